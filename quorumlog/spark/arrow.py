"""Raw stored records → one pyarrow RecordBatch, without a Python object per row.

The one per-row Python step left is the walk that finds where each record starts (records are variable
length and only a record's own header says how long it is). Everything else — header fields, the producer
tag cut — is numpy over the one buffer, and the body column is cut out of that buffer by Arrow itself
(`pa.Array.from_buffers` over boundary offsets, then `take`), so Spark's workers get Arrow data at memory
speed (~6M rows/s for 300-byte bodies on one core, against ~0.4M for `codec.decode_records`).
"""

from __future__ import annotations

import struct
from typing import Iterable

import numpy as np
import pyarrow as pa

from ..errors import CorruptEntry
from ..format.log_entry import CHANNEL_NOOP, CHANNEL_PRODUCER_TAG, ENTRY_MAGIC, HEADER_SIZE, PRODUCER_TAG_SIZE, record_columns

SCHEMA = pa.schema([
    pa.field("index", pa.int64(), nullable=False),
    pa.field("term", pa.int64(), nullable=False),
    pa.field("timestamp", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("body", pa.binary(), nullable=False),
])
# The same schema for Spark (DDL strings cannot be parsed inside workers; StructType is built lazily).
SCHEMA_DDL = "index long, term long, timestamp timestamp, body binary"

# The header as a numpy record (codec.HEADER ">iiqqqiIIqi", packed, big-endian).
HEADER_DTYPE = np.dtype([
    ("magic", ">i4"), ("total_size", ">i4"), ("index", ">i8"), ("term", ">i8"), ("pos", ">i8"),
    ("channel", ">i4"), ("chain_crc", ">u4"), ("body_crc", ">u4"), ("timestamp_ms", ">i8"), ("body_size", ">i4"),
])
assert HEADER_DTYPE.itemsize == HEADER_SIZE
_TOTAL_SIZE_AT = 4
_TOTAL_SIZE = struct.Struct(">i")
MAX_BUFFER_BYTES = 2**31 - 1  # int32 Arrow offsets; client pages are a few MiB


def spark_schema():
    """The StructType Spark sees (imported lazily so this module works without pyspark)."""
    from pyspark.sql.types import BinaryType, LongType, StructField, StructType, TimestampType

    return StructType([
        StructField("index", LongType(), False),
        StructField("term", LongType(), False),
        StructField("timestamp", TimestampType(), False),
        StructField("body", BinaryType(), False),
    ])


def empty_batch() -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in SCHEMA], schema=SCHEMA)


_MAGIC_BYTES = ENTRY_MAGIC.to_bytes(4, "big")


def record_offsets(buf) -> np.ndarray:
    """Start offset of each record in `buf` (int64). Raises CorruptEntry if the sizes do not tile `buf`.

    Fast path, vectorised: every place the entry magic occurs is a candidate; if the candidates chain
    exactly (first at 0, each one's total_size leads to the next, the last to the end), they are the
    records. A body that happens to contain the magic breaks the chain and we walk instead.
    """
    raw = np.frombuffer(buf, dtype=np.uint8)
    size = raw.size
    if size >= HEADER_SIZE:
        at = np.flatnonzero(raw[:size - HEADER_SIZE + 1] == _MAGIC_BYTES[0])
        for k in range(1, 4):
            at = at[raw[at + k] == _MAGIC_BYTES[k]]
        if at.size and at[0] == 0:
            sizes = raw[(at + _TOTAL_SIZE_AT)[:, None] + np.arange(4)].view(">i4").ravel().astype(np.int64)
            nxt = at + sizes
            if np.all(sizes >= HEADER_SIZE) and np.array_equal(nxt[:-1], at[1:]) and nxt[-1] == size:
                return at.astype(np.int64)
    return _walk_offsets(buf)


def _walk_offsets(buf) -> np.ndarray:
    """record_offsets the slow, always-right way: a record's length is only in its own header."""
    size = len(buf)
    unpack = _TOTAL_SIZE.unpack_from
    offsets: list[int] = []
    append = offsets.append
    off = 0
    last = size - HEADER_SIZE
    while off <= last:
        append(off)
        total = unpack(buf, off + _TOTAL_SIZE_AT)[0]
        if total < HEADER_SIZE:
            raise CorruptEntry(f"bad record size {total} at offset {off}")
        off += total
    if off != size:
        raise CorruptEntry(f"records do not tile the buffer: ended at {off} of {size} bytes")
    return np.fromiter(offsets, dtype=np.int64, count=len(offsets))


