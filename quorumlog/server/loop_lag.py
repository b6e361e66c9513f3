"""How late the event loop wakes: a task that sleeps a fixed interval and measures by how much it overslept.

Everything a node does runs on one loop, so anything that blocks it — a write() throttled by the kernel's dirty
page limits, an fsync, a page fault on a big mapping, a long GIL hold in a C extension, a full garbage
collection — delays every group's ticks, heartbeats and acks alike. Peers see a stalled node as dead: a stall
near the election timeout costs leadership. The lag a sleeper measures is that delay, whatever caused it.

A process stopped by SIGSTOP (the soaks' pause faults) oversleeps by the length of the pause without any stall
of its own. `resumed()` (the runtime calls it on SIGCONT) marks such a sample: it is counted as `paused`, not as
lag. A late sample is judged one wake later, so the SIGCONT that ended the pause has been handled by then.

`LoopLag` is the accounting (no clock, no loop): fine buckets that give a max and a p99.9 a summary can report
and that summaries of several processes can add up (`merge_buckets`, `quantile_ms`).
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import time
from typing import Callable, Iterable, Mapping

log = logging.getLogger(__name__)

LOOP_LAG_INTERVAL_MS = 20
# A sample later than this is held one wake before it is counted (see the module doc); below it a pause is
# invisible anyway.
LOOP_LAG_JUDGE_LATER_MS = 50
# 1 ms steps up to 100 ms, 10 ms steps up to 1 s, 100 ms steps up to 10 s, then one overflow bucket
# (its samples count at the max seen): a p99.9 read from them is within a step of the truth.
BUCKET_EDGES_MS: tuple[int, ...] = (tuple(range(1, 101)) + tuple(range(110, 1001, 10))
                                    + tuple(range(1100, 10_001, 100)))


class LoopLag:
    """Counts of loop lag samples in fine buckets, the max, and the samples dropped as pauses."""

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKET_EDGES_MS) + 1)
        self.samples = 0
        self.max_ms = 0.0
        self.paused = 0

    def observe(self, lag_ms: float) -> None:
        self.counts[bisect.bisect_left(BUCKET_EDGES_MS, lag_ms)] += 1
        self.samples += 1
        if lag_ms > self.max_ms:
            self.max_ms = lag_ms

    def buckets(self) -> dict[str, int]:
        """The non-empty buckets, keyed by upper edge in ms ("inf" for the overflow)."""
        return {_edge_name(i): n for i, n in enumerate(self.counts) if n}

    def summary(self) -> dict:
        buckets = self.buckets()
        return {"interval_ms": LOOP_LAG_INTERVAL_MS, "samples": self.samples, "paused": self.paused,
                "max_ms": round(self.max_ms, 1), "p99_ms": quantile_ms(buckets, 0.99, self.max_ms),
                "p999_ms": quantile_ms(buckets, 0.999, self.max_ms), "buckets_ms": buckets}


def _edge_name(i: int) -> str:
    return str(BUCKET_EDGES_MS[i]) if i < len(BUCKET_EDGES_MS) else "inf"


def merge_buckets(bucket_maps: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """The bucket counts of several summaries (several nodes, or a node's several processes) added up."""
    out: dict[str, int] = {}
    for m in bucket_maps:
        for k, n in m.items():
            out[k] = out.get(k, 0) + n
    return out


def quantile_ms(buckets: Mapping[str, int], q: float, max_ms: float) -> float:
    """The q-quantile of the samples in `buckets`, as the upper edge of its bucket (never above max_ms)."""
    total = sum(buckets.values())
    if not total:
        return 0.0
    rank = q * total
    seen = 0
    for k in sorted(buckets, key=lambda k: float(k)):
        seen += buckets[k]
        if seen >= rank:
            return round(min(float(k), max_ms), 1)
    return round(max_ms, 1)


class LoopLagMonitor:
    """The sleeper task: `run()` until cancelled; each judged sample goes to `lag` and to `on_sample(seconds)`,
    each pause to `on_paused()`."""

    def __init__(self, on_sample: Callable[[float], None] = lambda s: None,
                 on_paused: Callable[[], None] = lambda: None, interval_ms: int = LOOP_LAG_INTERVAL_MS, clock: Callable[[], float] = time.monotonic) -> None:
        self.lag = LoopLag()
        self._on_sample = on_sample
        self._on_paused = on_paused
        self._interval_s = interval_ms / 1000
        self._clock = clock
        self._resumed = False
        self._held_ms: float | None = None  # a late sample waiting one wake for a SIGCONT to explain it

    def resumed(self) -> None:
        """SIGCONT: the process was stopped; the late sample that covers the stop is not the loop's lag."""
        self._resumed = True

    def woke(self, lag_ms: float) -> None:
        """One wake, lag_ms after it was due: judge the held sample, then this one (held if late)."""
        if self._held_ms is not None:
            held, self._held_ms = self._held_ms, None
            if self._resumed:
                self.lag.paused += 1
                self._on_paused()
            else:
                self._count(held)
        self._resumed = False
        if lag_ms > LOOP_LAG_JUDGE_LATER_MS:
            self._held_ms = lag_ms
        else:
            self._count(lag_ms)

    def _count(self, lag_ms: float) -> None:
        self.lag.observe(lag_ms)
        self._on_sample(lag_ms / 1000)

    async def run(self) -> None:
        clock, interval_s = self._clock, self._interval_s
        while True:
            before = clock()
            await asyncio.sleep(interval_s)
            self.woke(max(0.0, (clock() - before - interval_s) * 1000))
