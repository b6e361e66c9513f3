/* The record codec's hot loops in C: one call per batch instead of Python work per entry.
 *
 * quorumlog/format/log_entry.py stays the reference: every function here must give byte-identical output to the
 * pure-Python encoder and accept exactly the records the Python checks accept (log_entry.py picks this module
 * once at import, checks that the layout constants it exports match its own, and falls back to Python when it
 * is missing or QUORUMLOG_PURE_PYTHON=1; tests/format/test_fastcodec.py compares the two).
 *
 * Layout (big-endian, docs/interfaces.md "Entry on disk"), offsets in the 56-byte header:
 *   0 magic i32 | 4 total_size i32 | 8 index i64 | 16 term i64 | 24 pos i64 | 32 channel i32 |
 *   36 chain_crc u32 | 40 body_crc u32 | 44 timestamp_ms i64 | 52 body_size i32 | 56 body
 * chain_crc = CRC32C(index, term, channel, body_crc, timestamp_ms, body_size; seed = previous chain_crc).
 * Index unit (32 bytes): magic i32 | pos i64 | size i32 | index i64 | term i64.
 *
 * CRC32C and the big-endian helpers are in _crc32c.h (bookie/_fastbookie.c uses them too).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "_crc32c.h"

#define ENTRY_MAGIC 0x514C4531u
#define INDEX_MAGIC 0x514C4931u
#define HEADER_SIZE 56
#define UNIT_SIZE 32
#define CHAIN_SIZE 36
#define TAG_SIZE 20
#define CHANNEL_PRODUCER_TAG 1
#define CHANNEL_BATCH_CONTINUES 4
/* Batches at least this big are encoded with the GIL released (a flush thread can run meanwhile). */
#define RELEASE_GIL_BYTES (64 * 1024)

/* The chain CRC fields are header bytes 8..24 (index, term), 32..36 (channel), 40..56 (body_crc, ts, size). */
static inline uint32_t chain_of(const uint8_t *h, uint32_t prev) {
    uint8_t c[CHAIN_SIZE];
    memcpy(c, h + 8, 16);
    memcpy(c + 16, h + 32, 4);
    memcpy(c + 20, h + 40, 16);
    return crc32c_buf(prev, c, CHAIN_SIZE);
}

