"""Codec properties: round trips both ways, and damaged input raises CorruptEntry, never anything else."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from quorumlog.errors import CorruptEntry
from quorumlog.store import MemoryStore
from quorumlog.format import log_entry
from quorumlog.format.log_entry import encode_records_and_units, producer_tag

bodies_st = st.lists(st.binary(max_size=300), min_size=1, max_size=12)
producer_st = st.none() | st.tuples(st.integers(0, 2 ** 64 - 1), st.integers(0, 2 ** 64 - 1))
common = settings(max_examples=150, deadline=None)


@common
@given(bodies=bodies_st, first=st.integers(0, 2 ** 40), term=st.integers(0, 2 ** 40), ts=st.integers(0, 2 ** 50),
       pos=st.integers(0, 2 ** 40), chain=st.integers(0, 2 ** 32 - 1), producer=producer_st)
def test_encode_decode_roundtrip(bodies, first, term, ts, pos, chain, producer):
    buf, sizes, last_chain = log_entry.encode_batch(first, term, bodies, ts, pos, chain, producer)
    assert sum(sizes) == len(buf)
    entries = log_entry.decode_records(buf)
    assert [e.body for e in entries] == bodies
    assert [e.index for e in entries] == list(range(first, first + len(bodies)))
    assert {(e.term, e.timestamp_ms) for e in entries} == {(term, ts)}
    headers = [h for h, _ in log_entry.iter_records(buf)]
    assert [h.pos for h in headers] == [pos + sum(sizes[:i]) for i in range(len(sizes))]
    prev = chain
    for h in headers:  # the chain names the whole prefix
        prev = log_entry.chain_crc_of(prev, h.index, h.term, h.channel, h.body_crc, h.timestamp_ms, h.body_size)
        assert prev == h.chain_crc
    assert prev == last_chain
    last_h, last_body = list(log_entry.iter_records(buf))[-1]
    _user, tag = log_entry.split_producer_tag(last_h.channel, last_body)
    assert (tag is None) == (producer is None)
    if tag is not None:
        assert (tag.client_id, tag.seq, tag.batch_count) == (*producer, len(bodies))


@common
@given(bodies=bodies_st, first=st.integers(0, 2 ** 40), pos=st.integers(0, 2 ** 40),
       chain=st.integers(0, 2 ** 32 - 1), producer=producer_st)
def test_index_units_point_at_the_encoded_records(bodies, first, pos, chain, producer):
    buf, sizes, last_chain = log_entry.encode_batch(first, 3, bodies, 77, pos, chain, producer)
    tag = producer_tag(producer[0], producer[1], len(bodies)) if producer else None
    records, units, chain2 = encode_records_and_units(first, 3, bodies, 77, pos, chain, tag)
    assert records == bytes(buf) and chain2 == last_chain
    offsets = [pos + sum(sizes[:i]) for i in range(len(sizes))]
    assert units == b"".join(log_entry.encode_index_unit(p, s, first + i, 3)
                             for i, (p, s) in enumerate(zip(offsets, sizes)))


@common
@given(pos=st.integers(0, 2 ** 62), size=st.integers(0, 2 ** 31 - 1), index=st.integers(0, 2 ** 62),
       term=st.integers(0, 2 ** 62))
def test_index_unit_roundtrip(pos, size, index, term):
    unit = log_entry.encode_index_unit(pos, size, index, term)
    assert len(unit) == log_entry.INDEX_UNIT_SIZE == 32
    assert log_entry.INDEX_UNIT.unpack(unit) == (log_entry.INDEX_MAGIC, pos, size, index, term)


@common
@given(size=st.integers(log_entry.MIN_BLANK_SIZE, 100_000))
def test_blank_record(size):
    blank = log_entry.encode_blank(size)
    assert len(blank) == size
    assert log_entry.BLANK.unpack_from(blank) == (log_entry.BLANK_MAGIC, size)
    assert blank[log_entry.MIN_BLANK_SIZE:].count(0) == size - log_entry.MIN_BLANK_SIZE
    with pytest.raises(CorruptEntry):  # a blank is not an entry
        log_entry.decode_records(blank)


@common
@given(bodies=bodies_st, data=st.data())
def test_truncated_input_raises_corrupt_entry(bodies, data):
    buf, sizes, _ = log_entry.encode_batch(0, 1, bodies, 5, 0, 0)
    boundaries = {sum(sizes[:i]) for i in range(len(sizes) + 1)}
    cut = data.draw(st.integers(0, len(buf) - 1))
    if cut in boundaries:
        assert len(log_entry.decode_records(buf[:cut])) == sorted(boundaries).index(cut)
    else:
        with pytest.raises(CorruptEntry):
            log_entry.decode_records(buf[:cut])


def _flip(buf: bytes, at: int, mask: int) -> bytes:
    out = bytearray(buf)
    out[at] ^= mask
    return bytes(out)


@common
@given(bodies=bodies_st, data=st.data())
def test_flipped_input_raises_corrupt_entry_or_nothing_else(bodies, data):
    buf, _sizes, _ = log_entry.encode_batch(0, 1, bodies, 5, 0, 0)
    at = data.draw(st.integers(0, len(buf) - 1))
    mask = data.draw(st.integers(1, 255))
    flipped = _flip(bytes(buf), at, mask)
    try:
        log_entry.decode_records(flipped)  # header fields outside magic/sizes/body CRC are the chain's job
    except CorruptEntry:
        pass


@common
@given(bodies=bodies_st, data=st.data())
def test_follower_path_catches_every_flip_but_pos(bodies, data):
    """append_records checks body CRC *and* the chain, so any flipped byte is caught except in `pos`,
    which the follower rewrites anyway."""
    leader = MemoryStore()
    leader.append_batch(1, bodies, 5)
    buf = leader.read(0, 10 ** 9).chunks[0]
    at = data.draw(st.integers(0, len(buf) - 1))
    mask = data.draw(st.integers(1, 255))
    follower = MemoryStore()
    starts = [leader.bytes_between(0, i - 1) for i in range(len(bodies))]
    in_pos = any(s + log_entry.POS_OFFSET <= at < s + log_entry.POS_OFFSET + 8 for s in starts)
    if in_pos:
        follower.append_records(_flip(buf, at, mask))
        assert [follower.get(i).body for i in range(len(bodies))] == bodies
    else:
        with pytest.raises(CorruptEntry):
            follower.append_records(_flip(buf, at, mask))
