/* CRC32C and big-endian helpers shared by quorumlog's C extensions (format/_fastcodec.c, bookie/_fastbookie.c):
 * static, so each module has its own copy of the tables; call crc_init() once from the module's init.
 *
 * CRC32C: SSE4.2 crc32 instruction when the CPU has it (checked by crc_init), else slicing-by-8 tables; both
 * match the `crc32c` package (reflected Castagnoli polynomial 0x82F63B78, ~ pre/post conditioning).
 * QUORUMLOG_CRC_TABLE (any value) forces the tables.
 */
#ifndef QUORUMLOG_CRC32C_H
#define QUORUMLOG_CRC32C_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <nmmintrin.h>
#define QL_X86 1
#endif

/* ---- CRC32C ---------------------------------------------------------------------------------------- */
static uint32_t crc_table[8][256];
static int crc_hw = 0;

static void crc_init_tables(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int k = 1; k < 8; k++)
            crc_table[k][i] = (crc_table[k - 1][i] >> 8) ^ crc_table[0][crc_table[k - 1][i] & 0xff];
}

/* Raw register update (no conditioning); copies src to dst when dst is not NULL (one pass over the body). */
static uint32_t crc_sw_update(uint32_t c, const uint8_t *p, size_t n, uint8_t *dst) {
    if (dst)
        memcpy(dst, p, n);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        uint32_t lo = (uint32_t)w ^ c, hi = (uint32_t)(w >> 32);
        c = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^ crc_table[5][(lo >> 16) & 0xff] ^
            crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xff] ^ crc_table[2][(hi >> 8) & 0xff] ^
            crc_table[1][(hi >> 16) & 0xff] ^ crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
#endif
    while (n--)
        c = crc_table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    return c;
}

#ifdef QL_X86
/* Three interleaved streams of STRIDE bytes hide the crc32 instruction's latency (~3 cycles, 1 per cycle
 * throughput); the three partial CRCs are joined with crc_shift (the register advanced over STRIDE zero bytes,
 * linear in the register, so four table lookups): crc(A||B) = shift(crc(A)) ^ crc_from_zero(B). */
#define STRIDE 256
static uint32_t crc_shift_table[4][256];

static uint32_t crc_shift(uint32_t c) {
    return crc_shift_table[0][c & 0xff] ^ crc_shift_table[1][(c >> 8) & 0xff] ^
           crc_shift_table[2][(c >> 16) & 0xff] ^ crc_shift_table[3][c >> 24];
}

static void crc_init_shift_table(void) {
    static const uint8_t zeros[STRIDE];
    for (int k = 0; k < 4; k++)
        for (uint32_t b = 0; b < 256; b++)
            crc_shift_table[k][b] = crc_sw_update(b << (8 * k), zeros, STRIDE, NULL);
}

__attribute__((target("sse4.2")))
static uint32_t crc_hw_update(uint32_t c32, const uint8_t *p, size_t n, uint8_t *dst) {
#if defined(__x86_64__)
    uint64_t c = c32;
    while (n >= 3 * STRIDE) {
        uint64_t c1 = 0, c2 = 0;
        for (size_t i = 0; i < STRIDE; i += 8) {
            uint64_t w0, w1, w2;
            memcpy(&w0, p + i, 8);
            memcpy(&w1, p + STRIDE + i, 8);
            memcpy(&w2, p + 2 * STRIDE + i, 8);
            c = _mm_crc32_u64(c, w0);
            c1 = _mm_crc32_u64(c1, w1);
            c2 = _mm_crc32_u64(c2, w2);
        }
        if (dst) {
            memcpy(dst, p, 3 * STRIDE);
            dst += 3 * STRIDE;
        }
        c = crc_shift(crc_shift((uint32_t)c) ^ (uint32_t)c1) ^ (uint32_t)c2;
        p += 3 * STRIDE;
        n -= 3 * STRIDE;
    }
    if (dst) {
        while (n >= 8) {
            uint64_t w;
            memcpy(&w, p, 8);
            memcpy(dst, &w, 8);
            c = _mm_crc32_u64(c, w);
            p += 8;
            dst += 8;
            n -= 8;
        }
        while (n--) {
            *dst++ = *p;
            c = _mm_crc32_u8((uint32_t)c, *p++);
        }
        return (uint32_t)c;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = _mm_crc32_u64(c, w);
        p += 8;
        n -= 8;
    }
    c32 = (uint32_t)c;
#else
    if (dst)
        memcpy(dst, p, n);
    while (n >= 4) {
        uint32_t w;
        memcpy(&w, p, 4);
        c32 = _mm_crc32_u32(c32, w);
        p += 4;
        n -= 4;
    }
#endif
    while (n--)
        c32 = _mm_crc32_u8(c32, *p++);
    return c32;
}
#endif

/* CRC32C of p[0:n] continuing from `crc` (a finished CRC, as crc32c.crc32c(data, crc) takes it). */
static inline uint32_t crc32c_copy(uint32_t crc, const uint8_t *p, size_t n, uint8_t *dst) {
    uint32_t c = ~crc;
#ifdef QL_X86
    if (crc_hw)
        return ~crc_hw_update(c, p, n, dst);
#endif
    return ~crc_sw_update(c, p, n, dst);
}

static inline uint32_t crc32c_buf(uint32_t crc, const uint8_t *p, size_t n) { return crc32c_copy(crc, p, n, NULL); }

/* ---- big-endian helpers ------------------------------------------------------------------------------ */
static inline void put32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}
static inline void put64(uint8_t *p, uint64_t v) { put32(p, (uint32_t)(v >> 32)); put32(p + 4, (uint32_t)v); }
static inline uint32_t get32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}
static inline uint64_t get64(const uint8_t *p) { return ((uint64_t)get32(p) << 32) | get32(p + 4); }

/* Tables, and the hardware path when the CPU has SSE4.2 (and QUORUMLOG_CRC_TABLE is not set). */
static void crc_init(void) {
    crc_init_tables();
#ifdef QL_X86
    crc_init_shift_table();
    __builtin_cpu_init();
    crc_hw = __builtin_cpu_supports("sse4.2") && getenv("QUORUMLOG_CRC_TABLE") == NULL;
#endif
}

#endif
