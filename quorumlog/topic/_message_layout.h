/* The stored message's layout as C reads it (topic/message.py is the reference), shared by the extensions that
 * read pulled messages: topic/_fastmessage.c and doors/kafka/_fastrecords.c.
 *
 * Message layout (big-endian; message.py):
 *   magic "QLM" | version u8 (1) | flags u32 | queue_id u16 | born_timestamp_ms i64
 *   | topic (u8 length) | key (u16 length) | tags (u16 length)
 *   | properties: count u16, each key (u16 length) value (u16 length), UTF-8 | body (the rest)
 * Pulled head (wire/client.py PackedMessages): per message queue_offset, index, term, store_timestamp_ms, size,
 * each a big-endian i64; the bodies back to back in `blob`.
 */
#ifndef QUORUMLOG_MESSAGE_LAYOUT_H
#define QUORUMLOG_MESSAGE_LAYOUT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define HEAD_SIZE 18 /* magic 3, version 1, flags 4, queue_id 2, born 8 */
#define PULLED_FIELDS 5
#define MAX_TOPIC 127

/* Big-endian loads and stores as one byte swap (a byte loop here cost a consumer's decode ~7% in a profile). */
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define FROM_BE16(v) __builtin_bswap16(v)
#define FROM_BE64(v) __builtin_bswap64(v)
#else
static inline uint16_t FROM_BE16(uint16_t v) {
    const unsigned char *p = (const unsigned char *)&v;
    return (uint16_t)((p[0] << 8) | p[1]);
}
static inline uint64_t FROM_BE64(uint64_t v) {
    const unsigned char *p = (const unsigned char *)&v;
    uint64_t r = 0;
    for (int i = 0; i < 8; i++) r = (r << 8) | p[i];
    return r;
}
#endif

static inline uint16_t be16(const unsigned char *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return FROM_BE16(v);
}

static inline int64_t be64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return (int64_t)FROM_BE64(v);
}

/* message.TOPIC_RE: 1..127 characters of [A-Za-z0-9_%|-]. */
static int topic_ok(const unsigned char *s, Py_ssize_t n) {
    if (n < 1 || n > MAX_TOPIC) return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '%' ||
              c == '|' || c == '-'))
            return 0;
    }
    return 1;
}

/* Is s[0:n] well-formed UTF-8 (what Python's strict decoder and Arrow's string validation accept)? */
static int utf8_ok(const unsigned char *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int len;
        uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) len = 2, cp = c & 0x1F;
        else if (c >= 0xE0 && c <= 0xEF) len = 3, cp = c & 0x0F;
        else if (c >= 0xF0 && c <= 0xF4) len = 4, cp = c & 0x07;
        else return 0;
        if (i + len > n) return 0;
        for (int j = 1; j < len; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + j] & 0x3F);
        }
        if (len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) return 0; /* overlong, or a surrogate */
        if (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) return 0;
        i += len;
    }
    return 1;
}

#endif
