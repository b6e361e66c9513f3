"""The dispatcher of a group that carries topic queues (RocketMQ's ReputMessageService): a StateMachine
(meta/state_machine.py) over the group's committed entries that appends each message to its queue's consume
queue, so the node runtime hosts it the way it hosts `_meta`'s store — applied once each, in log order, never
ahead of the commit point, snapshotted so retention can delete the log it was built from.

Snapshot: a JSON header (applied index, and per queue its topic, id, min offset and unit count) followed by
every queue's units in header order.
"""

from __future__ import annotations

import json
import struct

from .consume_queue import UNIT, ConsumeQueue
from .message import decode, tag_hash

_LEN = struct.Struct(">I")


class TopicDispatcher:
    def __init__(self) -> None:
        self.applied_index = -1
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        self.messages = 0

    def apply(self, index: int, body: bytes) -> int | None:
        """Dispatch the entry at `index` if it is a message; its queue offset (None for a raw entry)."""
        self.applied_index = index
        m = decode(body)
        if m is None:
            return None
        key = (m.topic, m.queue_id)
        q = self.queues.get(key)
        if q is None:
            q = self.queues[key] = ConsumeQueue(m.topic, m.queue_id)
        self.messages += 1
        return q.dispatch(index, len(body), tag_hash(m.tags))

    def queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.queues.get((topic, queue_id))

    def delete_before(self, log_index: int) -> None:
        """Retention deleted the log below log_index: the units pointing there go too (offsets are kept)."""
        for q in self.queues.values():
            q.delete_before_log_index(log_index)

    def snapshot(self) -> bytes:
        order = sorted(self.queues)
        head = json.dumps({"applied_index": self.applied_index, "messages": self.messages,
                           "queues": [[t, i, self.queues[(t, i)].min_offset,
                                       len(self.queues[(t, i)].to_bytes()) // UNIT.size] for t, i in order]}).encode()
        return _LEN.pack(len(head)) + head + b"".join(self.queues[k].to_bytes() for k in order)

    @classmethod
    def restore(cls, data: bytes) -> "TopicDispatcher":
        (n,) = _LEN.unpack_from(data)
        head = json.loads(data[_LEN.size:_LEN.size + n])
        d = cls()
        d.applied_index, d.messages = head["applied_index"], head["messages"]
        pos = _LEN.size + n
        for topic, queue_id, min_offset, units in head["queues"]:
            size = units * UNIT.size
            d.queues[(topic, queue_id)] = ConsumeQueue(topic, queue_id, data[pos:pos + size], min_offset)
            pos += size
        if pos != len(data):
            raise ValueError(f"topic dispatcher snapshot: {len(data) - pos} bytes left over")
        return d
