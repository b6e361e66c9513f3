"""Master/slave groups (RocketMQ HA) against a Raft group on the same 3 nodes (127.0.0.1), in one run.

    python bench/master_slave.py [--duration-s 5] [--repeat 3] [--kills 10] [--catch-up-mib 256] [--flush sync]

- appends: `quorumlog bench` against a Raft group (3 replicas), a SYNC_MASTER group with 2 slaves and one with
  1 slave (min_in_sync_replicas 2 in both): one writer (p50 latency) and 64 writers (appends/s), 1 KiB entries;
  --repeat interleaved rounds (the order rotated each round), medians compared.
- catch-up: a slave killed, its data wiped, restarted empty while the master holds --catch-up-mib: MB/s until
  it holds the master's max offset.
- switch: kill -9 of the master of the 2-slave group under one writer, --kills times: ms from the kill to the
  first append acknowledged by a new master (the old one restarts as a slave between kills).
Results: bench/results/master-slave-<date>.json. Targets: single-writer p50 ≤ Raft's, 64 writers ≥
Raft's appends/s, catch-up ≥ 200 MB/s, switch median ≤ 2 s.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from quorumlog.client.groups import GroupAdmin  # noqa: E402
from quorumlog.errors import QuorumLogError  # noqa: E402
from quorumlog.peers import parse_peers  # noqa: E402
from quorumlog.soak.processes import Cluster  # noqa: E402

import results_file  # noqa: E402  (bench/results_file.py)

QUORUMLOG = os.path.join(os.path.dirname(sys.executable), "quorumlog")
MIB = 1024 * 1024


def _bench(peers: str, group: str, writers: int, duration_s: float) -> dict:
    out = subprocess.run([QUORUMLOG, "bench", "--peers", peers, "--group", group, "--writers", str(writers),
                          "--value-bytes", "1024", "--duration-s", str(duration_s), "--warmup-s", "1", "--json"],
                         capture_output=True, text=True, timeout=duration_s + 120)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    d = json.loads(out.stdout)
    return {"appends_per_s": d["appends_per_s"], "p50_ms": d["latency_ms"]["p50"], "p99_ms": d["latency_ms"]["p99"],
            "errors": d["errors"]}


def _median_run(runs: list[dict]) -> dict:
    """Each figure's median over the rounds (p50 and appends/s taken separately)."""
    return {k: statistics.median(r[k] for r in runs) for k in ("appends_per_s", "p50_ms", "p99_ms", "errors")}


def _paired_ratios(runs: dict) -> dict:
    """Each master/slave group against the Raft group of the same round, the median over rounds: the machine's
    drift between rounds (here up to 25%) cancels out."""
    def ratio(g: str, load: str, key: str) -> float:
        return round(statistics.median(m[key] / r[key] for m, r in zip(runs[g][load], runs["raft"][load])), 2)
    return {g: {"p50_ratio": ratio(g, "1_writer", "p50_ms"), "appends_ratio": ratio(g, "64_writers", "appends_per_s")}
            for g in ("ms2", "ms1")}


async def _rows(cluster: Cluster, group: str) -> dict[str, dict]:
    async with GroupAdmin(parse_peers(cluster.peers), timeout_ms=5_000) as admin:
        statuses = await admin.cluster_status()
    return {n: next(g for g in s["groups"] if g["group"] == group) for n, s in statuses.items()
            if isinstance(s, dict) and any(g["group"] == group for g in s["groups"])}


async def _setup(cluster: Cluster) -> None:
    async with GroupAdmin(parse_peers(cluster.peers), timeout_ms=30_000) as admin:
        deadline = time.monotonic() + 30
        while not all(isinstance(s, dict) for s in (await admin.cluster_status()).values()):
            assert time.monotonic() < deadline, "nodes never answered"
            await asyncio.sleep(0.1)
        await admin.create_meta()
        await admin.create("raft", replicas=3)
        await admin.create("ms2", replicas=3, mode="master-slave", master_slave={"min_in_sync_replicas": 2})
        await admin.create("ms1", replicas=2, mode="master-slave", master_slave={"min_in_sync_replicas": 2})