static int parse_u32(PyObject *o, uint32_t *out, const char *what) {
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    if (v > 0xffffffffull) {
        PyErr_Format(PyExc_OverflowError, "%s out of range for u32", what);
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

/* ---- crc32c(data, value=0) ----------------------------------------------------------------------------- */
static PyObject *py_crc32c(PyObject *self, PyObject *args) {
    Py_buffer b;
    PyObject *value = NULL;
    uint32_t crc = 0;
    if (!PyArg_ParseTuple(args, "y*|O:crc32c", &b, &value))
        return NULL;
    if (value && parse_u32(value, &crc, "value") < 0) {
        PyBuffer_Release(&b);
        return NULL;
    }
    if (b.len >= RELEASE_GIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        crc = crc32c_buf(crc, b.buf, (size_t)b.len);
        Py_END_ALLOW_THREADS
    } else {
        crc = crc32c_buf(crc, b.buf, (size_t)b.len);
    }
    PyBuffer_Release(&b);
    return PyLong_FromUnsignedLong(crc);
}

/* ---- encode --------------------------------------------------------------------------------------------- */
/* encode(first_index, term, bodies, timestamp_ms, first_pos, prev_chain, tag, channel, ends_batch)
 *   -> (records: bytes, units: bytes, last_chain: int)
 * Same arguments and output as codec.encode_records_and_units. */
static PyObject *encode_impl(PyObject *args, int headers_only) {
    long long first_index, term, timestamp_ms, first_pos;
    PyObject *bodies_obj, *prev_obj, *tag_obj;
    int channel, ends_batch;
    if (!PyArg_ParseTuple(args, "LLOLLOOip:encode", &first_index, &term, &bodies_obj, &timestamp_ms, &first_pos,
                          &prev_obj, &tag_obj, &channel, &ends_batch))
        return NULL;
    uint32_t chain;
    if (parse_u32(prev_obj, &chain, "prev_chain_crc") < 0)
        return NULL;
    PyObject *seq = PySequence_Fast(bodies_obj, "bodies must be a sequence");
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n == 0) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_IndexError, "empty batch");
        return NULL;
    }
    PyObject *result = NULL, *records = NULL, *units = NULL;
    Py_buffer tag = {0};
    int have_tag = 0;
    Py_buffer *bufs = PyMem_Calloc((size_t)n, sizeof(Py_buffer));
    Py_ssize_t got = 0;
    if (!bufs) {
        PyErr_NoMemory();
        goto done;
    }
    if (tag_obj != Py_None) {
        if (PyObject_GetBuffer(tag_obj, &tag, PyBUF_SIMPLE) < 0)
            goto done;
        have_tag = 1;
    }
    PyObject **items = PySequence_Fast_ITEMS(seq);
    Py_ssize_t total = 0;
    for (; got < n; got++) {
        if (PyObject_GetBuffer(items[got], &bufs[got], PyBUF_SIMPLE) < 0)
            goto done;
        Py_ssize_t body = bufs[got].len + (got == n - 1 ? tag.len : 0);
        if (body > INT32_MAX - HEADER_SIZE) {
            PyErr_SetString(PyExc_OverflowError, "body too large for a record");
            goto done;
        }
        total += HEADER_SIZE + body;
    }
    records = PyBytes_FromStringAndSize(NULL, headers_only ? n * HEADER_SIZE : total);
    units = PyBytes_FromStringAndSize(NULL, n * UNIT_SIZE);
    if (!records || !units)
        goto done;
    uint8_t *out = (uint8_t *)PyBytes_AS_STRING(records), *u = (uint8_t *)PyBytes_AS_STRING(units);
    const uint32_t mid = (uint32_t)channel | CHANNEL_BATCH_CONTINUES;
    const uint32_t last = (ends_batch ? (uint32_t)channel : mid) | (have_tag ? CHANNEL_PRODUCER_TAG : 0);
    PyThreadState *ts = total >= RELEASE_GIL_BYTES ? PyEval_SaveThread() : NULL;
    uint64_t pos = (uint64_t)first_pos, index = (uint64_t)first_index;
    for (Py_ssize_t i = 0; i < n; i++, index++) {
        const uint8_t *body = bufs[i].buf;
        size_t len = (size_t)bufs[i].len;
        uint8_t *h = out;
        uint32_t ch = i == n - 1 ? last : mid;
        uint32_t body_crc = crc32c_copy(0, body, len, headers_only ? NULL : h + HEADER_SIZE);
        if (i == n - 1 && have_tag) {
            body_crc = crc32c_copy(body_crc, tag.buf, (size_t)tag.len, headers_only ? NULL : h + HEADER_SIZE + len);
            len += (size_t)tag.len;
        }
        uint32_t rec = (uint32_t)(HEADER_SIZE + len);
        put32(h, ENTRY_MAGIC);
        put32(h + 4, rec);
        put64(h + 8, index);
        put64(h + 16, (uint64_t)term);
        put64(h + 24, pos);
        put32(h + 32, ch);
        put32(h + 40, body_crc);
        put64(h + 44, (uint64_t)timestamp_ms);
        put32(h + 52, (uint32_t)len);
        chain = chain_of(h, chain);
        put32(h + 36, chain);
        put32(u, INDEX_MAGIC);
        put64(u + 4, pos);
        put32(u + 12, rec);
        put64(u + 16, index);
        put64(u + 24, (uint64_t)term);
        u += UNIT_SIZE;
        out += headers_only ? HEADER_SIZE : rec;
        pos += rec;
    }
    if (ts)
        PyEval_RestoreThread(ts);
    result = Py_BuildValue("(OOk)", records, units, (unsigned long)chain);
done:
    for (Py_ssize_t i = 0; i < got; i++)
        PyBuffer_Release(&bufs[i]);
    PyMem_Free(bufs);
    if (have_tag)
        PyBuffer_Release(&tag);
    Py_XDECREF(records);
    Py_XDECREF(units);
    Py_DECREF(seq);
    return result;
}

static PyObject *py_encode(PyObject *self, PyObject *args) { return encode_impl(args, 0); }

/* encode_headers(same arguments as encode) -> (headers: bytes, units: bytes, last_chain: int)
 * Only the 56-byte headers, back to back (the bodies are CRC-ed, not copied): write_records then hands the
 * kernel headers and the caller's bodies in one pwritev, so a batch is never copied in user space. */
static PyObject *py_encode_headers(PyObject *self, PyObject *args) { return encode_impl(args, 1); }

/* write_records(fd, offset, headers, bodies, tag) -> (bytes written, errno or 0)
 * pwritev of header 0, body 0, header 1, body 1, ... (the tag after the last body) at offset, with the GIL
 * released, IOV_MAX buffers per call, continuing after short writes. Errors come back as an errno with what
 * was written before them, so the caller can undo those bytes and raise its own error. */
