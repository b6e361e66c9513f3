"""The log as Spark's synchronous callbacks see it: an async Client on a private loop thread.

Spark calls the data source from plain threads (driver) and worker processes (tasks). Each process keeps
one `Remote` per (peers, group), so a reused Python worker keeps its connections across tasks and
micro-batches instead of reconnecting for every one.
"""

from __future__ import annotations

import asyncio
import atexit
import gc
import logging
import os
import sys
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, AsyncIterator, Coroutine, Iterator, TypeVar

from ..client import Client
from ..client.blocking import new_event_loop
from ..client.types import WRITABLE_ROLES
from ..errors import NotLeader, QuorumLogError
from .options import SourceOptions

log = logging.getLogger(__name__)
T = TypeVar("T")

REPLICA_MIN_TIMEOUT_MS = 500
REPLICA_REQUEST_TIMEOUT_MS = 2_000
STATUS_RETRY_MS = 100  # between status rounds while a group has no leader (an election takes ~1 s)


@dataclass(frozen=True, slots=True)
class LogBounds:
    """What the leader reports: entries begin_index..committed_index are readable."""

    begin_index: int
    committed_index: int
    leader_id: str
    followers: tuple[str, ...]  # members that answered as followers
    committed_by_node: dict  # node id → its own committed index (reachable members only)


class Remote:
    """An async quorumlog Client on a daemon loop thread; `run` blocks, `submit` returns a Future."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._loop = new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="quorumlog-spark", daemon=True)
        self._thread.start()
        self.client, self.replica_client = self.run(self._make_clients())
        self._topic_client: Any = None
        self._closed = False

    async def _make_clients(self) -> tuple[Client, Client]:
        """One client for the leader (patient: it follows elections), one for a named replica (quick to
        give up, so a partition fails over to the leader instead of waiting out a dead follower)."""
        o = self.opts
        replica_ms = max(REPLICA_MIN_TIMEOUT_MS, o.follower_wait_ms)
        return (Client(o.peers, group=o.group, timeout_ms=o.timeout_ms, token=o.token, tls_ca=o.tls_ca),
                Client(o.peers, group=o.group, timeout_ms=replica_ms,
                       request_timeout_ms=min(replica_ms, REPLICA_REQUEST_TIMEOUT_MS), max_retries=1, token=o.token,
                       tls_ca=o.tls_ca))

    def topic_client(self) -> Any:
        """A TopicClient on this loop (made on first use), for topic reads: its routes and connections stay
        from task to task."""
        if self._topic_client is None:
            self._topic_client = self.run(self._make_topic_client())
        return self._topic_client

    async def _make_topic_client(self) -> Any:
        from ..client.topics import TopicClient

        o = self.opts
        return TopicClient(o.peers, timeout_ms=o.timeout_ms, token=o.token, tls_ca=o.tls_ca)

    def submit(self, coro: Coroutine) -> Future:
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def run(self, coro: Coroutine, timeout_s: float | None = None) -> Any:
        return self.submit(coro).result(timeout_s)

    def close(self) -> None:
        if getattr(self, "_closed", True):
            return
        self._closed = True
        try:
            self.run(self.client.close(), timeout_s=5)
            self.run(self.replica_client.close(), timeout_s=5)
            if self._topic_client is not None:
                self.run(self._topic_client.close(), timeout_s=5)
        except Exception:  # closing is best effort: the process may be on its way out
            log.debug("closing quorumlog client failed", exc_info=True)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    # -- driver-side questions --------------------------------------------------------------------
    def bounds(self) -> LogBounds:
        return self.run(self._bounds())

    async def _bounds(self) -> LogBounds:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.opts.timeout_ms / 1000
        while True:
            nodes = await self.client.status()
            leaders = [s for s in nodes if s.role in WRITABLE_ROLES]  # (a master/slave group: its master)
            if leaders:
                leader = max(leaders, key=lambda s: s.term)
                followers = tuple(s.id for s in nodes if s.role == "follower")
                committed = {s.id: s.committed_index for s in nodes if s.reachable}
                return LogBounds(max(0, leader.begin_index), leader.committed_index, leader.id, followers,
                                 committed)
            if loop.time() >= deadline:
                raise NotLeader(f"no leader among {', '.join(self.opts.node_ids)} within {self.opts.timeout_ms} ms")
            await asyncio.sleep(STATUS_RETRY_MS / 1000)


_REMOTES: dict[tuple, Remote] = {}
_REMOTES_LOCK = threading.Lock()


def remote_for(opts: SourceOptions) -> Remote:
    """This process's Remote for opts' cluster (made on first use; a forked child makes its own)."""
    key = (os.getpid(), opts.peers, opts.group, opts.timeout_ms, opts.token)
    with _REMOTES_LOCK:
        remote = _REMOTES.get(key)
        if remote is None or remote._closed:
            remote = _REMOTES[key] = Remote(opts)
        return remote


def drop_remote(opts: SourceOptions) -> None:
    """Forget (and close) this process's Remote, e.g. after its connections broke in a way retries missed."""
    key = (os.getpid(), opts.peers, opts.group, opts.timeout_ms, opts.token)
    with _REMOTES_LOCK:
        remote = _REMOTES.pop(key, None)
    if remote is not None:
        remote.close()


FREEZE_AFTER_OBJECTS = 10_000  # tracked objects that make a worker's per-task gc.collect() cost tens of ms


def settle_worker_heap() -> bool:
    """At the end of a task in a Spark Python worker: move the objects that stay alive across tasks out of
    the garbage collector's sight, when there are many. Returns whether it did.

    A reused worker runs a full gc.collect() after every task (pyspark/daemon.py). With pyspark, pyarrow,
    numpy and our client loaded that walks ~35,000 objects after the first task and ~58,000 before it:
    py-spy put 40% of a streaming worker's CPU there, 15-180 ms per task on 2 busy cores — more than
    reading and decoding the task's 100,000 entries. gc.freeze() (made for pre-fork servers) leaves them
    out of later collections; they are still freed by reference counting. A collection right before the
    freeze frees what is garbage now, so no cycle is frozen dead; new objects are collected as usual."""
    if "pyspark.worker" not in sys.modules:
        return False  # a driver or a test process keeps its heap as it is
    if len(gc.get_objects()) < FREEZE_AFTER_OBJECTS:  # frozen objects are not counted
        return False
    gc.collect()
    gc.freeze()
    log.debug("froze %d objects out of the garbage collector's sight", gc.get_freeze_count())
    return True


@atexit.register
def _close_all() -> None:
    with _REMOTES_LOCK:
        remotes = [r for k, r in _REMOTES.items() if k[0] == os.getpid()]
        _REMOTES.clear()
    for r in remotes:
        r.close()


__all__ = ["LogBounds", "QuorumLogError", "Remote", "drop_remote", "remote_for", "settle_worker_heap"]


def iterate_on_private_loop(agen: AsyncIterator[T]) -> Iterator[T]:
    """An async generator as a plain iterator (for a task's read()): it runs on a loop of its own, closed when
    the iteration ends or is abandoned (uvloop when installed, as every other loop of the client). In a Spark
    worker it ends the task the way every reader here does: settle_worker_heap()."""
    loop = new_event_loop()
    try:
        while True:
            try:
                yield loop.run_until_complete(agen.__anext__())
            except StopAsyncIteration:
                return
    finally:
        loop.run_until_complete(agen.aclose())
        loop.close()
        settle_worker_heap()
