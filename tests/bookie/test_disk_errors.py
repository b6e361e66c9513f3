"""A bookie whose writes fail (quorumlog/bookie: journal.py, entry_log.py, storage.py): a full disk seen before the
95% check, or an I/O error, fails the adds it hit and acknowledges none of them, turns the bookie read-only, and
the bookie repairs itself once the disk takes writes again; no acknowledged add is lost, before or after a
restart. BookKeeper's bookie shuts down on a journal IOException instead (a supervisor restarts it)."""

from __future__ import annotations

import errno
import os

import pytest

from quorumlog.bookie import BookieConfig, BookieStorage
from quorumlog.bookie import entry_log, storage
from quorumlog.bookie.entry_log import EntryLogger
from quorumlog.bookie.index import LedgerIndex
from quorumlog.bookie.journal import Journal
from quorumlog.errors import BookieReadOnly, DiskError, DiskFull

SMALL = BookieConfig(entry_log_file_bytes=1 << 20, journal_file_bytes=1 << 20)


def body(entry: int) -> bytes:
    return b"%08d" % entry * 2048  # 16 KiB


def _add_until_refused(s: BookieStorage, ledger: int, first: int, n: int) -> tuple[list[int], list[type]]:
    acked, refused = [], []
    for e in range(first, first + n):
        try:
            s.add_entry(ledger, e, body(e), lac=e - 1).result(10)
            acked.append(e)
        except (DiskFull, DiskError, BookieReadOnly, OSError) as err:
            refused.append(type(err))
    return acked, refused