static PyObject *py_write_records(PyObject *self, PyObject *args) {
    int fd;
    long long offset;
    Py_buffer hdrs;
    PyObject *bodies_obj, *tag_obj;
    if (!PyArg_ParseTuple(args, "iLy*OO:write_records", &fd, &offset, &hdrs, &bodies_obj, &tag_obj))
        return NULL;
    PyObject *result = NULL;
    PyObject *seq = PySequence_Fast(bodies_obj, "bodies must be a sequence");
    Py_buffer *bufs = NULL, tag = {0};
    struct iovec *iov = NULL;
    Py_ssize_t n = 0, got = 0;
    int have_tag = 0;
    if (!seq)
        goto done;
    n = PySequence_Fast_GET_SIZE(seq);
    if (n == 0 || hdrs.len != n * HEADER_SIZE) {
        PyErr_SetString(PyExc_ValueError, "write_records: headers do not match the bodies");
        goto done;
    }
    if (tag_obj != Py_None) {
        if (PyObject_GetBuffer(tag_obj, &tag, PyBUF_SIMPLE) < 0)
            goto done;
        have_tag = 1;
    }
    bufs = PyMem_Calloc((size_t)n, sizeof(Py_buffer));
    iov = PyMem_Calloc((size_t)(2 * n + 1), sizeof(struct iovec));
    if (!bufs || !iov) {
        PyErr_NoMemory();
        goto done;
    }
    PyObject **items = PySequence_Fast_ITEMS(seq);
    const uint8_t *h = hdrs.buf;
    Py_ssize_t niov = 0;
    for (; got < n; got++) {
        if (PyObject_GetBuffer(items[got], &bufs[got], PyBUF_SIMPLE) < 0)
            goto done;
        Py_ssize_t len = bufs[got].len + (got == n - 1 ? tag.len : 0);
        if ((Py_ssize_t)get32(h + got * HEADER_SIZE + 52) != len) {  /* the headers were made for these bodies */
            PyErr_SetString(PyExc_ValueError, "write_records: a body's size differs from its header");
            goto done;
        }
        iov[niov].iov_base = (void *)(h + got * HEADER_SIZE);
        iov[niov++].iov_len = HEADER_SIZE;
        if (bufs[got].len) {
            iov[niov].iov_base = bufs[got].buf;
            iov[niov++].iov_len = (size_t)bufs[got].len;
        }
    }
    if (have_tag && tag.len) {
        iov[niov].iov_base = tag.buf;
        iov[niov++].iov_len = (size_t)tag.len;
    }
    long iov_max = sysconf(_SC_IOV_MAX);
    if (iov_max <= 0 || iov_max > 1024)
        iov_max = 1024;
    long long written = 0;
    int err = 0;
    Py_ssize_t idx = 0;
    Py_BEGIN_ALLOW_THREADS
    while (idx < niov) {
        int cnt = (int)(niov - idx < iov_max ? niov - idx : iov_max);
        ssize_t r = pwritev(fd, iov + idx, cnt, (off_t)(offset + written));
        if (r < 0) {
            if (errno == EINTR)
                continue;
            err = errno;
            break;
        }
        if (r == 0) {  /* no progress on a non-empty write: do not spin */
            err = EIO;
            break;
        }
        written += r;
        while (r > 0) {  /* drop what was written, cut into a partly written buffer */
            if ((size_t)r >= iov[idx].iov_len) {
                r -= (ssize_t)iov[idx].iov_len;
                idx++;
            } else {
                iov[idx].iov_base = (uint8_t *)iov[idx].iov_base + r;
                iov[idx].iov_len -= (size_t)r;
                r = 0;
            }
        }
    }
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("(Li)", written, err);
done:
    for (Py_ssize_t i = 0; i < got; i++)
        PyBuffer_Release(&bufs[i]);
    PyMem_Free(bufs);
    PyMem_Free(iov);
    if (have_tag)
        PyBuffer_Release(&tag);
    Py_XDECREF(seq);
    PyBuffer_Release(&hdrs);
    return result;
}

/* ---- scan ----------------------------------------------------------------------------------------------- */
/* scan(buf, off, end, *, expected_index=None, prev_chain=None, check_chain=False, pos_base=None, room=0,
 *      max_body=-1, check_tag=False, max_count=-1, want_units=False) -> (n, off, last_chain, last_term, units
 *      or None, tags)
 *
 * Accepts records from `off` while every check holds and stops *before* the first one that fails (or at
 * `end`, or after max_count records); it never raises for bad data: the caller's Python check then runs on
 * the record where it stopped and produces the reference error. Checks (None / -1 switch one off):
 *   header inside [off, end); magic; total == 56 + body_size >= 56 and off + total + room <= end;
 *   body_size <= max_body; tagged body >= 20 bytes (check_tag); index == expected_index (+1 per record);
 *   pos == pos_base + off; body CRC; chain CRC (check_chain; prev_chain None skips the first record's).
 * tags: (client_id, seq, first index of the batch, index) of every accepted producer-tagged record.
 * units: index units (pos from the record) of accepted records when want_units. */
