"""FileStore on disk: segments and blanks, recovery, corruption, retention, the disk guard, flush threads."""

from __future__ import annotations

import dataclasses
import errno
import logging
import os
import random
import shutil
import tempfile
import threading

import pytest

from quorumlog.errors import CorruptEntry, DiskError, DiskFull, IndexOutOfRange
from quorumlog.store import FileStore, RecoveryError, StoreConfig, atomic_write_file
from quorumlog.format import log_entry
from quorumlog.store.checkpoint import read_checkpoint
from quorumlog.store.segments import list_segments

from .conftest import SMALL
from .test_behaviour import body_for, fill


def data_files(path) -> list[str]:
    return [p for _s, p in list_segments(os.path.join(path, "data"))]


def index_files(path) -> list[str]:
    return [p for _s, p in list_segments(os.path.join(path, "index"))]


def check_prefix(store: FileStore, bodies: list[bytes], at_least: int = -1) -> None:
    """The log is a valid prefix of `bodies`: every entry readable, equal, in order."""
    assert store.begin_index == 0
    assert at_least <= store.end_index <= len(bodies) - 1
    for i in range(store.end_index + 1):
        assert store.get(i).body == bodies[i]
    if store.end_index >= 0:
        r = store.read(0, 10 ** 9)
        entries = log_entry.decode_records(b"".join(bytes(c) for c in r.chunks))
        assert [e.body for e in entries] == bodies[: store.end_index + 1]


def test_layout_names_blanks_and_reopen(tmp_path):
    path = str(tmp_path / "g")
    with FileStore(path, SMALL) as s:
        bodies = fill(s, 60)
        s.set_committed_index(20)
    files = data_files(path)
    assert len(files) > 5
    for k, f in enumerate(files):  # named by start offset, zero-padded, fixed size
        assert os.path.basename(f) == f"{k * SMALL.data_segment_size_bytes:020d}"
        assert os.path.getsize(f) == SMALL.data_segment_size_bytes
    for f in files[:-1]:  # every sealed segment ends with one blank record
        raw = open(f, "rb").read()
        off = 0
        while log_entry.BLANK.unpack_from(raw, off)[0] == log_entry.ENTRY_MAGIC:
            off += log_entry.BLANK.unpack_from(raw, off)[1]
        assert log_entry.BLANK.unpack_from(raw, off) == (log_entry.BLANK_MAGIC, len(raw) - off)
    assert all(os.path.getsize(f) == SMALL.index_segment_size_bytes for f in index_files(path))
    cp = read_checkpoint(os.path.join(path, "checkpoint"))
    assert (cp.end_index, cp.committed_index) == (len(bodies) - 1, 20)
    with FileStore(path, SMALL) as s:
        assert (s.end_index, s.committed_index, s.durable_index) == (len(bodies) - 1, 20, len(bodies) - 1)
        check_prefix(s, bodies, len(bodies) - 1)
        s.append_batch(50, [b"after-reopen"], 1)
        assert s.get(len(bodies)).body == b"after-reopen"


def test_reopen_after_clean_close_scans_from_the_checkpoint(tmp_path, caplog):
    """The checkpoint's last entry is confirmed by its predecessor's chain CRC, so a clean reopen starts the
    forward scan there instead of at the beginning (and older records are checked on first read)."""
    path = str(tmp_path / "g")
    with FileStore(path, SMALL) as s:
        bodies = fill(s, 60)
    caplog.set_level(logging.WARNING, logger="quorumlog.store")
    with FileStore(path, SMALL) as s:
        assert s.end_index == len(bodies) - 1
        assert s._verified_from == len(bodies)  # nothing rescanned: the scan started after the checkpoint entry
        check_prefix(s, bodies, len(bodies) - 1)
    assert not [r for r in caplog.records if "scanning from the beginning" in r.getMessage()]


def test_one_big_batch_spans_many_segments(tmp_path):
    with FileStore(str(tmp_path / "g"), SMALL) as s:
        bodies = [body_for(i, 900) for i in range(40)]
        assert s.append_batch(1, bodies, 1, producer=(1, 1)) == 39
        assert len(s._data) >= 10
        check_prefix(s, bodies, 39)
        assert s.find_producer_batch(1, 1).first_index == 0
        r = s.read(0, 10 ** 9)
        assert len(r.chunks) == len(s._data)  # one chunk per segment, padding left out
        assert r.size_bytes == s.bytes_between(0, 39) == sum(log_entry.HEADER_SIZE + len(b) for b in bodies) + 20


def test_reads_are_zero_copy_views(tmp_path):
    with FileStore(str(tmp_path / "g"), SMALL) as s:
        fill(s, 5)
        r = s.read(0, 10 ** 6)
        assert all(isinstance(c, memoryview) for c in r.chunks)


