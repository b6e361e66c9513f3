"""The RocketMQ door's pure parts: a RocketMQ message to the stored topic message and back, tag filters, the
door's `_meta` records. No processes."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rocketmq.grpc_protocol import definition_pb2 as pb

from quorumlog.client.topics import TopicMessage
from quorumlog.doors.rocketmq import metadata
from quorumlog.doors.rocketmq.convert import (MATCH_ALL, ConvertError, dead_letter_properties, message_id_for,
                                              parse_filter, parse_tags, to_proto, to_stored)


def _message(**kw) -> pb.Message:
    m = pb.Message(body=kw.pop("body", b"hello"))
    m.topic.name = kw.pop("topic", "t")
    sp = m.system_properties
    sp.message_id = kw.pop("message_id", "01ABC")
    for k, v in kw.pop("user", {}).items():
        m.user_properties[k] = v
    if "tag" in kw:
        sp.tag = kw.pop("tag")
    sp.keys.extend(kw.pop("keys", []))
    if "group" in kw:
        sp.message_group = kw.pop("group")
    if "deliver_s" in kw:
        sp.delivery_timestamp.seconds = kw.pop("deliver_s")
    sp.message_type = kw.pop("type", pb.NORMAL)
    assert not kw
    return m


def _stored_as_read(out, queue_id=2, offset=7) -> TopicMessage:
    return TopicMessage(out.topic, queue_id, offset, out.body, out.key, out.tags, dict(out.properties), 1_000, 2_000)


def test_a_message_is_stored_with_rocketmq_property_names_and_comes_back_the_same():
    m = _message(tag="a", keys=["k1", "k2"], group="g1", type=pb.FIFO, user={"color": "red"})
    out = to_stored(m)
    assert (out.key, out.tags, out.message_type, out.message_group) == ("k1 k2", "a", "FIFO", "g1")
    assert out.properties == {"color": "red", "UNIQ_KEY": "01ABC", "KEYS": "k1 k2", "__SHARDINGKEY": "g1"}
    back = to_proto(_stored_as_read(out), receipt_handle="h", attempt=3, invisible_ms=15_000)
    sp = back.system_properties
    assert back.body == b"hello" and dict(back.user_properties) == {"color": "red"}
    assert (sp.tag, list(sp.keys), sp.message_id, sp.message_group) == ("a", ["k1", "k2"], "01ABC", "g1")
    assert (sp.queue_id, sp.queue_offset, sp.delivery_attempt, sp.receipt_handle) == (2, 7, 3, "h")
    assert sp.message_type == pb.FIFO and sp.invisible_duration.seconds == 15
    assert sp.body_digest.type == pb.CRC32 and sp.body_digest.checksum == format(zlib.crc32(b"hello"), "08X")


def test_delay_and_transaction_properties():
    out = to_stored(_message(deliver_s=1_700_000_000, type=pb.DELAY))
    assert out.properties["TIMER_DELIVER_MS"] == "1700000000000" and out.message_type == "DELAY"
    back = to_proto(_stored_as_read(out))
    assert back.system_properties.delivery_timestamp.seconds == 1_700_000_000
    assert back.system_properties.message_type == pb.DELAY
    tx = to_stored(_message(type=pb.TRANSACTION))
    assert tx.properties["TRAN_MSG"] == "true" and tx.message_type == "TRANSACTION"
    assert to_proto(_stored_as_read(tx)).system_properties.message_type == pb.TRANSACTION
    dlq = dead_letter_properties(_stored_as_read(tx))
    assert dlq["DLQ_ORIGIN_TOPIC"] == "t" and dlq["DLQ_ORIGIN_MESSAGE_ID"] == "01ABC" and "TRAN_MSG" not in dlq


@pytest.mark.parametrize("message, code", [
    (_message(body=b""), pb.MESSAGE_BODY_EMPTY),
    (_message(topic=""), pb.ILLEGAL_TOPIC),
    (_message(user={"UNIQ_KEY": "x"}), pb.ILLEGAL_MESSAGE_PROPERTY_KEY),
    (_message(type=pb.FIFO), pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),  # FIFO without a group
    (_message(type=pb.DELAY), pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),  # DELAY without a time
    (_message(type=pb.TRANSACTION, group="g"), pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
    (_message(tag="a||b"), pb.ILLEGAL_MESSAGE_TAG),
    (_message(keys=["a b"]), pb.ILLEGAL_MESSAGE_KEY),
])
def test_refused_messages_name_rocketmqs_code(message, code):
    with pytest.raises(ConvertError) as e:
        to_stored(message)
    assert e.value.code == code


def test_a_message_stored_without_an_id_gets_a_stable_one():
    m = TopicMessage("t", 1, 42, b"x")
    assert to_proto(m).system_properties.message_id == message_id_for("t", 1, 42) == to_proto(m).system_properties.message_id
    assert message_id_for("t", 1, 42) != message_id_for("t", 1, 43) != message_id_for("u", 1, 42)


def test_tag_filters():
    assert parse_tags("*") is MATCH_ALL and parse_tags("") is MATCH_ALL and parse_tags(" a || * ") is MATCH_ALL
    f = parse_tags("a || b")
    assert f.matches("a") and f.matches("b") and not f.matches("c") and not f.matches("")
    assert parse_filter(pb.FilterExpression(type=pb.TAG, expression="x")).matches("x")
    with pytest.raises(ConvertError) as e:
        parse_filter(pb.FilterExpression(type=pb.SQL, expression="a > 1"))
    assert e.value.code == pb.ILLEGAL_FILTER_EXPRESSION
    with pytest.raises(ConvertError):
        parse_tags("||")


@given(st.lists(st.text(alphabet="abcxyz_-", min_size=1, max_size=5), min_size=1, max_size=5),
       st.text(alphabet="abcxyz_-", max_size=5))
def test_a_tag_filter_takes_exactly_its_tags(tags, tag):
    assert parse_tags("||".join(tags)).matches(tag) == (tag in tags)


def test_metadata_records():
    assert metadata.decode_topic_type(metadata.encode_topic_type("fifo")) == "FIFO"
    assert metadata.decode_topic_type(None) is None and metadata.decode_topic_type(b"junk") is None
    with pytest.raises(ValueError):
        metadata.check_message_type("LITE")
    p = metadata.GroupPolicy(max_attempts=3, fifo=True, backoff_s=(1, 2))
    assert metadata.GroupPolicy.decode(p.encode()) == p
    assert metadata.GroupPolicy.decode(None) == metadata.GroupPolicy() == metadata.GroupPolicy.decode(b"{bad")
    with pytest.raises(ValueError):
        metadata.GroupPolicy(max_attempts=0)
    assert metadata.transaction_key("t", 1, 5) == "rocketmq/transactions/t/1/5"
    assert metadata.dead_letter_topic("g") == "%DLQ%g"


def test_the_signature_check_takes_rocketmqs_header_with_the_token_as_secret():
    import hmac
    from hashlib import sha1
    from types import SimpleNamespace

    from quorumlog.doors.rocketmq.service import MessagingService

    def context(md):
        return SimpleNamespace(invocation_metadata=lambda: md)

    svc = MessagingService(SimpleNamespace(routes=SimpleNamespace(meta=None)), None, node_id="n0", token="tok",
                           endpoints=None, store_host="")
    when = "20261201T223344Z"
    sig = hmac.new(b"tok", when.encode(), sha1).hexdigest()
    header = f"MQv2-HMAC-SHA1 Credential=ak, SignedHeaders=x-mq-date-time, Signature={sig}"
    assert svc.authorized(context([("x-mq-date-time", when), ("authorization", header)]))
    assert svc.authorized(context([("x-mq-date-time", when), ("authorization", header.upper().replace(
        "CREDENTIAL=AK", "Credential=ak").replace("SIGNEDHEADERS=X-MQ-DATE-TIME", "SignedHeaders=x-mq-date-time")
        .replace("MQV2-HMAC-SHA1", "MQv2-HMAC-SHA1").replace("SIGNATURE=", "Signature="))]))  # hex in capitals
    assert not svc.authorized(context([("x-mq-date-time", "20261201T223345Z"), ("authorization", header)]))
    assert not svc.authorized(context([("authorization", header)]))
    assert not svc.authorized(context([("x-mq-date-time", when), ("authorization", header.replace("ak", " "))]))
    assert not svc.authorized(context([]))
    open_door = MessagingService(SimpleNamespace(routes=SimpleNamespace(meta=None)), None, node_id="n0", token=None,
                                 endpoints=None, store_host="")
    assert open_door.authorized(context([]))
