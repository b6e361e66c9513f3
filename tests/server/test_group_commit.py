import asyncio
import threading

import pytest

from quorumlog.codes import ResponseCode
from quorumlog.errors import DiskError, DiskFull
from quorumlog.server.flush_thread import ThreadedGroupCommitter
from quorumlog.server.group_commit import GroupCommitter
from quorumlog.store import MemoryStore


class GatedStore(MemoryStore):
    """flush() blocks until the test opens the gate, so writes can pile up behind a running fsync."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.started = threading.Event()
        self.flushes = 0
        self.fail_next = False

    def flush(self) -> int:
        covered = self.end_index  # like fdatasync: covers what was written when it started
        self.started.set()
        assert self.gate.wait(10)
        self.flushes += 1
        if self.fail_next:
            self.fail_next = False
            raise DiskError("EIO")
        self._durable = max(self._durable, covered)
        return covered


async def _until(pred, timeout_s=5.0):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not pred():
        assert loop.time() < deadline, "condition not reached"
        await asyncio.sleep(0.001)


def test_one_fsync_covers_everything_written_while_the_previous_ran():
    async def main():
        store = GatedStore()
        durable: list[int] = []
        gc = GroupCommitter(store, sync=True, on_durable=durable.append, on_failed=lambda c, r: None)
        task = asyncio.create_task(gc.run())
        gc.written(store.append_batch(1, [b"a"], 0))
        await asyncio.to_thread(store.started.wait, 5)  # fsync #1 running (covers index 0)
        for i in range(50):  # 50 batches arrive during fsync #1
            gc.written(store.append_batch(1, [b"x%d" % i], 0))
        store.started.clear()
        store.gate.set()
        await _until(lambda: durable and durable[-1] == 50)
        gc.close()
        await task
        # fsync #1 reported what was written when it started; one more fsync covered the 50 that came meanwhile
        assert store.flushes == 2
        assert durable == [0, 50]
        assert gc.fsyncs == 2
    asyncio.run(main())


def test_truncate_during_fsync_clamps_the_answer():
    async def main():
        store = GatedStore()
        for _ in range(10):
            store.append_batch(1, [b"a"], 0)
        durable: list[int] = []
        gc = GroupCommitter(store, sync=True, on_durable=durable.append, on_failed=lambda c, r: None)
        task = asyncio.create_task(gc.run())
        gc.written(store.end_index)
        await asyncio.to_thread(store.started.wait, 5)
        store.truncate_after(4)  # the running fsync's answer (9) is void above 4
        gc.truncated(4)
        gc.written(store.append_batch(2, [b"b"], 0))  # index 5 of term 2
        store.gate.set()
        await _until(lambda: durable and durable[-1] == 5)
        gc.close()
        await task
        assert all(d <= 5 for d in durable)
    asyncio.run(main())


# Both committers share the failure policy (GroupCommitter._fsync_failed): the task's fsync and the thread's.
COMMITTERS = pytest.mark.parametrize("committer", [GroupCommitter, ThreadedGroupCommitter])


@COMMITTERS
def test_failed_fsync_is_final_never_retried_nor_believed(committer):
    """fsyncgate: after EIO from fsync, a retried fsync may succeed over dropped pages; never retry it."""
    async def main():
        store = GatedStore()
        store.gate.set()
        store.fail_next = True
        durable, failures = [], []
        gc = committer(store, sync=True, on_durable=durable.append, on_failed=lambda c, r: failures.append(c))
        task = asyncio.create_task(gc.run())
        gc.written(store.append_batch(1, [b"a"], 0))
        await _until(lambda: failures == [ResponseCode.DISK_ERROR])
        gc.written(store.append_batch(1, [b"b"], 0))
        for _ in range(50):  # writes after the error wake the flusher, which must not fsync again
            await asyncio.sleep(0.002)
        assert store.flushes == 1 and durable == [] and gc.failed
        assert await gc.flush_once() == gc.durable_index
        assert store.flushes == 1
        gc.close()
        await task
        assert failures == [ResponseCode.DISK_ERROR]
    asyncio.run(main())


def _flushing_while(committer, still_full):
    """A committer started over a store whose flush fails with DiskFull while still_full(), with one entry
    written: (committer, its task, durable reports, failure reports)."""
    store = GatedStore()
    store.gate.set()
    real_flush = store.flush

    def flush():
        if still_full():
            raise DiskFull("ENOSPC")
        return real_flush()
    store.flush = flush
    durable, failures = [], []
    gc = committer(store, sync=True, on_durable=durable.append, on_failed=lambda c, r: failures.append(c))
    task = asyncio.create_task(gc.run())
    gc.written(store.append_batch(1, [b"a"], 0))
    return gc, task, durable, failures


@COMMITTERS
def test_failed_flush_for_a_full_disk_is_retried(committer):
    async def main():
        calls = []
        gc, task, durable, failures = _flushing_while(committer, lambda: calls.append(1) or len(calls) == 1)
        await _until(lambda: durable == [0])
        gc.close()
        await task
        assert failures == [ResponseCode.DISK_FULL] and gc.failed is None
    asyncio.run(main())


@COMMITTERS
def test_a_full_disks_backoff_ends_when_the_disk_has_room_again(committer):
    """Five failed flushes back off 1.6 s before the sixth; the node's disk check finding room again makes the
    retry happen now (a `_meta` follower's commit, say, waits on it)."""
    async def main():
        full = [True]
        gc, task, durable, failures = _flushing_while(committer, lambda: full[0])
        await _until(lambda: len(failures) == 5)  # 0.1 + 0.2 + 0.4 + 0.8 s of backoff so far
        full[0] = False
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        gc.disk_has_room()
        await _until(lambda: durable == [0])
        assert loop.time() - t0 < 0.5  # not the 1.6 s left of the backoff
        gc.close()
        await task
        assert failures == [ResponseCode.DISK_FULL] * 5 and gc.failed is None
    asyncio.run(main())


@pytest.mark.parametrize("sync", [True, False])
def test_async_mode_never_reports_durable_but_still_flushes(sync):
    async def main():
        store = GatedStore()
        store.gate.set()
        durable = []
        gc = GroupCommitter(store, sync=sync, on_durable=durable.append, on_failed=lambda c, r: None)
        task = asyncio.create_task(gc.run())
        gc.written(store.append_batch(1, [b"a", b"b"], 0))
        await _until(lambda: store.durable_index == 1)
        gc.close()
        await task
        assert durable == ([1] if sync else [])
    asyncio.run(main())