def test_config_validation_names_the_key():
    for key, value in [("data_segment_size_bytes", 100), ("index_segment_size_bytes", 33), ("max_entry_bytes", 0),
                       ("disk_full_ratio", 1.5), ("file_reserved_hours", -1),
                       ("preallocate", "yes"), ("checkpoint_interval_ms", -5)]:
        with pytest.raises(ValueError, match=key):
            StoreConfig(**{key: value})
    with pytest.raises(ValueError, match="data_segment_size_bytes"):  # must hold one largest record
        StoreConfig(data_segment_size_bytes=8192, max_entry_bytes=8192)
    assert StoreConfig().data_segment_size_bytes == 1024 ** 3


def test_atomic_write_file(tmp_path):
    p = str(tmp_path / "term")
    atomic_write_file(p, b"one")
    atomic_write_file(p, b"two")
    assert open(p, "rb").read() == b"two"
    assert os.listdir(tmp_path) == ["term"]


# -- recovery ---------------------------------------------------------------------------------------
def make_log(path, batches=25, checkpoint=False, seed=3) -> list[bytes]:
    s = FileStore(path, unsafe_config())
    bodies = fill(s, batches, seed=seed)
    s.flush()
    if checkpoint:
        s.checkpoint()
    s._close_files()  # like a crash after the flush: no close-time checkpoint
    s._closed = True
    return bodies


