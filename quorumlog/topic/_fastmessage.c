/* A pull's hot loops in C, one call per pull instead of Python work per message: on the node, pack_pulled
 * packs the messages a consume queue's units point at; on the consumer, decode_pulled decodes them into
 * objects, and pulled_columns into Arrow buffers for Spark (spark/topic.py). And the part of a message every
 * member's dispatcher reads of every committed entry: message_head.
 *
 * The Python paths stay the reference: decode_pulled accepts exactly the messages message.decode accepts, with
 * the same fields, and pack_pulled packs what server/services/topics.py's record walk packs
 * (tests/topic/test_fastmessage.py compares them). Optional at build time: both callers fall back to Python
 * without it, or with QUORUMLOG_PURE_PYTHON=1.
 *
 * Consume queue unit (consume_queue.py): log index i64 | size i32 | tag hash i64, big-endian.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_message_layout.h"

#define MAX_MS (INT64_MAX / 1000) /* a timestamp in ms that fits int64 microseconds */

/* TopicMessage's fields, in the order decode_pulled fills them. */
static const char *FIELDS[] = {"topic", "queue_id", "queue_offset", "body", "key", "tags", "properties",
                               "born_timestamp_ms", "store_timestamp_ms", "index", "term"};
#define N_FIELDS 11
enum { F_TOPIC, F_QUEUE_ID, F_QUEUE_OFFSET, F_BODY, F_KEY, F_TAGS, F_PROPERTIES, F_BORN, F_STORE, F_INDEX, F_TERM };

/* A length-prefixed UTF-8 string at *pos (u16 length), or NULL: -1 with no Python error if it runs past end
 * or is not UTF-8 (the entry is then not a message), -1 with an error set on a memory error. */
static PyObject *text16(const unsigned char *b, Py_ssize_t *pos, Py_ssize_t end, PyObject *empty) {
    if (*pos + 2 > end) return NULL;
    Py_ssize_t n = be16(b + *pos);
    *pos += 2;
    if (*pos + n > end) return NULL;
    PyObject *s;
    if (n == 0) {
        s = Py_NewRef(empty);
    } else {
        s = PyUnicode_DecodeUTF8((const char *)b + *pos, n, NULL);
        if (s == NULL && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) PyErr_Clear();
    }
    *pos += n;
    return s;
}

typedef struct {
    PyObject *topic, *key, *tags, *properties, *body;
    uint32_t flags;
    int queue_id;
    int64_t born;
} Parsed;

static void parsed_clear(Parsed *m) {
    Py_CLEAR(m->topic);
    Py_CLEAR(m->key);
    Py_CLEAR(m->tags);
    Py_CLEAR(m->properties);
    Py_CLEAR(m->body);
}

/* Parse one entry body. 1: a message, in *m; 0: not a message (raw or damaged); -1: a Python error.
 * `last_topic` caches the previous topic's string: one topic repeats through a pull. */
static int parse(const unsigned char *b, Py_ssize_t end, Parsed *m, PyObject **last_topic, PyObject *empty) {
    memset(m, 0, sizeof(*m));
    if (end < HEAD_SIZE + 7 || memcmp(b, "QLM", 3) != 0 || b[3] != 1) return 0;
    m->flags = ((uint32_t)b[4] << 24) | ((uint32_t)b[5] << 16) | ((uint32_t)b[6] << 8) | b[7];
    m->queue_id = be16(b + 8);
    m->born = be64(b + 10);
    Py_ssize_t tn = b[HEAD_SIZE], pos = HEAD_SIZE + 1;
    if (pos + tn > end || !topic_ok(b + pos, tn)) return 0;
    if (*last_topic != NULL && PyUnicode_GET_LENGTH(*last_topic) == tn &&
        memcmp(PyUnicode_DATA(*last_topic), b + pos, tn) == 0) {
        m->topic = Py_NewRef(*last_topic);
    } else {
        m->topic = PyUnicode_DecodeASCII((const char *)b + pos, tn, NULL);
        if (m->topic == NULL) return -1;
        Py_XSETREF(*last_topic, Py_NewRef(m->topic));
    }
    pos += tn;
    if ((m->key = text16(b, &pos, end, empty)) == NULL) goto not_one;
    if ((m->tags = text16(b, &pos, end, empty)) == NULL) goto not_one;
    if (pos + 2 > end) goto not_one;
    int count = be16(b + pos);
    pos += 2;
    if ((m->properties = PyDict_New()) == NULL) goto not_one;
    for (int i = 0; i < count; i++) {
        PyObject *k = text16(b, &pos, end, empty);
        if (k == NULL) goto not_one;
        PyObject *v = text16(b, &pos, end, empty);
        if (v == NULL) {
            Py_DECREF(k);
            goto not_one;
        }
        int rc = PyDict_SetItem(m->properties, k, v);
        Py_DECREF(k);
        Py_DECREF(v);
        if (rc < 0) goto not_one;
    }
    if ((m->body = PyBytes_FromStringAndSize((const char *)b + pos, end - pos)) == NULL) goto not_one;
    return 1;
not_one:
    parsed_clear(m);
    return PyErr_Occurred() ? -1 : 0;
}

