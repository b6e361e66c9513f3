"""records_to_batch against the codec's own decoder (no Spark, no cluster)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quorumlog.errors import CorruptEntry
from quorumlog.spark.arrow import SCHEMA, _walk_offsets, record_offsets, records_to_batch, records_to_batches
from quorumlog.format import log_entry

bodies_st = st.lists(st.binary(min_size=0, max_size=300), min_size=1, max_size=40)
batch_st = st.tuples(bodies_st, st.integers(0, 2**40), st.integers(0, 2**31), st.integers(0, 2**41),
                     st.one_of(st.none(), st.tuples(st.integers(1, 2**64 - 1), st.integers(0, 2**63 - 1))))


def _encode(batches, first_index):
    out = bytearray()
    index = first_index
    chain = 0
    for bodies, _, term, ts, producer in batches:
        buf, _, chain = log_entry.encode_batch(index, term, bodies, ts, len(out), chain, producer=producer)
        out += buf
        index += len(bodies)
    return bytes(out)


def _as_entries(batch: pa.RecordBatch):
    cols = batch.to_pydict()
    ts_ms = batch.column("timestamp").cast(pa.int64()).to_pylist()
    return [log_entry.Entry(i, t, ms // 1000, b) for i, t, ms, b in zip(cols["index"], cols["term"], ts_ms, cols["body"])]


@settings(max_examples=150, deadline=None)
@given(st.lists(batch_st, min_size=1, max_size=5), st.integers(0, 2**40))
def test_matches_decode_records(batches, first_index):
    buf = _encode(batches, first_index)
    batch = records_to_batch(buf)
    assert batch.schema == SCHEMA
    assert _as_entries(batch) == log_entry.decode_records(buf)


@settings(max_examples=50, deadline=None)
@given(st.lists(batch_st, min_size=1, max_size=3))
def test_memoryview_chunks(batches):
    buf = _encode(batches, 5)
    cut = len(log_entry.decode_records(buf)) // 2
    # split at a record boundary, as the store splits at segment ends
    offs = [h.total_size for h, _ in log_entry.iter_records(buf)]
    at = sum(offs[:cut])
    out = records_to_batches((memoryview(buf)[:at], memoryview(buf)[at:]))
    got = [e for b in out for e in _as_entries(b)]
    assert got == log_entry.decode_records(buf)


def test_timestamp_is_utc_microseconds():
    buf, _, _ = log_entry.encode_batch(0, 1, [b"x"], 1_700_000_000_123, 0, 0)
    batch = records_to_batch(bytes(buf))
    assert batch.column("timestamp").type == pa.timestamp("us", tz="UTC")
    assert batch.column("timestamp").cast(pa.int64()).to_pylist() == [1_700_000_000_123_000]


def test_empty_buffer_gives_empty_batch():
    batch = records_to_batch(b"")
    assert batch.num_rows == 0 and batch.schema == SCHEMA


@settings(max_examples=100, deadline=None)
@given(bodies_st, st.data())
def test_damage_raises_corrupt_entry(bodies, data):
    buf = bytearray(log_entry.encode_batch(0, 1, bodies, 1, 0, 0)[0])
    which = data.draw(st.sampled_from(["truncate", "magic", "size"]))
    if which == "truncate":
        cut = data.draw(st.integers(1, len(buf) - 1))
        damaged = bytes(buf[:cut])
        # a cut exactly at a record boundary is a valid shorter buffer
        bounds = set()
        off = 0
        for h, _ in log_entry.iter_records(bytes(buf)):
            off += h.total_size
            bounds.add(off)
        if cut in bounds:
            assert records_to_batch(damaged).num_rows < len(bodies)
            return
    elif which == "magic":
        buf[0] ^= 0xFF
        damaged = bytes(buf)
    else:
        buf[4:8] = (log_entry.HEADER_SIZE + len(bodies[0]) + 1).to_bytes(4, "big")
        damaged = bytes(buf)
    with pytest.raises(CorruptEntry):
        records_to_batch(damaged)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=80), st.binary(max_size=80)), min_size=1, max_size=20))
def test_bodies_holding_the_magic_take_the_slow_path_and_agree(parts):
    # A body that contains the entry magic (and look-alike headers) must not fool the vectorised walk.
    magic = log_entry.ENTRY_MAGIC.to_bytes(4, "big")
    bodies = [a + magic + log_entry.HEADER.pack(log_entry.ENTRY_MAGIC, 60, 0, 0, 0, 0, 0, 0, 0, 4) + b for a, b in parts]
    buf = bytes(log_entry.encode_batch(3, 2, bodies, 5, 0, 0)[0])
    batch = records_to_batch(buf)
    assert _as_entries(batch) == log_entry.decode_records(buf)
    assert list(record_offsets(buf)) == list(_walk_offsets(buf))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(bodies_st, st.sampled_from([0, log_entry.CHANNEL_NOOP, log_entry.CHANNEL_PRODUCER_TAG,
                                                      log_entry.CHANNEL_NOOP | log_entry.CHANNEL_BATCH_CONTINUES])),
                min_size=1, max_size=4),
       st.sampled_from(["none", "truncate", "magic", "size", "short_tag"]), st.data())
def test_compiled_columns_equal_the_python_path(batches, damage, data):
    """log_entry.record_columns (one C pass) gives the same RecordBatch as the take-based Python path, no-op
    entries left out and producer tags stripped; on a damaged buffer it steps aside and the Python path
    raises the reference error. record_positions (a topic pull's) finds the same records and bodies."""
    if log_entry.compiled_codec() is None:
        pytest.skip("the compiled codec is not built")
    out, index, chain = bytearray(), 0, 0
    for bodies, channel in batches:
        tag = log_entry.producer_tag(7, index + 1, len(bodies)) if channel & log_entry.CHANNEL_PRODUCER_TAG else None
        parts, _units, chain = log_entry._py_encode_parts_and_units(index, 3, bodies, 1_700_000_000_000 + index,
                                                                len(out), chain, tag, channel)
        out += b"".join(parts)
        index += len(bodies)
    buf = bytearray(out)
    if damage == "truncate":
        buf = buf[:data.draw(st.integers(1, len(buf)))]
    elif damage == "magic":
        buf[0] ^= 0xFF
    elif damage == "size":
        buf[4:8] = (int.from_bytes(buf[4:8], "big") + 1).to_bytes(4, "big")
    elif damage == "short_tag":  # the first record says "tagged" with a body shorter than a tag
        buf[32:36] = (int.from_bytes(buf[32:36], "big") | log_entry.CHANNEL_PRODUCER_TAG).to_bytes(4, "big")
    buf = bytes(buf)

    def outcome():
        try:
            return records_to_batch(buf)
        except CorruptEntry:
            return CorruptEntry

    compiled = outcome()
    saved = log_entry.compiled
    log_entry.compiled = None
    try:
        pure = outcome()
    finally:
        log_entry.compiled = saved
    if pure is CorruptEntry:
        assert compiled is CorruptEntry
    else:
        assert compiled is not CorruptEntry and compiled.equals(pure)
    # record_positions: the same records as record_columns, each body in place instead of copied
    cols, places = log_entry.record_columns(buf), log_entry.record_positions(buf)
    assert (cols is None) == (places is None)
    if cols is not None:
        n, index, term, ts, offsets, data = cols
        assert places[:4] == (n, index, term, ts)
        starts, ends = memoryview(places[4]).cast("i"), memoryview(places[5]).cast("i")
        offs = memoryview(offsets).cast("i")
        assert [buf[starts[k]:ends[k]] for k in range(n)] == [data[offs[k]:offs[k + 1]] for k in range(n)]
