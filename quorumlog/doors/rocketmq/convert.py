"""RocketMQ messages to topic messages and back, and tag filter expressions. Pure functions: no I/O.

A RocketMQ message is stored as the topic message `quorumlog consume` and Spark read: its body, its tag as
`tags`, its keys joined by a space as `key` (RocketMQ's KEY_SEPARATOR), its user properties as they are, and its
system properties under the names RocketMQ's own commit log gives them (MessageConst): UNIQ_KEY (message id),
KEYS, __SHARDINGKEY (message group), TIMER_DELIVER_MS (delivery time, ms), TRAN_MSG ("true": a half message),
DLQ_ORIGIN_TOPIC / DLQ_ORIGIN_MESSAGE_ID (in a dead-letter topic). A user property with one of these names is
refused (ILLEGAL_MESSAGE_PROPERTY_KEY), as RocketMQ refuses it.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

from ...format.log_entry import crc32c
from rocketmq.grpc_protocol import definition_pb2 as pb

P_MESSAGE_ID = "UNIQ_KEY"
P_KEYS = "KEYS"
P_MESSAGE_GROUP = "__SHARDINGKEY"
P_DELIVER_MS = "TIMER_DELIVER_MS"
P_TRANSACTION = "TRAN_MSG"
P_DLQ_TOPIC = "DLQ_ORIGIN_TOPIC"
P_DLQ_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"
P_TAGS = "TAGS"
RESERVED = frozenset({P_MESSAGE_ID, P_KEYS, P_MESSAGE_GROUP, P_DELIVER_MS, P_TRANSACTION, P_DLQ_TOPIC,
                      P_DLQ_MESSAGE_ID, P_TAGS})
KEY_SEPARATOR = " "
MAX_FILTER_CHARS = 4096


class ConvertError(ValueError):
    """A message or expression the door refuses; `code` is the RocketMQ status code to answer."""

    def __init__(self, code: int, text: str) -> None:
        super().__init__(text)
        self.code = code


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A RocketMQ message as the door stores it (what TopicClient.send_batch takes, plus what routing needs)."""
    topic: str
    body: bytes
    key: str
    tags: str
    properties: dict[str, str]
    message_id: str
    message_type: str  # NORMAL | FIFO | DELAY | TRANSACTION
    message_group: str


def message_type_of(message: pb.Message) -> str:
    """The message's type: what the client says, else what its properties make it."""
    sp = message.system_properties
    if sp.message_type in (pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION):
        return pb.MessageType.Name(sp.message_type)
    if sp.HasField("message_group") and sp.message_group:
        return "FIFO"
    if sp.HasField("delivery_timestamp"):
        return "DELAY"
    return "NORMAL"