static PyObject *py_scan(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"buf", "off", "end", "expected_index", "prev_chain", "check_chain", "pos_base", "room",
                             "max_body", "check_tag", "max_count", "want_units", NULL};
    Py_buffer b;
    Py_ssize_t off, end, room = 0, max_count = -1;
    long long max_body = -1;
    PyObject *exp_obj = Py_None, *prev_obj = Py_None, *pos_obj = Py_None;
    int check_chain = 0, check_tag = 0, want_units = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*nn|$OOpOnLpnp:scan", kwlist, &b, &off, &end, &exp_obj,
                                     &prev_obj, &check_chain, &pos_obj, &room, &max_body, &check_tag, &max_count,
                                     &want_units))
        return NULL;
    PyObject *result = NULL, *tags = NULL, *units = NULL;
    uint8_t *ubuf = NULL;
    size_t ucap = 0, ulen = 0;
    int check_index = exp_obj != Py_None, check_pos = pos_obj != Py_None, have_prev = prev_obj != Py_None;
    long long expected = 0, pos_base = 0;
    uint32_t prev = 0, last_chain = 0;
    long long last_term = -1;
    if (check_index && (expected = PyLong_AsLongLong(exp_obj)) == -1 && PyErr_Occurred())
        goto done;
    if (check_pos && (pos_base = PyLong_AsLongLong(pos_obj)) == -1 && PyErr_Occurred())
        goto done;
    if (have_prev && parse_u32(prev_obj, &prev, "prev_chain") < 0)
        goto done;
    if (end > b.len || off < 0 || off > end) {
        PyErr_SetString(PyExc_ValueError, "scan: off/end outside the buffer");
        goto done;
    }
    last_chain = prev;
    tags = PyList_New(0);
    if (!tags)
        goto done;
    const uint8_t *base = b.buf;
    Py_ssize_t n = 0;
    while (max_count < 0 || n < max_count) {
        if (end - off < HEADER_SIZE)
            break;
        const uint8_t *h = base + off;
        if (get32(h) != ENTRY_MAGIC)
            break;
        int32_t total = (int32_t)get32(h + 4), body_size = (int32_t)get32(h + 52);
        if (body_size < 0 || (long long)total != HEADER_SIZE + (long long)body_size ||
            (long long)total + room > (long long)(end - off))
            break;
        if (max_body >= 0 && body_size > max_body)
            break;
        uint32_t channel = get32(h + 32);
        if (check_tag && (channel & CHANNEL_PRODUCER_TAG) && body_size < TAG_SIZE)
            break;
        long long index = (long long)get64(h + 8);
        if (check_index && index != expected + n)
            break;
        long long pos = (long long)get64(h + 24);
        if (check_pos && pos != pos_base + off)
            break;
        uint32_t body_crc = get32(h + 40);
        if (crc32c_buf(0, h + HEADER_SIZE, (size_t)body_size) != body_crc)
            break;
        uint32_t chain = get32(h + 36);
        if (check_chain && (have_prev || n > 0) && chain_of(h, last_chain) != chain)
            break;
        long long term = (long long)get64(h + 16);
        if (want_units) {
            if (ulen + UNIT_SIZE > ucap) {
                size_t cap = ucap ? ucap * 2 : 64 * UNIT_SIZE;
                uint8_t *nb = PyMem_Realloc(ubuf, cap);
                if (!nb) {
                    PyErr_NoMemory();
                    goto done;
                }
                ubuf = nb;
                ucap = cap;
            }
            uint8_t *u = ubuf + ulen;
            put32(u, INDEX_MAGIC);
            put64(u + 4, (uint64_t)pos);
            put32(u + 12, (uint32_t)total);
            put64(u + 16, (uint64_t)index);
            put64(u + 24, (uint64_t)term);
            ulen += UNIT_SIZE;
        }
        if ((channel & CHANNEL_PRODUCER_TAG) && body_size >= TAG_SIZE) {
            const uint8_t *t = h + total - TAG_SIZE;
            PyObject *tup = Py_BuildValue("(KKLL)", (unsigned long long)get64(t), (unsigned long long)get64(t + 8),
                                          index - (long long)get32(t + 16) + 1, index);
            if (!tup || PyList_Append(tags, tup) < 0) {
                Py_XDECREF(tup);
                goto done;
            }
            Py_DECREF(tup);
        }
        last_chain = chain;
        last_term = term;
        off += total;
        n++;
    }
    if (want_units) {
        units = PyBytes_FromStringAndSize((const char *)ubuf, (Py_ssize_t)ulen);
        if (!units)
            goto done;
    } else {
        units = Py_NewRef(Py_None);
    }
    result = Py_BuildValue("(nnkLOO)", n, off, (unsigned long)last_chain, last_term, units, tags);
