"""The next pull of a partition a consumer is reading, started while its last Fetch answer is on the way.

A Kafka consumer keeps one Fetch in flight per broker: without read-ahead, the door's pulls for the next answer
start only when it asks, and the consumer waits for them every round. Read-ahead starts the pull for the offset
the consumer will ask for next (the one after the last record served) as an answer goes out; the next Fetch at
that offset takes it. Committed messages never change, so what was read ahead is what a pull then would bring;
a result older than MAX_AGE_S is dropped all the same (its high watermark would be stale), and so is one that
brought nothing (the consumer has caught up: its Fetch long-polls as usual).

Keyed by (topic, partition, offset): consumers of different groups reading one partition at different
offsets each keep their own, up to MAX_ENTRIES in all (the oldest go first), so memory stays within about
MAX_ENTRIES Fetch answers.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from typing import Any, Awaitable, Callable

MAX_ENTRIES = 32
MAX_AGE_S = 1.0

Key = tuple[str, int, int]  # topic, partition, offset


class ReadAhead:
    def __init__(self, spawn: Callable[[Awaitable[Any]], asyncio.Task], max_entries: int = MAX_ENTRIES,
                 max_age_s: float = MAX_AGE_S, clock: Callable[[], float] = time.monotonic) -> None:
        self._spawn = spawn  # the door's: its tasks are cancelled when it closes
        self._clock = clock
        self.max_entries = max_entries
        self.max_age_s = max_age_s
        self._pulls: OrderedDict[Key, tuple[float, asyncio.Task]] = OrderedDict()
        self.started = self.taken = 0

    def start(self, key: Key, pull: Awaitable[Any]) -> None:
        """Start `pull` (the pull for `key`), replacing one started for the same key."""
        self._drop(key)
        while len(self._pulls) >= self.max_entries:
            _, (_, oldest) = self._pulls.popitem(last=False)
            oldest.cancel()
        task = self._spawn(pull)
        task.add_done_callback(_retrieved)
        self._pulls[key] = (self._clock(), task)
        self.started += 1

    async def take(self, key: Key) -> Any | None:
        """The pull started for `key` (awaited if still running), or None: none started, too old, failed or
        empty. Either way it is taken: one answer per read-ahead."""
        entry = self._pulls.pop(key, None)
        if entry is None:
            return None
        started, task = entry
        if self._clock() - started > self.max_age_s:
            task.cancel()
            return None
        try:
            pulled = await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.cancelled():
                raise  # (our caller was cancelled, not the pull)
            return None
        except Exception:  # noqa: BLE001 - a failed read-ahead is no answer: the caller pulls itself
            return None
        if self._clock() - started > self.max_age_s or not pulled.messages:
            return None
        self.taken += 1
        return pulled

    def clear(self) -> None:
        for _, task in self._pulls.values():
            task.cancel()
        self._pulls.clear()

    def __len__(self) -> int:
        return len(self._pulls)

    def _drop(self, key: Key) -> None:
        entry = self._pulls.pop(key, None)
        if entry is not None:
            entry[1].cancel()


def _retrieved(task: asyncio.Task) -> None:
    """A read-ahead dropped before it was taken may have failed: nobody needs its error."""
    if not task.cancelled():
        task.exception()