/* Is the decoded tags string one of `wanted` (a set of str), or is there no filter? */
static int tag_wanted(PyObject *wanted, PyObject *tags) {
    if (wanted == Py_None) return 1;
    return PySet_Contains(wanted, tags);
}

static PyObject *py_decode_pulled(PyObject *self, PyObject *args) {
    Py_buffer head, blob;
    PyObject *cls, *wanted;
    if (!PyArg_ParseTuple(args, "y*y*OO", &head, &blob, &cls, &wanted)) return NULL;
    PyObject *out = NULL, *last_topic = NULL, *empty = NULL;
    PyObject *descr[N_FIELDS] = {NULL};
    if (!PyType_Check(cls) || (wanted != Py_None && !PyAnySet_Check(wanted))) {
        PyErr_SetString(PyExc_TypeError, "decode_pulled(head, blob, cls, wanted): a class and a set or None");
        goto done;
    }
    if (head.len % (8 * PULLED_FIELDS) != 0) {
        PyErr_SetString(PyExc_ValueError, "pulled head: not a whole number of 40-byte entries");
        goto done;
    }
    /* cls's fields must be slots (member descriptors): they are set as object.__setattr__ would, without
     * running a Python __init__ per message. */
    for (int f = 0; f < N_FIELDS; f++) {
        descr[f] = PyObject_GetAttrString(cls, FIELDS[f]);
        if (descr[f] == NULL) goto done;
        if (!Py_IS_TYPE(descr[f], &PyMemberDescr_Type)) {
            PyErr_Format(PyExc_TypeError, "%s.%s is not a slot", ((PyTypeObject *)cls)->tp_name, FIELDS[f]);
            goto done;
        }
    }
    if ((empty = PyUnicode_New(0, 0)) == NULL) goto done;
    Py_ssize_t n = head.len / (8 * PULLED_FIELDS);
    if ((out = PyList_New(0)) == NULL) goto done;
    const unsigned char *h = head.buf, *data = blob.buf;
    Py_ssize_t at = 0;
    PyTypeObject *type = (PyTypeObject *)cls;
    for (Py_ssize_t i = 0; i < n; i++, h += 8 * PULLED_FIELDS) {
        int64_t size = be64(h + 32);
        if (size < 0 || size > blob.len - at) {
            PyErr_SetString(PyExc_ValueError, "pulled messages run past their bodies");
            Py_CLEAR(out);
            goto done;
        }
        Parsed m;
        int rc = parse(data + at, (Py_ssize_t)size, &m, &last_topic, empty);
        at += (Py_ssize_t)size;
        if (rc < 0) {
            Py_CLEAR(out);
            goto done;
        }
        if (rc == 0) continue;
        int want = tag_wanted(wanted, m.tags);
        if (want <= 0) {
            parsed_clear(&m);
            if (want < 0) {
                Py_CLEAR(out);
                goto done;
            }
            continue;
        }
        PyObject *vals[N_FIELDS] = {
            m.topic, PyLong_FromLong(m.queue_id), PyLong_FromLongLong(be64(h)), m.body, m.key, m.tags,
            m.properties, PyLong_FromLongLong(m.born), PyLong_FromLongLong(be64(h + 24)),
            PyLong_FromLongLong(be64(h + 8)), PyLong_FromLongLong(be64(h + 16))};
        PyObject *obj = type->tp_alloc(type, 0);
        int ok = obj != NULL;
        for (int f = 0; f < N_FIELDS; f++) {
            if (ok && vals[f] != NULL) ok = Py_TYPE(descr[f])->tp_descr_set(descr[f], obj, vals[f]) == 0;
            else ok = 0;
            Py_XDECREF(vals[f]);
        }
        if (ok) ok = PyList_Append(out, obj) == 0;
        Py_XDECREF(obj);
        if (!ok) {
            Py_CLEAR(out);
            goto done;
        }
    }
done:
    for (int f = 0; f < N_FIELDS; f++) Py_XDECREF(descr[f]);
    Py_XDECREF(last_topic);
    Py_XDECREF(empty);
    PyBuffer_Release(&head);
    PyBuffer_Release(&blob);
    return out;
}

