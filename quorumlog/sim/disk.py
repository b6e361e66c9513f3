"""A node's simulated disk: a MemoryStore whose flushes take virtual time (group commit).

A flush covers what was written before it started, nothing after; writes that arrive while a flush is in
flight wait for the next one, which starts when the current one completes (one fsync covers many appends).
A truncate clamps the flush in flight: the entries it was covering are gone, and their replacements were
written after it started. A crash loses every unflushed entry (MemoryStore.crash), and the flush with it.

Disk faults refuse a write before any of it is stored, as a FileStore does: `full` (DISK_FULL until the space
comes back) and `fail_next_write` (EIO; the store then refuses every write until the node restarts, as a
FileStore that saw EIO does: fsyncgate).
"""

from __future__ import annotations

import random
from typing import Callable

from ..errors import DiskError, DiskFull
from ..store.memory import MemoryStore
from .scheduler import Scheduler


class SimStore(MemoryStore):
    full = False
    fail_next_write = False
    failed = False  # saw EIO: refuses writes until restart

    def _check_disk(self) -> None:
        if self.fail_next_write:
            self.fail_next_write, self.failed = False, True
        if self.failed:
            raise DiskError("simulated EIO on write")
        if self.full:
            raise DiskFull("simulated full disk")

    def append_batch(self, *args, **kwargs) -> int:
        self._check_disk()
        return super().append_batch(*args, **kwargs)

    def append_records(self, data) -> int:
        self._check_disk()
        return super().append_records(data)

    def flush_to(self, index: int) -> int:
        """Make entries ≤ index durable (a flush that started when end_index was `index`)."""
        assert index <= self.end_index, f"flush_to({index}) beyond end {self.end_index}"
        self._durable = max(self._durable, index)
        return self._durable


class Disk:
    def __init__(self, store: SimStore, rng: random.Random, scheduler: Scheduler, flush_delay_max_ms: int,
                 slow_flush_delay_max_ms: int, on_durable: Callable[[int], None]) -> None:
        self.store = store
        self.rng = rng
        self.scheduler = scheduler
        self.flush_delay_max_ms = flush_delay_max_ms
        self.slow_flush_delay_max_ms = slow_flush_delay_max_ms
        self.on_durable = on_durable
        self.slow = False
        self._flush_target: int | None = None  # end_index when the flush in flight started
        self._flush_id = 0
        self._dirty = False  # written since the flush in flight started
        self.flushes = 0

    def written(self) -> None:
        if self._flush_target is None:
            self._start_flush()
        else:
            self._dirty = True

    def truncated(self, after_index: int) -> None:
        if self._flush_target is not None:
            self._flush_target = min(self._flush_target, after_index)

    def crashed(self) -> None:
        self._flush_target = None
        self._dirty = False
        self._flush_id += 1  # the completion in the queue finds a stale id and does nothing

    def _start_flush(self) -> None:
        self._flush_target = self.store.end_index
        self._dirty = False
        self._flush_id += 1
        limit = self.slow_flush_delay_max_ms if self.slow else self.flush_delay_max_ms
        self.scheduler.after(self.rng.randint(0, limit), self._flush_done, self._flush_id)

    def _flush_done(self, flush_id: int) -> None:
        if flush_id != self._flush_id:
            return
        target = self._flush_target
        assert target is not None
        self._flush_target = None
        self.flushes += 1
        durable = self.store.flush_to(min(target, self.store.end_index))
        if self._dirty:
            self._start_flush()
        self.on_durable(durable)