def to_stored(message: pb.Message, transactional: bool = False) -> Outgoing:
    """The topic message for a SendMessage entry. Raises ConvertError with the status code to answer."""
    if not message.topic.name:
        raise ConvertError(pb.ILLEGAL_TOPIC, "message without a topic")
    if not message.body:
        raise ConvertError(pb.MESSAGE_BODY_EMPTY, "message body is empty")
    sp = message.system_properties
    props: dict[str, str] = {}
    for k, v in message.user_properties.items():
        if k in RESERVED:
            raise ConvertError(pb.ILLEGAL_MESSAGE_PROPERTY_KEY, f"user property {k!r} is a system property name")
        props[k] = v
    mtype = message_type_of(message)
    if transactional or mtype == "TRANSACTION":
        mtype = "TRANSACTION"
        props[P_TRANSACTION] = "true"
    message_id = sp.message_id or ""
    if message_id:
        props[P_MESSAGE_ID] = message_id
    keys = [k for k in sp.keys if k]
    if any(KEY_SEPARATOR in k for k in keys):
        raise ConvertError(pb.ILLEGAL_MESSAGE_KEY, "a message key contains a space")
    if keys:
        props[P_KEYS] = KEY_SEPARATOR.join(keys)
    group = sp.message_group if sp.HasField("message_group") else ""
    if group:
        props[P_MESSAGE_GROUP] = group
    if sp.HasField("delivery_timestamp"):
        ts = sp.delivery_timestamp
        props[P_DELIVER_MS] = str(ts.seconds * 1000 + ts.nanos // 1_000_000)
    if mtype == "FIFO" and not group:
        raise ConvertError(pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "a FIFO message needs a message group")
    if mtype == "DELAY" and P_DELIVER_MS not in props:
        raise ConvertError(pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "a DELAY message needs a delivery timestamp")
    if mtype == "TRANSACTION" and (group or P_DELIVER_MS in props):
        raise ConvertError(pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                           "a transactional message takes no message group and no delivery timestamp")
    tag = sp.tag if sp.HasField("tag") else ""
    if "||" in tag:
        raise ConvertError(pb.ILLEGAL_MESSAGE_TAG, "a tag contains '||'")
    return Outgoing(message.topic.name, bytes(message.body), KEY_SEPARATOR.join(keys), tag, props, message_id,
                    mtype, group)


def message_id_for(topic: str, queue_id: int, offset: int) -> str:
    """A stable message id for a message stored without one (sent by the own client or the Kafka door)."""
    return f"00{crc32c(topic.encode()):08X}{queue_id:04X}{offset:016X}"


def deliver_at_ms(properties: dict[str, str]) -> int:
    try:
        return int(properties.get(P_DELIVER_MS, "0"))
    except ValueError:
        return 0


def _timestamp(ts: Any, ms: int) -> None:
    ts.seconds, ts.nanos = divmod(ms, 1000)
    ts.nanos *= 1_000_000


def to_proto(m: Any, *, receipt_handle: str = "", attempt: int = 0, invisible_ms: int = 0,
             store_host: str = "") -> pb.Message:
    """The RocketMQ message for a topic message `m` (client/topics.py TopicMessage): for ReceiveMessage (with a
    receipt handle and its delivery attempt) or a check-back (without)."""
    props = m.properties
    out = pb.Message()
    out.topic.name = m.topic
    out.body = m.body
    for k, v in props.items():
        if k not in RESERVED:
            out.user_properties[k] = v
    sp = out.system_properties
    if m.tags:
        sp.tag = m.tags
    keys = props.get(P_KEYS, m.key)
    if keys:
        sp.keys.extend(k for k in keys.split(KEY_SEPARATOR) if k)
    sp.message_id = props.get(P_MESSAGE_ID) or message_id_for(m.topic, m.queue_id, m.queue_offset)
    sp.body_digest.type = pb.CRC32
    sp.body_digest.checksum = format(zlib.crc32(m.body) & 0xFFFFFFFF, "08X")
    sp.body_encoding = pb.IDENTITY
    if props.get(P_TRANSACTION) == "true":
        sp.message_type = pb.TRANSACTION
    elif props.get(P_MESSAGE_GROUP):
        sp.message_type = pb.FIFO
    elif P_DELIVER_MS in props:
        sp.message_type = pb.DELAY
    else:
        sp.message_type = pb.NORMAL
    _timestamp(sp.born_timestamp, m.born_timestamp_ms)
    sp.born_host = ""
    if m.store_timestamp_ms:
        _timestamp(sp.store_timestamp, m.store_timestamp_ms)
    sp.store_host = store_host
    at = deliver_at_ms(props)
    if at:
        _timestamp(sp.delivery_timestamp, at)
    if receipt_handle:
        sp.receipt_handle = receipt_handle
    sp.queue_id = m.queue_id
    sp.queue_offset = m.queue_offset
    if invisible_ms:
        sp.invisible_duration.seconds, rest = divmod(invisible_ms, 1000)
        sp.invisible_duration.nanos = rest * 1_000_000
    if attempt:
        sp.delivery_attempt = attempt
    if props.get(P_MESSAGE_GROUP):
        sp.message_group = props[P_MESSAGE_GROUP]
    if props.get(P_DLQ_TOPIC):
        sp.dead_letter_queue.topic = props[P_DLQ_TOPIC]
        sp.dead_letter_queue.message_id = props.get(P_DLQ_MESSAGE_ID, "")
    return out


def dead_letter_properties(m: Any) -> dict[str, str]:
    """A message's properties as it goes to `%DLQ%<group>`: its own, plus where it came from."""
    props = dict(m.properties)
    props[P_DLQ_TOPIC] = m.topic
    props[P_DLQ_MESSAGE_ID] = props.get(P_MESSAGE_ID) or message_id_for(m.topic, m.queue_id, m.queue_offset)
    props.setdefault(P_MESSAGE_ID, props[P_DLQ_MESSAGE_ID])
    props.pop(P_TRANSACTION, None)  # (decided: it was delivered)
    props.pop(P_DELIVER_MS, None)  # (due: it was delivered)
    return props


class TagFilter:
    """A TAG filter expression: "*" (or empty) takes every message; "a||b" those tagged a or b. A message
    without a tag matches only "*"."""

    __slots__ = ("tags",)

    def __init__(self, tags: frozenset[str] | None) -> None:
        self.tags = tags  # None: every message

    def matches(self, tag: str) -> bool:
        return self.tags is None or tag in self.tags

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TagFilter) and other.tags == self.tags

    def __repr__(self) -> str:
        return "TagFilter(*)" if self.tags is None else f"TagFilter({'||'.join(sorted(self.tags))})"


MATCH_ALL = TagFilter(None)


def parse_filter(expression: pb.FilterExpression | None) -> TagFilter:
    """The filter of a ReceiveMessage or a subscription. SQL92 is not served: ILLEGAL_FILTER_EXPRESSION, a code
    the client raises to the application at once (UNSUPPORTED would be retried as a server error)."""
    if expression is None:
        return MATCH_ALL
    if expression.type == pb.SQL:
        raise ConvertError(pb.ILLEGAL_FILTER_EXPRESSION, "SQL92 filter expressions are not supported by "
                                                         "quorumlog's RocketMQ door: use TAG expressions")
    if expression.type not in (pb.TAG, pb.FILTER_TYPE_UNSPECIFIED):
        raise ConvertError(pb.ILLEGAL_FILTER_EXPRESSION, f"unknown filter type {expression.type}")
    return parse_tags(expression.expression)


def parse_tags(text: str) -> TagFilter:
    if len(text) > MAX_FILTER_CHARS:
        raise ConvertError(pb.ILLEGAL_FILTER_EXPRESSION, f"filter expression longer than {MAX_FILTER_CHARS}")
    text = text.strip()
    if text in ("", "*"):
        return MATCH_ALL
    tags = frozenset(t.strip() for t in text.split("||") if t.strip())
    if not tags or "*" in tags:
        if "*" in tags:
            return MATCH_ALL
        raise ConvertError(pb.ILLEGAL_FILTER_EXPRESSION, f"filter expression {text!r} names no tag")
    return TagFilter(tags)
