/* A bookie's per-add work in C: one call per ADD_BATCH request (or ADD_MULTI section) instead of Python work per
 * add. Measured before it (5 nodes on 2 cores, 64 single 1 KiB adds in flight): the Python path took 5.3 us of a
 * bookie's main thread per add it stored, most of a bookie's user CPU.
 *
 * quorumlog/bookie/add_items.py and the Python in storage.py / entry_log.py / journal.py stay the reference:
 * every function here must accept and refuse exactly what wire/ledger.py's take_adds does and write
 * byte-identical records (tests/bookie/test_fastbookie.py compares the two).
 *
 * Formats (big-endian):
 *   add item (wire/ledger.py _ADD_ITEM)     entry id i64 | lac i64 | size u32 | data
 *   entry log record (entry_log.py _HEAD)   size u32 | crc32c(data) u32 | ledger u64 | entry i64 | data
 *   journal record (journal.py _HEAD)       size u32 | crc32c(payload) u32 | payload
 *     payload (storage.py _REC, an add)     type u8 = 1 | ledger u64 | entry i64 | lac i64 | data
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../format/_crc32c.h"

#define ITEM_HEAD 20
#define LOG_HEAD 24
#define REC_HEAD 25
#define JOURNAL_HEAD 8
#define REC_ADD 1

static inline int64_t geti64(const uint8_t *p) { return (int64_t)get64(p); }

/* scan_adds(buf, pos, count, max_adds) -> (end, n, max_lac)
 * The add items from pos: `count` of them, or up to the end of buf when count is -1. Raises ValueError as
 * take_adds does (a truncated item, a negative entry id, data past the end, more than max_adds items). */
static PyObject *py_scan_adds(PyObject *self, PyObject *args) {
    Py_buffer b;
    Py_ssize_t pos, count, max_adds;
    if (!PyArg_ParseTuple(args, "y*nnn:scan_adds", &b, &pos, &count, &max_adds))
        return NULL;
    const uint8_t *p = b.buf;
    Py_ssize_t len = b.len, n = 0;
    long long max_lac = INT64_MIN;
    PyObject *out = NULL;
    if (pos < 0 || pos > len) {
        PyErr_SetString(PyExc_ValueError, "add items start past the end");
        goto done;
    }
    while (count >= 0 ? n < count : pos < len) {
        if (pos + ITEM_HEAD > len) {
            PyErr_SetString(PyExc_ValueError, "truncated add batch");
            goto done;
        }
        int64_t entry = geti64(p + pos), lac = geti64(p + pos + 8);
        uint32_t size = get32(p + pos + 16);
        pos += ITEM_HEAD;
        if ((Py_ssize_t)size > len - pos || entry < 0) {
            PyErr_Format(PyExc_ValueError, "bad add batch item (entry %lld, %lu bytes)", (long long)entry,
                         (unsigned long)size);
            goto done;
        }
        pos += size;
        if (lac > max_lac)
            max_lac = lac;
        if (++n > max_adds) {
            PyErr_Format(PyExc_ValueError, "more than %zd adds in one batch", max_adds);
            goto done;
        }
    }
    out = Py_BuildValue("nnL", pos, n, n ? max_lac : -1LL);
done:
    PyBuffer_Release(&b);
    return out;
}

/* stage_adds(buf, pos, n, ledger, log_id, log_offset, log_buffer, log_limit)
 *   -> (journal, log_bytes, locations, max_entry, staged, end)
 * Up to n add items from pos (scanned already), as storage._stage_adds makes them: their entry log records are
 * appended to log_buffer (a bytearray: the entry log's, at log_offset in log log_id), `locations` maps each
 * (ledger, entry) to its (log_id, offset), and `journal` holds their journal records, framed as the journal
 * writes them. The first item is always staged; the next ones while the log holds less than log_limit bytes
 * (EntryLogger.append rolls the log there, before the next record). log_bytes: how many bytes the entry log
 * grew by; staged: how many items; end: where the items not staged begin. */
