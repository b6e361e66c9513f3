"""The compiled pull decoder (quorumlog/topic/_fastmessage.c) against the reference, message.decode: the same
messages with the same fields out of valid, damaged and random entries, raw entries left out, the exact tag
filter, and a malformed pull refused."""

from __future__ import annotations

import shutil
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quorumlog.client.topics import TopicMessage
from quorumlog.topic import message
from quorumlog.topic.message import Message, _decode_pulled, encode
from quorumlog.wire.client import PackedMessages, PulledMessage

fast = pytest.importorskip("quorumlog.topic._fastmessage")

topics = st.from_regex(r"[A-Za-z0-9_%|-]{1,127}", fullmatch=True)
texts = st.text(max_size=20)
messages = st.builds(Message, topic=topics, body=st.binary(max_size=300), queue_id=st.integers(0, 0xFFFF),
                     key=texts, tags=st.sampled_from(["", "a", "b", "ü"]),
                     properties=st.dictionaries(st.text(min_size=1, max_size=10), texts, max_size=3),
                     born_timestamp_ms=st.integers(-2**63, 2**63 - 1), flags=st.integers(0, 2**32 - 1))


def damaged(data: st.DataObject, body: bytes) -> bytes:
    """body cut short, a byte flipped, or bytes added: most of these are no longer messages."""
    how = data.draw(st.sampled_from(["cut", "flip", "grow", "as is"]))
    if how == "cut" and body:
        return body[:data.draw(st.integers(0, len(body) - 1))]
    if how == "flip" and body:
        i = data.draw(st.integers(0, min(len(body) - 1, 60)))
        return body[:i] + bytes([body[i] ^ data.draw(st.integers(1, 255))]) + body[i + 1:]
    if how == "grow":
        return body + data.draw(st.binary(min_size=1, max_size=5))
    return body


def pulled(bodies: list[bytes]) -> PackedMessages:
    return PackedMessages.of(PulledMessage(100 + i, 7 + 3 * i, 2, 1_700_000_000_000 + i, b)
                             for i, b in enumerate(bodies))


@given(st.data(), st.lists(st.one_of(messages.map(encode), st.binary(max_size=80)), max_size=12),
       st.sampled_from([None, {"a"}, {"a", "ü"}, set()]))
@settings(max_examples=400, deadline=None)
def test_the_compiled_decoder_agrees_with_the_reference(data, bodies, wanted):
    bodies = [damaged(data, b) for b in bodies]
    p = pulled(bodies)
    got = fast.decode_pulled(p.head, p.blob, TopicMessage, wanted)
    assert got == _decode_pulled(p, TopicMessage, wanted)
    assert all(type(m) is TopicMessage for m in got)


@given(st.data(), st.one_of(messages.map(encode), st.binary(max_size=80),
                            st.builds(lambda m, junk: encode(m)[:24] + junk, messages, st.binary(max_size=40))))
@settings(max_examples=600, deadline=None)
def test_the_compiled_head_takes_exactly_the_entries_decode_takes(data, body):
    """Every member's dispatcher reads this of every committed entry: with or without the compiled module,
    the same entries are messages, with the same flags, topic, queue and tags."""
    body = damaged(data, body)
    m = message.decode(body)
    assert fast.message_head(body) == (None if m is None else (m.flags, m.topic, m.queue_id, m.tags))


def test_fields_land_where_they_belong():
    m = Message("T", b"body", queue_id=3, key="k", tags="a", properties={"p": "v"}, born_timestamp_ms=-5, flags=9)
    p = PackedMessages.of([PulledMessage(41, 1_000, 6, 1_234, b"raw entry"), PulledMessage(42, 1_001, 7, 1_235,
                                                                                           encode(m))])
    (got,) = fast.decode_pulled(p.head, p.blob, TopicMessage, None)
    assert got == TopicMessage("T", 3, 42, b"body", "k", "a", {"p": "v"}, -5, 1_235, 1_001, 7)
    twice = PackedMessages.of([PulledMessage(i, i, 7, 1_235, encode(m)) for i in range(2)])
    first, second = fast.decode_pulled(twice.head, twice.blob, TopicMessage, None)
    first.properties["q"] = "w"  # each message its own dict
    assert second.properties == {"p": "v"}


def test_a_topic_name_with_a_newline_is_not_a_message():
    good = encode(Message("T", b"x"))
    bad = good.replace(b"\x01T", b"\x02T\n", 1)
    p = pulled([bad])
    assert message.decode(bad) is None
    assert fast.decode_pulled(p.head, p.blob, TopicMessage, None) == []


def test_a_malformed_pull_is_refused():
    p = pulled([encode(Message("T", b"x"))])
    with pytest.raises(ValueError, match="past their bodies"):
        fast.decode_pulled(p.head, p.blob[:-1], TopicMessage, None)
    with pytest.raises(ValueError, match="40-byte"):
        fast.decode_pulled(p.head[:-1], p.blob, TopicMessage, None)
    negative = struct.pack(">qqqqq", 0, 0, 0, 0, -1)
    with pytest.raises(ValueError):
        fast.decode_pulled(negative, b"", TopicMessage, None)
    plain = type("Plain", (), dict.fromkeys(TopicMessage.__slots__))  # the fields, but not as slots
    with pytest.raises(TypeError, match="not a slot"):
        fast.decode_pulled(p.head, p.blob, plain, None)


