"""How late the event loop wakes: a task that sleeps a fixed interval and measures by how much it overslept.

Everything a node does runs on one loop, so anything that blocks it — a write() throttled by the kernel's dirty
page limits, an fsync, a page fault on a big mapping, a long GIL hold in a C extension, a full garbage
collection — delays every group's ticks, heartbeats and acks alike. Peers see a stalled node as dead: a stall
near the election timeout costs leadership. The lag a sleeper measures is that delay, whatever caused it.

On a machine with more runnable threads than cores (five nodes and their clients on two, as the benchmarks and
soaks run) a loop also wakes late because its thread waited for a CPU, which no change to the node removes. The
kernel counts that wait per thread (/proc/thread-self/schedstat, its run-queue time), so each sample is also
counted less that wait (`less_cpu_wait`): what is left is the time the loop thread ran or was blocked (in a
syscall, a page fault, a lock) — the stalls of the node's own making.

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
import os
import sys
import threading
import time
import traceback
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
        return {"samples": self.samples, "max_ms": round(self.max_ms, 1),
                "p99_ms": quantile_ms(buckets, 0.99, self.max_ms), "p999_ms": quantile_ms(buckets, 0.999, self.max_ms),
                "buckets_ms": buckets}


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
                 on_paused: Callable[[], None] = lambda: None, interval_ms: int = LOOP_LAG_INTERVAL_MS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.lag = LoopLag()
        self.less_cpu_wait = LoopLag()  # each sample less the loop thread's wait for a CPU (see the module doc)
        self._on_sample = on_sample
        self._on_paused = on_paused
        self._interval_s = interval_ms / 1000
        self._clock = clock
        self._resumed = False
        self._held: tuple[float, float] | None = None  # a late (lag, CPU wait) waiting one wake for a SIGCONT
        self.last_wake_s = clock()  # (read by StallStacks' thread)

    def resumed(self) -> None:
        """SIGCONT: the process was stopped; the late sample that covers the stop is not the loop's lag."""
        self._resumed = True

    def summary(self) -> dict:
        """For a status document: the lag's max, p99, p99.9 and buckets, the same less CPU wait, pauses."""
        return {"interval_ms": LOOP_LAG_INTERVAL_MS, **self.lag.summary(), "paused": self.lag.paused,
                "less_cpu_wait": self.less_cpu_wait.summary()}

    def woke(self, lag_ms: float, cpu_wait_ms: float = 0.0) -> None:
        """One wake, lag_ms after it was due, cpu_wait_ms of the sleep spent waiting for a CPU: judge the held
        sample, then this one (held if late)."""
        if self._held is not None:
            held, self._held = self._held, None
            if self._resumed:
                self._pause()
            else:
                self._count(*held)
            self._resumed = False
        late = lag_ms > LOOP_LAG_JUDGE_LATER_MS
        if late and self._resumed:  # the SIGCONT was handled before the stop's late wake: it covers this one
            self._resumed = False
            self._pause()
        elif late:
            self._held = (lag_ms, cpu_wait_ms)
        else:
            self._resumed = False  # (a SIGCONT without a stop behind it)
            self._count(lag_ms, cpu_wait_ms)

    def _pause(self) -> None:
        self.lag.paused += 1
        self._on_paused()

    def _count(self, lag_ms: float, cpu_wait_ms: float) -> None:
        self.lag.observe(lag_ms)
        self.less_cpu_wait.observe(max(0.0, lag_ms - cpu_wait_ms))
        self._on_sample(lag_ms / 1000)

    async def run(self) -> None:
        clock, interval_s = self._clock, self._interval_s
        stacks = StallStacks(self) if os.environ.get(STALL_STACKS_ENV) else None
        cpu_wait = _CpuWait()  # (opened here: on the loop's thread, whose counters it reads)
        try:
            while True:
                waited = cpu_wait.ms()
                before = self.last_wake_s = clock()
                await asyncio.sleep(interval_s)
                self.woke(max(0.0, (clock() - before - interval_s) * 1000), cpu_wait.ms() - waited)
        finally:
            cpu_wait.close()
            if stacks is not None:
                stacks.stop()


class _CpuWait:
    """The calling thread's total time spent runnable but not running (ms), from /proc/thread-self/schedstat
    (run ns, run-queue wait ns, slices); 0 where the kernel does not provide it."""

    def __init__(self) -> None:
        try:
            self._fd: int | None = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        except OSError:
            self._fd = None

    def ms(self) -> float:
        if self._fd is None:
            return 0.0
        try:
            return int(os.pread(self._fd, 128, 0).split()[1]) / 1e6
        except (OSError, IndexError, ValueError):
            return 0.0

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


STALL_STACKS_ENV = "QUORUMLOG_LOOP_STALL_STACKS"  # set (to anything): log the loop thread's stack during a stall
STALL_STACKS_AFTER_MS = 150


class StallStacks:
    """A diagnosis aid: a thread that logs where the loop thread is while the sleeper is overdue by more than
    STALL_STACKS_AFTER_MS. It sees a call that blocks with the GIL released (write, fsync, a page fault in a
    read of a mapping); a C call that holds the GIL shows as the stack once it let go."""

    def __init__(self, monitor: LoopLagMonitor) -> None:
        self._monitor = monitor
        self._loop_thread = threading.get_ident()
        self._stopped = threading.Event()
        threading.Thread(target=self._main, name="loop-stall-stacks", daemon=True).start()

    def stop(self) -> None:
        self._stopped.set()

    def _main(self) -> None:
        m = self._monitor
        due_s = m._interval_s + STALL_STACKS_AFTER_MS / 1000
        reported = None
        while not self._stopped.wait(0.05):
            last = m.last_wake_s
            if last == reported or m._clock() - last < due_s:
                continue
            reported = last
            frame = sys._current_frames().get(self._loop_thread)  # noqa: SLF001 - the documented way
            if frame is not None:
                log.warning("event loop stalled %.0f ms so far; the loop thread is at:\n%s",
                            (m._clock() - last) * 1000, "".join(traceback.format_stack(frame, limit=14)))
