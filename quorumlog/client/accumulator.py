"""Coalesces concurrent append() calls into few batches (Kafka's RecordAccumulator, in one task).

A batch leaves when a send slot is free (at most max_in_flight batches in flight), after linger_ms, or as
soon as max_batch_bytes are waiting. While every slot is busy, new appends pile up and leave together:
many callers, few frames, with no added latency for a lone writer when linger_ms is 0 (once the last batches
were single appends flying alone, an append that finds nothing waiting or in flight is sent from its caller's
task).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass
from typing import Awaitable, Callable, Sequence

from ..errors import NetworkError

log = logging.getLogger(__name__)

LONE_AFTER_BATCHES = 2  # single-entry batches in a row, each alone in flight, before appends skip the accumulator


@dataclass(slots=True)
class PendingAppend:
    body: bytes
    future: asyncio.Future


SendBatch = Callable[[Sequence[PendingAppend]], Awaitable[None]]


class Accumulator:
    def __init__(self, send_batch: SendBatch, *, linger_ms: float, max_batch_bytes: int, max_in_flight: int) -> None:
        assert max_batch_bytes > 0 and max_in_flight > 0 and linger_ms >= 0
        self._send_batch = send_batch
        self._linger_s = linger_ms / 1000
        self._max_batch_bytes = max_batch_bytes
        self._slots = asyncio.Semaphore(max_in_flight)
        self._pending: deque[PendingAppend] = deque()
        self._pending_bytes = 0
        self._wake = asyncio.Event()
        self._full = asyncio.Event()
        self._closing = False
        # Not a TaskGroup: the client outlives any one `async with` block. Tasks are tracked here and
        # awaited or cancelled by close().
        self._tasks: set[asyncio.Task] = set()
        self._direct: set[asyncio.Future] = set()  # appends being sent from their caller's task
        self._in_flight = 0  # batches being sent (either way)
        self._lone = 0  # consecutive batches of one entry that were the only one in flight
        self._sender = asyncio.get_running_loop().create_task(self._run(), name="quorumlog-accumulator")
        self.batches_sent = 0

    async def add(self, body: bytes):
        if self._closing:
            raise NetworkError("client is closed")
        if self._sender.done():  # never expected; without this guard an append would wait forever
            raise NetworkError(f"append sender stopped: {self._sender!r}")
        fut = asyncio.get_running_loop().create_future()
        if not self._linger_s and not self._pending and self._in_flight == 0 and self._lone >= LONE_AFTER_BATCHES:
            # A lone writer (the last batches each held one entry and flew alone): this append would be a batch
            # of one whatever we do, so the caller's own task sends it (no hop through the accumulator task and
            # a sender task, each a loop turn, on the way out and back). Concurrent writers never get here: their
            # appends meet in the accumulator and keep sharing frames (the first writer woken by a shared answer
            # must not leave alone: that halves the entries per frame of 64 looping writers).
            await self._slots.acquire()  # all free: returns without suspending
            self._in_flight += 1
            self.batches_sent += 1
            self._direct.add(fut)
            try:
                await self._send([PendingAppend(body, fut)])  # answers fut, releases the slot
            finally:
                self._direct.discard(fut)
            return await fut
        self._pending.append(PendingAppend(body, fut))
        self._pending_bytes += len(body)
        self._wake.set()
        if self._pending_bytes >= self._max_batch_bytes:
            self._full.set()
        # Cancelling the caller cancels fut: an entry still waiting here is dropped; one already on the
        # wire stays in its batch and may still commit.
        return await fut

    def _take(self) -> list[PendingAppend]:
        """The next batch: waiting appends in arrival order up to max_batch_bytes (at least one)."""
        batch: list[PendingAppend] = []
        size = 0
        while self._pending:
            nxt = self._pending[0]
            if batch and size + len(nxt.body) > self._max_batch_bytes:
                break
            self._pending.popleft()
            self._pending_bytes -= len(nxt.body)
            if nxt.future.cancelled():
                continue  # cancelled before it left: not sent at all
            batch.append(nxt)
            size += len(nxt.body)
        assert self._pending_bytes >= 0 and (self._pending or self._pending_bytes == 0)
        if self._pending_bytes < self._max_batch_bytes:
            self._full.clear()
        return batch

    async def _run(self) -> None:
        while True:
            while not self._pending:
                self._wake.clear()
                await self._wake.wait()
            if self._linger_s > 0 and self._pending_bytes < self._max_batch_bytes and not self._closing:
                try:
                    await asyncio.wait_for(self._full.wait(), self._linger_s)
                except asyncio.TimeoutError:
                    pass
            await self._slots.acquire()  # while every slot is busy, appends keep piling into the next batch
            batch = self._take()
            if not batch:
                self._slots.release()
                continue
            self._in_flight += 1  # counted from here: a lone append must not overtake a batch already taken
            self.batches_sent += 1
            task = asyncio.get_running_loop().create_task(self._send(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _send(self, batch: list[PendingAppend]) -> None:
        """Send one batch that holds a slot and is counted in _in_flight; gives both back."""
        try:
            await self._send_batch(batch)
        except Exception as e:  # the sender reports per caller; this is a last resort so no caller hangs
            log.exception("append batch failed unexpectedly")
            for p in batch:
                if not p.future.done():
                    p.future.set_exception(e)
        finally:
            self._lone = self._lone + 1 if len(batch) == 1 and self._in_flight == 1 else 0
            self._in_flight -= 1
            self._slots.release()

    async def close(self, timeout_ms: float) -> None:
        """Let waiting and in-flight appends finish (bounded by timeout_ms), then stop; failing the rest."""
        self._closing = True
        self._full.set()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        while (self._pending or self._tasks or self._direct) and loop.time() < deadline:
            waiters = [p.future for p in self._pending] + list(self._tasks) + list(self._direct)
            await asyncio.wait(waiters, timeout=max(0.0, deadline - loop.time()))
        self._sender.cancel()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(self._sender, *self._tasks, return_exceptions=True)
        err = NetworkError("client closed before the append was sent")
        while self._pending:
            p = self._pending.popleft()
            if not p.future.done():
                p.future.set_exception(err)