class _Clock:
    """storage's time, driven by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> _Clock:
    c = _Clock()
    monkeypatch.setattr(storage, "time", c)
    return c


def test_a_disk_that_fills_up_fails_the_adds_it_hit_and_the_bookie_comes_back_once_space_returns(tmpfs, clock):
    disk = tmpfs("8M")
    s = BookieStorage(os.path.join(disk, "b"), SMALL)
    filler = os.path.join(disk, "filler")
    with open(filler, "wb") as f:  # leave ~0.6 MB: it runs out under the adds, before any disk check
        f.write(b"\0" * (os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize - 600_000))
    acked, refused = _add_until_refused(s, 1, 0, 100)
    assert acked == list(range(len(acked))) and 0 < len(acked) < 100
    assert OSError in refused or DiskFull in refused  # the add(s) that hit ENOSPC, then read-only refusals
    assert set(refused[1:]) == {BookieReadOnly}
    assert s.read_only and s.disk_error is not None and s.disk_error.errno == errno.ENOSPC
    with pytest.raises(OSError):  # a checkpoint cannot write either: the journal stays whole
        s.checkpoint()
    assert s.check_disk()  # still full: still read-only
    # reads go on, those still in the entry log's buffer (here: all, within its 1 MiB) served from it
    assert [s.read_entry(1, e) for e in acked] == [body(e) for e in acked]

    os.remove(filler)
    # (no repair backoff for a full disk: the check that finds room asks for the repair, as an I/O error's
    # would only after REPAIR_BACKOFF_S)
    assert s.check_disk()  # asked of the journal's writer; a later check takes its answer
    s._repairing.result(5)
    assert not s.check_disk() and s.disk_error is None
    assert [s.read_entry(1, e) for e in acked] == [body(e) for e in acked]
    more, refused = _add_until_refused(s, 1, 100, 20)
    assert more == list(range(100, 120)) and not refused
    s.checkpoint()
    s.close()
    s = BookieStorage(os.path.join(disk, "b"), SMALL)
    try:
        assert [s.read_entry(1, e) for e in acked + more] == [body(e) for e in acked + more]
    finally:
        s.close()


class _FailingFile:
    """A journal file whose write number `fail_at` writes `keep` bytes of its data, then fails with ENOSPC."""

    def __init__(self, inner, fail_at: int, keep: int = 0) -> None:
        self.inner, self.fail_at, self.keep, self.writes = inner, fail_at, keep, 0

    def write(self, data) -> int:
        self.writes += 1
        if self.writes == self.fail_at:
            self.inner.write(bytes(data)[:self.keep])
            raise OSError(errno.ENOSPC, "No space left on device")
        return self.inner.write(data)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_an_entry_log_write_cut_short_then_refused_loses_and_misplaces_no_record(tmp_path, monkeypatch):
    """The disk takes 40,000 bytes of a write-out (a record cut in two), then nothing: every record reads back
    from file and buffer together meanwhile, and once the disk takes writes the log on file is every record in
    order, at the offsets their locations say."""
    log = EntryLogger(str(tmp_path))
    taken = {"left": 40_000}

    def disk(fd, data):
        if taken["left"] == 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = os.write(fd, bytes(data[:taken["left"]]))
        taken["left"] -= n
        return n
    monkeypatch.setattr(entry_log, "_write", disk)
    locations = [log.append(1, e, body(e)) for e in range(6)]
    with pytest.raises(OSError):
        log.write_out()
    assert 0 < os.path.getsize(log._path(locations[0][0])) == 40_000 < log.size_of(locations[0][0])
    assert [log.read(loc, 1, e) for e, loc in enumerate(locations)] == [body(e) for e in range(6)]
    more = [log.append(1, e, body(e)) for e in range(6, 10)]  # (buffered: nothing to write yet)
    monkeypatch.setattr(entry_log, "_write", os.write)
    log.flush()
    assert [(off, entry) for off, _, entry, _ in log.scan(locations[0][0])] == \
        [(loc[1], e) for e, loc in enumerate(locations + more)]
    assert all(log.read(loc, 1, e) == body(e) for e, loc in enumerate(locations + more))
    log.close()


def test_a_failed_journal_write_fails_its_group_and_every_later_one_until_repaired(tmp_path):
    j = Journal(str(tmp_path))
    j.start()
    try:
        assert j.submit(b"one").result(5)
        j._file = _FailingFile(j._file, fail_at=1, keep=10)  # a torn record: 10 bytes of it reach the file
        with pytest.raises(OSError):
            j.submit(b"two").result(5)
        assert j.error is not None
        with pytest.raises(OSError):  # at once, nothing written: the file a write failed in is left as it is
            j.submit(b"three").result(5)
        assert j._file.writes == 1
        assert j.repair().result(5) is None and j.error is None
        assert j.submit(b"four").result(5) == j.durable
    finally:
        j.close()
    # replay reads past the abandoned file's torn tail into the next file
    assert list(Journal(str(tmp_path)).replay((0, 0))) == [b"one", b"four"]


def test_a_torn_tail_in_the_last_journal_file_still_ends_replay(tmp_path):
    j = Journal(str(tmp_path))
    j.start()
    j.submit(b"one").result(5)
    j.close()
    seq, path = j.files()[-1]
    with open(path, "ab") as f:
        f.write(b"\x00\x00\x00\x10torn")
    assert list(Journal(str(tmp_path)).replay((0, 0))) == [b"one"]


def test_a_checkpoint_whose_durable_part_fails_is_done_by_the_next_one(tmp_path, monkeypatch):
    """The index set its changes aside for the failed write; they go back (the changes made since on top), so
    the next checkpoint writes them, instead of every later checkpoint failing "one checkpoint at a time"."""
    s = BookieStorage(str(tmp_path), SMALL)
    for e in range(5):
        s.add_entry(1, e, body(e), lac=e - 1).result(5)
    real = s.entry_log.sync_paths
    monkeypatch.setattr(s.entry_log, "sync_paths", lambda paths: (_ for _ in ()).throw(OSError(errno.EIO, "EIO")))
    with pytest.raises(OSError):
        s.checkpoint()
    monkeypatch.setattr(s.entry_log, "sync_paths", real)
    for e in range(5, 8):
        s.add_entry(1, e, body(e), lac=e - 1).result(5)
    s.checkpoint()
    mark = s.index.mark()
    assert mark == s.journal.durable
    s.close()
    index = LedgerIndex(os.path.join(str(tmp_path), "index"))  # what the checkpoint wrote, without replay
    try:
        assert all(index.get(1, e) is not None for e in range(8)) and index.last_entry(1) == 7
    finally:
        index.close()


def test_a_disk_that_keeps_failing_after_each_repair_is_tried_ever_later(tmp_path, monkeypatch, clock):
    """An I/O error with space to spare: every repair starts a journal file, and the next add fails again. The
    repairs back off (doubling up to REPAIR_BACKOFF_S[1]), so a failing disk does not pile up journal files."""
    monkeypatch.setattr(storage, "REPAIR_BACKOFF_S", (0.02, 0.16))
    s = BookieStorage(str(tmp_path), SMALL)

    def eio(batch):
        raise OSError(errno.EIO, "Input/output error")
    monkeypatch.setattr(s.journal, "_write", eio)
    files_before = len(s.journal.files())
    repaired_at = []
    with pytest.raises(OSError):  # the first failure
        s.add_entry(1, 0, body(0), lac=-1).result(5)
    start = clock.now
    for _ in range(300):  # 1.5 s of checks every 5 ms
        clock.now += 0.005
        if s._repairing is not None:
            s._repairing.exception(5)  # (the journal's writer answers the repair it was asked)
        if not s.check_disk():  # repaired: the next add fails again
            repaired_at.append(round(clock.now - start, 3))
            with pytest.raises(OSError):
                s.add_entry(1, len(repaired_at), body(0), lac=-1).result(5)
    s.journal._write = Journal._write.__get__(s.journal)  # (a healthy disk again, for close)
    # each repair waits twice as long as the one before, up to 0.16 s (plus the two or three 5 ms checks that
    # notice the failure and take the writer's answer); without the backoff: a repair, and a file, every check
    gaps = [round(b - a, 3) for a, b in zip([0.0] + repaired_at, repaired_at)]
    waits = [min(0.02 * 2 ** i, 0.16) for i in range(len(gaps))]
    assert all(w < g <= w + 0.015 for g, w in zip(gaps, waits)), gaps
    assert 9 <= len(repaired_at) <= 11 and len(s.journal.files()) - files_before == len(repaired_at)
    s.close()
