"""Reads from any replica: committed entries, raw from the store, up to this node's committed index.

A long-poll (`wait_ms`) parks on a future that the runtime resolves when the committed index advances; no
sleep loop, so a follower streams new entries within one commit of their arrival.
"""

from __future__ import annotations

import asyncio
import logging

from ..codes import ResponseCode
from ..errors import QuorumLogError
from ..wire.client import ReadRequest, ReadResponse

log = logging.getLogger(__name__)

MAX_READ_BYTES = 16 * 1024 * 1024  # a reader cannot make us build a response bigger than this
MAX_WAIT_MS = 60_000


class CommitNotifier:
    """Wakes every parked reader when the committed index moves."""

    def __init__(self) -> None:
        self._committed = -1
        self._advanced: asyncio.Future[None] | None = None
        self.waiting = 0
        self._stopping = False

    @property
    def committed_index(self) -> int:
        return self._committed

    def advance(self, committed_index: int) -> None:
        if committed_index <= self._committed:
            return
        self._committed = committed_index
        fut, self._advanced = self._advanced, None
        if fut is not None and not fut.done():
            fut.set_result(None)

    async def wait_beyond(self, index: int, timeout_s: float) -> bool:
        """Wait until committed_index > index or timeout; True when it advanced past index."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        self.waiting += 1
        try:
            while self._committed <= index:
                if self._stopping:
                    return False
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return False
                if self._advanced is None:
                    self._advanced = loop.create_future()
                try:
                    await asyncio.wait_for(asyncio.shield(self._advanced), remaining)
                except asyncio.TimeoutError:
                    return False
            return True
        finally:
            self.waiting -= 1

    def wake_all(self) -> None:
        """Shutdown: let every parked reader answer now."""
        self._stopping = True
        fut, self._advanced = self._advanced, None
        if fut is not None and not fut.done():
            fut.set_result(None)


def read_committed(store, request: ReadRequest, committed_index: int) -> ReadResponse:
    """Answer a read from what is committed here now (no waiting)."""
    begin = store.begin_index
    committed = min(committed_index, store.end_index)
    if request.start < 0 or request.max_bytes <= 0:
        return ReadResponse(request.request_id, ResponseCode.BAD_REQUEST, begin, committed,
                            message=f"bad read start={request.start} max_bytes={request.max_bytes}")
    if request.start < begin:
        return ReadResponse(request.request_id, ResponseCode.INDEX_LESS_THAN_LOCAL_BEGIN, begin, committed,
                            message=f"index {request.start} < begin_index {begin} (removed by retention)")
    last = committed if request.end < 0 else min(request.end, committed)
    if request.start > last:
        return ReadResponse(request.request_id, ResponseCode.SUCCESS, begin, committed)
    try:
        records = store.read(request.start, min(request.max_bytes, MAX_READ_BYTES), last)
    except QuorumLogError as e:
        log.warning("read failed start=%d code=%s reason=%s", request.start, e.code.name, e)
        return ReadResponse(request.request_id, e.code, begin, committed, message=str(e))
    return ReadResponse(request.request_id, ResponseCode.SUCCESS, begin, committed, records=records)


async def serve_read(store, request: ReadRequest, notifier: CommitNotifier,
                     stopping: asyncio.Event | None = None) -> ReadResponse:
    """A read, parked up to wait_ms when nothing at `start` is committed yet."""
    response = read_committed(store, request, notifier.committed_index)
    if (response.code != ResponseCode.SUCCESS or response.records is not None or request.wait_ms <= 0
            or (request.end >= 0 and request.start > request.end) or (stopping is not None and stopping.is_set())):
        return response
    await notifier.wait_beyond(request.start - 1, min(request.wait_ms, MAX_WAIT_MS) / 1000)
    return read_committed(store, request, notifier.committed_index)
