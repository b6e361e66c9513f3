/* A Fetch answer's records in C: the messages of one pull, as the pull packed them, straight into one
 * uncompressed Kafka RecordBatch v2, without a Python object per message (records.py documents the layout,
 * mapping.py the mapping; the door's _encode_messages is the reference and tests/doors/test_kafka_fastrecords.py
 * holds this to it byte for byte).
 *
 * Messages whose Kafka form needs more than copying are left to the reference: headers a Kafka producer sent
 * (the JSON property `kafka.headers`), a binary key whose base64 is not in canonical form, a property named
 * twice. record_batch then answers None and the door runs the Python path for that pull.
 */
#include "../../topic/_message_layout.h"
#include "../../format/_crc32c.h"

#define BATCH_HEAD 61 /* base_offset .. record_count */
#define CRC_FROM 21   /* the CRC covers attributes .. end */
#define PER_RECORD_ESTIMATE 64
#define TAGS_HEADER "quorumlog.tags"
#define TAGS_HEADER_LEN 14

typedef struct {
    int64_t queue_offset, timestamp;
    const unsigned char *m; /* the message */
    Py_ssize_t key_at, key_len, key_out; /* key_out: decoded length; -1 a null key */
    int key_b64;
    Py_ssize_t tags_at, tags_len, props_at, value_at, value_len; /* value_len -1: a null value */
    int props, headers;
    Py_ssize_t size; /* the record after its length varint */
} Rec;

static inline int zigzag_size(int64_t v) {
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    int n = 1;
    while (z >= 0x80) z >>= 7, n++;
    return n;
}

static inline unsigned char *put_zigzag(unsigned char *p, int64_t v) {
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    while (z >= 0x80) *p++ = (unsigned char)(z | 0x80), z >>= 7;
    *p++ = (unsigned char)z;
    return p;
}

static inline Py_ssize_t bytes_size(Py_ssize_t n) { return n < 0 ? 1 : zigzag_size(n) + n; }

static signed char B64[256];

static void b64_init(void) {
    const char *a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    memset(B64, -1, sizeof(B64));
    for (int i = 0; i < 64; i++) B64[(unsigned char)a[i]] = (signed char)i;
}

/* The decoded length of canonical base64 (whole quads, alphabet only, '=' padding only at the end), or -1. */
static Py_ssize_t b64_length(const unsigned char *s, Py_ssize_t n) {
    if (n % 4) return -1;
    Py_ssize_t pad = n && s[n - 1] == '=' ? (s[n - 2] == '=' ? 2 : 1) : 0;
    for (Py_ssize_t i = 0; i < n - pad; i++)
        if (B64[s[i]] < 0) return -1;
    return n / 4 * 3 - pad;
}

static unsigned char *b64_decode(unsigned char *p, const unsigned char *s, Py_ssize_t n, Py_ssize_t out) {
    uint32_t acc = 0;
    int bits = 0;
    unsigned char *end = p + out;
    for (Py_ssize_t i = 0; i < n && p < end; i++) {
        acc = (acc << 6) | (uint32_t)(B64[s[i]] & 0x3F);
        bits += 6;
        if (bits >= 8) bits -= 8, *p++ = (unsigned char)(acc >> bits);
    }
    return p;
}

static inline int is_text(const unsigned char *s, Py_ssize_t n, const char *t) {
    return n == (Py_ssize_t)strlen(t) && memcmp(s, t, n) == 0;
}

/* A length-prefixed UTF-8 string at *pos within end: its start, or -1 (then the entry is not a message). */
static Py_ssize_t text_at(const unsigned char *b, Py_ssize_t *pos, Py_ssize_t end, Py_ssize_t *len) {
    if (*pos + 2 > end) return -1;
    Py_ssize_t n = be16(b + *pos), at = *pos + 2;
    if (at + n > end || !utf8_ok(b + at, n)) return -1;
    *pos = at + n;
    *len = n;
    return at;
}

/* Read one message into r. 1: a message; 0: not one (left out, as decode_pulled leaves it out); 2: a message
 * that only the reference path serves. */
