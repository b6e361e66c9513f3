"""The compiled record codec (quorumlog/format/_fastcodec.c) against the pure-Python reference in log_entry.py.

Same bytes out of the encoder, same CRC32C as the `crc32c` package (both the SSE4.2 and the table code), and
the same verdicts from every caller that checks records with it (a follower's append_records, a first read,
recovery's forward scan): same result, or the same error with the same message, for damaged input.
"""

from __future__ import annotations

import importlib
import os
import shutil
import sysconfig

import crc32c as crc32c_pkg
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from quorumlog.errors import QuorumLogError
from quorumlog.store import FileStore, StoreConfig
from quorumlog.format import log_entry
from quorumlog.store.recovery import check_record

try:
    fast = importlib.import_module("quorumlog.format._fastcodec")
except ImportError:  # pragma: no cover - only where the build had no C compiler
    fast = None

needs_fast = pytest.mark.skipif(fast is None, reason="quorumlog.format._fastcodec is not built (no C compiler at "
                                                     "install time): only the pure-Python codec is there to test")
common = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

I64 = st.integers(0, 2 ** 62)
U32 = st.integers(0, 2 ** 32 - 1)
# Mostly small bodies, some empty, now and then a large one (several CRC/copy code paths: <8 bytes, words).
body_st = st.one_of(st.binary(max_size=64), st.binary(min_size=1000, max_size=3000),
                    st.integers(0, 70_000).map(lambda n: os.urandom(n)))
as_buffer = st.sampled_from([bytes, bytearray, memoryview])
bodies_st = st.lists(st.tuples(body_st, as_buffer).map(lambda bt: bt[1](bt[0])), min_size=1, max_size=20)
tag_st = st.none() | st.tuples(st.integers(0, 2 ** 64 - 1), st.integers(0, 2 ** 64 - 1), st.integers(1, 2 ** 32 - 1)) \
    .map(lambda t: log_entry.producer_tag(*t))
channel_st = st.sampled_from([0, log_entry.CHANNEL_PRODUCER_TAG, log_entry.CHANNEL_NOOP, log_entry.CHANNEL_BATCH_CONTINUES,
                              log_entry.CHANNEL_NOOP | log_entry.CHANNEL_BATCH_CONTINUES, 7])


def test_extension_is_built_where_it_can_be():
    """CI notices a silently broken build: with a C compiler and Python.h present, `pip install -e .` must
    have built the extension (setup.py marks it optional, so a compile error would not fail the install)."""
    compiler = shutil.which("gcc") or shutil.which("cc")
    header = os.path.join(sysconfig.get_paths()["include"], "Python.h")
    if not (compiler and os.path.exists(header)):
        pytest.skip("no C compiler or Python.h here: the pure-Python codec is the expected outcome")
    assert fast is not None, "quorumlog.format._fastcodec missing: rebuild with `pip install -e .` and read its log"


@needs_fast
def test_pure_python_switch(monkeypatch):
    monkeypatch.setenv(log_entry.PURE_PYTHON_ENV, "1")
    assert log_entry._load_fast() is None
    monkeypatch.setenv(log_entry.PURE_PYTHON_ENV, "0")
    assert log_entry._load_fast() is fast


@needs_fast
def test_the_compiled_codec_is_checked_against_the_layout_at_import(monkeypatch):
    """The C module exports the layout it was compiled with; a mismatch is refused when it is loaded, not
    found later as records no reader accepts. Its flags are keywords (a positional one is refused)."""
    assert (fast.HEADER_SIZE, fast.UNIT_SIZE, fast.ENTRY_MAGIC) == (log_entry.HEADER_SIZE, log_entry.INDEX_UNIT_SIZE,
                                                                   log_entry.ENTRY_MAGIC)
    monkeypatch.setattr(fast, "HEADER_SIZE", 64)
    with pytest.raises(AssertionError, match="HEADER_SIZE"):
        log_entry._load_fast()
    with pytest.raises(TypeError):
        fast.scan(b"", 0, 0, None)


@pytest.fixture(params=["sse4.2", "table"])
def crc_backend(request):
    if fast is None:
        pytest.skip("quorumlog.format._fastcodec is not built")
    before = fast.crc_backend()
    try:
        fast.set_crc_backend(request.param)
    except ValueError:
        pytest.skip(f"CPU without {request.param}")
    yield request.param
    fast.set_crc_backend(before)


@common
@given(data=st.binary(max_size=5000), seed=U32, skip=st.integers(0, 7))
def test_crc32c_matches_the_package(crc_backend, data, seed, skip):
    view = memoryview(data)[skip:]  # unaligned starts
    assert fast.crc32c(view, seed) == crc32c_pkg.crc32c(view, seed)
    assert fast.crc32c(view) == crc32c_pkg.crc32c(view)


