"""A topic message inside a log entry (RocketMQ's message model, as DLedgerCommitLog stores it, compact):

    magic b"QLM" | version u8 | flags u32 | queue_id u16 | born_timestamp_ms i64
    | topic (u8 length) | key (u16 length) | tags (u16 length)
    | properties: count u16, each key (u16 length) value (u16 length), UTF-8
    | body (the rest of the entry)

An entry is a message if it starts with the magic and parses whole; anything else is a raw entry, so raw-log
readers and writers keep working on the same groups. The queue offset is not in the entry: it is assigned
when the committed entry is dispatched to its queue's consume queue (consume_queue.py), in log order, so it is
dense per queue and the same on every replica and after every failover. `store_timestamp` is the entry's own
timestamp (the leader's clock when it appended it).

Limits, checked where the message is made (the producer's side) and again where it is parsed: topic
1..127 characters of `[A-Za-z0-9_%|-]` (RocketMQ's), key ≤ 1 KiB, tags ≤ 255 bytes, properties ≤ 32 KiB
in all (RocketMQ's Short.MAX_VALUE), the whole message ≤ `max_message_bytes` (RocketMQ's maxMessageSize,
4 MiB).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from typing import Any, Iterable


from ..errors import BadRequest, EntryTooLarge
from ..format.log_entry import crc32c, load_compiled

MAGIC = b"QLM"
VERSION = 1
_HEAD = struct.Struct(">3sBIHq")
_U8, _U16 = struct.Struct(">B"), struct.Struct(">H")
TOPIC_RE = re.compile(r"\A[A-Za-z0-9_%|-]{1,127}\Z")  # (not ^...$: "$" also matches before a final newline)
MAX_KEY_BYTES = 1024
MAX_TAGS_BYTES = 255
MAX_PROPERTIES_BYTES = 32 * 1024 - 1
DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024
MAX_QUEUE_ID = 0xFFFF
# flags: a topic's configuration (retention) for the groups carrying its queues, not a message of a queue;
# body JSON {"retention_ms": N, "retention_bytes": N} (0: unlimited); written by `topic create` / `topic alter`
FLAG_CONFIG = 1 << 31


@dataclass(slots=True)  # (not frozen: a frozen dataclass's __init__ costs 3x, and a consumer makes millions)
class Message:
    topic: str
    body: bytes
    queue_id: int = 0
    key: str = ""
    tags: str = ""
    properties: dict[str, str] = field(default_factory=dict)
    born_timestamp_ms: int = 0
    flags: int = 0

    @property
    def tag_hash(self) -> int:
        return tag_hash(self.tags)


def tag_hash(tags: str) -> int:
    """The consume queue's tag code: what a node filters on (a client filters again on the exact tag)."""
    return crc32c(tags.encode()) if tags else 0


def _short(text: str, limit: int, what: str, size: struct.Struct = _U16) -> bytes:
    raw = text.encode("utf-8")
    if len(raw) > limit:
        raise BadRequest(f"{what} is {len(raw)} bytes, more than {limit}")
    return size.pack(len(raw)) + raw