@pytest.mark.parametrize("in_place", [True, False])
@given(data=st.data())
@settings(max_examples=60, deadline=None)
def test_the_nodes_compiled_pack_agrees_with_the_record_walk(tmp_path_factory, in_place, data):
    """TopicService._pack (C) against _read_units (the record walk) over a log of interleaved queues, raw
    entries, no-ops and producer-tagged batches in small segments: the same messages for any offset, count and
    tag filter, and a next offset that neither skips nor repeats a wanted message; with the entries read in
    place through the store's index (FileStore.records_at), and by walking the range they span."""
    from types import SimpleNamespace

    from quorumlog.server.services import topics as topic_service
    from quorumlog.server.services.topics import TopicService
    from quorumlog.store import FileStore, StoreConfig
    from quorumlog.topic.dispatcher import TopicDispatcher
    from quorumlog.topic.message import tag_hash

    if topic_service.fast is None:
        pytest.skip("QUORUMLOG_PURE_PYTHON=1: the node packs with the record walk alone")
    path = tmp_path_factory.mktemp("g")
    store = FileStore(str(path), StoreConfig(
        data_segment_size_bytes=4096, index_segment_size_bytes=32 * 64, max_entry_bytes=1024, disk_full_ratio=1.0,
        checkpoint_interval_ms=0))
    d = TopicDispatcher()
    try:
        for seq in range(data.draw(st.integers(1, 25))):
            kind = data.draw(st.sampled_from(["messages", "raw", "noop"]))
            if kind == "noop":
                store.append_batch(1, [b""], 1_000, noop=True)
                continue
            bodies = [encode(Message("T", data.draw(st.binary(max_size=200)), queue_id=data.draw(st.integers(0, 2)),
                                     tags=data.draw(st.sampled_from(["", "a", "b"]))))
                      if kind == "messages" else data.draw(st.binary(max_size=100)) for _ in range(
                          data.draw(st.integers(1, 6)))]
            producer = (7, seq) if data.draw(st.booleans()) else None
            first = store.append_batch(2, bodies, 1_700_000_000_123 + seq, producer=producer) - len(bodies) + 1
            for i, body in enumerate(bodies):
                d.apply(first + i, body)
        if not in_place:
            store.records_at = lambda indexes: None  # (as when an entry is below the checked ones)
        service = TopicService(SimpleNamespace(store=store))
        for q in d.queues.values():
            offset = data.draw(st.integers(q.min_offset, q.max_offset - 1))
            count = data.draw(st.integers(1, 40))
            wanted = data.draw(st.sampled_from([None, frozenset({tag_hash("a")}), frozenset({tag_hash("b"), 0})]))
            packed, next_offset = service._pack(q, offset, count, wanted)
            units = q.read(offset, count, wanted)
            assert packed == service._read_units(units)
            assert next_offset == min(q.max_offset, offset + count)
            # a byte budget smaller than one message: pull after pull, each wanted message exactly once
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr("quorumlog.server.services.topics.MAX_PULL_BYTES", 1)
                got, at = [], offset
                while at < q.max_offset:
                    part, nxt = service._pack(q, at, count, wanted)
                    assert nxt > at
                    got += list(part)
                    at = nxt
            assert got == list(service._read_units(q.read(offset, q.max_offset - offset, wanted)))
    finally:
        store.close()
        shutil.rmtree(path)  # (an example's store; hundreds are made per run)


def test_the_nodes_pack_fills_the_buffers_it_is_given_and_never_writes_past_them():
    """pack_pulled writes into buffers sized by pulled_capacity (a growing buffer copied each pull again at
    every resize): the sum of the units' sizes, or the byte budget plus the biggest; a smaller buffer is an
    error, not an overrun."""
    from array import array

    bodies = [b"a" * 10, b"b" * 30, b"c" * 20]
    units = b"".join(struct.pack(">qiq", 5 + i, len(b), 0) for i, b in enumerate(bodies))
    data = b"".join(bodies)
    starts = array("i", [0, 10, 40])
    ends = array("i", [10, 40, 60])
    cols = (array("q", [5, 6, 7]), array("q", [1, 1, 1]), array("q", [1_000_000] * 3), starts, ends)
    assert fast.pulled_capacity(units, 1 << 20) == 60
    assert fast.pulled_capacity(units, 15) == 15 + 30  # (stops once 15 bytes are in: at most one more)
    head, blob = bytearray(120), bytearray(fast.pulled_capacity(units, 15))
    assert fast.pack_pulled(units, 40, 0, None, *cols, data, head, blob, 0, 0, 15) == (2, 2, 40)
    assert bytes(blob[:40]) == bodies[0] + bodies[1]
    assert struct.unpack_from(">5q", head, 40) == (41, 6, 1, 1_000, 30)
    with pytest.raises(ValueError, match="smaller than pulled_capacity"):
        fast.pack_pulled(units, 40, 0, None, *cols, data, bytearray(120), bytearray(39), 0, 0, 1 << 20)
    with pytest.raises(ValueError, match="wrong shape"):  # (a count past the head's end)
        fast.pack_pulled(units, 40, 0, None, *cols, data, bytearray(40), bytearray(60), 2, 0, 1 << 20)