@pytest.fixture
def fast_dir(tmp_path):
    """Loops that reopen a store hundreds of times run on tmpfs when there is one: same code paths,
    fsync costs nothing there."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        d = tempfile.mkdtemp(prefix="quorumlog-store-", dir="/dev/shm")
        try:
            yield d
        finally:
            shutil.rmtree(d, ignore_errors=True)
    else:
        yield str(tmp_path)


def unsafe_config() -> StoreConfig:
    return StoreConfig(data_segment_size_bytes=SMALL.data_segment_size_bytes,
                       index_segment_size_bytes=SMALL.index_segment_size_bytes,
                       max_entry_bytes=SMALL.max_entry_bytes, disk_full_ratio=1.0,
                       checkpoint_interval_ms=10 ** 9)  # no checkpoint from flush()


def test_torn_tail_is_cut_and_index_rebuilt(tmp_path):
    path = str(tmp_path / "g")
    s = FileStore(path, unsafe_config())
    bodies = fill(s, 10)
    s.flush()
    pos, size, _ = s._unit(s.end_index)
    seg = s._data_seg(pos)
    s._close_files()
    s._closed = True
    with open(seg.path, "r+b") as f:  # tear the last record and scribble a half index unit
        f.seek(pos - seg.start + size - 3)
        f.write(b"\xff\xff\xff")
    with open(index_files(path)[-1], "r+b") as f:
        f.seek(0)
        f.write(b"\x00" * 16)
    with FileStore(path, unsafe_config()) as s2:
        assert s2.end_index == len(bodies) - 2
        check_prefix(s2, bodies, len(bodies) - 2)
        s2.append_batch(9, [b"z"], 1)
        assert s2.get(len(bodies) - 1).body == b"z"


def test_truncate_data_file_at_every_offset(fast_dir):
    """Cut the newest data segment at every byte: reopen gives exactly the records wholly before the cut
    (a record whose cut-off bytes were zeros anyway is whole: the zero-extended file holds the same bytes)."""
    base = os.path.join(fast_dir, "base")
    bodies = make_log(base, batches=6)
    newest = data_files(base)[-1]
    raw = open(newest, "rb").read()
    starts = [0]
    while log_entry.BLANK.unpack_from(raw, starts[-1])[0] == log_entry.ENTRY_MAGIC:
        starts.append(starts[-1] + log_entry.BLANK.unpack_from(raw, starts[-1])[1])
    first_in_newest = log_entry.HEADER.unpack_from(raw, 0)[2]
    work = os.path.join(fast_dir, "w")
    for cut in range(0, starts[-1] + 1):
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(base, work)
        os.truncate(os.path.join(work, "data", os.path.basename(newest)), cut)
        whole = 0
        for end in starts[1:]:
            if raw[cut:end].count(0) != len(raw[cut:end]):
                break
            whole += 1
        with FileStore(work, unsafe_config()) as s:
            assert s.end_index == first_in_newest + whole - 1, cut
            check_prefix(s, bodies)


def test_truncate_index_file_at_every_offset(fast_dir):
    base = os.path.join(fast_dir, "base")
    bodies = make_log(base, batches=3)
    idx = index_files(base)[-1]
    work = os.path.join(fast_dir, "w")
    for cut in range(0, os.path.getsize(idx) + 1):
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(base, work)
        os.truncate(os.path.join(work, "index", os.path.basename(idx)), cut)
        with FileStore(work, unsafe_config()) as s:
            assert s.end_index == len(bodies) - 1
            check_prefix(s, bodies, len(bodies) - 1)


def test_byte_flips_never_serve_a_corrupt_record(fast_dir, caplog):
    """Flip each byte of a small log. Above the checkpoint: the last record is a torn tail and is cut; any
    earlier one has valid records after it, so it is corruption and the store refuses to open (file + offset
    named) rather than cut acknowledged entries. Below: the store opens, reports and refuses
    the record (file + offset named), serves every other entry intact."""
    base = os.path.join(fast_dir, "base")
    s = FileStore(base, unsafe_config())
    bodies = fill(s, 4, seed=9)
    s.flush()
    s.checkpoint()
    ckpt_end = s.end_index
    more = [body_for(len(bodies) + i, 60) for i in range(6)]
    s.append_batch(9, more, 1)
    bodies += more
    s.flush()
    spans = []  # (index, file, start, end) of every record
    for i in range(s.end_index + 1):
        pos, size, _ = s._unit(i)
        seg = s._data_seg(pos)
        spans.append((i, os.path.basename(seg.path), pos - seg.start, pos - seg.start + size))
    s._close_files()
    s._closed = True
    work = os.path.join(fast_dir, "w")
    rnd = random.Random(5)
    outcomes = {"cut": 0, "refused": 0, "recovery_error": 0}
    for i, fname, start, end in spans:
        for at in range(start, end, 3):
            shutil.rmtree(work, ignore_errors=True)
            shutil.copytree(base, work)
            with open(os.path.join(work, "data", fname), "r+b") as f:
                f.seek(at)
                b = f.read(1)[0]
                f.seek(at)
                f.write(bytes([b ^ rnd.randrange(1, 256)]))
            try:
                st = FileStore(work, unsafe_config())
            except RecoveryError as e:
                # the checkpointed entry itself, or corruption with valid records after it
                assert ckpt_end <= i < len(bodies) - 1 and fname in str(e) and e.offset >= 0, (i, str(e))
                outcomes["recovery_error"] += 1
                continue
            with st:
                if i > ckpt_end:
                    assert i == len(bodies) - 1 and st.end_index == i - 1  # only the last record is a torn tail
                    check_prefix(st, bodies)
                    outcomes["cut"] += 1
                    continue
                assert st.end_index == len(bodies) - 1
                refused = set()
                for j in range(st.end_index + 1):
                    try:
                        assert st.get(j).body == bodies[j]
                    except CorruptEntry as e:
                        assert (fname if j == i else "data") in str(e) and "offset" in str(e)
                        refused.add(j)
                assert i in refused  # every header field is checked: CRCs, chain, index, pos
                assert refused <= {i, i + 1}  # i+1 only via its chain, which starts from i's chain field
                assert st.corrupt_records >= 1
                try:
                    r = st.read(0, 10 ** 9)
                    served = log_entry.decode_records(b"".join(bytes(c) for c in r.chunks))
                except CorruptEntry:
                    assert i == 0
                    served = []
                assert [e.body for e in served] == bodies[: len(served)] and len(served) <= i
                outcomes["refused"] += 1
    assert all(outcomes.values()), outcomes
    assert any("corrupt record refused" in r.message for r in caplog.records if r.levelno >= logging.ERROR)


def test_checkpoint_ahead_of_data_is_a_clear_error(tmp_path):
    path = str(tmp_path / "g")
    s = FileStore(path, unsafe_config())
    fill(s, 10)
    s.flush()
    s.checkpoint()
    s._close_files()
    s._closed = True
    newest = data_files(path)[-1]
    os.truncate(newest, 0)
    with pytest.raises(RecoveryError, match="ahead of the valid data") as e:
        FileStore(path, unsafe_config())
    assert e.value.path == newest


def test_truncate_after_survives_reopen(tmp_path):
    path = str(tmp_path / "g")
    s = FileStore(path, SMALL)
    bodies = fill(s, 30)
    s.flush()
    s.checkpoint()
    s.truncate_after(17)  # below the checkpoint: the checkpoint moves down with it
    s.flush()
    s._close_files()
    s._closed = True
    with FileStore(path, SMALL) as s2:
        assert s2.end_index == 17
        check_prefix(s2, bodies, 17)


@pytest.mark.parametrize("fail_on_zeroing", [1, 2], ids=["data", "index-units"])
@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EIO])
def test_truncate_after_that_dies_half_way_leaves_a_store_that_reopens(tmp_path, monkeypatch, fail_on_zeroing, err):
    """The cut zeroed records (and then index units) before it lowered the checkpoint, so a
    crash or ENOSPC in between left a checkpoint ahead of the valid data, and the node refused to reopen.
    The n-th zeroing fails here (the process dies there, or the disk says no); the store must reopen with every
    entry up to the cut intact."""
    import quorumlog.store.file_store as fs_module
    path = str(tmp_path / "g")
    s = FileStore(path, SMALL)
    bodies = fill(s, 30)
    s.flush()
    s.checkpoint()
    calls = []
    real = fs_module.write_zeros

    def failing(fd, start, end):
        calls.append((start, end))
        if len(calls) == fail_on_zeroing:
            raise OSError(err, os.strerror(err))
        return real(fd, start, end)
    monkeypatch.setattr(fs_module, "write_zeros", failing)
    with pytest.raises((DiskError, DiskFull)):
        s.truncate_after(17)
    assert len(calls) == fail_on_zeroing
    monkeypatch.setattr(fs_module, "write_zeros", real)
    s._close_files()  # the process dies: nothing more is written
    s._closed = True
    with FileStore(path, SMALL) as s2:
        assert s2.end_index >= 17
        check_prefix(s2, bodies, 17)
        s2.truncate_after(17)  # the cut the core still owes is done after the restart
        assert s2.end_index == 17


# -- retention ----------------------------------------------------------------------------------------
def test_retention_deletes_old_safe_segments_only(tmp_path):
    path = str(tmp_path / "g")
    cfg = StoreConfig(data_segment_size_bytes=4096, index_segment_size_bytes=32 * 8, max_entry_bytes=1024,
                      disk_full_ratio=1.0, file_reserved_hours=1)
    with FileStore(path, cfg) as s:
        bodies = fill(s, 60)
        s.flush()
        n_segs = len(s._data)
        now = max(seg.last_write_ms for seg in s._data)
        hour_ms = 3600 * 1000
        assert s.delete_expired(now, safe_index=s.end_index) == 0  # too young
        assert s.delete_expired(now + 2 * hour_ms, safe_index=-1) == 0  # nothing every replica has
        safe = s._data[3].first_index - 1  # segments 0..2 are wholly <= safe
        assert s.delete_expired(now + 2 * hour_ms, safe_index=safe) == 3
        assert s.begin_index == safe + 1
        assert len(data_files(path)) == n_segs - 3
        with pytest.raises(IndexOutOfRange):
            s.get(safe)
        for i in range(s.begin_index, s.end_index + 1):
            assert s.get(i).body == bodies[i]
        deleted = s.delete_expired(now + 2 * hour_ms, safe_index=s.end_index)
        assert len(s._data) == 1 and deleted == n_segs - 4  # the active segment always stays
        assert min(int(os.path.basename(p)) for p in index_files(path)) + 8 > s.begin_index
        begin = s.begin_index
    with FileStore(path, cfg) as s:  # begin_index comes back from the files
        assert s.begin_index == begin
        assert [s.get(i).body for i in range(begin, s.end_index + 1)] == bodies[begin:]


def test_a_store_reopens_committed_up_to_its_begin_even_if_retention_ran_after_the_last_checkpoint(tmp_path):
    """Found by the simulator (seed 8579): retention ran after the last checkpoint, the node crashed, and the
    store came back with a committed index below its begin index; as leader its core then read the term of a
    deleted entry. Everything below begin was committed (retention deletes only that)."""
    path = str(tmp_path / "g")
    cfg = StoreConfig(data_segment_size_bytes=4096, index_segment_size_bytes=32 * 8, max_entry_bytes=1024,
                      disk_full_ratio=1.0, file_reserved_hours=0, checkpoint_interval_ms=1 << 30)
    s = FileStore(path, cfg)
    fill(s, 60)
    s.flush()
    s.checkpoint()  # committed -1 on disk
    s.set_committed_index(s.end_index)  # committed in memory only
    now = max(seg.last_write_ms for seg in s._data) + 1
    assert s.delete_expired(now, safe_index=s._data[3].first_index - 1) == 3
    begin = s.begin_index
    s._close_files()  # kill -9 before any checkpoint
    s._closed = True
    with FileStore(path, cfg) as s2:
        assert s2.begin_index == begin
        assert s2.committed_index >= begin - 1


# -- disk guard -----------------------------------------------------------------------------------------
def test_disk_guard_refuses_appends_reads_go_on(tmp_path):
    path = str(tmp_path / "g")
    with FileStore(path, SMALL) as s:
        bodies = fill(s, 5)
    cfg = StoreConfig(data_segment_size_bytes=4096, index_segment_size_bytes=32 * 8, max_entry_bytes=1024,
                      disk_full_ratio=0.0001)  # any real filesystem is fuller than this
    with FileStore(path, cfg) as s:
        with pytest.raises(DiskFull):
            s.append_batch(1, [b"x"], 1)
        with pytest.raises(DiskFull):
            s.append_records(b"")
        check_prefix(s, bodies, len(bodies) - 1)
        assert s.disk_used_ratio > 0.0001


def test_real_full_disk_enospc_then_guard(tmpfs):
    """A 4 MiB tmpfs really fills up: ENOSPC while preallocating a segment becomes DiskFull, nothing partial
    is left behind, reads still work, and the store reopens to the same log."""
    cfg = StoreConfig(data_segment_size_bytes=256 * 1024, index_segment_size_bytes=32 * 1024,
                      max_entry_bytes=16 * 1024, disk_full_ratio=1.0, disk_check_interval_ms=0)
    path = os.path.join(tmpfs("4M"), "g")
    s = FileStore(path, cfg)
    bodies: list[bytes] = []
    with pytest.raises(DiskFull):
        for b in range(1000):
            batch = [body_for(len(bodies) + i, 8000) for i in range(4)]
            s.append_batch(1, batch, b)
            bodies += batch
    assert s.end_index == len(bodies) - 1 > 100
    s.flush()
    check_prefix(s, bodies, len(bodies) - 1)
    with pytest.raises(DiskFull):
        s.append_batch(1, [b"x" * 8000] * 40, 1)
    assert s.end_index == len(bodies) - 1
    s.close()
    with FileStore(path, StoreConfig(**{**cfg_dict(cfg), "disk_full_ratio": 0.85})) as s2:
        check_prefix(s2, bodies, len(bodies) - 1)
        with pytest.raises(DiskFull):  # the guard, from statvfs, before any write
            s2.append_batch(1, [b"x"], 1)


def test_a_flush_on_a_disk_full_to_the_last_block_reports_what_it_synced(tmpfs, caplog):
    """The entries went into preallocated segments before the disk filled up: fdatasync needs no block, but
    the checkpoint's new file does. The flush still reports them durable (a follower acks them); the checkpoint
    is written once there is room, and the store reopens to the whole log either way."""
    cfg = StoreConfig(data_segment_size_bytes=1024 * 1024, index_segment_size_bytes=64 * 1024,
                      max_entry_bytes=16 * 1024, disk_full_ratio=1.0, disk_check_interval_ms=0,
                      checkpoint_interval_ms=0)
    root = tmpfs("16M")
    path = os.path.join(root, "g")
    s = FileStore(path, cfg)
    bodies = [body_for(i, 4000) for i in range(10)]
    s.append_batch(1, bodies, 1)
    assert s.flush() == 9
    filler = os.path.join(root, "filler")
    with open(filler, "wb", buffering=0) as f:
        with pytest.raises(OSError) as full:
            while True:
                f.write(b"\0" * 4096)
    assert full.value.errno == errno.ENOSPC
    more = [body_for(10 + i, 4000) for i in range(20)]
    s.append_batch(1, more, 2)  # into the preallocated segment
    bodies += more
    with caplog.at_level(logging.WARNING, logger="quorumlog.store.file_store"):
        assert s.flush() == len(bodies) - 1
    assert "checkpoint deferred" in caplog.text
    assert read_checkpoint(os.path.join(path, "checkpoint")).end_index == 9
    os.unlink(filler)
    s._last_checkpoint_s = 0.0  # (the deferral waits an interval)
    s.append_batch(1, [body_for(len(bodies), 10)], 3)
    bodies.append(body_for(len(bodies), 10))
    assert s.flush() == len(bodies) - 1
    assert read_checkpoint(os.path.join(path, "checkpoint")).end_index == len(bodies) - 1
    s.close()
    with FileStore(path, cfg) as s2:
        check_prefix(s2, bodies, len(bodies) - 1)


def cfg_dict(cfg: StoreConfig) -> dict:
    return {k: getattr(cfg, k) for k in cfg.__dataclass_fields__}


# -- flush from a worker thread --------------------------------------------------------------------------
def test_flush_from_a_thread_while_appending(tmp_path):
    path = str(tmp_path / "g")
    s = FileStore(path, SMALL)
    stop = threading.Event()
    results: list[tuple[int, int]] = []  # (durable returned, end seen before the call)
    errors: list[BaseException] = []

    def flusher():
        try:
            while not stop.is_set():
                before = s.end_index
                results.append((s.flush(), before))
        except BaseException as e:  # surfaced below
            errors.append(e)

    t = threading.Thread(target=flusher)
    t.start()
    bodies = []
    try:
        for b in range(400):
            batch = [body_for(len(bodies) + i, 150) for i in range(1 + b % 5)]
            s.append_batch(1, batch, b)
            bodies += batch
            if b % 97 == 0:
                s.checkpoint()
    finally:
        stop.set()
        t.join(timeout=30)
    assert not t.is_alive() and not errors
    assert len(results) > 5
    durables = [d for d, _ in results]
    assert durables == sorted(durables)  # monotonic
    assert all(d >= before for d, before in results)  # covers what was there when it started
    assert all(d <= len(bodies) - 1 for d in durables)
    final = s.flush()
    assert final == len(bodies) - 1
    check_prefix(s, bodies, final)
    s.close()


def test_flush_never_claims_entries_written_during_its_sync(tmp_path, monkeypatch):
    """Appends that land while fdatasync runs are not covered by that flush's answer."""
    s = FileStore(str(tmp_path / "g"), SMALL)
    s.append_batch(1, [b"a", b"b"], 1)
    real = os.fdatasync
    landed = []

    def sync_with_a_concurrent_append(fd):
        if not landed:
            landed.append(s.append_batch(1, [b"c"] * 3, 2))  # what the event loop does meanwhile
        real(fd)

    monkeypatch.setattr(os, "fdatasync", sync_with_a_concurrent_append)
    assert s.flush() == 1 == s.durable_index
    monkeypatch.setattr(os, "fdatasync", real)
    assert landed == [4]
    assert s.flush() == 4
    s.close()