@needs_fast
def test_crc32c_large_buffer_and_known_value():
    assert fast.crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    big = os.urandom(3 * 1024 * 1024 + 5)  # released-GIL path
    assert fast.crc32c(big, 7) == crc32c_pkg.crc32c(big, 7)


@common
@given(first=I64, term=I64, ts=I64, pos=I64, chain=U32, bodies=bodies_st, tag=tag_st, channel=channel_st,
       ends_batch=st.booleans())
def test_encode_is_byte_identical(crc_backend, first, term, ts, pos, chain, bodies, tag, channel, ends_batch):
    parts, units, last = log_entry._py_encode_parts_and_units(first, term, bodies, ts, pos, chain, tag, channel,
                                                          ends_batch)
    assert fast.encode(first, term, bodies, ts, pos, chain, tag, channel, ends_batch) == (b"".join(parts), units,
                                                                                          last)


@needs_fast
def test_encode_big_batch_is_byte_identical():
    bodies = [os.urandom(1024) for _ in range(4096)]  # the benchmark's batch, encoded with the GIL released
    tag = log_entry.producer_tag(1, 2, 4096)
    parts, units, last = log_entry._py_encode_parts_and_units(10, 3, bodies, 99, 12345, 77, tag)
    assert fast.encode(10, 3, bodies, 99, 12345, 77, tag, 0, True) == (b"".join(parts), units, last)


@common
@given(bodies=bodies_st)
def test_body_sizes(bodies):
    if fast is None:
        pytest.skip("quorumlog.format._fastcodec is not built")
    lengths = list(map(len, bodies))
    assert fast.body_sizes(bodies) == (sum(lengths), max(lengths))
    assert fast.body_sizes(tuple(bodies)) == (sum(lengths), max(lengths))


@needs_fast
def test_public_encoders_agree_both_ways(monkeypatch):
    bodies = [b"a" * 100, b"", bytearray(b"xyz"), memoryview(b"q" * 5000)]
    compiled = (log_entry.encode_records_and_units(5, 2, bodies, 9, 100, 3, b"t" * 20, log_entry.CHANNEL_NOOP),
                log_entry.encode_batch(5, 2, bodies, 9, 100, 3, (1, 2)),
                b"".join(log_entry.encode_parts_and_units(5, 2, bodies, 9, 100, 3)[0]))
    monkeypatch.setattr(log_entry, "compiled", None)
    pure = (log_entry.encode_records_and_units(5, 2, bodies, 9, 100, 3, b"t" * 20, log_entry.CHANNEL_NOOP),
            log_entry.encode_batch(5, 2, bodies, 9, 100, 3, (1, 2)),
            b"".join(log_entry.encode_parts_and_units(5, 2, bodies, 9, 100, 3)[0]))
    assert compiled == pure


# -- checking: the C scan accepts exactly the records the Python checks accept ------------------------------
def _ref_segment_scan(view, off, end, seg_start, index, prev_chain):
    """recovery.check_record applied record after record: what the C scan must reproduce in segment mode,
    with the index units recovery would build and the producer tags append_records would remember."""
    n, last_chain, last_term, units, tags = 0, prev_chain if prev_chain is not None else 0, -1, bytearray(), []
    while True:
        why, h = check_record(view, off, end, seg_start, index + n, prev_chain)
        if why is not None:
            return n, off, last_chain, last_term, bytes(units), tags
        units += log_entry.encode_index_unit(h[4], h[1], h[2], h[3])
        if h[5] & log_entry.CHANNEL_PRODUCER_TAG:
            client_id, seq, count = log_entry.PRODUCER_TAG.unpack_from(view, off + h[1] - log_entry.PRODUCER_TAG_SIZE)
            tags.append((client_id, seq, h[2] - count + 1, h[2]))
        prev_chain = last_chain = h[6]
        last_term = h[3]
        off += h[1]
        n += 1


damage_st = st.tuples(st.sampled_from(["flip", "truncate", "none"]), st.integers(0, 2 ** 31), st.integers(1, 255))


def _damage(buf: bytes, damage) -> bytes:
    kind, where, xor = damage
    b = bytearray(buf)
    if kind == "flip" and b:
        b[where % len(b)] ^= xor
    elif kind == "truncate":
        del b[where % (len(b) + 1):]
    return bytes(b)


small_bodies_st = st.lists(st.binary(max_size=200), min_size=1, max_size=12)


@common
@given(bodies=small_bodies_st, first=st.integers(0, 1000), chain=U32, seg_start=st.integers(0, 2 ** 40),
       tag=tag_st, channel=channel_st, damage=damage_st, known_prev=st.booleans(), room=st.integers(0, 16))
