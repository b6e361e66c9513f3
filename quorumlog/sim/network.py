"""The virtual network: drops, delays, duplicates, reorders and partitions, all drawn from the world's rng.

Links are directed (frm, to) pairs, so a partition may be asymmetric: a node that can hear but not speak,
or the reverse. A partition cuts what is sent while it lasts and what is still in flight when it starts (checked on
sending and again on arrival).
Client links are never partitioned (a client that reaches a stale, isolated leader is a case we want) and
never duplicate a request (a client sends each request id once; retries get new ids).
"""

from __future__ import annotations

import random
from typing import Any, Callable, Iterable

from .options import SimOptions
from .scheduler import Scheduler

REORDER_HOLD_FACTOR = 10  # a reordered message is held up to this many times the largest normal delay


class Network:
    def __init__(self, rng: random.Random, scheduler: Scheduler, options: SimOptions,
                 trace: Callable[[str], None] | None) -> None:
        self.rng = rng
        self.scheduler = scheduler
        self.delay_min_ms = options.delay_min_ms
        self.delay_max_ms = options.delay_max_ms
        self.drop_ratio = options.drop_ratio
        self.duplicate_ratio = options.duplicate_ratio
        self.reorder_ratio = options.reorder_ratio
        self.client_drop_ratio = options.client_drop_ratio
        # (frm, to) -> how many partitions cut it; overlapping partitions lift one by one
        self.blocked: dict[tuple[str, str], int] = {}
        self.generation = 0  # bumped by heal(): partitions cut before it have nothing left to lift
        self.trace = trace
        self.sent = 0
        self.dropped = 0
        self.duplicated = 0

    # -- faults ------------------------------------------------------------------------------------
    def calm(self) -> None:
        """Liveness phase: no more loss, duplication or reordering (delays stay)."""
        self.drop_ratio = self.duplicate_ratio = self.reorder_ratio = self.client_drop_ratio = 0.0

    def heal(self) -> None:
        self.blocked.clear()
        self.generation += 1

    def cut(self, frm: Iterable[str], to: Iterable[str]) -> list[tuple[str, str]]:
        """Cut every link frm→to; returns the links cut, for uncut()."""
        to = tuple(to)
        links = [(a, b) for a in frm for b in to if a != b]
        for link in links:
            self.blocked[link] = self.blocked.get(link, 0) + 1
        return links

    def uncut(self, links: list[tuple[str, str]], generation: int) -> None:
        if generation != self.generation:
            return  # a heal lifted them already
        for link in links:
            count = self.blocked[link]
            if count == 1:
                del self.blocked[link]
            else:
                self.blocked[link] = count - 1

    def describe_blocked(self) -> str:
        return " ".join(f"{a}->{b}" for a, b in sorted(self.blocked)) or "none"

    # -- traffic -----------------------------------------------------------------------------------
    def _delay_ms(self) -> int:
        delay = self.rng.randint(self.delay_min_ms, self.delay_max_ms)
        if self.reorder_ratio and self.rng.random() < self.reorder_ratio:
            delay += self.rng.randint(0, REORDER_HOLD_FACTOR * self.delay_max_ms + 1)
        return delay

    def send(self, frm: str, to: str, payload: Any, on_arrive: Callable[[Any], None]) -> None:
        """Node-to-node: may drop, duplicate, delay or reorder; a partition cuts it on arrival."""
        self.sent += 1
        if (frm, to) in self.blocked or (self.drop_ratio and self.rng.random() < self.drop_ratio):
            self.dropped += 1
            return
        self.scheduler.after(self._delay_ms(), self._arrive, frm, to, payload, on_arrive)
        if self.duplicate_ratio and self.rng.random() < self.duplicate_ratio:
            self.duplicated += 1
            self.scheduler.after(self._delay_ms(), self._arrive, frm, to, payload, on_arrive)

    def _arrive(self, frm: str, to: str, payload: Any, on_arrive: Callable[[Any], None]) -> None:
        if (frm, to) in self.blocked:
            self.dropped += 1
            if self.trace:
                self.trace(f"cut {frm}->{to}")
            return
        on_arrive(payload)

    def send_client(self, payload: Any, on_arrive: Callable[[Any], None]) -> None:
        """Client ↔ node: may drop or delay, never duplicates, never partitioned."""
        if self.client_drop_ratio and self.rng.random() < self.client_drop_ratio:
            return
        self.scheduler.after(self._delay_ms(), on_arrive, payload)