def test_unreadable_checkpoint_falls_back_to_a_full_scan(tmp_path):
    path = str(tmp_path / "g")
    with FileStore(path, SMALL) as s:
        bodies = fill(s, 20)
    with open(os.path.join(path, "checkpoint"), "r+b") as f:
        f.write(b"garbage")
    with FileStore(path, SMALL) as s:
        check_prefix(s, bodies, len(bodies) - 1)


def test_integer_keys_refuse_floats():
    with pytest.raises(ValueError, match="data_segment_size_bytes"):
        StoreConfig(data_segment_size_bytes=4096.0)


def _failing_pwrite(real, err: int, on_call: int):
    calls = {"n": 0}

    def pwrite(fd, data, offset):
        calls["n"] += 1
        if calls["n"] == on_call:
            raise OSError(err, os.strerror(err))
        return real(fd, data, offset)

    return pwrite


def test_enospc_mid_batch_is_undone_and_reported_as_disk_full(tmp_path, monkeypatch):
    path = str(tmp_path / "g")
    s = FileStore(path, unsafe_config())
    bodies = fill(s, 5)
    real = os.pwrite
    # records go out with pwritev, the index units with pwrite: fail the units, after the records are written
    monkeypatch.setattr(os, "pwrite", _failing_pwrite(real, errno.ENOSPC, on_call=1))
    with pytest.raises(DiskFull):
        s.append_batch(1, [b"lost-1", b"lost-2"], 1)
    monkeypatch.setattr(os, "pwrite", real)
    assert s.end_index == len(bodies) - 1
    check_prefix(s, bodies, len(bodies) - 1)
    s.flush()
    s._close_files()
    s._closed = True
    with FileStore(path, unsafe_config()) as s2:  # the undone records must not come back on recovery
        assert s2.end_index == len(bodies) - 1
        check_prefix(s2, bodies, len(bodies) - 1)


