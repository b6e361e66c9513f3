"""kill -9 a writer at random moments: after flush() returned N, entries <= N survive, and the log is a valid
prefix of what was written (every entry intact, in order, nothing invented)."""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import threading
import time

import pytest

from quorumlog.store import FileStore, StoreConfig

CRASH_CONFIG = StoreConfig(data_segment_size_bytes=8192, index_segment_size_bytes=32 * 16, max_entry_bytes=1024,
                           disk_full_ratio=1.0, checkpoint_interval_ms=5)


def body_of(index: int) -> bytes:
    """Deterministic per index, so a log rewritten after a crash must hold the very same bodies."""
    size = (index * 7919) % 700
    return (index.to_bytes(8, "big") * (size // 8 + 1))[:size]


def _writer(path: str, seed: int, conn) -> None:
    """Child: append random batches, flush from a worker thread and inline, report every flush result."""
    try:
        store = FileStore(path, CRASH_CONFIG)
        rnd = random.Random(seed)
        send_lock = threading.Lock()

        def report(durable: int) -> None:
            with send_lock:
                conn.send(durable)

        stop = threading.Event()

        def flusher() -> None:
            while not stop.is_set():
                report(store.flush())

        t = threading.Thread(target=flusher, daemon=True)
        conn.send("ready")
        t.start()
        while True:
            first = store.end_index + 1
            n = rnd.randrange(1, 40)
            store.append_batch(1, [body_of(first + i) for i in range(n)], int(time.time() * 1000))
            if rnd.random() < 0.2:
                report(store.flush())
            if rnd.random() < 0.05 and store.end_index > 50:
                store.set_committed_index(store.durable_index)
    except BaseException as e:  # the parent sees this in the pipe and fails the test
        conn.send(f"error: {e!r}")
    finally:
        os._exit(0)


def check_log(path: str, must_have: int) -> int:
    with FileStore(path, CRASH_CONFIG) as s:
        assert s.end_index >= must_have, f"flush() returned {must_have} but only {s.end_index} survived"
        assert s.begin_index == 0
        for i in range(s.end_index + 1):
            assert s.get(i).body == body_of(i), f"entry {i} differs"
        assert s.durable_index == s.end_index
        return s.end_index


def run_crashes(tmp_path, iterations: int, seed: int) -> None:
    ctx = multiprocessing.get_context("fork")
    path = str(tmp_path / "crash")
    rnd = random.Random(seed)
    for _ in range(iterations):
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_writer, args=(path, rnd.randrange(2 ** 32), child))
        proc.start()
        child.close()
        assert parent.poll(30), "writer did not start"
        assert parent.recv() == "ready"
        # The kill lands mid-work: after the writer's first flush (on a loaded machine a fixed delay can expire
        # before it got the CPU, and such a kill proves little), then at a random moment.
        assert parent.poll(30), "writer never flushed"
        first = parent.recv()
        assert not isinstance(first, str), first
        time.sleep(rnd.uniform(0.0, 0.12))  # the random moment of death
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(30)
        assert proc.exitcode == -signal.SIGKILL
        flushed = first
        while parent.poll(0):
            try:
                msg = parent.recv()
            except EOFError:
                break
            assert not isinstance(msg, str), msg
            flushed = max(flushed, msg)
        parent.close()
        check_log(path, flushed)


def test_kill_9_writer_30_times(tmp_path):
    run_crashes(tmp_path, iterations=30, seed=1)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3))
def test_kill_9_writer_many_times(tmp_path, seed):
    run_crashes(tmp_path, iterations=60, seed=100 + seed)