static inline void put64(unsigned char *p, int64_t v) {
    uint64_t b = FROM_BE64((uint64_t)v); /* (a byte swap is its own inverse) */
    memcpy(p, &b, 8);
}

/* pulled_capacity(units, budget) -> the most bytes pack_pulled can put in a pull's blob from these units: their
 * sizes' sum, or budget plus the biggest (it stops once the blob holds budget bytes). A blob of this size is
 * never grown, so a pull's messages are copied once, not again at every resize of a growing buffer. */
static PyObject *py_pulled_capacity(PyObject *self, PyObject *args) {
    Py_buffer units;
    Py_ssize_t budget;
    if (!PyArg_ParseTuple(args, "y*n", &units, &budget)) return NULL;
    const unsigned char *u = (const unsigned char *)units.buf;
    long long total = 0, biggest = 0;
    for (Py_ssize_t i = 0; i < units.len / 20; i++) {
        const unsigned char *s = u + i * 20 + 8;
        long long size = ((uint32_t)s[0] << 24) | ((uint32_t)s[1] << 16) | ((uint32_t)s[2] << 8) | s[3];
        total += size;
        if (size > biggest) biggest = size;
    }
    PyBuffer_Release(&units);
    return PyLong_FromLongLong(total < budget + biggest ? total : budget + biggest);
}

/* pack_pulled(units, first_offset, start, wanted, index, term, ts_us, starts, ends, data, head, blob, count,
 *             used, budget) -> (next, count, used)
 *
 * Writes into `head` and `blob` (writable buffers sized by the caller: 40 bytes per unit, pulled_capacity bytes)
 * after the `count` messages and `used` blob bytes already there, the messages that consume-queue units start,
 * start+1, ... point at within records of `data` (format.log_entry.record_positions of a chunk, or
 * FileStore.records_at of a segment: native int64 index, term and timestamp in microseconds, int32 starts and
 * ends of the user bodies in `data`), skipping units whose tag hash is not in `wanted` (a set of ints, or None).
 * Unit u's queue offset is first_offset + u. Stops at the first unit past the last record given, or once the
 * blob holds `budget` bytes; returns the position reached (len(units) / 20 when all were handled) and the new
 * count and used. A message is cut to its unit's size, as a producer tag may follow it. */
