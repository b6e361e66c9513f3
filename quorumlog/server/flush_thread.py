"""Group commit through one dedicated fsync thread (flush mode `sync`): GroupCommitter minus the task hops.

GroupCommitter (group_commit.py) wakes a flusher task, which hands store.flush to the default executor with
asyncio.to_thread and awaits it. strace of a follower under one-at-a-time appends shows the cost: from the
store write to the fsync's start one loop turn, a task switch and an executor submit; from the fsync's end to
the ack on the socket a call_soon_threadsafe, a future chained into another, a task switch and the peer
link's writer task (three loop turns). Here `written()` hands the request straight to a parked thread (one
SimpleQueue.put), and the thread reports with one call_soon_threadsafe whose callback steps Durable at once.

Same guarantees as GroupCommitter: one fsync at a time covering everything written before it started, the
answer clamped at a truncation that happened meanwhile, durable only once fdatasync returned, io_lock held
by nobody else while it runs. The fast path covers the common case only; every case it does not take (io_lock
busy or awaited, closing) goes to GroupCommitter's own task and flush_once. A failed fsync gets GroupCommitter's
own policy (_fsync_failed: EIO is final, a full disk is reported and retried by that task after the backoff),
and the committer keeps using that path from then on.

A node hosting many groups shares one FsyncWorker among their committers: one thread, each request one
fdatasync of one group's files that have dirty data, taken in arrival order (a group never has two queued:
its next fsync starts when the previous one's answer arrived). 1,000 groups cost one thread, not 1,000.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from typing import Callable

from ..codes import ResponseCode
from .group_commit import GroupCommitter

_STOP = object()


class FsyncWorker:
    """One fsync thread for many committers. `submit(flush, done, started)` runs flush() on the thread and
    calls done(result or exception, started) on the loop."""

    def __init__(self, name: str = "fsync") -> None:
        self._loop = asyncio.get_running_loop()
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def submit(self, flush: Callable[[], int], done: Callable[[int | BaseException, float], None],
               started: float) -> None:
        self._requests.put((flush, done, started))

    def close(self) -> None:
        if self._thread is not None:
            self._requests.put(_STOP)
            self._thread = None

    def _main(self) -> None:
        get = self._requests.get
        report = self._loop.call_soon_threadsafe
        while True:
            job = get()
            if job is _STOP:
                return
            flush, done, started = job
            try:
                result: int | BaseException = flush()
            except BaseException as e:  # noqa: BLE001 - reported on the loop, handled by GroupCommitter
                result = e
            try:
                report(done, result, started)
            except RuntimeError:  # the loop is closed: nobody to tell
                return


class _IoLock(asyncio.Lock):
    """GroupCommitter's io lock, also excluding the fsync thread: an acquirer waits for a running fsync,
    and the fsync thread starts none while the lock is held or awaited."""

    def __init__(self, committer: "ThreadedGroupCommitter") -> None:
        super().__init__()
        self._committer = committer
        self.waiting = 0

    async def acquire(self) -> bool:
        c = self._committer
        self.waiting += 1
        try:
            while True:
                await super().acquire()
                if not c.fsync_running:
                    return True
                super().release()
                await c.fsync_idle.wait()
        finally:
            self.waiting -= 1


class ThreadedGroupCommitter(GroupCommitter):
    """Drop-in for GroupCommitter (same constructor, same methods); must be made inside the running loop.
    With `fsync_worker` it uses that shared thread, else a thread of its own."""

    def __init__(self, store, *, sync: bool, on_durable: Callable[[int], None],
                 on_failed: Callable[[ResponseCode, str], None],
                 observe_fsync_s: Callable[[float], None] = lambda s: None,
                 fsync_worker: FsyncWorker | None = None) -> None:
        super().__init__(store, sync=sync, on_durable=on_durable, on_failed=on_failed,
                         observe_fsync_s=observe_fsync_s)
        self._loop = asyncio.get_running_loop()
        self._lock = _IoLock(self)
        self.fsync_running = False
        self.fsync_idle = asyncio.Event()
        self.fsync_idle.set()
        self._fast = sync  # async mode keeps GroupCommitter's paced background fsync
        self._worker = fsync_worker
        self._own_worker = False
        if self._fast and self._worker is None:
            self._worker = FsyncWorker()
            self._own_worker = True

    # -- the loop's side ---------------------------------------------------------------------------------
    def written(self, end_index: int) -> None:
        self._written = end_index
        if self.fsync_running:
            return  # its completion starts the next one
        if self.failed is not None:
            return  # nothing is flushed after a disk error (group_commit.py's module doc)
        if self._fast and not self._closed and not self._lock.locked() and not self._lock.waiting:
            self._start()
        else:
            self._wake.set()

    def close(self) -> None:
        super().close()
        if self._own_worker and self._worker is not None:
            self._worker.close()

    def _start(self) -> None:
        self.fsync_running = True
        self.fsync_idle.clear()
        self._truncated_to = None
        self._worker.submit(self._store.flush, self._done, time.perf_counter())

    def _done(self, result: int | BaseException, started: float) -> None:
        """On the loop: the fsync thread finished one flush."""
        self.fsync_running = False
        self.fsync_idle.set()
        if isinstance(result, BaseException):
            # GroupCommitter's policy; a retry (full disk) goes through its own task from now on.
            self._fast = False
            backoff_s = self._fsync_failed(result)
            if backoff_s is not None:
                self._loop.call_later(backoff_s, self._wake.set)
            return
        if self._fsync_done(result, started) and not self.fsync_running:
            if self._fast and not self._closed and not self._lock.locked() and not self._lock.waiting:
                self._start()
            else:
                self._wake.set()
