"""A group's state machine on a node (DLedger 0.3's StateMachineCaller): the `_meta` group's key/value store
(meta/kv.py), or a topic group's dispatcher into consume queues (topic/dispatcher.py).

- Applies committed entries in order, once each (meta/state_machine.py's runner), after every commit the
  replica executes; callers wait for "applied ≥ i" (a write's own index, a read's ReadIndex) and get the
  result the entry produced.
- Keeps snapshots in `data_dir/snapshots/` (written to a temporary file, fsynced, renamed, directory
  fsynced; the newest two kept), one every `snapshot_every` applied entries; on restart it loads the newest
  and replays the log after it. Retention never deletes what the newest snapshot does not cover.
- A member whose log the leader reset past what it applied (it was far behind, or new, and the leader's
  retention deleted the entries it lacks) cannot replay: it installs the leader's snapshot instead — fetched
  over a client connection (KvRequest "snapshot"), stored durably, then applying resumes after it.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import os
import re
from collections import OrderedDict
from typing import TYPE_CHECKING

from ..errors import CorruptEntry, IndexOutOfRange
from ..meta.kv import Change, KVStore, Result
from ..meta.state_machine import StateMachineRunner

if TYPE_CHECKING:
    from ..store.file_store import FileStore
    from ..topic.dispatcher import TopicDispatcher

log = logging.getLogger(__name__)

SNAPSHOT_DIR = "snapshots"
SNAPSHOTS_KEPT = 2
DEFAULT_SNAPSHOT_EVERY = 10_000
RESULTS_KEPT = 4096  # results of recent writes, for a retried (deduplicated) write to find its own


class StateMachineHost:
    def __init__(self, data_dir: str, log_view: FileStore, *, snapshot_every: int = DEFAULT_SNAPSHOT_EVERY,
                 machine_type: type[KVStore] | type[TopicDispatcher] = KVStore, suffix: str = "kv") -> None:
        self.dir = os.path.join(data_dir, SNAPSHOT_DIR)
        os.makedirs(self.dir, exist_ok=True)
        self.machine_type = machine_type  # a class with restore(bytes) and a no-argument constructor
        self.suffix = suffix
        self._file_re = re.compile(rf"^snapshot-(\d{{20}})\.{suffix}$")
        self.machine = self._load_newest()
        self.runner = StateMachineRunner(self.machine, log_view, snapshot_every)
        self._results: OrderedDict[int, Result] = OrderedDict()
        self._applied_waiters: list[tuple[int, int, asyncio.Future]] = []  # heap of (index, seq, future)
        self._waiter_seq = 0
        self._watchers: list[tuple[str, asyncio.Future]] = []
        self._snapshotting = False
        self.needs_snapshot = False  # the log no longer holds the next entry to apply
        self.installs = 0

    @property
    def kv(self) -> KVStore:
        return self.machine

    @property
    def applied_index(self) -> int:
        return self.machine.applied_index

    # -- snapshots on disk ----------------------------------------------------------------------------------
    def _files(self) -> list[tuple[int, str]]:
        out = []
        for name in os.listdir(self.dir):
            m = self._file_re.match(name)
            if m:
                out.append((int(m.group(1)), os.path.join(self.dir, name)))
        return sorted(out)

    def _load_newest(self) -> KVStore | TopicDispatcher:
        for index, path in reversed(self._files()):
            try:
                with open(path, "rb") as f:
                    machine = self.machine_type.restore(f.read())
                log.info("state machine loaded snapshot %s applied=%d", path, machine.applied_index)
                return machine
            except (OSError, CorruptEntry, ValueError) as e:  # a torn newest one: the previous one still holds
                log.error("state machine snapshot %s unusable: %s", path, e)
        return self.machine_type()

    def _write_snapshot(self, index: int, data: bytes) -> None:
        """Durably (runs in a thread): temp file, fsync, rename, fsync the directory; then drop old ones."""
        path = os.path.join(self.dir, f"snapshot-{index:020d}.{self.suffix}")
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        for _, old in self._files()[:-SNAPSHOTS_KEPT]:
            os.unlink(old)

    async def save_snapshot(self) -> None:
        if self._snapshotting:
            return
        self._snapshotting = True
        try:
            index, data = self.runner.take_snapshot()
            await asyncio.to_thread(self._write_snapshot, index, data)
            self.runner.snapshot_stored(index)
            log.info("state machine snapshot stored applied=%d bytes=%d", index, len(data))
        finally:
            self._snapshotting = False

    async def install(self, data: bytes) -> None:
        """Replace the state by a snapshot fetched from the leader (it covers what our log no longer has)."""
        machine = self.machine_type.restore(data)
        if machine.applied_index <= self.machine.applied_index:
            return
        await asyncio.to_thread(self._write_snapshot, machine.applied_index, data)
        self.machine = self.runner.machine = machine
        self.runner.snapshot_stored(machine.applied_index)
        self.needs_snapshot = False
        self.installs += 1
        log.warning("state machine installed a snapshot applied=%d", machine.applied_index)
        self._wake(machine.applied_index, changed=True)

    def retention_limit(self, safe_index: int) -> int:
        return self.runner.retention_limit(safe_index)

    # -- applying ----------------------------------------------------------------------------------------
    def on_commit(self, committed_index: int) -> bool:
        """Apply up to `committed_index`; True when a snapshot is due."""
        if self.needs_snapshot or committed_index <= self.machine.applied_index:
            return False
        try:
            applied = self.runner.on_commit(committed_index)
        except IndexOutOfRange:
            # (entries applied before the gap are kept: the runner advanced applied_index as it went)
            log.warning("state machine cannot replay: the log no longer holds entry %d; installing a snapshot",
                        self.machine.applied_index + 1)
            self.needs_snapshot = True
            return False
        results = self._results
        for index, result in applied:
            results[index] = result
        while len(results) > RESULTS_KEPT:
            results.popitem(last=False)
        self._wake(self.machine.applied_index, changed=bool(applied))
        return self.runner.snapshot_due()

    def result_of(self, index: int) -> Result | None:
        return self._results.get(index)

    def _wake(self, applied: int, changed: bool) -> None:
        waiters = self._applied_waiters
        while waiters and waiters[0][0] <= applied:
            fut = heapq.heappop(waiters)[2]
            if not fut.done():
                fut.set_result(None)
        if changed and self._watchers:
            watchers, self._watchers = self._watchers, []
            for _, fut in watchers:
                if not fut.done():
                    fut.set_result(None)

    async def wait_applied(self, index: int) -> None:
        if self.machine.applied_index >= index:
            return
        fut = asyncio.get_running_loop().create_future()
        self._waiter_seq += 1
        heapq.heappush(self._applied_waiters, (index, self._waiter_seq, fut))
        await fut

    async def wait_change(self, revision: int, prefix: str, timeout_s: float) -> list[Change]:
        """Changes after `revision` under `prefix`, waiting up to timeout_s for the first (WatchCompacted if
        the history no longer reaches back to `revision`)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            changes = self.kv.changes_since(revision, prefix)
            left = deadline - loop.time()
            if changes or left <= 0:
                return changes
            fut = loop.create_future()
            self._watchers.append((prefix, fut))
            try:
                await asyncio.wait_for(fut, left)
            except asyncio.TimeoutError:
                pass

    def close(self) -> None:
        for _, _, fut in self._applied_waiters:
            fut.cancel()
        for _, fut in self._watchers:
            fut.cancel()
        self._applied_waiters.clear()
        self._watchers.clear()