done:
    PyBuffer_Release(&b);
    PyMem_Free(ubuf);
    Py_XDECREF(units);
    Py_XDECREF(tags);
    return result;
}

/* ---- relocate ------------------------------------------------------------------------------------------- */
/* relocate(buf, start, end, first_pos, first_index) -> (records: bytearray, units: bytes)
 * Copies already-checked records buf[start:end], rewriting each `pos` to this node's layout from first_pos,
 * and builds their index units (a follower storing the leader's bytes). */
static PyObject *py_relocate(PyObject *self, PyObject *args) {
    Py_buffer b;
    Py_ssize_t start, end;
    long long first_pos, first_index;
    if (!PyArg_ParseTuple(args, "y*nnLL:relocate", &b, &start, &end, &first_pos, &first_index))
        return NULL;
    PyObject *records = NULL, *units = NULL, *result = NULL;
    if (start < 0 || end > b.len || start > end) {
        PyErr_SetString(PyExc_ValueError, "relocate: start/end outside the buffer");
        goto done;
    }
    /* Count first so the units are allocated once. */
    const uint8_t *base = b.buf;
    Py_ssize_t n = 0;
    for (Py_ssize_t off = start; off < end; n++) {
        int32_t total = end - off >= HEADER_SIZE ? (int32_t)get32(base + off + 4) : -1;
        if (total < HEADER_SIZE || total > end - off) {
            PyErr_SetString(PyExc_ValueError, "relocate: records were not checked");
            goto done;
        }
        off += total;
    }
    records = PyByteArray_FromStringAndSize((const char *)base + start, end - start);
    units = PyBytes_FromStringAndSize(NULL, n * UNIT_SIZE);
    if (!records || !units)
        goto done;
    uint8_t *out = (uint8_t *)PyByteArray_AS_STRING(records), *u = (uint8_t *)PyBytes_AS_STRING(units);
    uint64_t pos = (uint64_t)first_pos;
    Py_ssize_t rel = 0;
    for (Py_ssize_t i = 0; i < n; i++, u += UNIT_SIZE) {
        uint8_t *h = out + rel;
        uint32_t total = get32(h + 4);
        put64(h + 24, pos);
        put32(u, INDEX_MAGIC);
        put64(u + 4, pos);
        put32(u + 12, total);
        put64(u + 16, (uint64_t)(first_index + i));
        memcpy(u + 24, h + 16, 8);
        pos += total;
        rel += total;
    }
    result = PyTuple_Pack(2, records, units);
done:
    PyBuffer_Release(&b);
    Py_XDECREF(records);
    Py_XDECREF(units);
    return result;
}

/* record_columns(buf) -> (n, index, term, timestamp_us, body_offsets, body_data) or None.
 * Spark's Arrow columns from the records tiling buf, in two passes (check and size, then fill): index,
 * term and timestamp (ms * 1000) as native int64 arrays, the user bodies (producer tag stripped) as int32
 * Arrow offsets (n + 1) and their bytes; no-op entries (CHANNEL_NOOP) are left out. None when a record is
 * malformed (magic, total != 56 + body size, a tagged body shorter than its tag, records not tiling buf, a
 * buffer past int32 offsets): the caller's Python path raises the reference error. */
#define CHANNEL_NOOP 2
#define PREFETCH_AHEAD 2048
/* The check-and-size pass of record_columns and record_positions: 1 if the records tile p[0:size] and are
 * well formed, with *n the records that are not no-ops and *data_bytes their user bodies' total. */
static int columns_size(const uint8_t *p, Py_ssize_t size, Py_ssize_t *n, Py_ssize_t *data_bytes) {
    Py_ssize_t off = 0;
    *n = 0, *data_bytes = 0;
    if (size > 0x7fffffff) return 0;
    while (off + HEADER_SIZE <= size) {
        const uint8_t *h = p + off;
        __builtin_prefetch(h + PREFETCH_AHEAD); /* (records are read in order: the bytes ahead are next) */
        uint32_t total = get32(h + 4), body = get32(h + 52), channel = get32(h + 32);
        if (get32(h) != ENTRY_MAGIC || total < HEADER_SIZE || body != total - HEADER_SIZE ||
            ((channel & CHANNEL_PRODUCER_TAG) && body < TAG_SIZE))
            return 0;
        if (!(channel & CHANNEL_NOOP)) {
            (*n)++;
            *data_bytes += body - ((channel & CHANNEL_PRODUCER_TAG) ? TAG_SIZE : 0);
        }
        off += total;
    }
    return off == size;
}

