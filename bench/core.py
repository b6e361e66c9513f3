"""Benchmark: entries/s through a 3-node cluster of RaftCores over MemoryStores, zero-latency network.

    .venv/bin/python bench/core.py [--entries N] [--quick]

Every node's Ready is executed as the contract says (hard state, truncate, appends → Stored, messages,
completions, commit). Messages are delivered at once; a node flushes (MemoryStore.flush, then Durable) when
it has nothing else to do — group commit at zero latency. Time is split into the cores' own step() CPU time
(the number the targets are about), the MemoryStore's (encoding records, validating chain CRCs), and the
driver's. Results go to bench/results/core-<date>.json.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import random
import sys
import time
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from quorumlog.raft.core import RaftCore  # noqa: E402
from quorumlog.raft.types import (AppendBatch, ClientAppend, Durable, HardState, RaftConfig, Receive, Role,  # noqa: E402
                                  Stored, Tick)
from quorumlog.store.memory import MemoryStore  # noqa: E402

BODY_BYTES = 100
TARGET_BATCH_ENTRIES_PER_S = 1_000_000
TARGET_SINGLE_APPENDS_PER_S = 20_000


class TimedMemoryStore(MemoryStore):
    """MemoryStore whose read() (called by the leader's core to build pushes) is timed as store work."""

    read_s = 0.0

    def read(self, start, max_bytes, end=None):
        t0 = time.process_time()
        r = MemoryStore.read(self, start, max_bytes, end)
        self.read_s += time.process_time() - t0
        return r


class Bench:
    def __init__(self, n: int = 3) -> None:
        ids = tuple(f"n{i}" for i in range(n))
        self.ids = ids
        self.stores = {i: TimedMemoryStore() for i in ids}
        self.cores = {i: RaftCore(RaftConfig(node_id=i, peers=ids, max_pending_requests=1_000_000,
                                             max_wait_ack_ms=10**9),
                                  self.stores[i], HardState(), random.Random(k), 0) for k, i in enumerate(ids)}
        self.queue: deque = deque()
        self.dirty: set[str] = set()
        self.done = 0
        self.failed = 0
        self.core_s = 0.0
        self.store_s = 0.0
        self.steps = 0
        self.now_ms = 0
        pc = time.process_time
        while not any(c.role is Role.LEADER for c in self.cores.values()):
            self.now_ms += 10
            for i in ids:
                self.step(i, Tick(self.now_ms))
            self.drain()
        self.leader = next(i for i, c in self.cores.items() if c.role is Role.LEADER)
        self.core_s = self.store_s = 0.0
        self.steps = 0
        for st in self.stores.values():
            st.read_s = 0.0
        self._pc = pc

    def step(self, nid: str, event) -> None:
        pc = time.process_time
        t0 = pc()
        ready = self.cores[nid].step(event)
        t1 = pc()
        self.core_s += t1 - t0
        self.steps += 1
        if not ready:
            return
        store = self.stores[nid]
        if ready.truncate_after is not None:
            store.truncate_after(ready.truncate_after)
        if ready.appends:
            for a in ready.appends:
                if type(a) is AppendBatch:
                    store.append_batch(a.term, a.bodies, a.timestamp_ms, a.producer, a.noop)
                else:
                    store.append_records(a.data)
            self.queue.append((nid, Stored(store.end_index)))
            self.dirty.add(nid)
        q = self.queue
        for m in ready.messages:
            q.append((m.to, Receive(m)))
        for c in ready.completions:
            if c.code == 200:
                self.done += c.last_index - c.first_index + 1
            else:
                self.failed += 1
        if ready.committed_index is not None:
            store.set_committed_index(ready.committed_index)
        self.store_s += pc() - t1

    def drain(self) -> None:
        q = self.queue
        while True:
            while q:
                nid, ev = q.popleft()
                self.step(nid, ev)
            if not self.dirty:
                return
            for nid in sorted(self.dirty):
                t0 = time.process_time()
                durable = self.stores[nid].flush()
                self.store_s += time.process_time() - t0
                self.step(nid, Durable(durable))
            self.dirty.clear()


def run(mode: str, total_entries: int, batch: int, pipeline: int) -> dict:
    b = Bench()
    body = b"x" * BODY_BYTES
    bodies = [body] * batch
    rid = 0
    submitted = 0
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    while submitted < total_entries:
        for _ in range(pipeline):
            rid += 1
            b.step(b.leader, ClientAppend(rid, bodies))
            submitted += batch
        b.drain()
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    b.core_s -= b.stores[b.leader].read_s  # the core calls MemoryStore.read to build pushes: store work
    b.store_s += b.stores[b.leader].read_s
    assert b.failed == 0 and b.done == submitted, (b.failed, b.done, submitted)
    for s in b.stores.values():
        assert s.end_index == submitted - 1
    batches = submitted // batch
    driver_s = cpu - b.core_s - b.store_s
    return {
        "mode": mode,
        "entries": submitted,
        "client_batches": batches,
        "entries_per_batch": batch,
        "pipelined_batches": pipeline,
        "body_bytes": BODY_BYTES,
        "wall_s": round(wall, 4),
        "process_cpu_s": round(cpu, 4),
        "core_step_s": round(b.core_s, 4),
        "store_s": round(b.store_s, 4),
        "driver_s": round(driver_s, 4),
        "core_steps": b.steps,
        "core_us_per_entry": round(b.core_s / submitted * 1e6, 4),
        "core_us_per_batch": round(b.core_s / batches * 1e6, 2),
        "core_us_per_step": round(b.core_s / b.steps * 1e6, 3),
        "store_us_per_entry": round(b.store_s / submitted * 1e6, 3),
        "entries_per_s_core_only": round(submitted / b.core_s),
        "entries_per_s_end_to_end_cpu": round(submitted / cpu),
        "entries_per_s_end_to_end_wall": round(submitted / wall),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entries", type=int, default=2_000_000, help="entries for the batch run")
    ap.add_argument("--single", type=int, default=100_000, help="appends for the single-entry runs")
    ap.add_argument("--quick", action="store_true", help="a short smoke run")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.quick:
        args.entries, args.single = 100_000, 10_000
    results = [
        run("batch-1000", args.entries, 1000, 8),
        run("single-pipelined", args.single, 1, 64),
        run("single-one-at-a-time", args.single // 5, 1, 1),
    ]
    batch, single = results[0], results[1]
    summary = {
        "benchmark": "bench/core.py",
        "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "cluster": "3 RaftCores over MemoryStores, zero-latency delivery, flush when idle",
        "targets": {
            "batch_1000_entries_per_s": TARGET_BATCH_ENTRIES_PER_S,
            "single_entry_appends_per_s": TARGET_SINGLE_APPENDS_PER_S,
            "batch_core_only_met": batch["entries_per_s_core_only"] >= TARGET_BATCH_ENTRIES_PER_S,
            "single_core_only_met": single["entries_per_s_core_only"] >= TARGET_SINGLE_APPENDS_PER_S,
            "batch_end_to_end_met": batch["entries_per_s_end_to_end_cpu"] >= TARGET_BATCH_ENTRIES_PER_S,
            "single_end_to_end_met": single["entries_per_s_end_to_end_cpu"] >= TARGET_SINGLE_APPENDS_PER_S,
        },
        "runs": results,
    }
    for r in results:
        print(f"{r['mode']:>22}: core-only {r['entries_per_s_core_only']:>12,} entries/s "
              f"({r['core_us_per_entry']} us/entry, {r['core_us_per_batch']} us/batch) | "
              f"end-to-end {r['entries_per_s_end_to_end_cpu']:>10,} entries/s | store {r['store_us_per_entry']} us/entry")
    out = Path(args.out) if args.out else (Path(__file__).parent / "results" /
                                           f"core-{_dt.date.today().isoformat()}.json")
    if not args.quick or args.out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(summary, indent=2) + "\n")
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
