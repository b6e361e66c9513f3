"""A Kafka record as a quorumlog topic message, and back (docs/kafka.md "Records").

- value → the message body; a null value (a tombstone) is an empty body with property `kafka.null` = "1".
- key → the message key when it is non-empty UTF-8 of at most 1 KiB (so `quorumlog consume` shows it);
  any other key (binary, empty, longer) goes base64 in property `kafka.key`. No key: neither.
- headers → property `kafka.headers`: JSON `[[name, base64 value or null], ...]`, order and repeats kept.
- timestamp (CreateTime) → the born timestamp.

Going back, a message written by quorumlog's own producer shows its properties as headers (UTF-8 values) and
its tags as the header `quorumlog.tags`.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from ...topic.message import MAX_KEY_BYTES, encode_fields
from .records import Record

KEY_PROPERTY = "kafka.key"
HEADERS_PROPERTY = "kafka.headers"
NULL_PROPERTY = "kafka.null"
TAGS_HEADER = "quorumlog.tags"
_OWN = (KEY_PROPERTY, HEADERS_PROPERTY, NULL_PROPERTY)


def message_fields(r: Record) -> tuple[bytes, str, dict[str, str]]:
    """(body, key, properties) of the message that stores `r`."""
    props: dict[str, str] = {}
    key = ""
    if r.key is not None:
        text = None
        if 0 < len(r.key) <= MAX_KEY_BYTES:
            try:
                text = r.key.decode("utf-8")
            except UnicodeDecodeError:
                text = None
        if text is not None:
            key = text
        else:
            props[KEY_PROPERTY] = base64.b64encode(r.key).decode()
    if r.value is None:
        props[NULL_PROPERTY] = "1"
    if r.headers:
        props[HEADERS_PROPERTY] = json.dumps(
            [[k, None if v is None else base64.b64encode(v).decode()] for k, v in r.headers], separators=(",", ":"))
    return (r.value or b""), key, props


def encode_record(topic: str, queue_id: int, r: Record, max_message_bytes: int) -> bytes:
    """The entry body (topic/message.py) for record `r`; BadRequest/EntryTooLarge as encode_fields raises."""
    body, key, props = message_fields(r)
    return encode_fields(topic, body, queue_id, key, "", props or None, r.timestamp_ms, 0, max_message_bytes)


def _base64_or_text(value: str) -> bytes:
    """A `kafka.key` property's bytes: the door writes base64; anything else (a property some other producer
    named so) is served as its text."""
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:  # (binascii.Error)
        return value.encode("utf-8")


def record_of(m: Any, offset_delta: int) -> Record:
    """The Kafka record of a pulled TopicMessage."""
    props = m.properties or {}
    if KEY_PROPERTY in props:
        key: bytes | None = _base64_or_text(props[KEY_PROPERTY])
    else:
        key = m.key.encode("utf-8") if m.key else None
    value = None if props.get(NULL_PROPERTY) == "1" and not m.body else bytes(m.body)
    headers: list[tuple[str, bytes | None]] = []
    if HEADERS_PROPERTY in props:
        try:
            headers = [(k, None if v is None else base64.b64decode(v)) for k, v in json.loads(props[HEADERS_PROPERTY])]
        except (ValueError, TypeError):
            headers = []
    for k, v in props.items():
        if k not in _OWN:
            headers.append((k, v.encode("utf-8")))
    if m.tags:
        headers.append((TAGS_HEADER, m.tags.encode("utf-8")))
    ts = m.born_timestamp_ms or m.store_timestamp_ms
    return Record(offset_delta, ts, key, value, headers)
