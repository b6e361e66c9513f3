"""Membership change on real nodes: how fast a new member catches up, and how long writes stop during a change.

    python bench/membership.py [--log-mib 1024] [--writers 4] [--flush sync]

A 3-node group (soak's process cluster, 127.0.0.1) is filled with --log-mib MiB of 1 KiB entries in 1 MiB
batches; then a fresh node starts with --join and is added as a learner, and the time until it holds the
leader's whole log gives the catch-up rate (MB/s of the leader's stored log bytes). The raw sequential-write
ceiling of the same filesystem (bench/store.py) is measured in the same run, so the rate is also given as a
fraction of what the disk can take. Then, under --writers single-entry writers: promote the learner, remove a
follower, remove the leader; for each change the longest gap between two acknowledged writes from the request
to 1 s after its answer is the change's write unavailability. Results: bench/results/membership-<date>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

import store as store_bench  # noqa: E402  (the raw-disk ceiling, reused)

from quorumlog.errors import LearnerNotCaughtUp, QuorumLogError  # noqa: E402
from quorumlog.soak.processes import Cluster  # noqa: E402

MIB = 1024 * 1024


async def fill(cluster: Cluster, mib: int, writers: int = 4) -> float:
    body = b"x" * 1000
    batch = [body] * 1024
    batches = mib * MIB // (len(body) * len(batch)) + 1
    todo = iter(range(batches))

    async def one() -> None:
        async with cluster.client(timeout_ms=30_000) as c:
            for _ in todo:
                await c.append_batch(batch)

    t0 = time.monotonic()
    await asyncio.gather(*(one() for _ in range(writers)))
    return time.monotonic() - t0


async def catch_up(cluster: Cluster, admin) -> dict:
    leader = await cluster.wait_leader(admin, timeout_s=10)
    await asyncio.sleep(2.5)  # the node refreshes store_bytes in /status every 2 s
    st = (await cluster.statuses(admin))[leader]
    target, log_bytes = st.end_index, st.raw["disk"]["store_bytes"]
    node = cluster.add_node()
    t0 = time.monotonic()
    await admin.change_member("add_learner", node.node_id, f"127.0.0.1:{node.port}")
    while True:
        s = (await cluster.statuses(admin))[node.node_id]
        if s.reachable and s.end_index >= target:
            break
        await asyncio.sleep(0.02)
    seconds = time.monotonic() - t0
    return {"node": node.node_id, "entries": target + 1, "log_bytes": log_bytes, "seconds": round(seconds, 3),
            "mb_per_s": round(log_bytes / seconds / 1e6, 1)}


async def unavailability(cluster: Cluster, admin, learner: str, writers: int) -> dict:
    acks: list[float] = []
    stop = asyncio.Event()

    async def writer(i: int) -> None:
        async with cluster.client(timeout_ms=10_000) as c:
            n = 0
            while not stop.is_set():
                try:
                    await c.append(b"w%d-%d" % (i, n))
                    acks.append(time.monotonic())
                except QuorumLogError:
                    pass
                n += 1

    async def change(name: str, fn) -> dict:
        await asyncio.sleep(1.0)
        t0 = time.monotonic()
        await fn()
        t1 = time.monotonic()
        await asyncio.sleep(1.0)
        edges = [t0, *(a for a in acks if t0 <= a <= t1 + 1.0), t1 + 1.0]
        return {"change": name, "answer_ms": round((t1 - t0) * 1000, 1),
                "max_write_gap_ms": round(max(b - a for a, b in zip(edges, edges[1:])) * 1000, 1)}

    async def promote() -> None:
        while True:
            try:
                await admin.change_member("promote", learner)
                return
            except LearnerNotCaughtUp:
                await asyncio.sleep(0.05)

    tasks = [asyncio.create_task(writer(i)) for i in range(writers)]
    out = [await change("promote learner", promote)]
    leader = await cluster.wait_leader(admin, timeout_s=10)
    follower = next(n for n in ("n0", "n1", "n2") if n != leader)
    out.append(await change(f"remove follower {follower}", lambda: admin.change_member("remove", follower)))
    out.append(await change(f"remove leader {leader}", lambda: admin.change_member("remove", leader)))
    stop.set()
    await asyncio.gather(*tasks)
    return {"writers": writers, "changes": out, "acks": len(acks)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--log-mib", type=int, default=1024)
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--flush", choices=("sync", "async"), default="sync")
    ap.add_argument("--out", default=os.path.join(HERE, "results", f"membership-{dt.date.today()}.json"))
    a = ap.parse_args()
    base = tempfile.mkdtemp(prefix="ql-membership-")
    # 1 MiB writes, each fdatasynced, into a fallocated file: what a follower's appends of big pushes can reach
    disk = store_bench.raw_sequential(base, 256 * MIB, MIB, "fallocated")
    disk = {"mb_per_s": round(disk["mb_per_s"] * MIB / 1e6, 1), "how": "1 MiB pwrite + fdatasync, fallocated"}
    cluster = Cluster(base, n=3, spares=1, extra_args=("--flush", a.flush))

    async def run() -> dict:
        async with cluster.client(timeout_ms=30_000) as admin:
            await cluster.wait_leader(admin, timeout_s=30)
            fill_s = await fill(cluster, a.log_mib)
            caught = await catch_up(cluster, admin)
            down = await unavailability(cluster, admin, caught["node"], a.writers)
        return {"fill_s": round(fill_s, 1), "catch_up": caught, "unavailability": down}

    try:
        cluster.start()
        result = asyncio.run(run())
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)  # four nodes' copies of the filled log: ~4 GB a run
    doc = {"date": str(dt.date.today()), "flush": a.flush, "log_mib": a.log_mib, "nodes": "3 + 1 joining, 127.0.0.1",
           "disk_ceiling": disk, **result}
    if disk["mb_per_s"]:
        doc["catch_up_vs_disk"] = round(result["catch_up"]["mb_per_s"] / disk["mb_per_s"], 2)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
