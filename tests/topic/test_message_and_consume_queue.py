"""The topic message layout (quorumlog/topic/message.py) and the consume queue (consume_queue.py): messages
round-trip whatever their fields, raw entries are never taken for messages, limits give their error; queue
offsets are dense in committed order, survive a rebuild from the log, are never reused after retention or a
truncated tail."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quorumlog.errors import BadRequest, EntryTooLarge
from quorumlog.topic.consume_queue import ConsumeQueue, dispatch_all
from quorumlog.topic.message import Message, decode, encode, tag_hash

topics = st.from_regex(r"[A-Za-z0-9_%|-]{1,127}", fullmatch=True)
texts = st.text(max_size=40)
messages = st.builds(Message, topic=topics, body=st.binary(max_size=2_000), queue_id=st.integers(0, 0xFFFF),
                     key=texts, tags=texts, properties=st.dictionaries(st.text(min_size=1, max_size=20), texts,
                                                                       max_size=5),
                     born_timestamp_ms=st.integers(-2**63, 2**63 - 1), flags=st.integers(0, 2**32 - 1))


@given(messages)
@settings(max_examples=300, deadline=None)
def test_a_message_round_trips(m):
    assert decode(encode(m)) == m


@given(st.binary(max_size=300))
@settings(max_examples=300, deadline=None)
def test_raw_entries_are_not_messages_unless_they_parse_whole(raw):
    m = decode(raw)
    assert m is None or encode(m) == raw


def test_limits_give_their_error():
    with pytest.raises(BadRequest, match="topic"):
        encode(Message("no spaces", b""))
    with pytest.raises(BadRequest, match="key"):
        encode(Message("T", b"", key="k" * 1_025))  # a key of absurd size
    with pytest.raises(BadRequest, match="queue_id"):
        encode(Message("T", b"", queue_id=70_000))
    with pytest.raises(EntryTooLarge):
        encode(Message("T", b"x" * 2_000), max_message_bytes=1_000)
    with pytest.raises(BadRequest, match="properties"):
        encode(Message("T", b"", properties={f"k{i}": "v" * 100 for i in range(400)}))
    assert decode(b"QLM") is None and decode(b"hello") is None


def test_queue_offsets_are_dense_in_committed_order_and_survive_a_rebuild():
    log = []
    for i in range(30):
        m = Message("orders", b"%d" % i, queue_id=i % 3, tags="a" if i % 2 else "b")
        log.append((i * 2, encode(m)))  # (odd indexes: raw entries between them)
        log.append((i * 2 + 1, b"raw %d" % i))
    queues: dict = {}
    dispatch_all(queues, log)
    q0 = queues[("orders", 0)]
    assert q0.max_offset == 10 and [u.queue_offset for u in q0.read(0, 100)] == list(range(10))
    assert [u.log_index for u in q0.read(0, 3)] == [0, 6, 12]
    assert [u.log_index for u in q0.read(0, 100, frozenset({tag_hash("a")}))] == [6, 18, 30, 42, 54]
    # rebuilt on restart: the kept units, then the log from where they end (dispatching twice changes nothing)
    again = {k: ConsumeQueue(k[0], k[1], q.to_bytes()) for k, q in queues.items()}
    dispatch_all(again, log)
    assert {k: q.to_bytes() for k, q in again.items()} == {k: q.to_bytes() for k, q in queues.items()}
    with pytest.raises(ValueError):
        q0.dispatch(6, 10, 0)  # never out of order


def test_offsets_are_never_reused_after_retention():
    q = ConsumeQueue("T", 0)
    for i in range(10):
        q.dispatch(i * 10, 100, 0)
    q.delete_before_log_index(35)  # units of indexes 0..30 go with the log
    assert q.min_offset == 4 and q.max_offset == 10 and q.get(3) is None and q.get(4).log_index == 40
    assert q.dispatch(100, 100, 0) == 10  # the next message takes the next offset, not a freed one
    assert [u.queue_offset for u in q.read(0, 100)] == list(range(4, 11))


def test_a_queue_starts_after_what_a_members_log_retention_deleted():
    q = ConsumeQueue("t", 0)
    for i in range(10):
        q.dispatch(i * 10, 50, 0)  # messages at log indexes 0, 10, ..., 90
    assert [q.first_offset_from(x) for x in (0, 1, 10, 11, 90, 91)] == [0, 1, 1, 2, 9, 10]
    q.delete_before_log_index(25)
    assert q.min_offset == 3 and q.first_offset_from(0) == 3 and q.first_offset_from(31) == 4