static PyObject *py_record_columns(PyObject *self, PyObject *arg) {
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0)
        return NULL;
    const uint8_t *p = (const uint8_t *)b.buf;
    Py_ssize_t size = b.len, off = 0, n = 0, data_bytes = 0;
    PyObject *result = NULL, *idx = NULL, *term = NULL, *ts = NULL, *offs = NULL, *data = NULL;
    if (!columns_size(p, size, &n, &data_bytes)) {
        result = Py_None;
        Py_INCREF(result);
        goto done;
    }
    idx = PyBytes_FromStringAndSize(NULL, n * 8);
    term = PyBytes_FromStringAndSize(NULL, n * 8);
    ts = PyBytes_FromStringAndSize(NULL, n * 8);
    offs = PyBytes_FromStringAndSize(NULL, (n + 1) * 4);
    data = PyBytes_FromStringAndSize(NULL, data_bytes);
    if (!idx || !term || !ts || !offs || !data)
        goto done;
    int64_t *pi = (int64_t *)PyBytes_AS_STRING(idx), *pt = (int64_t *)PyBytes_AS_STRING(term);
    int64_t *ps = (int64_t *)PyBytes_AS_STRING(ts);
    int32_t *po = (int32_t *)PyBytes_AS_STRING(offs);
    uint8_t *pd = (uint8_t *)PyBytes_AS_STRING(data);
    int32_t w = 0;
    Py_ssize_t k = 0;
    po[0] = 0;
    for (off = 0; off < size;) {
        const uint8_t *h = p + off;
        __builtin_prefetch(h + PREFETCH_AHEAD);
        uint32_t total = get32(h + 4), channel = get32(h + 32);
        if (!(channel & CHANNEL_NOOP)) {
            uint32_t user = total - HEADER_SIZE - ((channel & CHANNEL_PRODUCER_TAG) ? TAG_SIZE : 0);
            pi[k] = (int64_t)get64(h + 8);
            pt[k] = (int64_t)get64(h + 16);
            ps[k] = (int64_t)get64(h + 44) * 1000;
            memcpy(pd + w, h + HEADER_SIZE, user);
            w += (int32_t)user;
            po[++k] = w;
        }
        off += total;
    }
    result = Py_BuildValue("(nOOOOO)", n, idx, term, ts, offs, data);
done:
    Py_XDECREF(idx);
    Py_XDECREF(term);
    Py_XDECREF(ts);
    Py_XDECREF(offs);
    Py_XDECREF(data);
    PyBuffer_Release(&b);
    return result;
}

/* record_positions(buf) -> (n, index, term, timestamp_us, body_starts, body_ends) or None: record_columns
 * without copying the bodies: where each user body (producer tag excluded) lies in buf, as native int32
 * starts and ends. For a reader that takes a few records of many (a topic pull wants one queue's messages
 * among the whole group's), so the rest are never copied. None exactly where record_columns gives None. */
static PyObject *py_record_positions(PyObject *self, PyObject *arg) {
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0)
        return NULL;
    const uint8_t *p = (const uint8_t *)b.buf;
    Py_ssize_t size = b.len, n = 0, data_bytes = 0;
    PyObject *result = NULL, *cols[5] = {NULL};
    if (!columns_size(p, size, &n, &data_bytes)) {
        result = Py_None;
        Py_INCREF(result);
        goto done;
    }
    static const int widths[5] = {8, 8, 8, 4, 4};
    for (int c = 0; c < 5; c++)
        if ((cols[c] = PyBytes_FromStringAndSize(NULL, n * widths[c])) == NULL)
            goto done;
    int64_t *pi = (int64_t *)PyBytes_AS_STRING(cols[0]), *pt = (int64_t *)PyBytes_AS_STRING(cols[1]);
    int64_t *ps = (int64_t *)PyBytes_AS_STRING(cols[2]);
    int32_t *pstart = (int32_t *)PyBytes_AS_STRING(cols[3]), *pend = (int32_t *)PyBytes_AS_STRING(cols[4]);
    Py_ssize_t k = 0;
    for (Py_ssize_t off = 0; off < size;) {
        const uint8_t *h = p + off;
        __builtin_prefetch(h + PREFETCH_AHEAD);
        uint32_t total = get32(h + 4), channel = get32(h + 32);
        if (!(channel & CHANNEL_NOOP)) {
            pi[k] = (int64_t)get64(h + 8);
            pt[k] = (int64_t)get64(h + 16);
            ps[k] = (int64_t)get64(h + 44) * 1000;
            pstart[k] = (int32_t)(off + HEADER_SIZE);
            pend[k] = (int32_t)(off + total - ((channel & CHANNEL_PRODUCER_TAG) ? TAG_SIZE : 0));
            k++;
        }
        off += total;
    }
    result = Py_BuildValue("(nOOOOO)", n, cols[0], cols[1], cols[2], cols[3], cols[4]);