def encode(m: Message, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> bytes:
    """The entry body for m. Raises BadRequest (a malformed field) or EntryTooLarge."""
    return encode_fields(m.topic, m.body, m.queue_id, m.key, m.tags, m.properties, m.born_timestamp_ms, m.flags,
                         max_message_bytes)


_EMPTY = _U16.pack(0)  # a zero u16 length: no key, no tags, no properties
_TOPIC_FIELDS: dict[str, bytes] = {}  # topic name -> its checked, length-prefixed field (bounded below)


def _topic_field(topic: str) -> bytes:
    field = _TOPIC_FIELDS.get(topic)
    if field is None:
        if not isinstance(topic, str) or not TOPIC_RE.match(topic):
            raise BadRequest(f"topic {topic!r}: 1..127 characters of letters, digits, _ % | -")
        field = _short(topic, 127, "topic", _U8)
        if len(_TOPIC_FIELDS) < 65_536:
            _TOPIC_FIELDS[topic] = field
    return field


def encode_fields(topic: str, body: bytes, queue_id: int = 0, key: str = "", tags: str = "",
                  properties: dict[str, str] | None = None, born_timestamp_ms: int = 0, flags: int = 0,
                  max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> bytes:
    """encode(Message(...)) without making the Message: a producer's path, once per message."""
    if not 0 <= queue_id <= MAX_QUEUE_ID:
        raise BadRequest(f"queue_id {queue_id} outside 0..{MAX_QUEUE_ID}")
    if not 0 <= flags < 1 << 32:
        raise BadRequest(f"flags {flags} outside 32 bits")
    if properties:
        props = [_U16.pack(len(properties))]
        for k, v in properties.items():
            if not isinstance(k, str) or not isinstance(v, str) or not k:
                raise BadRequest(f"property {k!r}: keys and values are strings, keys not empty")
            props += [_short(k, MAX_PROPERTIES_BYTES, "a property key"), _short(v, MAX_PROPERTIES_BYTES, "a property")]
        props_raw = b"".join(props)
        if len(props_raw) > MAX_PROPERTIES_BYTES:
            raise BadRequest(f"properties are {len(props_raw)} bytes, more than {MAX_PROPERTIES_BYTES}")
    else:
        props_raw = _EMPTY
    out = b"".join((_HEAD.pack(MAGIC, VERSION, flags, queue_id, born_timestamp_ms), _topic_field(topic),
                    _short(key, MAX_KEY_BYTES, "key") if key else _EMPTY,
                    _short(tags, MAX_TAGS_BYTES, "tags") if tags else _EMPTY, props_raw, body))
    if len(out) > max_message_bytes:
        raise EntryTooLarge(f"message of {len(out)} bytes is over max_message_bytes {max_message_bytes}")
    return out


def _text(p: memoryview, pos: int, size: struct.Struct = _U16) -> tuple[str, int]:
    """A length-prefixed UTF-8 string at pos, and the position after it; struct.error if truncated."""
    (n,) = size.unpack_from(p, pos)
    pos += size.size
    if pos + n > len(p):
        raise struct.error("string runs past the entry")
    return str(p[pos:pos + n], "utf-8"), pos + n


_KEY_TAGS = struct.Struct(">H")
_VALID_TOPICS: set[str] = set()  # topic names already matched against TOPIC_RE (bounded below)


def decode(entry: bytes | memoryview) -> Message | None:
    """The message in an entry body, or None if the entry is not one (a raw entry, or damaged). On the read
    path once per message (a consumer's, a dispatcher's): plain slices of bytes, no memoryview per field."""
    b = entry if type(entry) is bytes else bytes(entry)
    end = len(b)
    if end < _HEAD.size + 7 or b[:3] != MAGIC:
        return None
    try:
        _magic, version, flags, queue_id, born = _HEAD.unpack_from(b)
        if version != VERSION:
            return None
        pos = _HEAD.size + 1 + b[_HEAD.size]
        topic = b[_HEAD.size + 1:pos].decode()
        (n,) = _KEY_TAGS.unpack_from(b, pos)
        key = b[pos + 2:pos + 2 + n].decode()
        pos += 2 + n
        (n,) = _KEY_TAGS.unpack_from(b, pos)
        tags = b[pos + 2:pos + 2 + n].decode()
        pos += 2 + n
        (count,) = _KEY_TAGS.unpack_from(b, pos)
        pos += 2
        props = {}
        if count:
            p = memoryview(b)
            for _ in range(count):
                k, pos = _text(p, pos)
                props[k], pos = _text(p, pos)
        if pos > end:
            return None  # a length ran past the entry
        if topic not in _VALID_TOPICS:
            if not TOPIC_RE.match(topic):
                return None
            if len(_VALID_TOPICS) < 65_536:
                _VALID_TOPICS.add(topic)
        return Message(topic, b[pos:], queue_id, key, tags, props, born, flags)
    except (struct.error, UnicodeDecodeError, IndexError):
        return None


fast = load_compiled("quorumlog.topic._fastmessage")  # the compiled pull helpers, or None


def head(entry: bytes | memoryview) -> tuple[int, str, int, str] | None:
    """(flags, topic, queue_id, tags) of the message in an entry, or None exactly where decode gives None:
    what a dispatcher reads of every committed entry (one C call where _fastmessage is built)."""
    if fast is not None:
        return fast.message_head(entry)
    m = decode(entry)
    return None if m is None else (m.flags, m.topic, m.queue_id, m.tags)


def decode_pulled(pulled: Any, cls: type, wanted: set[str] | None = None) -> list:
    """The messages of one pull (wire/client.py PackedMessages, or PulledMessages) as `cls` objects with the
    fields topic, queue_id, queue_offset, body, key, tags, properties, born_timestamp_ms, store_timestamp_ms,
    index, term; entries that are not messages are left out, and so are tags not in `wanted` (None: all).
    One C call per pull where _fastmessage is built (cls's fields must then be slots)."""
    if fast is not None and hasattr(pulled, "blob"):
        return fast.decode_pulled(pulled.head, pulled.blob, cls, wanted)
    return _decode_pulled(pulled, cls, wanted)


def _decode_pulled(pulled: Iterable, cls: type, wanted: set[str] | None) -> list:
    out = []
    for pm in pulled:
        m = decode(pm.body)
        if m is None or (wanted is not None and m.tags not in wanted):
            continue
        out.append(cls(m.topic, m.queue_id, pm.queue_offset, m.body, m.key, m.tags, m.properties,
                       m.born_timestamp_ms, pm.store_timestamp_ms, pm.index, pm.term))
    return out