def test_eio_fails_writes_for_good_reads_go_on(tmp_path, monkeypatch):
    s = FileStore(str(tmp_path / "g"), SMALL)
    bodies = fill(s, 5)
    real = os.fdatasync

    def eio(fd):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", eio)
    with pytest.raises(DiskError):
        s.flush()
    monkeypatch.setattr(os, "fdatasync", real)
    with pytest.raises(DiskError):  # after a failed fsync the page cache cannot be trusted: no more writes
        s.append_batch(1, [b"x"], 1)
    with pytest.raises(DiskError):
        s.flush()
    check_prefix(s, bodies, len(bodies) - 1)
    s.close()


def test_retention_on_a_worker_thread_while_reading(tmp_path):
    """The runtime runs delete_expired in asyncio.to_thread while the loop serves reads: a read either finds
    its entry or gets IndexOutOfRange (retention moved begin past it), never anything else."""
    cfg = StoreConfig(data_segment_size_bytes=4096, index_segment_size_bytes=32 * 8, max_entry_bytes=1024,
                      disk_full_ratio=1.0, file_reserved_hours=0)
    with FileStore(str(tmp_path / "g"), cfg) as s:
        bodies = fill(s, 120)
        s.flush()
        errors: list[BaseException] = []

        def retention():
            try:
                for safe in range(0, len(bodies) - 1, 3):
                    s.delete_expired(10 ** 15, safe)
            except BaseException as e:  # surfaced below
                errors.append(e)

        t = threading.Thread(target=retention)
        t.start()
        served = 0
        while t.is_alive() or served == 0:
            for i in range(0, len(bodies), 7):
                try:
                    assert s.get(i).body == bodies[i]
                    r = s.read(i, 3000)
                    assert [e.body for e in log_entry.decode_records(b"".join(bytes(c) for c in r.chunks))] == \
                        bodies[i: r.last_index + 1]
                    served += 1
                except IndexOutOfRange:
                    pass
        t.join(30)
        assert not errors and served > 0
        assert s.begin_index > 0
        assert s.corrupt_records == 0


