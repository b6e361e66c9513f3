"""The membership configurations a log's entries set, kept beside the log as its producer table is.

A configuration is an entry of its own (quorumlog/raft/membership.py): a no-op tagged by the reserved producer
log_entry.MEMBERSHIP_PRODUCER_ID, so every store already notices it where it notices producer tags. The raft
core uses the latest configuration in the log, committed or not (Raft §4.1), so the store keeps every one the
log holds — a truncate may take the latest away and bring the one before back — plus the last one below the
log's begin index, which retention deleted from the log and a follower's reset received from its leader.
They are persisted in the producer snapshot (quorumlog/format/producer_state.py, version 2).
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Callable

from ..format.log_entry import MEMBERSHIP_PRODUCER_ID
from ..format.producer_state import ProducerSnapshot
from .producers import ProducerTable


class MembershipLog:
    __slots__ = ("_indexes", "_bodies")

    def __init__(self) -> None:
        self._indexes: list[int] = []
        self._bodies: list[bytes] = []

    def latest(self) -> tuple[int, bytes] | None:
        return (self._indexes[-1], self._bodies[-1]) if self._indexes else None

    def state(self) -> tuple[tuple[int, bytes], ...]:
        return tuple(zip(self._indexes, self._bodies))

    def load(self, configs) -> None:
        pairs = sorted(configs)
        self._indexes = [i for i, _ in pairs]
        self._bodies = [b for _, b in pairs]

    def add(self, index: int, body: bytes) -> None:
        assert not self._indexes or index > self._indexes[-1], (self._indexes[-1], index)
        self._indexes.append(index)
        self._bodies.append(body)

    def drop_after(self, index: int) -> None:
        k = bisect_right(self._indexes, index)
        del self._indexes[k:], self._bodies[k:]

    def compact(self, begin_index: int) -> None:
        """Retention moved the log's begin: forget configurations superseded before it (keep the last one
        below it, which is the one in force at begin_index - 1)."""
        k = bisect_right(self._indexes, begin_index - 1) - 1
        if k > 0:
            del self._indexes[:k], self._bodies[:k]

    def rebuild(self, snap: ProducerSnapshot | None, begin: int, end: int, producers: ProducerTable,
                body_at: Callable[[int], bytes]) -> None:
        """As a store reopens: the configurations below `begin` from the snapshot (nowhere else has them), those
        in the log from the producer table's membership batches (already rebuilt and verified against it)."""
        below = [(i, b) for i, b in (snap.configs if snap is not None else ()) if i < begin]
        held = [(last, body_at(last)) for cid, _seq, _first, last in producers.batches()
                if cid == MEMBERSHIP_PRODUCER_ID and begin <= last <= end]
        self.load(below + held)
        self.compact(begin)
