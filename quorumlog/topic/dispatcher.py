"""The dispatcher of a group that carries topic queues (RocketMQ's ReputMessageService): a StateMachine
(meta/state_machine.py) over the group's committed entries that appends each message to its queue's consume
queue, so the node runtime hosts it the way it hosts `_meta`'s store — applied once each, in log order, never
ahead of the commit point, snapshotted so retention can delete the log it was built from.

Retention per topic (RocketMQ keeps a commit log `fileReservedTime`; Kafka a topic `retention.ms` and
`retention.bytes`): a config message of the topic (topic/message.py FLAG_CONFIG, written by `topic create` /
`topic alter` into every group carrying its queues) sets its retention here, in log order like everything else.
A queue keeps at most `retention_bytes` of messages; messages older than `retention_ms` go, where age is
measured on the log's own clock (the leader's time stored in each entry, sampled every CLOCK_STEP_MS), so every
member drops the same units at the same point of the log. Dropped units raise the queue's min offset (a pull
below it is OFFSET_TOO_SMALL); the group's log retention frees the disk.

Snapshot: a JSON header (applied index, retention, clock samples, and per queue its topic, id, min offset and
unit count) followed by every queue's units in header order.
"""

from __future__ import annotations

import json
import struct

from .consume_queue import UNIT, ConsumeQueue
from .message import FLAG_CONFIG, decode, head, tag_hash

_LEN = struct.Struct(">I")
CLOCK_STEP_MS = 1_000


class TopicDispatcher:
    def __init__(self) -> None:
        self.applied_index = -1
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        self.messages = 0
        self.retention: dict[str, tuple[int, int]] = {}  # topic -> (retention_ms, retention_bytes); 0: unlimited
        # (log index, its timestamp ms), taken when the clock moved CLOCK_STEP_MS past the last sample, with the
        # entry before it: every entry up to a sample's index is at most that sample's age
        self.clock: list[tuple[int, int]] = []
        self.last: tuple[int, int] | None = None  # the last entry applied with a timestamp

    def apply(self, index: int, body: bytes, timestamp_ms: int = 0) -> int | None:
        """Dispatch the entry at `index` if it is a message; its queue offset (None for a raw entry or a
        topic's config)."""
        self.applied_index = index
        if timestamp_ms:
            if not self.clock or timestamp_ms - self.clock[-1][1] >= CLOCK_STEP_MS:
                if self.last is not None and (not self.clock or self.clock[-1][0] != self.last[0]):
                    self.clock.append(self.last)
                self.clock.append((index, timestamp_ms))
                self._expire(timestamp_ms)
            self.last = (index, timestamp_ms)
        h = head(body)
        if h is None:
            return None
        flags, topic, queue_id, tags = h
        if flags & FLAG_CONFIG:
            self._configure(topic, decode(body).body)
            return None
        key = (topic, queue_id)
        q = self.queues.get(key)
        if q is None:
            q = self.queues[key] = ConsumeQueue(topic, queue_id)
        self.messages += 1
        offset = q.dispatch(index, len(body), tag_hash(tags))
        max_bytes = self.retention.get(topic, (0, 0))[1]
        if max_bytes:
            q.trim_to_bytes(max_bytes)
        return offset

    def _configure(self, topic: str, body: bytes) -> None:
        try:
            doc = json.loads(body)
            ms, size = int(doc.get("retention_ms", 0)), int(doc.get("retention_bytes", 0))
        except (ValueError, TypeError, AttributeError):
            return  # a malformed config is ignored, the same way on every member
        self.retention[topic] = (max(0, ms), max(0, size))
        if self.clock:
            self._expire(self.clock[-1][1])
        if size:
            for (t, _), q in self.queues.items():
                if t == topic:
                    q.trim_to_bytes(size)

    def _expire(self, now_ms: int) -> None:
        """Drop messages older than their topic's retention_ms, on the log's clock."""
        for topic, (ms, _) in self.retention.items():
            if not ms:
                continue
            old = [i for i, ts in self.clock if ts < now_ms - ms]
            if old:
                for (t, _), q in self.queues.items():
                    if t == topic:
                        q.delete_before_log_index(old[-1] + 1)
        horizon = max((ms for ms, _ in self.retention.values() if ms), default=0)
        keep = [s for s in self.clock if s[1] >= now_ms - horizon] if horizon else self.clock[-1:]
        if len(keep) < len(self.clock):  # (one sample older than every horizon stays: the cut point)
            keep = self.clock[len(self.clock) - len(keep) - 1:]
        self.clock = keep

    def queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.queues.get((topic, queue_id))

    def snapshot(self) -> bytes:
        order = sorted(self.queues)
        head = json.dumps({"applied_index": self.applied_index, "messages": self.messages,
                           "retention": self.retention, "clock": self.clock, "last": self.last,
                           "queues": [[t, i, self.queues[(t, i)].min_offset,
                                       len(self.queues[(t, i)].to_bytes()) // UNIT.size] for t, i in order]}).encode()
        return _LEN.pack(len(head)) + head + b"".join(self.queues[k].to_bytes() for k in order)

    @classmethod
    def restore(cls, data: bytes) -> "TopicDispatcher":
        (n,) = _LEN.unpack_from(data)
        head = json.loads(data[_LEN.size:_LEN.size + n])
        d = cls()
        d.applied_index, d.messages = head["applied_index"], head["messages"]
        d.retention = {t: (int(ms), int(size)) for t, (ms, size) in head.get("retention", {}).items()}
        d.clock = [(int(i), int(ts)) for i, ts in head.get("clock", [])]
        d.last = tuple(head["last"]) if head.get("last") else None
        pos = _LEN.size + n
        for topic, queue_id, min_offset, units in head["queues"]:
            size = units * UNIT.size
            d.queues[(topic, queue_id)] = ConsumeQueue(topic, queue_id, data[pos:pos + size], min_offset)
            pos += size
        if pos != len(data):
            raise ValueError(f"topic dispatcher snapshot: {len(data) - pos} bytes left over")
        return d