async def _catch_up(cluster: Cluster, mib: int) -> dict:
    rows = await _rows(cluster, "ms1")
    master = next(n for n, r in rows.items() if r["role"] == "master")
    slave = next(n for n in rows if n != master)
    async with cluster.client(group="ms1", timeout_ms=60_000) as c:
        body = b"x" * (64 * 1024)
        for _ in range(mib * MIB // (len(body) * 16)):
            await c.append_batch([body] * 16)
    cluster.nodes[slave].kill9()
    data = os.path.join(cluster.base_dir, slave, "groups", "ms1")
    for d in ("store", "epochs.json"):
        p = os.path.join(data, d)
        shutil.rmtree(p, ignore_errors=True) if os.path.isdir(p) else (os.path.exists(p) and os.unlink(p))
    target = (await _rows(cluster, "ms1"))[master]["max_offset"]
    cluster.nodes[slave].start()
    t0 = time.monotonic()
    first: tuple[float, int] | None = None  # when the restarted slave first answered, and what it held
    while True:
        rows = await _rows(cluster, "ms1")
        if slave in rows:
            if first is None:
                first = (time.monotonic(), rows[slave]["max_offset"])
            if rows[slave]["max_offset"] >= target:
                break
        if time.monotonic() - t0 > 300:
            raise RuntimeError("the empty slave never caught up")
        await asyncio.sleep(0.02)
    done = time.monotonic()
    took = done - first[0]
    moved = target - first[1]
    return {"bytes": moved, "seconds": round(took, 2), "mb_per_s": round(moved / took / 1e6, 1),
            "seconds_from_restart": round(done - t0, 2)}


async def _switches(cluster: Cluster, kills: int) -> dict:
    times = []
    async with cluster.client(group="ms2", timeout_ms=30_000, request_timeout_ms=300) as c:
        for k in range(kills):
            rows = await _rows(cluster, "ms2")
            master = next(n for n, r in rows.items() if r["role"] == "master")
            epoch = rows[master]["epoch"]
            await c.append(b"warm")
            cluster.nodes[master].kill9()
            t0 = time.monotonic()
            while True:
                try:
                    r = await c.append(f"after-kill-{k}".encode())
                    if r.term > epoch:
                        break
                except QuorumLogError:
                    pass
            times.append(round((time.monotonic() - t0) * 1000))
            print(f"switch {k}: {times[-1]} ms ({master} killed, epoch {epoch} -> {r.term})", flush=True)
            cluster.nodes[master].start()
            deadline = time.monotonic() + 60
            while True:  # the old master back as a slave, in step
                rows = await _rows(cluster, "ms2")
                if len(rows) == 3 and len({r["max_offset"] for r in rows.values()}) == 1:
                    break
                assert time.monotonic() < deadline, "the old master never converged"
                await asyncio.sleep(0.1)
    return {"switch_ms": times, "median_ms": statistics.median(times), "max_ms": max(times)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duration-s", type=float, default=5.0)
    p.add_argument("--kills", type=int, default=10)
    p.add_argument("--repeat", type=int, default=3, help="interleaved rounds of the append loads (medians)")
    p.add_argument("--catch-up-mib", type=int, default=256)
    p.add_argument("--flush", default="sync", choices=["sync", "async"])
    p.add_argument("--out", default=os.path.join(HERE, "results"))
    a = p.parse_args()
    base = tempfile.mkdtemp(prefix="quorumlog-ms-bench-")
    cluster = Cluster(base, n=3, extra_args=("--flush", a.flush))
    results: dict = {}
    try:
        cluster.start()
        asyncio.run(_setup(cluster))
        # Interleaved rounds, the groups' order rotated each round, medians reported: one pass in a fixed order
        # measured each group at another moment of this shared machine (runs vary by ±10-20% here).
        groups = ["raft", "ms2", "ms1"]
        runs: dict = {g: {"1_writer": [], "64_writers": []} for g in groups}
        for r in range(a.repeat):
            for group in groups[r % 3:] + groups[:r % 3]:
                for load, writers in (("1_writer", 1), ("64_writers", 64)):
                    runs[group][load].append(_bench(cluster.peers, group, writers, a.duration_s))
                print(f"round {r}", group, {k: v[-1] for k, v in runs[group].items()}, flush=True)
        appends = {g: {load: _median_run(rs) for load, rs in loads.items()} for g, loads in runs.items()}
        results["runs"] = runs
        raft = appends["raft"]
        results["appends"] = appends
        results["vs_raft"] = {g: {"p50_ratio": round(appends[g]["1_writer"]["p50_ms"] / raft["1_writer"]["p50_ms"], 2),
                                  "appends_ratio": round(appends[g]["64_writers"]["appends_per_s"]
                                                         / raft["64_writers"]["appends_per_s"], 2)}
                              for g in ("ms2", "ms1")}
        results["vs_raft_paired"] = _paired_ratios(runs)
        results["catch_up"] = asyncio.run(_catch_up(cluster, a.catch_up_mib))
        print("catch-up", results["catch_up"], flush=True)
        results["switch"] = asyncio.run(_switches(cluster, a.kills))
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)
    doc = {"bench": "master/slave groups against Raft on the same nodes",
           "date_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%MZ"),
           "machine": {"cpus": os.cpu_count(), "load_avg": os.getloadavg()},
           "setup": f"3 nodes on 127.0.0.1, flush {a.flush}; groups raft (3 replicas), ms2 (SYNC_MASTER, 2 slaves, "
                    f"min_in_sync_replicas 2), ms1 (SYNC_MASTER, 1 slave); 1 KiB entries; appends: medians of {a.repeat} "
                    f"interleaved rounds",
           "command": "python bench/master_slave.py " + " ".join(sys.argv[1:]), "results": results}
    results_file.write(a.out, "master-slave", doc, results)


if __name__ == "__main__":
    main()
