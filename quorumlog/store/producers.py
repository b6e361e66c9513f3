"""The idempotent-producer table: client_id -> the last PRODUCER_WINDOW_BATCHES (seq -> first, last index).

Rebuilt from the log itself (the producer tag on a batch's last entry), so any replica can dedupe after
failover. Same semantics as MemoryStore's.
"""

from __future__ import annotations

from collections import OrderedDict

from .base import PRODUCER_WINDOW_BATCHES, ProducerBatch


class ProducerTable:
    def __init__(self, window_batches: int = PRODUCER_WINDOW_BATCHES) -> None:
        self.window_batches = window_batches
        self._windows: dict[int, OrderedDict[int, tuple[int, int]]] = {}
        # Highest seq per client that may have been appended and is no longer remembered. Only a seq at or
        # below it is "too old to tell"; pipelined batches that arrive out of order above it are new.
        self._forgotten: dict[int, int] = {}

    def remember(self, client_id: int, seq: int, first_index: int, last_index: int) -> None:
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

    def mark_scan_partial(self) -> None:
        """The table was rebuilt from the log's tail only: seqs below each client's oldest seen may exist
        further back, so they count as forgotten."""
        for client_id, window in self._windows.items():
            self._forgotten[client_id] = max(self._forgotten.get(client_id, -1), min(window) - 1)

    def drop_after(self, index: int) -> None:
        """Forget batches whose tag entry was truncated away (their last entry > index)."""
        for client_id in list(self._windows):
            window = self._windows[client_id]
            for seq in [s for s, (_first, last) in window.items() if last > index]:
                del window[seq]
            if not window:
                del self._windows[client_id]

    def clear(self) -> None:
        self._windows.clear()
        self._forgotten.clear()
