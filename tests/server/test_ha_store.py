"""Master/slave HA over real FileStores: the slave's log becomes the master's, byte for byte at the same
positions, across segment ends, a Reset past retention, a restart, and refuses a log laid out differently."""

from __future__ import annotations

import random

import pytest

from quorumlog.errors import CorruptEntry
from quorumlog.ha import HAClient, HAConnection, Reset, SlaveReport, Transfer
from quorumlog.ha.master import HAConfig
from quorumlog.server.master_slave.ha_store import StoreHALog
from quorumlog.store import FileStore, StoreConfig

SEG = 4096
CFG = StoreConfig(data_segment_size_bytes=SEG, index_segment_size_bytes=32 * 8, max_entry_bytes=1024,
                  disk_full_ratio=1.0, checkpoint_interval_ms=0, file_reserved_hours=0)
HA = HAConfig(transfer_batch_bytes=700, empty_slave_from_current_segment=False)


def _fill(store: FileStore, n_batches: int, rng: random.Random) -> None:
    for _ in range(n_batches):
        bodies = [rng.randbytes(rng.randint(1, 300)) for _ in range(rng.randint(1, 4))]
        store.append_batch(1, bodies, 1_700_000_000_000)
    store.flush()


def _sync(master: StoreHALog, slave: StoreHALog, now: int = 0) -> int:
    """Run one connection until the slave holds the master's end; returns frames moved."""
    conn, client = HAConnection("s", master, HA, now), HAClient(slave, HA, now)
    inbox = client.on_connected(now)
    frames = 0
    for _ in range(10_000):
        out = []
        for m in inbox:
            assert isinstance(m, SlaveReport)
            out += conn.on_report(m, now)
        out += conn.poll(now)
        inbox = []
        for m in out:
            assert isinstance(m, (Transfer, Reset)), m
            frames += 1
            inbox += client.on_message(m, now)
        if not out and slave.max_offset() == master.max_offset():
            return frames
    raise AssertionError("did not converge")


def _same(master: FileStore, slave: FileStore) -> None:
    assert (slave.begin_index, slave.end_index, slave.write_position) == \
           (master.begin_index, master.end_index, master.write_position)
    for i in range(master.begin_index, master.end_index + 1):
        assert slave.get(i) == master.get(i)


def test_a_slave_copies_the_master_across_segment_ends_and_restarts(tmp_path):
    rng = random.Random(7)
    m = FileStore(str(tmp_path / "m"), CFG)
    s = FileStore(str(tmp_path / "s"), CFG)
    _fill(m, 60, rng)
    assert len(list((tmp_path / "m" / "data").iterdir())) >= 3  # the log crosses segment ends
    ml, sl = StoreHALog(m, SEG), StoreHALog(s, SEG)
    assert _sync(ml, sl) > 3
    _same(m, s)
    # the bytes at every record position are the master's (pos rewritten identically: same layout)
    for i in range(m.begin_index, m.end_index + 1):
        p = m._unit(i)[0]
        assert s._unit(i)[0] == p and s.read_at_position(p, 1) == m.read_at_position(p, 1)
    _fill(m, 30, rng)
    s.close()
    s = FileStore(str(tmp_path / "s"), CFG)  # a restarted slave reports where it is and continues
    _sync(ml, StoreHALog(s, SEG))
    _same(m, s)
    m.close(), s.close()


def test_a_slave_whose_offset_retention_deleted_restarts_at_the_masters_first_segment(tmp_path):
    rng = random.Random(8)
    m = FileStore(str(tmp_path / "m"), CFG)
    s = FileStore(str(tmp_path / "s"), CFG)
    ml, sl = StoreHALog(m, SEG), StoreHALog(s, SEG)
    _fill(m, 10, rng)
    _sync(ml, sl)
    _fill(m, 80, rng)
    m.set_committed_index(m.end_index)
    assert m.delete_expired(10**15, m.end_index) >= 2
    assert m.first_position() > s.write_position  # what the slave needs next is gone
    _sync(ml, sl)
    _same(m, s)
    assert s.begin_index == m.begin_index > 0
    m.close(), s.close()