static int read_message(const unsigned char *b, Py_ssize_t end, Rec *r) {
    if (end < HEAD_SIZE + 7 || memcmp(b, "QLM", 3) != 0 || b[3] != 1) return 0;
    Py_ssize_t tn = b[HEAD_SIZE], pos = HEAD_SIZE + 1;
    if (pos + tn > end || !topic_ok(b + pos, tn)) return 0;
    pos += tn;
    if ((r->key_at = text_at(b, &pos, end, &r->key_len)) < 0) return 0;
    if ((r->tags_at = text_at(b, &pos, end, &r->tags_len)) < 0) return 0;
    if (pos + 2 > end) return 0;
    r->props = be16(b + pos);
    pos += 2;
    r->props_at = pos;
    r->key_out = r->key_len > 0 ? r->key_len : -1;
    r->key_b64 = 0;
    int null_value = 0, special = 0;
    Py_ssize_t hsize = 0;
    r->headers = 0;
    for (int i = 0; i < r->props; i++) {
        Py_ssize_t kl, vl, ka = text_at(b, &pos, end, &kl);
        if (ka < 0) return 0;
        Py_ssize_t va = text_at(b, &pos, end, &vl);
        if (va < 0) return 0;
        for (int j = 0, q = (int)r->props_at; j < i; j++) { /* a name seen before: the reference decides */
            Py_ssize_t l = be16(b + q);
            if (l == kl && memcmp(b + q + 2, b + ka, kl) == 0) special = 1;
            q += 2 + (int)l;
            q += 2 + be16(b + q);
        }
        if (is_text(b + ka, kl, "kafka.key")) {
            Py_ssize_t n = b64_length(b + va, vl);
            if (n < 0) special = 1;
            r->key_b64 = 1, r->key_at = va, r->key_len = vl, r->key_out = n;
        } else if (is_text(b + ka, kl, "kafka.headers")) {
            special = 1;
        } else if (is_text(b + ka, kl, "kafka.null")) {
            null_value = vl == 1 && b[va] == '1';
        } else {
            r->headers++;
            hsize += bytes_size(kl) + bytes_size(vl);
        }
    }
    r->value_at = pos;
    r->value_len = null_value && pos == end ? -1 : end - pos;
    if (r->tags_len) r->headers++, hsize += bytes_size(TAGS_HEADER_LEN) + bytes_size(r->tags_len);
    r->m = b;
    r->size = hsize + zigzag_size(r->headers) + bytes_size(r->key_out) + bytes_size(r->value_len);
    return special ? 2 : 1;
}

static unsigned char *write_record(unsigned char *p, const Rec *r, int64_t base_offset, int64_t base_ts) {
    const unsigned char *b = r->m;
    int64_t ts_delta = r->timestamp - base_ts, offset_delta = r->queue_offset - base_offset;
    Py_ssize_t size = r->size + 1 + zigzag_size(ts_delta) + zigzag_size(offset_delta);
    p = put_zigzag(p, size);
    *p++ = 0; /* attributes */
    p = put_zigzag(p, ts_delta);
    p = put_zigzag(p, offset_delta);
    p = put_zigzag(p, r->key_out);
    if (r->key_b64) p = b64_decode(p, b + r->key_at, r->key_len, r->key_out);
    else if (r->key_out > 0) memcpy(p, b + r->key_at, r->key_out), p += r->key_out;
    p = put_zigzag(p, r->value_len);
    if (r->value_len > 0) memcpy(p, b + r->value_at, r->value_len), p += r->value_len;
    p = put_zigzag(p, r->headers);
    Py_ssize_t pos = r->props_at;
    for (int i = 0; i < r->props; i++) {
        Py_ssize_t kl = be16(b + pos), ka = pos + 2;
        Py_ssize_t vl = be16(b + ka + kl), va = ka + kl + 2;
        pos = va + vl;
        if (is_text(b + ka, kl, "kafka.key") || is_text(b + ka, kl, "kafka.null")) continue;
        p = put_zigzag(p, kl), memcpy(p, b + ka, kl), p += kl;
        p = put_zigzag(p, vl), memcpy(p, b + va, vl), p += vl;
    }
    if (r->tags_len) {
        p = put_zigzag(p, TAGS_HEADER_LEN), memcpy(p, TAGS_HEADER, TAGS_HEADER_LEN), p += TAGS_HEADER_LEN;
        p = put_zigzag(p, r->tags_len), memcpy(p, b + r->tags_at, r->tags_len), p += r->tags_len;
    }
    return p;
}

/* record_batch(head, blob, max_bytes) -> bytes, b"" (no message in the pull) or None (the reference path).
 * Records are cut after max_bytes of values, counting PER_RECORD_ESTIMATE more per record, and at least one
 * is served; a batch whose deltas would not fit Kafka's fields is left to the reference too. */