def test_scan_matches_check_record(crc_backend, bodies, first, chain, seg_start, tag, channel, damage, known_prev,
                                   room):
    records, _units, _ = log_entry._py_encode_parts_and_units(first, 1, bodies, 5, seg_start, chain, tag, channel)
    seg = _damage(b"".join(records), damage) + bytes(room)  # room < 8: the last record leaves no room for a blank
    prev = chain if known_prev else None
    got = fast.scan(seg, 0, len(seg), expected_index=first, prev_chain=prev, check_chain=True, pos_base=seg_start,
                    room=log_entry.MIN_BLANK_SIZE, check_tag=True, want_units=True)
    assert got == _ref_segment_scan(memoryview(seg), 0, len(seg), seg_start, first, prev)


@common
@given(bodies=small_bodies_st, tag=tag_st, channel=channel_st, damage=damage_st)
def test_iter_records_same_records_and_error(monkeypatch, bodies, tag, channel, damage):
    if fast is None:
        pytest.skip("quorumlog.format._fastcodec is not built")
    records, _units, _ = log_entry._py_encode_parts_and_units(3, 1, bodies, 5, 0, 0, tag, channel)
    buf = _damage(b"".join(records), damage)
    results = []
    for mode in ("compiled", "pure"):
        monkeypatch.setattr(log_entry, "compiled", fast if mode == "compiled" else None)
        got = []
        try:
            for h, body in log_entry.iter_records(buf):
                got.append((h, bytes(body)))
            got.append("end")
        except QuorumLogError as e:
            got.append((type(e).__name__, str(e)))
        results.append(got)
    assert results[0] == results[1]


def _push_store(tmp_path, name: str, prefix_bodies) -> FileStore:
    s = FileStore(str(tmp_path / name), StoreConfig(data_segment_size_bytes=64 * 1024,
                                                    index_segment_size_bytes=32 * 1024, max_entry_bytes=4096,
                                                    disk_full_ratio=1.0, checkpoint_interval_ms=0))
    if prefix_bodies:
        s.append_batch(1, prefix_bodies, 1)
    return s


def _outcome(fn, strip: str = ""):
    """("ok", result) or (error class, message), the message without the store's own directory."""
    try:
        return ("ok", fn())
    except QuorumLogError as e:
        return (type(e).__name__, str(e).replace(strip, "<dir>") if strip else str(e))


@common
@given(prefix=st.lists(st.binary(max_size=50), max_size=3), bodies=st.lists(st.binary(max_size=300), min_size=1,
                                                                           max_size=10),
       tag=tag_st, channel=channel_st, damage=damage_st, big=st.booleans())
def test_follower_append_records_same_verdict(tmp_path_factory, monkeypatch, prefix, bodies, tag, channel, damage,
                                              big):
    if fast is None:
        pytest.skip("quorumlog.format._fastcodec is not built")
    if big:
        bodies = bodies + [bytes(5000)]  # > max_entry_bytes: EntryTooLarge, in both paths
    leader = _push_store(tmp_path_factory.mktemp("leader"), "l", prefix)
    first = leader.end_index + 1
    prev = leader.chain_crc_at(first - 1) if first else 0
    leader.close()
    records, _u, _c = log_entry._py_encode_parts_and_units(first, 2, bodies, 7, 999, prev, tag, channel)
    push = _damage(b"".join(records), damage)
    results = []
    for mode in ("compiled", "pure"):
        monkeypatch.setattr(log_entry, "compiled", fast if mode == "compiled" else None)
        d = tmp_path_factory.mktemp(mode)
        s = _push_store(d, "f", prefix)
        try:
            got = _outcome(lambda: s.append_records(push))
            stored = s.read(0, 1 << 20)
            units = [s._unit(i) for i in range(s.end_index + 1)]
            results.append((got, s.end_index, b"".join(bytes(c) for c in stored.chunks), units,
                            [s.get(i) for i in range(s.end_index + 1)]))
        finally:
            s.close()
    assert results[0] == results[1]


@common
@given(batches=st.lists(st.lists(st.binary(max_size=150), min_size=1, max_size=6), min_size=1, max_size=6),
       damage=damage_st, checkpoint_after=st.integers(0, 6))