def test_reads_of_checked_records_match_the_checking_path(tmp_path):
    """The fast path (records this process already checked) serves the same bytes as the checking one,
    across segment ends; after a reopen, entries before the recovery scan are checked on first read."""
    from quorumlog.store import FileStore
    from tests.store.conftest import SMALL

    s = FileStore(str(tmp_path / "g"), SMALL)
    for i in range(40):
        s.append_batch(1, [bytes([i]) * (50 + i * 7)] * 3, 1_000 + i)
    s.flush()
    s.set_committed_index(s.end_index)
    s.checkpoint()
    fast = [bytes(c) for c in s.read(5, 1 << 20).chunks]
    assert s._verified_from == 0
    s._verified_from = s.end_index + 1  # force the checking path
    slow = [bytes(c) for c in s.read(5, 1 << 20).chunks]
    assert fast == slow and len(fast) > 1  # several segments
    assert s._verified_from == 5  # what it checked now counts as checked
    s.close()
    s = FileStore(str(tmp_path / "g"), SMALL)
    assert s._verified_from <= s.end_index + 1
    assert [bytes(c) for c in s.read(5, 1 << 20).chunks] == slow
    s.close()


RARE_CHECKPOINTS = dataclasses.replace(SMALL, checkpoint_interval_ms=3_600_000)


