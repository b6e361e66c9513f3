"""ThreadedGroupCommitter: GroupCommitter's guarantees through a dedicated fsync thread."""

import asyncio
import threading

from quorumlog.server.flush_thread import ThreadedGroupCommitter

from .test_group_commit import GatedStore, _until


class NamedStore(GatedStore):
    def __init__(self) -> None:
        super().__init__()
        self.threads: list[str] = []

    def flush(self) -> int:
        self.threads.append(threading.current_thread().name)
        return super().flush()


def _committer(store, durable, failures=None, sync=True):
    return ThreadedGroupCommitter(store, sync=sync, on_durable=durable.append,
                                  on_failed=lambda c, r: (failures if failures is not None else []).append(c))


def test_written_starts_an_fsync_on_the_thread_without_the_task():
    async def main():
        store = NamedStore()
        store.gate.set()
        durable: list[int] = []
        gc = _committer(store, durable)  # no run() task at all: the thread alone makes entries durable
        gc.written(store.append_batch(1, [b"a"], 0))
        await _until(lambda: durable == [0])
        gc.close()
        assert store.threads == ["fsync"] and gc.fsyncs == 1
    asyncio.run(main())


def test_one_fsync_covers_everything_written_while_the_previous_ran():
    async def main():
        store = GatedStore()
        durable: list[int] = []
        gc = _committer(store, durable)
        task = asyncio.create_task(gc.run())
        gc.written(store.append_batch(1, [b"a"], 0))
        await asyncio.to_thread(store.started.wait, 5)
        for i in range(50):
            gc.written(store.append_batch(1, [b"x%d" % i], 0))
        store.started.clear()
        store.gate.set()
        await _until(lambda: durable and durable[-1] == 50)
        gc.close()
        await task
        assert store.flushes == 2 and durable == [0, 50] and gc.fsyncs == 2
    asyncio.run(main())


def test_truncate_during_fsync_clamps_the_answer():
    async def main():
        store = GatedStore()
        for _ in range(10):
            store.append_batch(1, [b"a"], 0)
        durable: list[int] = []
        gc = _committer(store, durable)
        task = asyncio.create_task(gc.run())
        gc.written(store.end_index)
        await asyncio.to_thread(store.started.wait, 5)
        store.truncate_after(4)
        gc.truncated(4)
        gc.written(store.append_batch(2, [b"b"], 0))
        store.gate.set()
        await _until(lambda: durable and durable[-1] == 5)
        gc.close()
        await task
        assert all(d <= 5 for d in durable) and store.flushes == 2
    asyncio.run(main())


def test_io_lock_waits_for_a_running_fsync_and_blocks_new_ones():
    async def main():
        store = GatedStore()
        durable: list[int] = []
        gc = _committer(store, durable)
        task = asyncio.create_task(gc.run())
        gc.written(store.append_batch(1, [b"a"], 0))
        await asyncio.to_thread(store.started.wait, 5)
        held = asyncio.Event()
        release = asyncio.Event()

        async def checkpoint():
            async with gc.io_lock:
                held.set()
                assert not gc.fsync_running
                await release.wait()
        cp = asyncio.create_task(checkpoint())
        await asyncio.sleep(0.02)
        assert not held.is_set()  # the fsync still runs
        store.gate.set()
        await asyncio.wait_for(held.wait(), 5)
        gc.written(store.append_batch(1, [b"b"], 0))  # lock held: not on the thread now
        assert not gc.fsync_running
        release.set()
        await cp
        await _until(lambda: durable and durable[-1] == 1)  # GroupCommitter's task took it
        gc.close()
        await task
    asyncio.run(main())


def test_async_mode_uses_the_paced_task_not_the_thread():
    async def main():
        store = NamedStore()
        store.gate.set()
        durable: list[int] = []
        gc = _committer(store, durable, sync=False)
        task = asyncio.create_task(gc.run())
        gc.written(store.append_batch(1, [b"a", b"b"], 0))
        await _until(lambda: store.durable_index == 1)
        gc.close()
        await task
        assert durable == [] and "fsync" not in store.threads
    asyncio.run(main())