done:
    for (int c = 0; c < 5; c++)
        Py_XDECREF(cols[c]);
    PyBuffer_Release(&b);
    return result;
}

/* records_at(index_view, index_first, data_view, data_start, wanted, k) -> (k_next, columns) or None
 *
 * record_positions for chosen records instead of a run: `wanted` holds ascending entry indexes (native int64);
 * from wanted[k] on, each is found through its unit in the index segment `index_view` (first entry
 * index_first) and read in place in the data segment `data_view` (global position data_start). Stops at the
 * first entry outside either segment and returns its k with the columns (n, index, term, timestamp_us,
 * body_starts, body_ends) of those found, starts and ends in data_view. None when a unit or a header is not
 * what it must be (magic, index, size): the caller then reads the range and checks every record. */
static PyObject *py_records_at(PyObject *self, PyObject *args) {
    Py_buffer iv, dv, w;
    long long index_first, data_start;
    Py_ssize_t k;
    if (!PyArg_ParseTuple(args, "y*Ly*Ly*n", &iv, &index_first, &dv, &data_start, &w, &k))
        return NULL;
    PyObject *result = NULL, *cols[5] = {NULL};
    const uint8_t *ip = iv.buf, *dp = dv.buf;
    const int64_t *want = w.buf;
    Py_ssize_t n_want = w.len / 8, units = iv.len / UNIT_SIZE, k0 = k;
    if (w.len % 8 || k < 0 || k > n_want || dv.len > 0x7fffffff) {
        PyErr_SetString(PyExc_ValueError, "records_at: arguments of the wrong shape");
        goto done;
    }
    static const int widths[5] = {8, 8, 8, 4, 4};
    for (int c = 0; c < 5; c++)
        if ((cols[c] = PyBytes_FromStringAndSize(NULL, (n_want - k0) * widths[c])) == NULL)
            goto done;
    int64_t *pi = (int64_t *)PyBytes_AS_STRING(cols[0]), *pt = (int64_t *)PyBytes_AS_STRING(cols[1]);
    int64_t *ps = (int64_t *)PyBytes_AS_STRING(cols[2]);
    int32_t *pstart = (int32_t *)PyBytes_AS_STRING(cols[3]), *pend = (int32_t *)PyBytes_AS_STRING(cols[4]);
    Py_ssize_t n = 0;
    for (; k < n_want; k++) {
        int64_t index = want[k], slot = index - index_first;
        if (slot < 0 || slot >= units) break;
        const uint8_t *u = ip + slot * UNIT_SIZE;
        int64_t pos = (int64_t)get64(u + 4);
        uint32_t size = get32(u + 12);
        if (get32(u) != INDEX_MAGIC || (int64_t)get64(u + 16) != index || size < HEADER_SIZE) {
            Py_CLEAR(cols[0]);
            break;
        }
        if (pos < data_start || pos - data_start + size > dv.len) break; /* (in another data segment) */
        const uint8_t *h = dp + (pos - data_start);
        uint32_t total = get32(h + 4), channel = get32(h + 32), body = get32(h + 52);
        if (get32(h) != ENTRY_MAGIC || total != size || (int64_t)get64(h + 8) != index ||
            body != total - HEADER_SIZE || ((channel & CHANNEL_PRODUCER_TAG) && body < TAG_SIZE)) {
            Py_CLEAR(cols[0]);
            break;
        }
        pi[n] = index;
        pt[n] = (int64_t)get64(h + 16);
        ps[n] = (int64_t)get64(h + 44) * 1000;
        pstart[n] = (int32_t)(pos - data_start + HEADER_SIZE);
        pend[n] = (int32_t)(pos - data_start + total - ((channel & CHANNEL_PRODUCER_TAG) ? TAG_SIZE : 0));
        n++;
    }
    if (cols[0] == NULL) { /* a unit or header that is not what it must be */
        result = Py_None;
        Py_INCREF(result);
        goto done;
    }
    for (int c = 0; c < 5; c++)
        if (_PyBytes_Resize(&cols[c], n * widths[c]) < 0)
            goto done;
    result = Py_BuildValue("(n(nOOOOO))", k, n, cols[0], cols[1], cols[2], cols[3], cols[4]);
done:
    for (int c = 0; c < 5; c++)
        Py_XDECREF(cols[c]);
    PyBuffer_Release(&iv);
    PyBuffer_Release(&dv);
    PyBuffer_Release(&w);
    return result;
}

static PyObject *py_crc_backend(PyObject *self, PyObject *unused) {
    return PyUnicode_FromString(crc_hw ? "sse4.2" : "table");
}