static PyObject *py_pack_pulled(PyObject *self, PyObject *args) {
    Py_buffer units, index, term, ts, starts, ends, data, head, blob;
    long long first_offset;
    Py_ssize_t start, count, used, budget;
    PyObject *wanted, *result = NULL;
    if (!PyArg_ParseTuple(args, "y*LnOy*y*y*y*y*y*w*w*nnn", &units, &first_offset, &start, &wanted, &index, &term,
                          &ts, &starts, &ends, &data, &head, &blob, &count, &used, &budget))
        return NULL;
    Py_ssize_t n = index.len / 8, n_units = units.len / 20;
    if (units.len % 20 || index.len % 8 || term.len != index.len || ts.len != index.len || starts.len != n * 4 ||
        ends.len != n * 4 || start < 0 || count < 0 || used < 0 || count * 40 > head.len ||
        used > blob.len || (wanted != Py_None && !PyAnySet_Check(wanted))) {
        PyErr_SetString(PyExc_ValueError, "pack_pulled: units or record columns of the wrong shape");
        goto done;
    }
    const int64_t *ix = index.buf, *tm = term.buf, *us = ts.buf;
    const int32_t *from = starts.buf, *to = ends.buf;
    const unsigned char *u = (const unsigned char *)units.buf;
    Py_ssize_t k = 0, pos = start;
    for (; pos < n_units && n > 0; pos++) {
        const unsigned char *unit = u + pos * 20;
        int64_t log_index = be64(unit);
        if (log_index > ix[n - 1] || used >= budget) break;
        if (wanted != Py_None) {
            PyObject *tag = PyLong_FromLongLong(be64(unit + 12));
            int in = tag == NULL ? -1 : PySet_Contains(wanted, tag);
            Py_XDECREF(tag);
            if (in < 0) goto done;
            if (!in) continue;
        }
        Py_ssize_t lo = k, hi = n; /* the first record at or after log_index: units and records both ascend */
        while (lo < hi) {
            Py_ssize_t mid = lo + (hi - lo) / 2;
            if (ix[mid] < log_index) lo = mid + 1;
            else hi = mid;
        }
        k = lo;
        if (k >= n || ix[k] != log_index) continue; /* (not in these records: nothing to send) */
        int32_t body = to[k] - from[k], size = (int32_t)(((uint32_t)unit[8] << 24) | ((uint32_t)unit[9] << 16) |
                                                         ((uint32_t)unit[10] << 8) | unit[11]);
        if (from[k] < 0 || body < 0 || to[k] > data.len) {
            PyErr_SetString(PyExc_ValueError, "pack_pulled: body offsets outside the data");
            goto done;
        }
        if (size < 0 || size > body) size = body;
        int64_t ms = us[k] / 1000 - (us[k] % 1000 < 0); /* floor, as Python's // */
        if ((count + 1) * 40 > head.len || size > blob.len - used) {
            PyErr_SetString(PyExc_ValueError, "pack_pulled: head or blob smaller than pulled_capacity");
            goto done;
        }
        unsigned char *h = (unsigned char *)head.buf + count * 40;
        put64(h, first_offset + pos);
        put64(h + 8, log_index);
        put64(h + 16, tm[k]);
        put64(h + 24, ms);
        put64(h + 32, size);
        memcpy((char *)blob.buf + used, (const char *)data.buf + from[k], size);
        count++;
        used += size;
    }
    result = Py_BuildValue("(nnn)", pos, count, used);
done:
    PyBuffer_Release(&units);
    PyBuffer_Release(&index);
    PyBuffer_Release(&term);
    PyBuffer_Release(&ts);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&ends);
    PyBuffer_Release(&data);
    PyBuffer_Release(&head);
    PyBuffer_Release(&blob);
    return result;
}

/* pulled_columns(head, blob) -> (n, index, term, store_us, queue_offset, queue_id, born_us, topic_offsets,
 * topic_data, key_offsets, key_data, tags_offsets, tags_data, body_offsets, body_data), or None
 *
 * A pull's messages as Arrow buffers for Spark's topic rows, in two passes (check and size, then fill): native
 * int64 (index, term, timestamps in microseconds, queue offset), int32 (queue id), and int32 offsets (n + 1)
 * with the bytes of each string or binary column. None when any entry is not a message, has properties or a
 * timestamp past int64 microseconds, or would not fit int32 offsets: the caller's per-message path decides
 * those (it raises the reference error). */
