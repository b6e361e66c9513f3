"""The virtual clock and its one queue of timed work: a heap ordered by (time_ms, sequence number).

The sequence number breaks ties in insertion order, so two runs of one seed pop the same work in the same
order; nothing here reads a wall clock.
"""

from __future__ import annotations

import heapq
from typing import Any, Callable


class Scheduler:
    def __init__(self) -> None:
        self.now_ms = 0
        self._heap: list[tuple[int, int, Callable[..., Any], tuple]] = []
        self._seq = 0

    def at(self, time_ms: int, handler: Callable[..., Any], *args: Any) -> None:
        assert time_ms >= self.now_ms, f"scheduling in the past: {time_ms} < {self.now_ms}"
        self._seq += 1
        heapq.heappush(self._heap, (time_ms, self._seq, handler, args))

    def after(self, delay_ms: int, handler: Callable[..., Any], *args: Any) -> None:
        assert delay_ms >= 0
        self.at(self.now_ms + delay_ms, handler, *args)

    def pop(self) -> tuple[Callable[..., Any], tuple]:
        time_ms, _, handler, args = heapq.heappop(self._heap)
        self.now_ms = time_ms
        return handler, args

    def __len__(self) -> int:
        return len(self._heap)