static PyObject *py_stage_adds(PyObject *self, PyObject *args) {
    Py_buffer b;
    Py_ssize_t pos, n;
    unsigned long long ledger;
    long long log_id, log_offset, log_limit;
    PyObject *log_buffer;
    if (!PyArg_ParseTuple(args, "y*nnKLLO!L:stage_adds", &b, &pos, &n, &ledger, &log_id, &log_offset,
                          &PyByteArray_Type, &log_buffer, &log_limit))
        return NULL;
    const uint8_t *p = b.buf;
    Py_ssize_t len = b.len, log_bytes = 0, journal_bytes = 0, q = pos, staged = 0;
    PyObject *journal = NULL, *locations = NULL, *log_id_obj = NULL, *ledger_obj = NULL, *out = NULL;
    /* sizes first, and the scan's checks again (never trust a caller) */
    for (; staged < n && (staged == 0 || log_offset + log_bytes < log_limit); staged++) {
        if (q < 0 || q + ITEM_HEAD > len) {
            PyErr_SetString(PyExc_ValueError, "truncated add batch");
            goto done;
        }
        uint32_t size = get32(p + q + 16);
        if ((Py_ssize_t)size > len - q - ITEM_HEAD || geti64(p + q) < 0) {
            PyErr_SetString(PyExc_ValueError, "bad add batch item");
            goto done;
        }
        log_bytes += LOG_HEAD + size;
        journal_bytes += JOURNAL_HEAD + REC_HEAD + size;
        q += ITEM_HEAD + size;
    }
    Py_ssize_t start = PyByteArray_GET_SIZE(log_buffer);
    if (!(journal = PyBytes_FromStringAndSize(NULL, journal_bytes)) || !(locations = PyDict_New()) ||
        !(log_id_obj = PyLong_FromLongLong(log_id)) || !(ledger_obj = PyLong_FromUnsignedLongLong(ledger)))
        goto done;
    if (PyByteArray_Resize(log_buffer, start + log_bytes) < 0)
        goto done;
    uint8_t *lg = (uint8_t *)PyByteArray_AS_STRING(log_buffer) + start;
    uint8_t *jr = (uint8_t *)PyBytes_AS_STRING(journal);
    long long offset = log_offset, max_entry = -1;
    q = pos;
    for (Py_ssize_t i = 0; i < staged; i++) {
        int64_t entry = geti64(p + q), lac = geti64(p + q + 8);
        uint32_t size = get32(p + q + 16);
        const uint8_t *data = p + q + ITEM_HEAD;
        q += ITEM_HEAD + size;
        /* entry log record: the data copied as its CRC is taken */
        uint32_t crc = crc32c_copy(0, data, size, lg + LOG_HEAD);
        put32(lg, size);
        put32(lg + 4, crc);
        put64(lg + 8, ledger);
        put64(lg + 16, (uint64_t)entry);
        /* journal record: head, then the payload's CRC continued over the data as it is copied */
        uint8_t *rec = jr + JOURNAL_HEAD;
        rec[0] = REC_ADD;
        put64(rec + 1, ledger);
        put64(rec + 9, (uint64_t)entry);
        put64(rec + 17, (uint64_t)lac);
        uint32_t jcrc = crc32c_copy(crc32c_buf(0, rec, REC_HEAD), data, size, rec + REC_HEAD);
        put32(jr, REC_HEAD + size);
        put32(jr + 4, jcrc);
        jr += JOURNAL_HEAD + REC_HEAD + size;
        /* locations[(ledger, entry)] = (log_id, offset) */
        PyObject *entry_obj = PyLong_FromLongLong(entry), *offset_obj = PyLong_FromLongLong(offset);
        PyObject *key = entry_obj ? PyTuple_Pack(2, ledger_obj, entry_obj) : NULL;
        PyObject *loc = offset_obj ? PyTuple_Pack(2, log_id_obj, offset_obj) : NULL;
        int failed = !key || !loc || PyDict_SetItem(locations, key, loc) < 0;
        Py_XDECREF(entry_obj);
        Py_XDECREF(offset_obj);
        Py_XDECREF(key);
        Py_XDECREF(loc);
        if (failed) {
            PyByteArray_Resize(log_buffer, start);  /* (nothing staged) */
            goto done;
        }
        offset += LOG_HEAD + size;
        lg += LOG_HEAD + size;
        if (entry > max_entry)
            max_entry = entry;
    }
    out = Py_BuildValue("OnOLnn", journal, log_bytes, locations, max_entry, staged, q);
done:
    Py_XDECREF(journal);
    Py_XDECREF(locations);
    Py_XDECREF(log_id_obj);
    Py_XDECREF(ledger_obj);
    PyBuffer_Release(&b);
    return out;
}

/* add_results(buf, pos, n, code, ledger) -> bytes: the answer for n add items, each with `code`: (entry id i64,
 * code u16) per item (ADD_BATCH), or (ledger u64, entry id i64, code u16) when ledger >= 0 (an ADD_MULTI section). */
static PyObject *py_add_results(PyObject *self, PyObject *args) {
    Py_buffer b;
    Py_ssize_t pos, n;
    int code;
    long long ledger;
    if (!PyArg_ParseTuple(args, "y*nniL:add_results", &b, &pos, &n, &code, &ledger))
        return NULL;
    if (code < 0 || code > 0xFFFF) {
        PyBuffer_Release(&b);
        PyErr_Format(PyExc_OverflowError, "response code %d out of range for u16", code);
        return NULL;
    }
    const uint8_t *p = b.buf;
    Py_ssize_t each = ledger >= 0 ? 18 : 10;
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * each);
    if (out) {
        uint8_t *o = (uint8_t *)PyBytes_AS_STRING(out);
        for (Py_ssize_t i = 0; i < n; i++) {
            if (pos < 0 || pos + ITEM_HEAD > b.len) {
                Py_CLEAR(out);
                PyErr_SetString(PyExc_ValueError, "truncated add batch");
                break;
            }
            if (ledger >= 0) {
                put64(o, (uint64_t)ledger);
                o += 8;
            }
            memcpy(o, p + pos, 8);
            o[8] = (uint8_t)(code >> 8);
            o[9] = (uint8_t)code;
            o += 10;
            pos += ITEM_HEAD + get32(p + pos + 16);
        }
    }
    PyBuffer_Release(&b);
    return out;
}

static PyMethodDef methods[] = {
    {"scan_adds", py_scan_adds, METH_VARARGS, "scan_adds(buf, pos, count, max_adds) -> (end, n, max_lac)"},
    {"stage_adds", py_stage_adds, METH_VARARGS,
     "stage_adds(buf, pos, n, ledger, log_id, log_offset, log_buffer, log_limit) -> (journal, log_bytes, "
     "locations, max_entry, staged, end)"},
    {"add_results", py_add_results, METH_VARARGS, "add_results(buf, pos, n, code, ledger) -> bytes"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastbookie",
                                    "A bookie's per-add work in C (see bookie/add_items.py).", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__fastbookie(void) {
    crc_init();
    return PyModule_Create(&module);
}