static PyObject *py_pulled_columns(PyObject *self, PyObject *args) {
    Py_buffer head, blob;
    if (!PyArg_ParseTuple(args, "y*y*", &head, &blob)) return NULL;
    PyObject *result = NULL, *bufs[14] = {NULL};
    Py_ssize_t n = head.len / (8 * PULLED_FIELDS);
    const unsigned char *h = head.buf, *data = blob.buf;
    /* per column: 0 topic, 1 key, 2 tags, 3 body */
    int64_t total[4] = {0, 0, 0, 0};
    Py_ssize_t at = 0;
    int ok = head.len % (8 * PULLED_FIELDS) == 0;
    /* Both passes run without the GIL (they touch only the buffers held here and bytes not yet shared), so a
     * Spark worker's pulls go on in its other thread meanwhile. */
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; ok && i < n; i++) {
        int64_t size = be64(h + i * 40 + 32);
        if (size < HEAD_SIZE + 7 || size > blob.len - at) {
            ok = 0;
            break;
        }
        const unsigned char *b = data + at;
        Py_ssize_t end = (Py_ssize_t)size, tn = b[HEAD_SIZE], pos = HEAD_SIZE + 1 + tn;
        ok = memcmp(b, "QLM", 3) == 0 && b[3] == 1 && pos + 2 <= end && topic_ok(b + HEAD_SIZE + 1, tn);
        if (!ok) break;
        Py_ssize_t kn = be16(b + pos);
        ok = pos + 2 + kn + 2 <= end && utf8_ok(b + pos + 2, kn);
        if (!ok) break;
        pos += 2 + kn;
        Py_ssize_t gn = be16(b + pos);
        ok = pos + 2 + gn + 2 <= end && utf8_ok(b + pos + 2, gn) && be16(b + pos + 2 + gn) == 0;
        if (!ok) break;
        pos += 2 + gn + 2;
        int64_t born = be64(b + 10), stored = be64(h + i * 40 + 24);
        ok = born >= -MAX_MS && born <= MAX_MS && stored >= -MAX_MS && stored <= MAX_MS; /* (as microseconds) */
        if (!ok) break;
        total[0] += tn, total[1] += kn, total[2] += gn, total[3] += end - pos;
        at += (Py_ssize_t)size;
    }
    Py_END_ALLOW_THREADS
    if (!ok || at != blob.len || total[0] > INT32_MAX || total[1] > INT32_MAX || total[2] > INT32_MAX ||
        total[3] > INT32_MAX) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    static const int widths[6] = {8, 8, 8, 8, 4, 8};
    for (int c = 0; c < 6; c++)
        if ((bufs[c] = PyBytes_FromStringAndSize(NULL, n * widths[c])) == NULL) goto done;
    for (int c = 0; c < 4; c++) {
        if ((bufs[6 + 2 * c] = PyBytes_FromStringAndSize(NULL, (n + 1) * 4)) == NULL) goto done;
        if ((bufs[7 + 2 * c] = PyBytes_FromStringAndSize(NULL, total[c])) == NULL) goto done;
    }
    int64_t *index = (int64_t *)PyBytes_AS_STRING(bufs[0]), *term = (int64_t *)PyBytes_AS_STRING(bufs[1]);
    int64_t *store = (int64_t *)PyBytes_AS_STRING(bufs[2]), *qoff = (int64_t *)PyBytes_AS_STRING(bufs[3]);
    int32_t *qid = (int32_t *)PyBytes_AS_STRING(bufs[4]);
    int64_t *born = (int64_t *)PyBytes_AS_STRING(bufs[5]);
    int32_t *off[4];
    char *out[4];
    int32_t w[4] = {0, 0, 0, 0};
    for (int c = 0; c < 4; c++) {
        off[c] = (int32_t *)PyBytes_AS_STRING(bufs[6 + 2 * c]);
        out[c] = PyBytes_AS_STRING(bufs[7 + 2 * c]);
        off[c][0] = 0;
    }
    at = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++, h += 40) {
        Py_ssize_t end = (Py_ssize_t)be64(h + 32);
        const unsigned char *b = data + at;
        qoff[i] = be64(h);
        index[i] = be64(h + 8);
        term[i] = be64(h + 16);
        store[i] = be64(h + 24) * 1000;
        qid[i] = be16(b + 8);
        born[i] = be64(b + 10) * 1000;
        Py_ssize_t from[4], len[4], pos = HEAD_SIZE + 1;
        from[0] = pos, len[0] = b[HEAD_SIZE], pos += len[0];
        from[1] = pos + 2, len[1] = be16(b + pos), pos += 2 + len[1];
        from[2] = pos + 2, len[2] = be16(b + pos), pos += 2 + len[2] + 2;
        from[3] = pos, len[3] = end - pos;
        for (int c = 0; c < 4; c++) {
            memcpy(out[c] + w[c], b + from[c], len[c]);
            w[c] += (int32_t)len[c];
            off[c][i + 1] = w[c];
        }
        at += end;
    }
    Py_END_ALLOW_THREADS
    result = PyTuple_New(15);
    if (result == NULL) goto done;
    PyTuple_SET_ITEM(result, 0, PyLong_FromSsize_t(n));
    for (int c = 0; c < 14; c++) {
        PyTuple_SET_ITEM(result, c + 1, bufs[c]);
        bufs[c] = NULL;
    }
    if (PyTuple_GET_ITEM(result, 0) == NULL) Py_CLEAR(result);
done:
    for (int c = 0; c < 14; c++) Py_XDECREF(bufs[c]);
    PyBuffer_Release(&head);
    PyBuffer_Release(&blob);
    return result;
}

/* message_head(entry) -> (flags, topic, queue_id, tags) or None
 *
 * What a dispatcher needs of an entry (topic/dispatcher.py), and whether it is a message at all: None exactly
 * where message.decode returns None (every field checked as it checks them: the topic's characters, each
 * length within the entry, key, tags and properties well-formed UTF-8), but no object made for the key, the
 * properties or the body. Every member of a group must take the same entries for messages, with or without
 * this module: tests/topic/test_fastmessage.py holds it to decode. */
