"""A queue's consume queue (RocketMQ's ConsumeQueue): fixed 20-byte units, one per message of the queue, in
the order the group committed them — the unit's position is the message's queue offset.

    unit = log index i64 | entry size i32 | tag hash i64        (RocketMQ: commitlog offset, size, tags code)

Built by dispatching committed entries in log order (`dispatch`), never ahead of what is committed; rebuilt
from the log on restart by dispatching again from where the kept units end (`rebuild_from`), so queue offsets
are dense and the same on every replica and after every failover (RocketMQ #7689 and #8539 are what happens
when a queue offset is reused). Tag filtering by hash happens here; the client filters again on the exact
tag (two tags may share a hash).
"""

from __future__ import annotations

import struct
from typing import Iterable, NamedTuple

UNIT = struct.Struct(">qiq")
assert UNIT.size == 20


class Unit(NamedTuple):  # (a tuple: a pull reads thousands)
    queue_offset: int
    log_index: int
    size: int
    tag_hash: int


class ConsumeQueue:
    def __init__(self, topic: str, queue_id: int, data: bytes = b"", min_offset: int = 0) -> None:
        if len(data) % UNIT.size:
            raise ValueError(f"consume queue {topic}/{queue_id}: {len(data)} bytes is not whole units")
        self.topic = topic
        self.queue_id = queue_id
        self._data = bytearray(data)
        self.min_offset = min_offset  # units below it were deleted (retention)
        self.total_bytes = sum(UNIT.unpack_from(self._data, i)[1] for i in range(0, len(self._data), UNIT.size))

    @property
    def max_offset(self) -> int:
        """The next queue offset (one past the last message)."""
        return self.min_offset + len(self._data) // UNIT.size

    @property
    def last_log_index(self) -> int:
        """The log index of the last message dispatched here (-1: none), where a rebuild resumes."""
        if not self._data:
            return -1
        return UNIT.unpack_from(self._data, len(self._data) - UNIT.size)[0]

    def dispatch(self, log_index: int, size: int, tag_hash: int) -> int:
        """Add the message at log_index (committed, after every index dispatched before); its queue offset."""
        if log_index <= self.last_log_index:
            raise ValueError(f"{self.topic}/{self.queue_id}: index {log_index} dispatched after "
                             f"{self.last_log_index} (dispatch follows the committed log, once each)")
        self._data += UNIT.pack(log_index, size, tag_hash)
        self.total_bytes += size
        return self.max_offset - 1

    def get(self, queue_offset: int) -> Unit | None:
        if not self.min_offset <= queue_offset < self.max_offset:
            return None
        i, size, tag = UNIT.unpack_from(self._data, (queue_offset - self.min_offset) * UNIT.size)
        return Unit(queue_offset, i, size, tag)

    def read(self, queue_offset: int, max_units: int, tag_hashes: frozenset[int] | None = None) -> list[Unit]:
        """Units from queue_offset on (at most max_units looked at), those whose tag hash is wanted."""
        start, raw = self.raw_units(queue_offset, max_units)
        return [Unit(start + k, i, size, tag) for k, (i, size, tag) in enumerate(UNIT.iter_unpack(raw))
                if tag_hashes is None or tag in tag_hashes]

    def raw_units(self, queue_offset: int, max_units: int) -> tuple[int, bytes]:
        """(the first unit's queue offset, the units) from queue_offset on, at most max_units, as stored."""
        start = max(queue_offset, self.min_offset)
        end = min(self.max_offset, start + max_units)
        return start, bytes(self._data[(start - self.min_offset) * UNIT.size:(end - self.min_offset) * UNIT.size])

    def first_offset_from(self, log_index: int) -> int:
        """The first queue offset whose message is at or after log_index (max_offset if none): where the queue
        starts for a member whose log retention deleted the entries below log_index."""
        lo, hi = 0, len(self._data) // UNIT.size
        while lo < hi:
            mid = (lo + hi) // 2
            if UNIT.unpack_from(self._data, mid * UNIT.size)[0] < log_index:
                lo = mid + 1
            else:
                hi = mid
        return self.min_offset + lo

    def delete_before_log_index(self, log_index: int) -> None:
        """Retention: forget units pointing below log_index (their queue offsets are never reused)."""
        drop = 0
        while drop < len(self._data) // UNIT.size and UNIT.unpack_from(self._data, drop * UNIT.size)[0] < log_index:
            drop += 1
        self._drop(drop)

    def trim_to_bytes(self, max_bytes: int) -> None:
        """Size retention: forget the oldest units until the queue's messages hold at most max_bytes."""
        drop, total = 0, self.total_bytes
        while total > max_bytes and drop < len(self._data) // UNIT.size:
            total -= UNIT.unpack_from(self._data, drop * UNIT.size)[1]
            drop += 1
        self._drop(drop)

    def _drop(self, units: int) -> None:
        for i in range(units):
            self.total_bytes -= UNIT.unpack_from(self._data, i * UNIT.size)[1]
        del self._data[:units * UNIT.size]
        self.min_offset += units

    def to_bytes(self) -> bytes:
        return bytes(self._data)


def dispatch_all(queues: dict[tuple[str, int], ConsumeQueue], entries: Iterable[tuple[int, bytes]]) -> None:
    """Dispatch committed (index, body) entries in order to their queues (creating queues as messages name
    them); entries that are not messages, or already dispatched to their queue, are skipped."""
    from .message import decode, tag_hash

    for index, body in entries:
        m = decode(body)
        if m is None:
            continue
        q = queues.get((m.topic, m.queue_id))
        if q is None:
            q = queues[(m.topic, m.queue_id)] = ConsumeQueue(m.topic, m.queue_id)
        if index > q.last_log_index:
            q.dispatch(index, len(body), tag_hash(m.tags))
