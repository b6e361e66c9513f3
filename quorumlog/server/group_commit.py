"""Group commit: one flusher task, one fdatasync at a time in a worker thread, covering every write so far.

Writes reach the store on the event loop (page cache, microseconds); durability comes from here. While one
fsync runs, new batches keep arriving; the next single fsync covers all of them, so under load the number of
fsyncs per second stays at the disk's fsync rate while the number of entries per fsync grows.

A truncate that happens while an fsync runs makes the fsync's answer unreliable above the truncation point
(the entries it covered may have been replaced), so the result is clamped there and another fsync follows.

A failed fsync (EIO: DISK_ERROR) is final. After fsync reports EIO, Linux may already have dropped the dirty
pages or marked them clean ("fsyncgate", PostgreSQL 2018): a second fsync can return 0 although the data
never reached the disk. So the committer never retries it and never reports anything durable again; the
store refuses every write after the error, and the core hands its leadership over and stays out of
elections. Only a restart, whose recovery re-reads and CRC-checks the files instead of trusting the page
cache, brings the node back (the entries it lacks come from the leader). A failed flush for a full disk
(DISK_FULL: ENOSPC from a checkpoint or metadata write; the data segments are preallocated) is retried
with backoff: space comes back. The backoff ends early when the node's disk check finds room again
(`disk_has_room`): a member whose commit a group waits for (say `_meta`'s, for a master/slave hand-over) must
not sleep out the rest of a doubled backoff once its disk can take the fsync.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable

from ..codes import ResponseCode
from ..errors import QuorumLogError
from .repeated_log import RepeatedLog

log = logging.getLogger(__name__)

ASYNC_FLUSH_INTERVAL_MS = 10  # flush mode async: background fsync period (DLedger's flushFileInterval)
FAILED_FLUSH_BACKOFF_MS = 100  # first retry after a failed fsync; doubles up to the max
FAILED_FLUSH_BACKOFF_MAX_MS = 5_000


class GroupCommitter:
    def __init__(self, store, *, sync: bool, on_durable: Callable[[int], None],
                 on_failed: Callable[[ResponseCode, str], None],
                 observe_fsync_s: Callable[[float], None] = lambda s: None) -> None:
        self._store = store
        self._sync = sync
        self._on_durable = on_durable
        self._on_failed = on_failed
        self._observe_fsync_s = observe_fsync_s
        self._written = store.end_index  # highest index written (maybe not durable)
        self._durable = store.durable_index
        self._truncated_to: int | None = None  # lowest truncation point since the running fsync started
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()  # serializes worker-thread store I/O (flush, checkpoint)
        self._closed = False
        self._failures = 0  # consecutive failed fsyncs
        self._room = asyncio.Event()  # set by disk_has_room: ends a full disk's backoff
        self._failed_log = RepeatedLog(log)
        self.failed: str | None = None  # a DISK_ERROR: no fsync is retried or believed after it
        self.fsyncs = 0

    @property
    def io_lock(self) -> asyncio.Lock:
        return self._lock

    @property
    def durable_index(self) -> int:
        return self._durable

    def written(self, end_index: int) -> None:
        """The store now holds entries up to end_index (not durable yet)."""
        self._written = end_index
        self._wake.set()

    def truncated(self, index: int) -> None:
        self._written = index
        self._durable = min(self._durable, index)
        self._truncated_to = index if self._truncated_to is None else min(self._truncated_to, index)

    def close(self) -> None:
        self._closed = True
        self._wake.set()

    async def run(self) -> None:
        """The flusher task: runs until close()."""
        while not self._closed:
            await self._wake.wait()
            self._wake.clear()
            if self._closed:
                break
            if self.failed is not None:
                continue  # nothing is flushed after a disk error (see the module doc)
            if not self._sync:
                # async mode: entries already counted as durable; fsync in the background at a fixed pace.
                await asyncio.sleep(ASYNC_FLUSH_INTERVAL_MS / 1000)
            if self._written > self._durable:
                await self.flush_once()

    async def flush_once(self) -> int:
        """One fsync covering everything written so far; returns the durable index."""
        if self.failed is not None:
            return self._durable
        async with self._lock:
            self._truncated_to = None
            started = time.perf_counter()
            try:
                durable = await asyncio.to_thread(self._store.flush)
            except Exception as e:  # noqa: BLE001 - any failure of the disk is reported to the core
                backoff_s = self._fsync_failed(e)
                if backoff_s is not None:
                    await self._back_off(backoff_s)
                    self._wake.set()
                return self._durable
            if self._fsync_done(durable, started):
                self._wake.set()
            return self._durable

    async def _back_off(self, seconds: float) -> None:
        self._room.clear()
        try:
            await asyncio.wait_for(self._room.wait(), seconds)
        except asyncio.TimeoutError:
            pass

    def disk_has_room(self) -> None:
        """The node's disk check found room again after a full disk: a flush backing off is retried now."""
        self._room.set()
        if self._failures and self.failed is None:
            self._wake.set()

    def _fsync_failed(self, e: BaseException) -> float | None:
        """The failure policy for one failed fsync (see the module doc): reports it to the core and returns
        the backoff in seconds before a retry, or None when the failure is final (DISK_ERROR)."""
        code = e.code if isinstance(e, QuorumLogError) else ResponseCode.DISK_ERROR
        if code not in (ResponseCode.DISK_FULL, ResponseCode.DISK_ERROR):
            code = ResponseCode.DISK_ERROR
        self._failures += 1
        self._failed_log.log(code, logging.ERROR, "flush failed code=%s failures=%d reason=%s", code.name,
                             self._failures, e)
        if code == ResponseCode.DISK_ERROR:
            self.failed = str(e)
            log.critical("disk error: no fsync will be retried or trusted until restart reason=%s", e)
            self._on_failed(code, str(e))
            return None
        self._on_failed(code, str(e))
        return min(FAILED_FLUSH_BACKOFF_MAX_MS, FAILED_FLUSH_BACKOFF_MS * 2 ** (self._failures - 1)) / 1000

    def _fsync_done(self, durable: int, started_s: float) -> bool:
        """Bookkeeping after a successful fsync that started at started_s (perf_counter) and reported
        `durable`: clamp at a truncation that happened meanwhile, report progress; True if another fsync
        is needed (a truncation, or writes that came after this one started)."""
        self.fsyncs += 1
        self._failures = 0
        self._observe_fsync_s(time.perf_counter() - started_s)
        again = False
        if self._truncated_to is not None:
            durable = min(durable, self._truncated_to)
            again = True  # what was written after the truncation needs its own fsync
        if durable > self._written:
            durable = self._written
        if durable > self._durable:
            self._durable = durable
            if self._sync:
                self._on_durable(durable)
        return again or self._written > self._durable