def _pieces(buf, bounds: np.ndarray) -> pa.BinaryArray:
    """`buf` cut at `bounds` (ascending, first 0, last len(buf)) as one Binary array, zero-copy."""
    return pa.Array.from_buffers(pa.binary(), bounds.size - 1, [None, pa.py_buffer(bounds), pa.py_buffer(buf)])


def records_to_batch(buf) -> pa.RecordBatch:
    """Contiguous raw records (one Records chunk) → RecordBatch(index, term, timestamp, body).

    With the compiled codec, one C pass builds the columns (codec.record_columns). Without it (or for a
    malformed buffer, to raise the reference error), the buffer is viewed as an Arrow binary array cut at
    record/header/body boundaries, and `take` copies the pieces we want (headers, then user bodies) at C
    speed. Checks magic and sizes; body CRCs were checked by the store that served the read.
    """
    size = len(buf)
    if size == 0:
        return empty_batch()
    if size > MAX_BUFFER_BYTES:
        raise ValueError(f"records buffer of {size} bytes exceeds {MAX_BUFFER_BYTES}")
    columns = record_columns(buf)
    if columns is not None:
        n, index, term, ts_us, offsets, data = columns
        return pa.RecordBatch.from_arrays([
            pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(index)]),
            pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(term)]),
            pa.Array.from_buffers(pa.timestamp("us", tz="UTC"), n, [None, pa.py_buffer(ts_us)]),
            pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)]),
        ], schema=SCHEMA)
    starts = record_offsets(buf).astype(np.int32)
    n = starts.size
    bounds = np.empty(2 * n + 1, dtype=np.int32)
    bounds[0:2 * n:2] = starts
    bounds[1:2 * n:2] = starts + HEADER_SIZE
    bounds[-1] = size
    headers_arr = _pieces(buf, bounds).take(pa.array(np.arange(0, 2 * n, 2, dtype=np.int32)))
    headers = np.frombuffer(headers_arr.buffers()[2], dtype=np.uint8, count=HEADER_SIZE * n).view(HEADER_DTYPE)
    if not np.all(headers["magic"] == ENTRY_MAGIC):
        bad = int(starts[np.argmax(headers["magic"] != ENTRY_MAGIC)])
        raise CorruptEntry(f"bad magic at offset {bad}")
    body_size = headers["body_size"].astype(np.int32)
    if np.any(headers["total_size"] != body_size + HEADER_SIZE):
        raise CorruptEntry("record total size does not match its body size")
    tagged = (headers["channel"] & CHANNEL_PRODUCER_TAG) != 0
    user_size = body_size - np.where(tagged, PRODUCER_TAG_SIZE, 0).astype(np.int32)
    if np.any(user_size < 0):
        raise CorruptEntry("producer-tagged record shorter than its tag")
    # Cut every record into header | user body | producer tag (empty when untagged), keep the bodies.
    bounds = np.empty(3 * n + 1, dtype=np.int32)
    bounds[0:3 * n:3] = starts
    bounds[1:3 * n:3] = starts + HEADER_SIZE
    bounds[2:3 * n:3] = starts + HEADER_SIZE + user_size
    bounds[-1] = size
    body = _pieces(buf, bounds).take(pa.array(np.arange(1, 3 * n, 3, dtype=np.int32)))
    index = headers["index"].astype(np.int64)
    term = headers["term"].astype(np.int64)
    ts_us = headers["timestamp_ms"].astype(np.int64) * 1000
    batch = pa.RecordBatch.from_arrays([
        pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(index)]),
        pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(term)]),
        pa.Array.from_buffers(pa.timestamp("us", tz="UTC"), n, [None, pa.py_buffer(ts_us)]),
        body,
    ], schema=SCHEMA)
    noop = (headers["channel"] & CHANNEL_NOOP) != 0
    if noop.any():  # a new leader's no-op entries are log bookkeeping, not data
        batch = batch.filter(pa.array(~noop))
    return batch


def records_to_batches(chunks: Iterable) -> list[pa.RecordBatch]:
    """Every chunk of a Records (one per data segment touched) → batches, empty chunks dropped."""
    return [records_to_batch(c) for c in chunks if len(c)]