def _killed_after_flush_with_old_checkpoint(path: str) -> tuple[FileStore, list[bytes], int]:
    s = FileStore(path, RARE_CHECKPOINTS)
    bodies = fill(s, 5)
    s.flush()
    s.checkpoint()
    cp_end = s.end_index
    for b in range(25):  # fsynced (acknowledgeable), but the checkpoint still says cp_end
        batch = [body_for(len(bodies) + i, 300) for i in range(2)]
        s.append_batch(1, batch, 5_000 + b)
        bodies += batch
    s.flush()
    return s, bodies, cp_end


def _file_offset(s: FileStore, index: int) -> tuple[str, int, int]:
    pos, size, _ = s._unit(index)
    seg = next(seg for seg in s._data if seg.start <= pos < seg.start + seg.size_bytes)
    return seg.path, pos - seg.start, size


def _snapshot(path: str) -> dict[str, bytes]:
    out = {}
    for root, _, files in os.walk(path):
        for f in files:
            with open(os.path.join(root, f), "rb") as fh:
                out[os.path.join(root, f)] = fh.read()
    return out


def test_a_flipped_bit_mid_log_refuses_to_open_and_cuts_nothing(tmp_path):
    """One flipped bit in an fsynced record beyond the checkpoint was taken for a torn tail and
    every (acknowledged) entry after it was cut on restart. Valid records after the damage mean corruption:
    the store refuses to open, names the file, offset and entry, and changes no byte."""
    path = str(tmp_path / "g")
    s, bodies, cp_end = _killed_after_flush_with_old_checkpoint(path)
    victim = cp_end + 20
    assert victim < s.end_index - 5
    file, off, size = _file_offset(s, victim)
    s._close_files()  # kill -9: no clean close, no new checkpoint
    s._closed = True
    with open(file, "r+b") as f:
        f.seek(off + log_entry.HEADER_SIZE + 7)
        byte = f.read(1)
        f.seek(off + log_entry.HEADER_SIZE + 7)
        f.write(bytes([byte[0] ^ 0x10]))
    before = _snapshot(path)
    with pytest.raises(RecoveryError) as e:
        FileStore(path, RARE_CHECKPOINTS)
    assert "corrupt record in the middle of the log" in str(e.value)
    assert e.value.path == file and e.value.offset == off and f"expected entry {victim}" in str(e.value)
    after = _snapshot(path)
    assert {k: v for k, v in after.items() if "checkpoint" not in k} == \
        {k: v for k, v in before.items() if "checkpoint" not in k}