def test_reads_and_recovery_same_verdict(tmp_path_factory, monkeypatch, batches, damage, checkpoint_after):
    """A damaged data segment: recovery's forward scan (after the checkpoint) and first reads (before it) cut
    and refuse the same records with the same errors in both paths."""
    if fast is None:
        pytest.skip("quorumlog.format._fastcodec is not built")
    d = tmp_path_factory.mktemp("log")
    cfg = StoreConfig(data_segment_size_bytes=4096, index_segment_size_bytes=32 * 8, max_entry_bytes=1024,
                      disk_full_ratio=1.0, checkpoint_interval_ms=10 ** 9)
    s = FileStore(str(d / "g"), cfg)
    for k, b in enumerate(batches):
        s.append_batch(1, b, k, producer=(k, k) if k % 2 else None)
        s.flush()
        if k + 1 == checkpoint_after:
            s.checkpoint()
    s._closed = True  # a crash after the flushes: no final checkpoint
    s._close_files()
    data = sorted(os.listdir(d / "g" / "data"))
    kind, where, xor = damage
    path = d / "g" / "data" / data[where % len(data)]
    raw = bytearray(path.read_bytes())
    assume(kind != "none")
    raw[where % len(raw)] ^= xor
    path.write_bytes(raw)
    pristine = d / "pristine"
    shutil.copytree(d / "g", pristine)
    results = []
    for mode in ("compiled", "pure"):
        monkeypatch.setattr(log_entry, "compiled", fast if mode == "compiled" else None)
        work = d / mode
        shutil.copytree(pristine, work)

        def run():
            st2 = FileStore(str(work), cfg)
            try:
                reads = [_outcome(lambda i=i: bytes(b"".join(bytes(c) for c in st2.read(i, 1 << 20).chunks)),
                                  str(work)) for i in range(st2.begin_index, st2.end_index + 1)]
                gets = [_outcome(lambda i=i: st2.get(i), str(work)) for i in range(st2.begin_index, st2.end_index + 1)]
                return st2.end_index, reads, gets, st2.corrupt_records
            finally:
                st2.close()

        results.append(_outcome(run, str(work)))
    assert results[0] == results[1]


# -- writing: headers + the caller's bodies in one pwritev -------------------------------------------------
@needs_fast
def test_write_records_writes_the_encoded_records(tmp_path):
    bodies = [os.urandom(i % 97) for i in range(2000)]  # ~3900 buffers: several IOV_MAX chunks, empty bodies
    tag = log_entry.producer_tag(3, 4, 2000)
    records, _units, _ = fast.encode(7, 2, bodies, 11, 4096, 5, tag, 0, True)
    headers, units, chain = fast.encode_headers(7, 2, bodies, 11, 4096, 5, tag, 0, True)
    assert (units, chain) == fast.encode(7, 2, bodies, 11, 4096, 5, tag, 0, True)[1:]
    path = tmp_path / "f"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        assert fast.write_records(fd, 100, headers, bodies, tag) == (len(records), 0)
    finally:
        os.close(fd)
    assert path.read_bytes() == bytes(100) + records


@needs_fast
def test_write_records_reports_errors_and_refuses_mismatched_bodies(tmp_path, monkeypatch):
    monkeypatch.setattr(log_entry, "compiled", fast)  # also under QUORUMLOG_PURE_PYTHON=1
    headers, _u, _c = fast.encode_headers(0, 1, [b"abc"], 1, 0, 0, None, 0, True)
    fd = os.open(tmp_path / "f", os.O_RDONLY | os.O_CREAT)
    try:
        assert fast.write_records(fd, 0, headers, [b"abc"], None) == (0, 9)  # EBADF: read-only fd
        with pytest.raises(ValueError):
            fast.write_records(fd, 0, headers, [b"abcd"], None)
        with pytest.raises(ValueError):
            fast.write_records(fd, 0, headers, [b"abc", b"x"], None)
    finally:
        os.close(fd)
    with pytest.raises(OSError) as e:
        log_entry.write_record_parts(-1, 0, log_entry.RecordParts(headers, [b"abc"], None, 59))
    assert e.value.written == 0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.tuples(st.lists(st.binary(max_size=700), min_size=1, max_size=8), st.booleans(),
                                  st.booleans()), min_size=1, max_size=8))
def test_file_store_writes_the_same_files(tmp_path_factory, monkeypatch, batches):
    """append_batch through the compiled path (encode_headers + write_records) leaves byte-identical data and
    index segments to the pure-Python path (header/body pwritev), across segment ends."""
    if fast is None:
        pytest.skip("quorumlog.format._fastcodec is not built")
    cfg = StoreConfig(data_segment_size_bytes=4096, index_segment_size_bytes=32 * 8, max_entry_bytes=1024,
                      disk_full_ratio=1.0, checkpoint_interval_ms=10 ** 9)
    trees = []
    for mode in ("compiled", "pure"):
        monkeypatch.setattr(log_entry, "compiled", fast if mode == "compiled" else None)
        d = tmp_path_factory.mktemp(mode)
        s = FileStore(str(d / "g"), cfg)
        try:
            for k, (bodies, producer, noop) in enumerate(batches):
                s.append_batch(2, bodies, 1000 + k, producer=(9, k) if producer else None, noop=noop)
        finally:
            s.close()
        trees.append({f"{sub}/{name}": (d / "g" / sub / name).read_bytes()
                      for sub in ("data", "index") for name in sorted(os.listdir(d / "g" / sub))})
    assert trees[0] == trees[1]