def test_an_empty_slave_of_a_trimmed_master_begins_at_its_first_record(tmp_path):
    rng = random.Random(9)
    m = FileStore(str(tmp_path / "m"), CFG)
    _fill(m, 80, rng)
    m.set_committed_index(m.end_index)
    m.delete_expired(10**15, m.end_index)
    s = FileStore(str(tmp_path / "s"), CFG)
    _sync(StoreHALog(m, SEG), StoreHALog(s, SEG))
    _same(m, s)
    m.close(), s.close()


def test_positions_inside_a_record_or_outside_the_log_are_refused(tmp_path):
    m = FileStore(str(tmp_path / "m"), CFG)
    _fill(m, 5, random.Random(1))
    with pytest.raises(ValueError, match="inside a record"):
        m.read_at_position(m._unit(1)[0] + 3, 100)
    with pytest.raises(ValueError, match="outside the log"):
        m.read_at_position(m.write_position + 8, 100)
    assert m.read_at_position(m.write_position, 100) == b""
    m.close()


def test_a_slave_with_other_segment_sizes_is_refused_not_misplaced(tmp_path):
    rng = random.Random(3)
    m = FileStore(str(tmp_path / "m"), CFG)
    other = StoreConfig(data_segment_size_bytes=2 * SEG, index_segment_size_bytes=32 * 8, max_entry_bytes=1024,
                        disk_full_ratio=1.0, checkpoint_interval_ms=0)
    s = FileStore(str(tmp_path / "s"), other)
    _fill(m, 60, rng)
    with pytest.raises(CorruptEntry, match="data_segment_size differs"):
        _sync(StoreHALog(m, SEG), StoreHALog(s, 2 * SEG))
    m.close(), s.close()


def test_positions_found_by_hint_or_search_agree_after_reads_truncation_and_new_entries(tmp_path):
    # read_at_position remembers which entry begins where each read ends (so the next read and the reader's
    # report skip the index search); the answers must stay the search's own after the log is cut and rewritten.
    rng = random.Random(11)
    st = FileStore(str(tmp_path / "m"), CFG)
    _fill(st, 60, rng)

    def expected(p: int) -> int | None:
        """By brute force: the entry beginning at p, the next one if p ends a segment's records, else None."""
        for i in range(st.begin_index, st.end_index + 1):
            start = st.position_after(i - 1) if i > st.begin_index else st.first_position()
            if start == p or (st.position_after(i - 1) == p and i > st.begin_index):
                return i
        return None

    for _round in range(3):
        pos, ends = st.first_position(), []
        while pos < st.write_position:  # a slave's reads, cut at record ends, across segment ends
            data = st.read_at_position(pos, rng.randint(1, 900))
            pos += len(data)
            ends.append(pos)
        assert any(p in st._position_hints for p in ends)
        cut = rng.randint(st.begin_index, st.end_index - 5)
        st.truncate_after(cut)
        _fill(st, 20, rng)  # other sizes at the positions the hints remember
        for p in ends:
            if p >= st.write_position:
                continue
            want = expected(p)
            if want is None:
                with pytest.raises(ValueError):
                    st.index_at_position(p)  # (inside a record now: never a stale hint's entry)
            else:
                assert st.index_at_position(p) == want, p
    st.close()


def test_an_entry_that_opens_a_segment_begins_at_the_segment_not_where_the_last_one_ended(tmp_path):
    """position_of(i): where SYNC_MASTER's wait says an append starts, compared with where a slave's copy
    begins (a segment start, after a Reset). position_after(i - 1) ends before the previous segment's blank, so
    it would put such an append before the copy and the slave would never count for it."""
    st = FileStore(str(tmp_path / "m"), CFG)
    _fill(st, 60, random.Random(5))
    openers = 0
    for i in range(st.begin_index, st.end_index + 1):
        assert st.index_at_position(st.position_of(i)) == i
        if i > st.begin_index and st.position_of(i) % SEG == 0:
            openers += 1
            assert st.position_after(i - 1) < st.position_of(i)  # (the blank in between)
    assert openers >= 3
    st.close()
