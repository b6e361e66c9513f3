"""The compiled Fetch encoder (quorumlog/doors/kafka/_fastrecords.c) against the reference, the door's Python
path: byte for byte the same RecordBatch out of the same pull (Kafka producers' records, the own producer's
properties and tags, entries that are not messages, every cut by max_bytes), and None exactly where it leaves
a pull to the reference."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quorumlog.client.topics import TopicMessage
from quorumlog.doors.kafka import door
from quorumlog.doors.kafka.mapping import encode_record
from quorumlog.doors.kafka.records import Record, decode_batches
from quorumlog.topic.message import Message, _decode_pulled, encode
from quorumlog.wire.client import PackedMessages, PulledMessage

fast = pytest.importorskip("quorumlog.doors.kafka._fastrecords")

texts = st.text(max_size=12)
own_messages = st.builds(
    Message, topic=st.sampled_from(["t", "T-1", "a%b"]), body=st.binary(max_size=200), queue_id=st.integers(0, 7),
    key=texts, tags=st.sampled_from(["", "a", "ü"]),
    properties=st.dictionaries(st.sampled_from(["p", "q", "ß", "kafka.null", "kafka.key", "x" * 30]),
                               st.sampled_from(["", "1", "v", "QUJD", "QQ==", "Q===", "ab!c", "é"]), max_size=3),
    born_timestamp_ms=st.one_of(st.just(0), st.integers(0, 2 ** 45), st.integers(-2 ** 63, 2 ** 63 - 1)),
    flags=st.integers(0, 3)).map(encode)
kafka_records = st.builds(
    lambda key, value, headers, ts: encode_record("t", 0, Record(0, ts, key, value, headers), 1 << 20),
    st.one_of(st.none(), st.binary(max_size=20), st.text(max_size=8).map(str.encode)),
    st.one_of(st.none(), st.binary(max_size=100)),
    st.one_of(st.just([]), st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=5))),
                                    max_size=2)),
    st.integers(0, 2 ** 42))
entries = st.one_of(own_messages, kafka_records, st.binary(max_size=40))


def pulled(bodies: list[bytes], first: int, stored_ms: int) -> PackedMessages:
    return PackedMessages.of(PulledMessage(first + i, 10 + i, 3, stored_ms + i, b) for i, b in enumerate(bodies))


def reference(p: PackedMessages, max_bytes: int) -> bytes:
    msgs = _decode_pulled(p, TopicMessage, None)
    return door._encode_messages(msgs, max_bytes) if msgs else b""


@given(st.lists(entries, max_size=10), st.integers(0, 2 ** 40), st.integers(1, 2 ** 44),
       st.integers(0, 2_000))
@settings(max_examples=600, deadline=None)
def test_the_compiled_encoder_agrees_with_the_reference(bodies, first, stored_ms, max_bytes) -> None:
    p = pulled(bodies, first, stored_ms)
    got = fast.record_batch(p.head, p.blob, max_bytes)
    want = reference(p, max_bytes)
    if got is None:  # left to the reference: only for what it cannot copy
        msgs = _decode_pulled(p, TopicMessage, None)
        assert any("kafka.headers" in m.properties or "kafka.key" in m.properties
                   or m.born_timestamp_ms < -2 ** 40 or m.born_timestamp_ms > 2 ** 46 for m in msgs)
    else:
        assert got == want
    assert door._records(p, max_bytes) == want


def test_what_it_serves_is_what_kafka_clients_read() -> None:
    bodies = [encode_record("t", 0, Record(0, 1_700_000_000_000 + i, f"k{i}".encode(), b"v" * i, []), 1 << 20)
              for i in range(50)] + [encode(Message("t", b"own", 0, "", "tag", {"p": "1"}, 0, 0))]
    p = pulled(bodies, 1_000, 1_700_000_000_500)
    data = fast.record_batch(p.head, p.blob, 1 << 20)
    (batch,) = decode_batches(data)  # (the CRC is checked here)
    assert batch.base_offset == 1_000 and len(batch.records) == 51
    assert [r.key for r in batch.records[:3]] == [b"k0", b"k1", b"k2"]
    own = batch.records[-1]
    assert (own.offset_delta, own.key, own.value, own.headers) == (50, None, b"own", [("p", b"1"), ("quorumlog.tags",
                                                                                                    b"tag")])
    assert own.timestamp_ms == 1_700_000_000_500 + 50  # no born time: the store's


def test_binary_keys_and_null_values_are_copied_and_headers_go_to_the_reference() -> None:
    key = bytes(range(256))
    plain = encode_record("t", 0, Record(0, 5, key, None, []), 1 << 20)
    p = pulled([plain], 0, 1)
    (batch,) = decode_batches(fast.record_batch(p.head, p.blob, 1 << 20))
    assert (batch.records[0].key, batch.records[0].value) == (key, None)
    assert base64.b64encode(key).decode() in plain.decode("latin-1")
    with_headers = encode_record("t", 0, Record(0, 5, b"k", b"v", [("h", b"1")]), 1 << 20)
    p = pulled([plain, with_headers], 0, 1)
    assert fast.record_batch(p.head, p.blob, 1 << 20) is None
    (batch,) = decode_batches(door._records(p, 1 << 20))
    assert batch.records[1].headers == [("h", b"1")]


def test_a_malformed_pull_is_refused() -> None:
    with pytest.raises(ValueError):
        fast.record_batch(b"\0" * 39, b"", 100)
    p = pulled([b"x" * 30], 0, 1)
    with pytest.raises(ValueError):
        fast.record_batch(p.head, p.blob[:-1], 100)
    assert fast.record_batch(b"", b"", 100) == b""
