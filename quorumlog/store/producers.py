"""The idempotent-producer table: client_id -> the last PRODUCER_WINDOW_BATCHES (seq -> first, last index).

Rebuilt from the log itself (the producer tag on a batch's last entry), so any replica can dedupe after
failover. Same semantics as MemoryStore's.

A FileStore also keeps a snapshot of the table (the `producers` file, as Kafka keeps producer-state snapshots):
the table as of `snapshot_index`, so a restart loads it and scans only the entries after it, instead of the
whole log or, as before, a tail that forgot older clients (whose retries were then appended twice). Its layout
is in quorumlog/format/producer_state.py.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Callable

from ..format.producer_state import ProducerSnapshot, State, decode_snapshot, encode_snapshot
from .base import PRODUCER_WINDOW_BATCHES, ProducerBatch
from .files import atomic_write_file

PRODUCERS_NAME = "producers"
log = logging.getLogger(__name__)
__all__ = ["PRODUCERS_NAME", "ProducerSnapshot", "ProducerTable", "State", "read_snapshot", "write_snapshot"]


def read_snapshot(path: str) -> ProducerSnapshot | None:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    return decode_snapshot(data, path)


def write_snapshot(path: str, snap: ProducerSnapshot) -> None:
    atomic_write_file(path, encode_snapshot(snap))


class ProducerTable:
    def __init__(self, window_batches: int = PRODUCER_WINDOW_BATCHES) -> None:
        self.window_batches = window_batches
        self._windows: dict[int, OrderedDict[int, tuple[int, int]]] = {}
        # Highest seq per client that may have been appended and is no longer remembered. Only a seq at or
        # below it is "too old to tell"; pipelined batches that arrive out of order above it are new.
        self._forgotten: dict[int, int] = {}
        self.version = 0  # bumped by every change: a snapshot is written only when the table moved

    def state(self) -> State:
        """A copy of the table (callers hold the store's lock so it matches an end index)."""
        return {cid: (self._forgotten.get(cid, -1), [(seq, f, l) for seq, (f, l) in w.items()])
                for cid, w in self._windows.items()} | \
            {cid: (fg, []) for cid, fg in self._forgotten.items() if cid not in self._windows}

    def load(self, state: State) -> None:
        self.clear()
        for cid, (forgotten, batches) in state.items():
            if forgotten >= 0:
                self._forgotten[cid] = forgotten
            if batches:
                self._windows[cid] = OrderedDict((seq, (f, l)) for seq, f, l in batches)

    def batches(self) -> list[tuple[int, int, int, int]]:
        """(client_id, seq, first, last) of every remembered batch."""
        return [(cid, seq, f, l) for cid, w in self._windows.items() for seq, (f, l) in w.items()]

    def remember(self, client_id: int, seq: int, first_index: int, last_index: int) -> None:
        self.version += 1
        window = self._windows.setdefault(client_id, OrderedDict())
        window[seq] = (first_index, last_index)
        window.move_to_end(seq)
        while len(window) > self.window_batches:
            old_seq, _ = window.popitem(last=False)
            self._forgotten[client_id] = max(old_seq, self._forgotten.get(client_id, old_seq))

    def find(self, client_id: int, seq: int) -> ProducerBatch | None:
        hit = self._windows.get(client_id, {}).get(seq)
        return ProducerBatch(client_id, seq, *hit) if hit else None

    def last_seq(self, client_id: int) -> int | None:
        window = self._windows.get(client_id)
        return max(window) if window else None

    def window_floor(self, client_id: int) -> int | None:
        """Lowest seq this table can still judge: a seq below it may have been appended and forgotten
        (None: nothing forgotten, every unknown seq is new)."""
        forgotten = self._forgotten.get(client_id)
        return None if forgotten is None else forgotten + 1

    def rebuild(self, snap: ProducerSnapshot | None, begin: int, end: int,
                tag_at: Callable[[int], tuple[int, int, int] | None]) -> None:
        """The table as a store reopens it: the snapshot (if any) plus the tagged batches after it, found with
        `tag_at(index)` -> (client_id, seq, batch_count) or None. Without a usable snapshot the whole log is
        scanned: a table that forgot an old client would let that client's retry be appended twice."""
        self.clear()
        scan_from = begin
        if snap is not None:
            self.load(snap.state)
            covered = min(snap.snapshot_index, end)
            self.drop_after(covered)  # batches of a tail that a crash or a truncate took away
            # A batch the snapshot names must still be in the log as that batch. If one is not, a truncate's
            # snapshot update did not land before new entries took its indexes: from where is unknown, so the
            # snapshot is not trusted at all (rare: a crash inside that window). Batches below `begin` are
            # known only from the snapshot (retention, or a follower reset with its leader's table).
            if any(last >= begin and (tag_at(last) or ())[:2] != (client_id, seq)
                   for client_id, seq, _first, last in self.batches()):
                log.warning("the producer snapshot names a batch the log no longer holds: scanning the whole log")
                self.clear()
            else:
                scan_from = max(begin, covered + 1)
        for index in range(scan_from, end + 1):
            tag = tag_at(index)
            if tag is not None:
                client_id, seq, count = tag
                self.remember(client_id, seq, index - count + 1, index)

    def drop_after(self, index: int) -> None:
        """Forget batches whose tag entry was truncated away (their last entry > index)."""
        for client_id in list(self._windows):
            window = self._windows[client_id]
            for seq in [s for s, (_first, last) in window.items() if last > index]:
                del window[seq]
                self.version += 1
            if not window:
                del self._windows[client_id]

    def clear(self) -> None:
        self.version += 1
        self._windows.clear()
        self._forgotten.clear()