@pytest.mark.parametrize("tail", ["half-record", "garbage"])
def test_a_torn_tail_with_nothing_valid_after_it_is_still_cut(tmp_path, tail):
    path = str(tmp_path / "g")
    s, bodies, _ = _killed_after_flush_with_old_checkpoint(path)
    end = s.end_index
    file, off, size = _file_offset(s, end)
    s._close_files()
    s._closed = True
    with open(file, "r+b") as f:
        if tail == "half-record":  # the last write tore: its second half never reached the disk
            f.seek(off + size // 2)
            f.write(bytes(size - size // 2))
        else:  # garbage after the last record
            f.seek(off + size)
            f.write(random.Random(7).randbytes(200))
    with FileStore(path, RARE_CHECKPOINTS) as s2:
        assert s2.end_index == (end - 1 if tail == "half-record" else end)
        check_prefix(s2, bodies, s2.end_index)


@pytest.mark.parametrize("then", ["nothing", "entries"])
def test_a_reset_log_reopens_at_its_new_begin(tmp_path, then):
    path = str(tmp_path / "g")
    s = FileStore(path, SMALL)
    fill(s, 8)
    s.flush()
    s.checkpoint()
    s.reset(500)
    if then == "entries":
        from quorumlog.store import MemoryStore
        leader = MemoryStore()
        leader.reset(500)
        leader.append_batch(7, [b"x" * 100, b"y"], 1)
        s.append_records(b"".join(bytes(c) for c in leader.read(500, 1 << 20).chunks))
        s.flush()
    s._close_files()  # kill -9
    s._closed = True
    with FileStore(path, SMALL) as s2:
        assert s2.begin_index == 500
        assert s2.end_index == (501 if then == "entries" else 499)
        if then == "entries":
            assert s2.get(501).body == b"y"


@pytest.mark.parametrize("crash_after_deleting", [0, 1, 3])
def test_a_crash_in_the_middle_of_a_reset_reopens(tmp_path, monkeypatch, crash_after_deleting):
    """The old files go one by one: whatever a crash leaves, the store reopens, holding the old log, a suffix
    of it (as if retention had run) or nothing; the leader then resets it again."""
    from quorumlog.store.segments import Segment
    path = str(tmp_path / "g")
    s = FileStore(path, SMALL)
    bodies = fill(s, 8)
    s.flush()
    s.checkpoint()
    deleted = []
    real = Segment.delete

    def delete(seg):
        if len(deleted) == crash_after_deleting:
            raise OSError(errno.EIO, "crash")
        deleted.append(seg.path)
        real(seg)
    monkeypatch.setattr(Segment, "delete", delete)
    with pytest.raises(DiskError):
        s.reset(500)
    monkeypatch.setattr(Segment, "delete", real)
    s._close_files()
    s._closed = True
    with FileStore(path, SMALL) as s2:
        if crash_after_deleting == 0:  # nothing gone yet: the old log, whole
            check_prefix(s2, bodies, len(bodies) - 1)
        assert [s2.get(i).body for i in range(s2.begin_index, s2.end_index + 1)] == \
            bodies[s2.begin_index: s2.end_index + 1]


def test_a_reset_takes_the_leaders_producer_table_and_keeps_it_across_a_restart(tmp_path):
    """A follower reset to its leader's begin index cannot learn the producer table from the batches below
    it (retention deleted them): it takes the leader's, so an old batch's retry is still a duplicate on it,
    also after a kill -9 (the table is in its `producers` snapshot)."""
    from quorumlog.store import MemoryStore
    leader = MemoryStore()
    leader.append_batch(1, [b"old-a", b"old-b"], 1, producer=(42, 7))  # 0..1, client 42 seq 7
    for _ in range(5):
        leader.append_batch(1, [b"later"], 1)
    leader.flush()
    leader.set_committed_index(leader.end_index)
    leader.delete_before(4)  # retention: the batch of seq 7 is gone from the leader's log
    assert leader.begin_index == 4 and leader.find_producer_batch(42, 7) is not None
    path = str(tmp_path / "g")
    s = FileStore(path, SMALL)
    s.reset(4, leader.producer_state())
    s.append_records(b"".join(bytes(c) for c in leader.read(4, 1 << 20).chunks))
    s.flush()
    assert (s.find_producer_batch(42, 7).first_index, s.find_producer_batch(42, 7).last_index) == (0, 1)
    s._close_files()  # kill -9
    s._closed = True
    with FileStore(path, SMALL) as s2:
        assert s2.begin_index == 4
        hit = s2.find_producer_batch(42, 7)
        assert (hit.first_index, hit.last_index) == (0, 1)


def test_a_reset_with_a_garbled_producer_table_changes_nothing(tmp_path):
    from quorumlog.errors import CorruptEntry
    s = FileStore(str(tmp_path / "g"), SMALL)
    fill(s, 3)
    end = s.end_index
    with pytest.raises(CorruptEntry):
        s.reset(end + 10, b"not a producer snapshot")
    assert (s.begin_index, s.end_index) == (0, end)
    s.close()


def test_a_reset_can_drop_held_entries_that_do_not_chain_to_the_leaders(tmp_path):
    """A follower whose entry at the leader's begin - 1 is an old term's (it does not chain to the leader's
    first record) resets to begin with entries at and above it in its log: they go too, and the store
    reopens at the new begin."""
    path = str(tmp_path / "g")
    s = FileStore(path, SMALL)
    fill(s, 8)
    s.flush()
    s.set_committed_index(2)
    s.checkpoint()
    s.reset(5)  # entries 5.. were held, uncommitted
    assert (s.begin_index, s.end_index, s.committed_index) == (5, 4, 4)
    s.append_batch(9, [b"new"], 1)
    s.flush()
    s.close()
    with FileStore(path, SMALL) as s2:
        assert (s2.begin_index, s2.end_index) == (5, 5) and s2.get(5).body == b"new"


def _rss_file_bytes() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("RssFile:"))


def test_a_readers_pages_of_sealed_segments_leave_the_process_when_released(tmp_path):
    # A leader reads every entry it pushes through the segments' mmaps: without the release its RSS grew by
    # what it pushed (6.6 GB after 20 GB), pages that drop_caches cannot free.
    mib = 1024 * 1024
    cfg = dataclasses.replace(SMALL, data_segment_size_bytes=4 * mib, index_segment_size_bytes=64 * 1024,
                              max_entry_bytes=64 * 1024)
    with FileStore(str(tmp_path / "g"), cfg) as s:
        bodies = [body_for(i, 60 * 1024) for i in range(400)]  # ~24 MiB: 6 data segments
        for i in range(0, len(bodies), 20):
            s.append_batch(1, bodies[i:i + 20], 1)
        s.flush()
        assert len(s._data) >= 6

        def touch_everything() -> bytes:
            r = s.read(0, 10 ** 9)
            return b"".join(bytes(c) for c in r.chunks)
        everything = touch_everything()
        mapped = _rss_file_bytes()
        s.release_read_pages()
        released = mapped - _rss_file_bytes()
        assert released >= 16 * mib, f"only {released} bytes of the sealed segments' pages left the process"
        assert touch_everything() == everything  # read again from the page cache, the same bytes
        s.release_read_pages()
        assert mapped - _rss_file_bytes() >= 16 * mib
