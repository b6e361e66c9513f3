"""The door's records in `_meta`, shared with the CLI (`topic create --message-type`, `consumer-group create`):

- `rocketmq/topics/<topic>` = {"message_type": "NORMAL" | "FIFO" | "DELAY" | "TRANSACTION"}: the one type of
  message a topic accepts (RocketMQ 5's topic attribute `message.type`). A topic without the record (made by the
  own client or the Kafka door) accepts every type.
- `rocketmq/groups/<group>` = {"max_attempts": 16, "fifo": false, "backoff_s": [...], "start_from": "earliest"}:
  a consumer group's retry policy (RocketMQ's subscription group config). A group without the record uses
  these defaults (RocketMQ's autoCreateSubscriptionGroup).
- `rocketmq/transactions/<topic>/<queue>/<offset>` = b"commit" | b"rollback": a half message's outcome, written
  once (compare-and-create: the first decision wins).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

PREFIX = "rocketmq/"
TOPICS_PREFIX = PREFIX + "topics/"
GROUPS_PREFIX = PREFIX + "groups/"
TRANSACTIONS_PREFIX = PREFIX + "transactions/"
MESSAGE_TYPES = ("NORMAL", "FIFO", "DELAY", "TRANSACTION")
DEFAULT_MAX_ATTEMPTS = 16
# RocketMQ's messageDelayLevel from level 3 on (what a consumer group's retries use): 10s 30s 1m 2m ... 2h
DEFAULT_BACKOFF_S = (10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200)
MAX_ATTEMPTS_LIMIT = 1000


def topic_type_key(topic: str) -> str:
    return TOPICS_PREFIX + topic


def group_key(group: str) -> str:
    return GROUPS_PREFIX + group


def transaction_prefix(topic: str, queue_id: int) -> str:
    return f"{TRANSACTIONS_PREFIX}{topic}/{queue_id}/"


def transaction_key(topic: str, queue_id: int, offset: int) -> str:
    return f"{transaction_prefix(topic, queue_id)}{offset}"


def dead_letter_topic(group: str) -> str:
    return f"%DLQ%{group}"


def check_message_type(message_type: str) -> str:
    t = message_type.upper()
    if t not in MESSAGE_TYPES:
        raise ValueError(f"message type {message_type!r}: one of {', '.join(MESSAGE_TYPES)}")
    return t


def encode_topic_type(message_type: str) -> bytes:
    return json.dumps({"message_type": check_message_type(message_type)}).encode()


def decode_topic_type(raw: bytes | None) -> str | None:
    """The topic's message type, or None: it accepts every type."""
    if raw is None:
        return None
    try:
        return check_message_type(json.loads(raw)["message_type"])
    except (ValueError, KeyError, TypeError):
        return None


@dataclass(frozen=True)
class GroupPolicy:
    """A consumer group's retry policy. max_attempts counts deliveries (1 = never redelivered); the message goes
    to `%DLQ%<group>` after that many. backoff_s: the invisible time a push consumer sets after a failed
    attempt n (the last one repeats). fifo: one message per message group in flight, in order."""

    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    fifo: bool = False
    backoff_s: tuple[int, ...] = field(default=DEFAULT_BACKOFF_S)
    start_from: str = "earliest"  # where a group with no stored offset starts: earliest | latest

    def __post_init__(self) -> None:
        if not 1 <= self.max_attempts <= MAX_ATTEMPTS_LIMIT:
            raise ValueError(f"max_attempts {self.max_attempts}: 1..{MAX_ATTEMPTS_LIMIT}")
        if not self.backoff_s or any(s < 0 for s in self.backoff_s):
            raise ValueError(f"backoff_s {self.backoff_s}: one or more delays ≥ 0 s")
        if self.start_from not in ("earliest", "latest"):
            raise ValueError(f"start_from {self.start_from!r}: earliest or latest")

    def encode(self) -> bytes:
        d = asdict(self)
        d["backoff_s"] = list(self.backoff_s)
        return json.dumps(d).encode()

    @classmethod
    def decode(cls, raw: bytes | None) -> "GroupPolicy":
        if raw is None:
            return cls()
        try:
            d: dict[str, Any] = json.loads(raw)
            return cls(max_attempts=int(d.get("max_attempts", DEFAULT_MAX_ATTEMPTS)), fifo=bool(d.get("fifo", False)),
                       backoff_s=tuple(int(s) for s in d.get("backoff_s", DEFAULT_BACKOFF_S)),
                       start_from=str(d.get("start_from", "earliest")))
        except (ValueError, TypeError, AttributeError):
            return cls()