static PyObject *py_message_head(PyObject *self, PyObject *arg) {
    Py_buffer e;
    if (PyObject_GetBuffer(arg, &e, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *b = e.buf;
    Py_ssize_t end = e.len, pos = HEAD_SIZE + 1, tn = 0, gn = 0, tags_at = 0;
    PyObject *result = NULL;
    int ok = end >= HEAD_SIZE + 7 && memcmp(b, "QLM", 3) == 0 && b[3] == 1;
    if (ok) {
        tn = b[HEAD_SIZE];
        ok = pos + tn <= end && topic_ok(b + pos, tn);
        pos += tn;
    }
    for (int field = 0; ok && field < 2; field++) { /* key, then tags */
        ok = pos + 2 <= end;
        if (!ok) break;
        Py_ssize_t n = be16(b + pos);
        ok = pos + 2 + n <= end && utf8_ok(b + pos + 2, n);
        if (field == 1) tags_at = pos + 2, gn = n;
        pos += 2 + n;
    }
    if (ok) ok = pos + 2 <= end;
    if (ok) {
        int count = be16(b + pos);
        pos += 2;
        for (int i = 0; ok && i < 2 * count; i++) { /* each property's key and value */
            ok = pos + 2 <= end;
            if (!ok) break;
            Py_ssize_t n = be16(b + pos);
            ok = pos + 2 + n <= end && utf8_ok(b + pos + 2, n);
            pos += 2 + n;
        }
    }
    if (!ok) {
        result = Py_NewRef(Py_None);
    } else {
        uint32_t flags = ((uint32_t)b[4] << 24) | ((uint32_t)b[5] << 16) | ((uint32_t)b[6] << 8) | b[7];
        PyObject *topic = PyUnicode_DecodeASCII((const char *)b + HEAD_SIZE + 1, tn, NULL);
        PyObject *tags = PyUnicode_DecodeUTF8((const char *)b + tags_at, gn, NULL);
        if (topic != NULL && tags != NULL)
            result = Py_BuildValue("(kOiO)", (unsigned long)flags, topic, be16(b + 8), tags);
        Py_XDECREF(topic);
        Py_XDECREF(tags);
    }
    PyBuffer_Release(&e);
    return result;
}

/* unit_indexes(units) -> bytes: the log index of each consume-queue unit, as native int64s (what the store's
 * records_at takes). */
static PyObject *py_unit_indexes(PyObject *self, PyObject *arg) {
    Py_buffer u;
    if (PyObject_GetBuffer(arg, &u, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *out = NULL;
    if (u.len % 20) {
        PyErr_SetString(PyExc_ValueError, "unit_indexes: not whole 20-byte units");
    } else if ((out = PyBytes_FromStringAndSize(NULL, u.len / 20 * 8)) != NULL) {
        int64_t *o = (int64_t *)PyBytes_AS_STRING(out);
        for (Py_ssize_t i = 0; i < u.len / 20; i++) o[i] = be64((const unsigned char *)u.buf + i * 20);
    }
    PyBuffer_Release(&u);
    return out;
}

static PyMethodDef methods[] = {
    {"message_head", py_message_head, METH_O,
     "message_head(entry) -> (flags, topic, queue_id, tags), or None where message.decode gives None."},
    {"pulled_columns", py_pulled_columns, METH_VARARGS,
     "pulled_columns(head, blob) -> (n, 14 Arrow buffers) or None: a pull's messages as Spark's topic columns."},
    {"pulled_capacity", py_pulled_capacity, METH_VARARGS, "pulled_capacity(units, budget) -> blob bytes"},
    {"pack_pulled", py_pack_pulled, METH_VARARGS,
     "pack_pulled(units, first_offset, start, wanted, index, term, ts_us, starts, ends, data, head, blob, count, "
     "used, budget) -> (next, count, used)"},
    {"unit_indexes", py_unit_indexes, METH_O, "unit_indexes(units) -> the units' log indexes as native int64s."},
    {"decode_pulled", py_decode_pulled, METH_VARARGS,
     "decode_pulled(head, blob, cls, wanted) -> [cls(...)]: the messages of one pull (entries that are not "
     "messages, and tags not in the set `wanted` unless it is None, left out)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastmessage",
                                    "quorumlog's topic message decoder in C (see topic/message.py).", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__fastmessage(void) { return PyModule_Create(&module); }
