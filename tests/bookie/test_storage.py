"""A bookie's storage (quorumlog/bookie): adds are durable before they are acknowledged and grouped into few
fsyncs; fence and LAC survive restarts; a kill -9 loses no acknowledged add (journal replay); deleted ledgers
are garbage collected and sparse entry logs compacted; read-only mode past the disk threshold."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import random
import signal
import threading
import time

import pytest

from quorumlog.bookie import BookieConfig, BookieStorage
from quorumlog.bookie.index import LedgerIndex
from quorumlog.errors import BookieReadOnly, LedgerFenced, NoSuchEntry, NoSuchLedger

SMALL = BookieConfig(entry_log_file_bytes=64 * 1024, journal_file_bytes=128 * 1024)


def body(ledger: int, entry: int) -> bytes:
    return b"%d/%d:" % (ledger, entry) + bytes([entry % 251]) * ((entry * 37) % 900)


def test_adds_are_acknowledged_after_the_journal_fsync_and_read_back(tmp_path):
    s = BookieStorage(str(tmp_path), SMALL)
    try:
        futs = [s.add_entry(7, e, body(7, e), lac=e - 1) for e in range(300)]
        assert all(f.result(10) for f in futs)
        assert s.journal.fsyncs >= 1 and s.journal.fsyncs < 300 // 3  # group commit: few fsyncs for many adds
        assert [s.read_entry(7, e) for e in range(300)] == [body(7, e) for e in range(300)]
        assert s.last_entry(7) == 299 and s.last_add_confirmed(7) == 298 and s.ledgers() == [7]
        with pytest.raises(NoSuchEntry):
            s.read_entry(7, 300)
        with pytest.raises(NoSuchLedger):
            s.read_entry(8, 0)
    finally:
        s.close()


def test_fence_refuses_the_writer_lets_recovery_write_and_survives_a_restart(tmp_path):
    s = BookieStorage(str(tmp_path), SMALL)
    for e in range(5):
        s.add_entry(1, e, body(1, e), lac=e - 1).result(5)
    assert s.fence(1).result(5) == 3  # the LAC the writer piggybacked last
    with pytest.raises(LedgerFenced):
        s.add_entry(1, 5, b"late")
    s.add_entry(1, 5, b"written back by recovery", recovery=True).result(5)
    s.set_explicit_lac(1, 5).result(5)
    s.journal.close()  # a crash after the fence was acknowledged, before any checkpoint wrote it to the index
    s.entry_log.close()
    s.index.close()
    s = BookieStorage(str(tmp_path), SMALL)
    try:
        assert s.ledger_state(1).fenced and s.last_add_confirmed(1) == 5
        with pytest.raises(LedgerFenced):
            s.add_entry(1, 6, b"still late")
        assert s.read_entry(1, 5) == b"written back by recovery"
    finally:
        s.close()


def test_adds_of_several_ledgers_together_refuse_only_the_fenced_one_and_survive_a_restart(tmp_path):
    """add_sections (an ADD_MULTI request): one journal group for the ledgers it may store; a fenced ledger's
    section is refused with LEDGER_FENCED and stores nothing, the others are durable and readable."""
    s = BookieStorage(str(tmp_path), SMALL)
    s.add_entry(2, 0, body(2, 0)).result(5)
    s.fence(2).result(5)
    fsyncs = s.journal.fsyncs
    refused, fut = s.add_sections([(1, [(e, body(1, e), e - 1) for e in range(3)]),
                                   (2, [(1, b"refused", 0)]),
                                   (3, [(0, body(3, 0), -1)])])
    assert set(refused) == {2} and isinstance(refused[2], LedgerFenced)
    fut.result(5)
    assert s.journal.fsyncs == fsyncs + 1  # (the stored adds of both ledgers: one group)
    refused, fut = s.add_sections([(2, [(1, b"refused again", 0)])])
    assert set(refused) == {2} and fut.result(5)  # (nothing to store: done at once)
    s.journal.close()  # a crash before any checkpoint: replay brings back what was acknowledged
    s.entry_log.close()
    s.index.close()
    s = BookieStorage(str(tmp_path), SMALL)
    try:
        assert [s.read_entry(1, e) for e in range(3)] == [body(1, e) for e in range(3)]
        assert s.read_entry(3, 0) == body(3, 0) and s.last_add_confirmed(1) == 1
        with pytest.raises(NoSuchEntry):
            s.read_entry(2, 1)
    finally:
        s.close()


def _writer(path: str, seed: int, conn) -> None:
    try:
        s = BookieStorage(path, SMALL)
        rnd = random.Random(seed)
        conn.send("ready")
        ledger = seed % 5
        entry = s.last_entry(ledger) + 1
        checkpointing = None  # (mark, thread running its durable part) while adds go on, as a node does
        while True:
            futs = []
            n = rnd.randrange(1, 30)
            if rnd.random() < 0.5:  # an ADD_BATCH: one future for all
                f = s.add_entries(ledger, [(e, body(ledger, e), -1) for e in range(entry, entry + n)])
                futs += [(ledger, e, f) for e in range(entry, entry + n)]
                entry += n
            else:
                for _ in range(n):
                    futs.append((ledger, entry, s.add_entry(ledger, entry, body(ledger, entry))))
                    entry += 1
            for ledger_id, entry_id, f in futs:
                f.result(10)
                conn.send((ledger_id, entry_id))
            if checkpointing is not None and not checkpointing[1].is_alive():
                s.checkpoint_end(checkpointing[0])
                checkpointing = None
            if checkpointing is None and rnd.random() < 0.1:
                mark, durable_part = s.checkpoint_begin()
                checkpointing = (mark, threading.Thread(target=durable_part))
                checkpointing[1].start()
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        conn.send(f"error: {e!r}")
    finally:
        os._exit(0)


def test_kill_9_loses_no_acknowledged_add(tmp_path):  # (checkpoints' durable part on a thread, batches too)
    ctx = multiprocessing.get_context("fork")
    path = str(tmp_path / "bookie")
    rnd = random.Random(5)
    acked: set[tuple[int, int]] = set()
    for _ in range(12):
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_writer, args=(path, rnd.randrange(1 << 30), child))
        proc.start()
        child.close()
        assert parent.poll(30) and parent.recv() == "ready"
        assert parent.poll(30), "no add acknowledged"  # kill mid-work: after the first ack, at a random moment
        time.sleep(rnd.uniform(0, 0.1))
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(30)
        while parent.poll(0):
            try:
                msg = parent.recv()
            except EOFError:
                break
            assert not isinstance(msg, str), msg
            acked.add(msg)
        parent.close()
        s = BookieStorage(path, SMALL)
        try:
            missing = [(lid, e) for lid, e in acked if s.read_entry(lid, e) != body(lid, e)]
        finally:
            s.close()
        assert not missing, missing[:5]
    assert len(acked) > 100


def test_a_torn_journal_tail_is_ignored(tmp_path):
    s = BookieStorage(str(tmp_path), SMALL)
    s.add_entry(3, 0, b"kept").result(5)
    s.journal.close()
    s.entry_log.close()
    s.index.close()
    seq, path = s.journal.files()[-1]
    with open(path, "ab") as f:
        f.write(b"\x00\x00\x01\x00garbage")  # a record header promising 256 bytes, then a crash
    s = BookieStorage(str(tmp_path), SMALL)
    try:
        assert s.read_entry(3, 0) == b"kept" and s.last_entry(3) == 0
    finally:
        s.close()


def test_deleted_ledgers_are_collected_and_sparse_entry_logs_compacted(tmp_path):
    s = BookieStorage(str(tmp_path), SMALL)
    try:
        for e in range(400):  # three ledgers interleaved over several 64 KiB entry logs
            for lid in (10, 11, 12):
                s.add_entry(lid, e, body(lid, e))
        s.checkpoint()
        before = s.entry_log.log_ids()
        assert len(before) >= 4
        s.delete_ledger(10).result(5)
        s.delete_ledger(11).result(5)
        with pytest.raises(NoSuchLedger):
            s.read_entry(10, 0)
        with pytest.raises(NoSuchLedger):
            s.add_entry(11, 400, b"x")
        done = s.gc()
        assert done["ledgers_dropped"] == 2 and done["logs_compacted"] + done["logs_removed"] >= len(before) - 1
        assert s.ledgers() == [12]
        assert all(s.read_entry(12, e) == body(12, e) for e in range(400))
        size = sum(s.entry_log.size_of(i) for i in s.entry_log.log_ids())
        assert size < 0.5 * sum(len(body(12, e)) + 24 for e in range(400)) * 3
    finally:
        s.close()
    s = BookieStorage(str(tmp_path), SMALL)  # and so it stays after a restart
    try:
        assert s.ledgers() == [12] and s.read_entry(12, 399) == body(12, 399)
    finally:
        s.close()


def test_gc_judges_entry_logs_by_their_bytes_per_ledger_and_maps_older_logs_once(tmp_path):
    """GC does not read a log to judge it (a pass over GBs of logs stalled every node's loop): the bytes per
    ledger counted while writing, or after a restart found once by a walk of the headers, say what is live."""
    s = BookieStorage(str(tmp_path), SMALL)
    try:
        for e in range(300):
            for lid in (20, 21, 22):
                s.add_entry(lid, e, body(lid, e))
        s.checkpoint()
        logs = s.entry_log.log_ids()[:-1]
        counted = {i: dict(s.entry_log.ledger_bytes(i)) for i in logs}
        assert s.entry_log.unmapped() == [] and all(set(c) <= {20, 21, 22} for c in counted.values())
        assert all(sum(c.values()) == s.entry_log.size_of(i) for i, c in counted.items())
        scans = []
        real_scan = s.entry_log.scan
        s.entry_log.scan = lambda log_id: scans.append(log_id) or real_scan(log_id)
        assert s.gc() == {"ledgers_dropped": 0, "logs_removed": 0, "logs_compacted": 0}
        assert scans == []  # nothing deleted: no log read
    finally:
        s.close()
    s = BookieStorage(str(tmp_path), SMALL)
    try:
        assert s.entry_log.unmapped() == logs + [logs[-1] + 1]  # (the last log of the run before, too)
        assert {i: s.entry_log.map_ledgers(i) for i in logs} == counted
        s.delete_ledger(20).result(5)
        s.delete_ledger(21).result(5)
        done = s.gc()
        assert done["ledgers_dropped"] == 2 and done["logs_removed"] + done["logs_compacted"] >= len(logs) - 1
        assert s.entry_log.unmapped() == []
        assert all(s.read_entry(22, e) == body(22, e) for e in range(300))
    finally:
        s.close()


def _resident_pages(path: str) -> int:
    """Pages of the file in the page cache (mincore through a mapping that touches none of them)."""
    import ctypes
    import mmap

    libc = ctypes.CDLL(None, use_errno=True)
    size = os.path.getsize(path)
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    with open(path, "rb") as f, mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY) as m:
        addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
        vec = (ctypes.c_ubyte * pages)()
        assert libc.mincore(ctypes.c_void_p(addr), ctypes.c_size_t(size), vec) == 0, ctypes.get_errno()
        resident = sum(b & 1 for b in vec)
    return resident


def test_the_journal_leaves_the_page_cache_once_synced(tmp_path):
    """BookKeeper's journalRemovePagesFromCache: only replay reads the journal, so its synced pages are dropped
    (the part-written last page stays for the next write); the entry logs, which readers read, keep theirs."""
    s = BookieStorage(str(tmp_path), BookieConfig())
    try:
        for e in range(200):
            s.add_entry(5, e, os.urandom(4000)).result(5)
        (_, journal), = s.journal.files()[-1:]
        assert os.path.getsize(journal) > 200 * 4000
        assert _resident_pages(journal) <= 1
        s.entry_log.flush_begin()
        log = s.entry_log._path(s.entry_log.current_id)
        assert _resident_pages(log) >= 150  # (nothing evicts them here: the machine is not short of memory)
        assert s.read_entry(5, 0) and s.read_entry(5, 199)
    finally:
        s.close()


def test_read_only_past_the_disk_threshold_and_writable_again_below_the_low_water_mark(tmp_path):
    s = BookieStorage(str(tmp_path), SMALL)
    try:
        s.add_entry(1, 0, b"a").result(5)
        s.config = dataclasses.replace(SMALL, disk_usage_threshold=0.0)  # any disk is "full"
        assert s.check_disk()
        with pytest.raises(BookieReadOnly):
            s.add_entry(1, 1, b"b")
        s.add_entry(1, 1, b"recovery write", recovery=True).result(5)  # recovery still writes
        s.fence(1).result(5)  # and fences
        assert s.read_entry(1, 0) == b"a"
        s.config = dataclasses.replace(SMALL, disk_usage_threshold=1.0, disk_usage_lwm=1.0)  # space is back
        assert not s.check_disk()
        s.add_entry(2, 0, b"c").result(5)
    finally:
        s.close()


def test_instance_id_is_kept_and_a_wiped_bookie_gets_a_new_one(tmp_path):
    s = BookieStorage(str(tmp_path / "b"), SMALL)
    first = s.instance_id
    s.close()
    s = BookieStorage(str(tmp_path / "b"), SMALL)
    assert s.instance_id == first
    s.close()
    import shutil
    shutil.rmtree(tmp_path / "b")
    s = BookieStorage(str(tmp_path / "b"), SMALL)
    try:
        assert s.instance_id != first
    finally:
        s.close()


def test_a_checkpoint_in_three_steps_keeps_every_entry_readable_and_durable(tmp_path):
    """What a node does (server/services/bookie.py): begin on the loop, the durable part on a thread while
    adds go on, end; readers see every entry at each step, and a restart finds them all."""
    s = BookieStorage(str(tmp_path), SMALL)
    try:
        assert all(f.result(10) for f in [s.add_entry(3, e, body(3, e)) for e in range(100)])
        s.fence(4).result(10)
        mark, durable_part = s.checkpoint_begin()
        assert [s.read_entry(3, e) for e in range(100)] == [body(3, e) for e in range(100)]
        assert s.last_entry(3) == 99 and 4 in s.ledgers()
        t = threading.Thread(target=durable_part)
        t.start()
        s.add_entries(3, [(e, body(3, e), e - 1) for e in range(100, 200)]).result(10)
        t.join(10)
        assert [s.read_entry(3, e) for e in range(200)] == [body(3, e) for e in range(200)]
        s.checkpoint_end(mark)
        assert s.last_entry(3) == 199 and s.index.mark() == mark
        with pytest.raises(LedgerFenced):
            s.add_entries(4, [(0, b"x", -1)])
    finally:
        s.close()
    s = BookieStorage(str(tmp_path), SMALL)
    try:
        assert [s.read_entry(3, e) for e in range(200)] == [body(3, e) for e in range(200)]
        assert s.last_add_confirmed(3) == 198
    finally:
        s.close()


def _crash_between_index_chunks(path: str) -> None:
    """(child) Adds, a fence, then a checkpoint whose index write dies after two of its chunks."""
    from quorumlog.bookie import index as index_module
    index_module._COMMIT_CHUNK = 3
    s = BookieStorage(path, SMALL)
    for lid in (1, 2):
        assert all(f.result(10) for f in [s.add_entry(lid, e, body(lid, e)) for e in range(10)])
    s.fence(2).result(10)

    class DiesOnThirdWrite:
        writes = 0

        def __init__(self, db):
            self.db = db

        def __getattr__(self, name):
            return getattr(self.db, name)

        def write(self, batch, options):
            DiesOnThirdWrite.writes += 1
            if DiesOnThirdWrite.writes == 3:
                os._exit(0)  # kill -9 between the entries' chunks and the batch with the states and the mark
            self.db.write(batch, options)

    s.index.db = DiesOnThirdWrite(s.index.db)
    mark, durable_part = s.checkpoint_begin()
    with open(path + ".mark", "w") as f:
        f.write("%d %d" % mark)
    durable_part()
    os._exit(1)  # (not reached)


def test_a_crash_between_a_checkpoints_index_chunks_loses_nothing(tmp_path):
    """The index's checkpoint writes entries in chunks, then the states and the journal mark in one last batch:
    a crash between them leaves some entries in RocksDB under the old mark, and replay from that mark restores
    the rest, the fence included."""
    path = str(tmp_path / "bookie")
    proc = multiprocessing.get_context("fork").Process(target=_crash_between_index_chunks, args=(path,))
    proc.start()
    proc.join(60)
    assert proc.exitcode == 0
    with open(path + ".mark") as f:
        lost_mark = tuple(map(int, f.read().split()))
    index = LedgerIndex(os.path.join(path, "index"))  # as the crash left it
    try:
        assert index.mark() != lost_mark and index.state(2) is None  # the last batch never landed ...
        assert [index.get(1, e) is not None for e in range(3)] == [True] * 3  # ... the first chunks did
    finally:
        index.close()
    s = BookieStorage(path, SMALL)
    try:
        assert [s.read_entry(lid, e) for lid in (1, 2) for e in range(10)] == \
            [body(lid, e) for lid in (1, 2) for e in range(10)]
        with pytest.raises(LedgerFenced):
            s.add_entries(2, [(10, b"x", 9)])
        assert s.add_entries(1, [(10, body(1, 10), 9)]).result(10) is not None
    finally:
        s.close()


def test_the_journal_without_flush_when_queue_empty_groups_every_kind_of_record(tmp_path):
    """BookKeeper's default (journalFlushWhenQueueEmpty = false): the writer waits up to max_group_wait for a
    group's bytes, counting single records, (head, body) records, a batch framed by C, and a repair (which has
    none). Each kind is acknowledged and replayed; the journal thread lives on."""
    from quorumlog.bookie.add_items import scan_adds
    from quorumlog.wire.ledger import AddEntry, pack_adds, pack_entry

    config = dataclasses.replace(SMALL, journal_flush_when_queue_empty=False, journal_max_group_wait_ms=5)
    s = BookieStorage(str(tmp_path), config)
    try:
        batch = scan_adds(pack_adds([AddEntry("b", 2, e, pack_entry(e - 1, e + 1, body(2, e)), e - 1)
                                     for e in range(20)]))
        futs = [s.add_entry(1, 0, body(1, 0)),
                s.add_entries(1, [(e, body(1, e), e - 1) for e in range(1, 10)]),
                s.add_entries(2, batch),
                s.journal.repair(),
                s.fence(3)]
        for f in futs:
            f.result(5)
        assert s.journal._thread.is_alive()
        s.add_entry(1, 10, body(1, 10)).result(5)  # (and the next group too)
    finally:
        s.journal.close()  # a crash before any checkpoint: replay brings back what was acknowledged
        s.entry_log.close()
        s.index.close()
    s = BookieStorage(str(tmp_path), SMALL)
    try:
        assert [s.read_entry(1, e) for e in range(11)] == [body(1, e) for e in range(11)]
        assert s.read_entry(2, 19) == pack_entry(18, 20, body(2, 19)) and s.ledger_state(3).fenced
    finally:
        s.close()


def test_an_entry_over_the_cap_is_refused_so_replay_never_drops_an_acknowledged_record(tmp_path):
    """A journal record over 64 MiB was written, fsynced and acknowledged, then read by replay as a torn tail:
    lost, and every record after it. The bookie refuses an entry over max_entry_bytes (16 MiB by default) with
    ENTRY_TOO_LARGE, single or in a batch (refused whole), and what it acknowledged replays."""
    from quorumlog.bookie.add_items import scan_adds
    from quorumlog.bookie.journal import MAX_RECORD_BYTES
    from quorumlog.errors import EntryTooLarge
    from quorumlog.wire.ledger import AddEntry, pack_adds, pack_entry

    s = BookieStorage(str(tmp_path), SMALL)
    try:
        with pytest.raises(EntryTooLarge):
            s.add_entry(1, 0, pack_entry(-1, 1, bytes(MAX_RECORD_BYTES + 1)))
        s.add_entry(1, 0, body(1, 0)).result(5)
        s.fence(2).result(5)
    finally:
        s.journal.close()  # a crash before any checkpoint: replay brings back what was acknowledged
        s.entry_log.close()
        s.index.close()
    s = BookieStorage(str(tmp_path), dataclasses.replace(SMALL, max_entry_bytes=100))
    try:
        assert s.read_entry(1, 0) == body(1, 0) and s.ledger_state(2).fenced
        big, small = pack_entry(0, 1, bytes(101)), pack_entry(0, 1, bytes(100))
        with pytest.raises(EntryTooLarge):
            s.add_entries(3, [(0, small, -1), (1, big, 0)])
        with pytest.raises(EntryTooLarge):  # (the C path's batch)
            s.add_entries(3, scan_adds(pack_adds([AddEntry("b", 3, 0, small, -1), AddEntry("b", 3, 1, big, 0)])))
        refused, fut = s.add_sections([(4, [(0, big, -1)]), (5, [(0, small, -1)])])
        assert set(refused) == {4} and isinstance(refused[4], EntryTooLarge)
        fut.result(5)
        assert 3 not in s.ledgers() and s.read_entry(5, 0) == small
    finally:
        s.close()