static PyObject *py_record_batch(PyObject *self, PyObject *args) {
    Py_buffer head, blob;
    Py_ssize_t max_bytes;
    if (!PyArg_ParseTuple(args, "y*y*n", &head, &blob, &max_bytes)) return NULL;
    PyObject *out = NULL;
    Rec *recs = NULL;
    if (head.len % (8 * PULLED_FIELDS) != 0) {
        PyErr_SetString(PyExc_ValueError, "pulled head: not a whole number of 40-byte entries");
        goto done;
    }
    Py_ssize_t n = head.len / (8 * PULLED_FIELDS), count = 0, at = 0, size = 0, total = BATCH_HEAD;
    if ((recs = PyMem_Malloc(sizeof(Rec) * (n ? n : 1))) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    const unsigned char *h = head.buf, *data = blob.buf;
    int reference = 0;
    for (Py_ssize_t i = 0; i < n; i++, h += 8 * PULLED_FIELDS) {
        int64_t len = be64(h + 32);
        if (len < 0 || len > blob.len - at) {
            PyErr_SetString(PyExc_ValueError, "pulled messages run past their bodies");
            goto done;
        }
        Rec *r = &recs[count];
        int rc = read_message(data + at, (Py_ssize_t)len, r);
        at += (Py_ssize_t)len;
        if (rc == 0) continue;
        Py_ssize_t value = r->value_len < 0 ? 0 : r->value_len;
        if (count && size + value > max_bytes) break;
        if (rc == 2) reference = 1;
        size += value + PER_RECORD_ESTIMATE;
        int64_t born = be64(r->m + 10);
        r->queue_offset = be64(h);
        r->timestamp = born ? born : be64(h + 24);
        count++;
    }
    if (reference) {
        out = Py_NewRef(Py_None);
        goto done;
    }
    if (count == 0) {
        out = PyBytes_FromStringAndSize(NULL, 0);
        goto done;
    }
    int64_t base_offset = recs[0].queue_offset, base_ts = recs[0].timestamp, max_ts = base_ts, last_delta = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t ts_delta, offset_delta;
        if (__builtin_sub_overflow(recs[i].timestamp, base_ts, &ts_delta) ||
            __builtin_sub_overflow(recs[i].queue_offset, base_offset, &offset_delta) || offset_delta > INT32_MAX ||
            offset_delta < INT32_MIN) {
            out = Py_NewRef(Py_None);
            goto done;
        }
        Py_ssize_t size = recs[i].size + 1 + zigzag_size(ts_delta) + zigzag_size(offset_delta);
        total += zigzag_size(size) + size;
        if (recs[i].timestamp > max_ts) max_ts = recs[i].timestamp;
        last_delta = offset_delta;
    }
    if (total - 12 > INT32_MAX) {
        out = Py_NewRef(Py_None);
        goto done;
    }
    if ((out = PyBytes_FromStringAndSize(NULL, total)) == NULL) goto done;
    unsigned char *start = (unsigned char *)PyBytes_AS_STRING(out), *p = start;
    put64(p, (uint64_t)base_offset);
    put32(p + 8, (uint32_t)(total - 12));
    put32(p + 12, UINT32_MAX); /* partition leader epoch: -1 */
    p[16] = 2;                 /* magic; the CRC at 17, below */
    p[21] = p[22] = 0;         /* attributes: uncompressed, CreateTime */
    put32(p + 23, (uint32_t)last_delta);
    put64(p + 27, (uint64_t)base_ts);
    put64(p + 35, (uint64_t)max_ts);
    put64(p + 43, UINT64_MAX); /* producer id, epoch and base sequence: -1 */
    p[51] = p[52] = 0xFF;
    put32(p + 53, UINT32_MAX);
    put32(p + 57, (uint32_t)count);
    p += BATCH_HEAD;
    for (Py_ssize_t i = 0; i < count; i++) p = write_record(p, &recs[i], base_offset, base_ts);
    if (p != start + total) { /* the two passes disagree: a bug here, never a wrong batch sent */
        Py_CLEAR(out);
        PyErr_SetString(PyExc_SystemError, "record_batch: sized and written lengths differ");
        goto done;
    }
    put32(start + 17, crc32c_buf(0, start + CRC_FROM, (size_t)(total - CRC_FROM)));
done:
    PyMem_Free(recs);
    PyBuffer_Release(&head);
    PyBuffer_Release(&blob);
    return out;
}

static PyMethodDef methods[] = {
    {"record_batch", py_record_batch, METH_VARARGS,
     "record_batch(head, blob, max_bytes) -> one uncompressed RecordBatch v2 of a pull's messages, b\"\" when "
     "there is none, or None when the Python path must encode them."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastrecords",
                                    "A Fetch answer's RecordBatch in C (see doors/kafka/door.py).", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__fastrecords(void) {
    crc_init();
    b64_init();
    return PyModule_Create(&module);
}
