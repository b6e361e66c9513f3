"""One behaviour suite, run against MemoryStore and FileStore (the `store` fixture), so they stay swappable."""

from __future__ import annotations

import random

import pytest

from quorumlog.errors import CorruptEntry, EmptyBatch, EntryTooLarge, IndexOutOfRange
from quorumlog.store import MemoryStore
from quorumlog.format import log_entry

from .conftest import MAX_ENTRY_BYTES


def body_for(index: int, size: int) -> bytes:
    return (index.to_bytes(8, "big") * (size // 8 + 1))[:size]


def fill(store, batches: int, seed: int = 1, term_every: int = 7) -> list[bytes]:
    rnd = random.Random(seed)
    bodies: list[bytes] = []
    for b in range(batches):
        n = rnd.randrange(1, 6)
        batch = [body_for(len(bodies) + i, rnd.randrange(0, 700)) for i in range(n)]
        last = store.append_batch(1 + b // term_every, batch, 1_000 + b)
        bodies += batch
        assert last == len(bodies) - 1
    return bodies


def test_empty_store(store):
    assert (store.begin_index, store.end_index, store.end_term, store.committed_index) == (0, -1, -1, -1)
    assert store.durable_index == -1
    r = store.read(0, 1000)
    assert (r.first_index, r.last_index, r.chunks, r.size_bytes, r.count) == (0, -1, (), 0, 0)
    with pytest.raises(IndexOutOfRange):
        store.get(0)
    with pytest.raises(IndexOutOfRange):
        store.term_at(0)
    assert store.bytes_between(3, 2) == 0


def test_append_get_and_terms(store):
    bodies = fill(store, 40)
    assert store.end_index == len(bodies) - 1
    for i, body in enumerate(bodies):
        e = store.get(i)
        assert (e.index, e.body) == (i, body)
        assert e.term == store.term_at(i)
    assert store.end_term == store.term_at(store.end_index)
    with pytest.raises(IndexOutOfRange):
        store.get(len(bodies))
    with pytest.raises(IndexOutOfRange):
        store.get(-1)


def test_refusals(store):
    with pytest.raises(EmptyBatch):
        store.append_batch(1, [], 0)
    with pytest.raises(EntryTooLarge):
        store.append_batch(1, [b"x", b"y" * (MAX_ENTRY_BYTES + 1)], 0)
    assert store.end_index == -1  # nothing of a refused batch is stored
    store.append_batch(1, [b"y" * MAX_ENTRY_BYTES], 0)
    assert store.get(0).body == b"y" * MAX_ENTRY_BYTES


def test_read_respects_bytes_and_end_and_returns_raw_records(store):
    bodies = fill(store, 30)
    for start in range(0, len(bodies), 4):
        for max_bytes in (0, 1, 200, 1500, 10 ** 7):
            for end in (None, start + 3):
                r = store.read(start, max_bytes, end)
                data = b"".join(bytes(c) for c in r.chunks)
                assert r.size_bytes == len(data) == store.bytes_between(r.first_index, r.last_index)
                assert r.first_index == start and r.last_index >= start  # at least one record
                if end is not None:
                    assert r.last_index <= end
                if r.last_index > start:
                    assert r.size_bytes <= max_bytes
                if end is None:
                    assert r.last_index == store.end_for_bytes(start, max_bytes, 10 ** 9)
                entries = log_entry.decode_records(data)
                assert [e.index for e in entries] == list(range(start, r.last_index + 1))
                assert [e.body for e in entries] == bodies[start: r.last_index + 1]
    assert store.read(len(bodies), 100).count == 0


def test_end_for_bytes_is_largest_fitting(store):
    fill(store, 25)
    for start in range(0, store.end_index + 1, 3):
        for max_bytes in (0, 300, 2000, 5000):
            for max_count in (1, 5, 1000):
                last = store.end_for_bytes(start, max_bytes, max_count)
                assert start <= last <= min(store.end_index, start + max_count - 1)
                assert last == start or store.bytes_between(start, last) <= max_bytes
                if last < min(store.end_index, start + max_count - 1):
                    assert store.bytes_between(start, last + 1) > max_bytes


def test_flush_and_commit(store):
    fill(store, 5)
    assert store.flush() == store.end_index == store.durable_index
    store.set_committed_index(3)
    store.set_committed_index(2)  # never moves back
    assert store.committed_index == 3
    store.checkpoint()


def test_truncate_after_then_append_again(store):
    bodies = fill(store, 30)
    store.flush()
    store.set_committed_index(10)
    chain_20 = store.chain_crc_at(20)
    store.truncate_after(20)
    assert store.end_index == 20 and store.durable_index <= 20
    assert store.chain_crc_at(20) == chain_20
    assert store.end_term == store.term_at(20)
    assert [store.get(i).body for i in range(21)] == bodies[:21]
    store.append_batch(99, [b"new-21", b"new-22"], 5)
    assert [store.get(i).body for i in (21, 22)] == [b"new-21", b"new-22"]
    assert store.term_at(22) == 99
    store.truncate_after(50)  # beyond the end: nothing to do
    assert store.end_index == 22
    with pytest.raises(AssertionError):
        store.truncate_after(5)  # below committed


def test_truncate_everything(store):
    fill(store, 5)
    store.truncate_after(-1)
    assert (store.end_index, store.end_term) == (-1, -1)
    store.append_batch(3, [b"a"], 1)
    assert store.get(0).body == b"a"


def test_follower_append_records_roundtrip(store):
    leader = MemoryStore(max_entry_bytes=MAX_ENTRY_BYTES)
    bodies = fill(leader, 30)
    pos = 0
    while pos <= leader.end_index:
        r = leader.read(pos, 1500)
        assert store.append_records(r.chunks[0]) == r.last_index
        pos = r.last_index + 1
    assert [store.get(i).body for i in range(len(bodies))] == bodies
    assert [store.chain_crc_at(i) for i in range(len(bodies))] == [leader.chain_crc_at(i) for i in range(len(bodies))]


def test_follower_refuses_bad_records(store):
    leader = MemoryStore(max_entry_bytes=MAX_ENTRY_BYTES)
    fill(leader, 5)
    data = bytearray(leader.read(0, 10 ** 6).chunks[0])
    with pytest.raises(CorruptEntry):
        store.append_records(bytes(data[:-1]))  # torn
    bad = bytearray(data)
    bad[log_entry.HEADER_SIZE + 1] ^= 0xFF  # first body byte (or the next header if the body is empty)
    with pytest.raises(CorruptEntry):
        store.append_records(bytes(bad))
    assert store.end_index == -1
    store.append_records(bytes(data[: leader.bytes_between(0, 1)]))
    with pytest.raises(CorruptEntry):  # not contiguous: entry 0 again
        store.append_records(bytes(data[: leader.bytes_between(0, 1)]))
    gap = leader.read(3, 10 ** 6).chunks[0]
    with pytest.raises(CorruptEntry):  # gap: 3 after 1
        store.append_records(gap)
    assert store.end_index == 1
    with pytest.raises(EmptyBatch):
        store.append_records(b"")


def test_follower_refuses_a_diverging_chain(store):
    a = MemoryStore(max_entry_bytes=MAX_ENTRY_BYTES)
    b = MemoryStore(max_entry_bytes=MAX_ENTRY_BYTES)
    a.append_batch(1, [b"x", b"y"], 1)
    b.append_batch(2, [b"x", b"y", b"z"], 1)  # same indexes, other history
    store.append_records(a.read(0, 10 ** 6).chunks[0])
    with pytest.raises(CorruptEntry):
        store.append_records(b.read(2, 10 ** 6).chunks[0])


def test_producer_table(store):
    store.append_batch(1, [b"a", b"b", b"c"], 1, producer=(42, 0))
    store.append_batch(1, [b"d"], 1)
    store.append_batch(1, [b"e", b"f"], 1, producer=(42, 1))
    store.append_batch(1, [b"g"], 1, producer=(7, 5))
    assert store.get(2).body == b"c"  # the tag is never visible
    hit = store.find_producer_batch(42, 1)
    assert (hit.first_index, hit.last_index) == (4, 5)
    assert store.find_producer_batch(42, 0).first_index == 0
    assert store.find_producer_batch(42, 2) is None
    assert (store.producer_last_seq(42), store.producer_window_floor(42)) == (1, None)  # nothing forgotten
    assert store.producer_last_seq(99) is None and store.producer_window_floor(99) is None
    store.truncate_after(4)  # cuts batch (42, 1) in half: its tag is gone
    assert store.find_producer_batch(42, 1) is None
    assert store.producer_last_seq(42) == 0
    assert store.producer_last_seq(7) is None


def test_producer_tag_survives_follower_copy(store):
    leader = MemoryStore(max_entry_bytes=MAX_ENTRY_BYTES)
    leader.append_batch(1, [b"a", b"b"], 1, producer=(9, 3))
    store.append_records(leader.read(0, 10 ** 6).chunks[0])
    assert store.find_producer_batch(9, 3).last_index == 1
    assert [store.get(i).body for i in (0, 1)] == [b"a", b"b"]


def test_reset_starts_an_empty_log_at_a_later_begin_index(store, tmp_path):
    """A follower whose log ends below its leader's begin index (retention) takes the leader's
    log from there: reset drops everything and the next entries start at the new begin index."""
    fill(store, 6)
    store.flush()
    end = store.end_index
    store.reset(end + 50)
    assert (store.begin_index, store.end_index, store.committed_index) == (end + 50, end + 49, end + 49)
    leader = MemoryStore()
    leader.reset(end + 50)
    leader.append_batch(3, [b"p", b"q"], 9, producer=(4, 1))
    records = leader.read(end + 50, 1 << 20)
    assert store.append_records(b"".join(bytes(c) for c in records.chunks)) == end + 51
    store.flush()
    assert [store.get(i).body for i in (end + 50, end + 51)] == [b"p", b"q"]
    assert store.find_producer_batch(4, 1) is not None