/* body_sizes(bodies) -> (sum of len(body), max len(body)): append_batch's size checks without a per-entry loop
 * in Python. len() semantics, as the Python path's map(len, bodies). */
static PyObject *py_body_sizes(PyObject *self, PyObject *bodies_obj) {
    PyObject *seq = PySequence_Fast(bodies_obj, "bodies must be a sequence");
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), total = 0, max = -1;
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t len = PyObject_Size(items[i]);
        if (len < 0) {
            Py_DECREF(seq);
            return NULL;
        }
        total += len;
        if (len > max)
            max = len;
    }
    Py_DECREF(seq);
    return Py_BuildValue("(nn)", total, max);
}

/* Tests run both CRC implementations in one process. */
static PyObject *py_set_crc_backend(PyObject *self, PyObject *arg) {
    const char *name = PyUnicode_AsUTF8(arg);
    if (!name)
        return NULL;
    if (strcmp(name, "table") == 0) {
        crc_hw = 0;
        Py_RETURN_NONE;
    }
#ifdef QL_X86
    if (strcmp(name, "sse4.2") == 0 && __builtin_cpu_supports("sse4.2")) {
        crc_hw = 1;
        Py_RETURN_NONE;
    }
#endif
    PyErr_Format(PyExc_ValueError, "CRC backend %s not available", name);
    return NULL;
}

static PyMethodDef methods[] = {
    {"crc32c", py_crc32c, METH_VARARGS, "crc32c(data, value=0) -> CRC32C of data continuing from value."},
    {"encode", py_encode, METH_VARARGS,
     "encode(first_index, term, bodies, timestamp_ms, first_pos, prev_chain, tag, channel, ends_batch)"
     " -> (records, units, last_chain)"},
    {"encode_headers", py_encode_headers, METH_VARARGS,
     "encode_headers(same arguments as encode) -> (headers, units, last_chain)"},
    {"write_records", py_write_records, METH_VARARGS,
     "write_records(fd, offset, headers, bodies, tag) -> (bytes written, errno or 0)"},
    {"scan", (PyCFunction)(void (*)(void))py_scan, METH_VARARGS | METH_KEYWORDS,
     "scan(buf, off, end, *, expected_index=None, prev_chain=None, check_chain=False, pos_base=None, room=0,"
     " max_body=-1, check_tag=False, max_count=-1, want_units=False) -> (n, off, last_chain, last_term, units,"
     " tags)"},
    {"relocate", py_relocate, METH_VARARGS,
     "relocate(buf, start, end, first_pos, first_index) -> (records bytearray, units)"},
    {"record_columns", py_record_columns, METH_O,
     "record_columns(buf) -> (n, index, term, timestamp_us, body_offsets, body_data) for Arrow, or None."},
    {"record_positions", py_record_positions, METH_O,
     "record_positions(buf) -> (n, index, term, timestamp_us, body_starts, body_ends) in buf, or None."},
    {"records_at", py_records_at, METH_VARARGS,
     "records_at(index_view, index_first, data_view, data_start, wanted, k) -> (k_next, columns) or None."},
    {"body_sizes", py_body_sizes, METH_O, "body_sizes(bodies) -> (sum of lengths, max length or -1)."},
    {"crc_backend", py_crc_backend, METH_NOARGS, "'sse4.2' or 'table': how CRC32C is computed."},
    {"set_crc_backend", py_set_crc_backend, METH_O, "set_crc_backend('sse4.2' | 'table') (for tests)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastcodec",
                                    "quorumlog's record codec hot loops in C (see format/log_entry.py).", -1,
                                    methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__fastcodec(void) {
    crc_init();
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    /* The layout this module was compiled with: log_entry.py checks each against its own at import. */
    if (PyModule_AddObject(m, "ENTRY_MAGIC", PyLong_FromUnsignedLong(ENTRY_MAGIC)) < 0 ||
        PyModule_AddObject(m, "INDEX_MAGIC", PyLong_FromUnsignedLong(INDEX_MAGIC)) < 0 ||
        PyModule_AddIntConstant(m, "HEADER_SIZE", HEADER_SIZE) < 0 ||
        PyModule_AddIntConstant(m, "UNIT_SIZE", UNIT_SIZE) < 0 ||
        PyModule_AddIntConstant(m, "CHAIN_SIZE", CHAIN_SIZE) < 0 ||
        PyModule_AddIntConstant(m, "TAG_SIZE", TAG_SIZE) < 0 ||
        PyModule_AddIntConstant(m, "CHANNEL_PRODUCER_TAG", CHANNEL_PRODUCER_TAG) < 0 ||
        PyModule_AddIntConstant(m, "CHANNEL_BATCH_CONTINUES", CHANNEL_BATCH_CONTINUES) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
