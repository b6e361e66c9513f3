"""Event-loop lag of every node under heavy batched writes: the stalls the ledger benchmark showed, bounded in time.

    python bench/loop_lag.py [--duration-s 20] [--load ledgers,raft] [--label before] [--out FILE]

One `quorumlog cluster up --nodes 5 --flush sync` with 64 MiB segments and `group create raft3 --replicas 3`, as
bench/ledgers.py; then, at the same time for --duration-s: bench/ledgers.py's batched ledger load (4 ledgers x 16
adds of 64 KiB in flight, E=3 W=2 A=2) and `quorumlog bench --writers 4 --batch 1024` (1 MiB batches of 1 KiB
values) on raft3. Each node's loop lag (server/loop_lag.py: a 20 ms sleeper's oversleep) is read from its status at
the end: per node max and p99.9, and the cluster's (the nodes' buckets added up). With --delete-fraction F, F of
the ledgers written are then deleted and the run waits out a bookie GC (every 60 s), which compacts the entry logs
left partly live: the loop lag of that phase is reported apart (`after_deletes`). Prints one JSON document; --out
adds it, as {label: document}, to a results file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from quorumlog.soak.loop_lag import combine  # noqa: E402

QUORUMLOG = os.path.join(os.path.dirname(sys.executable), "quorumlog")
RAFT_GROUP = "raft3"


def five_nodes_and_a_raft_group(data_dir: str, base_port: int) -> str:
    """`cluster up` of 5 nodes (flush sync, 64 MiB segments) and a 3-replica Raft group RAFT_GROUP on them;
    returns the peers. (bench/ledgers.py's cluster too.)"""
    subprocess.run([QUORUMLOG, "cluster", "up", "--nodes", "5", "--data-dir", data_dir, "--flush", "sync",
                    "--base-port", str(base_port), "--set", "data_segment_size=67108864"],
                   check=True, timeout=120, stdout=subprocess.DEVNULL)
    subprocess.run([QUORUMLOG, "group", "create", RAFT_GROUP, "--replicas", "3", "--cluster", data_dir],
                   check=True, timeout=60, stdout=subprocess.DEVNULL)
    with open(os.path.join(data_dir, "cluster.json")) as f:
        peers = json.load(f)["peers"]
    if isinstance(peers, dict):
        peers = ",".join(f"{k}={v}" for k, v in peers.items())
    time.sleep(3)  # the bookies register in `_meta` after it has a leader
    return peers


async def node_loop_lag(peers: str) -> dict[str, dict]:
    from quorumlog.client import Client
    async with Client(peers) as c:
        return {s.id: s.raw.get("loop_lag", {}) for s in await c.status() if s.reachable}


async def delete_ledgers(peers: str, fraction: float) -> int:
    """Delete `fraction` of the ledgers (every one whose position modulo 4 falls below fraction x 4)."""
    from quorumlog.ledgers import LedgerClient
    async with LedgerClient(peers) as lc:
        ids = sorted(md.ledger_id for md in await lc.list_ledgers())
        doomed = [lid for i, lid in enumerate(ids) if i % 4 < fraction * 4]
        for lid in doomed:
            await lc.delete_ledger(lid)
    return len(doomed)


def reports(peers: str) -> dict[str, dict]:
    """Every node's loop lag report now (blocking; for the benchmarks' drivers)."""
    return asyncio.run(node_loop_lag(peers))


def between(before: dict[str, dict], after: dict[str, dict]) -> dict:
    """The loop lag of every node between two reports(): max (exact when a node's max grew meanwhile, else the
    upper edge of its highest bucket that gained samples), p99.9 and samples over 200 ms, of the lag and of the
    lag less CPU wait."""
    out = {}
    for key in (None, "less_cpu_wait"):
        deltas = []
        for n, a in after.items():
            a = a.get(key, {}) if key else a
            b = before.get(n, {})
            b = b.get(key, {}) if key else b
            gained = {k: c - b.get("buckets_ms", {}).get(k, 0) for k, c in a.get("buckets_ms", {}).items()}
            gained = {k: c for k, c in gained.items() if c > 0}
            top = a.get("max_ms", 0.0)
            if top <= b.get("max_ms", 0.0):
                top = min(top, max((float(k) for k in gained if k != "inf"), default=0.0))
            deltas.append({"buckets_ms": gained, "max_ms": top})
        d = combine(deltas)
        out[key or "lag"] = {k: d[k] for k in ("samples", "max_ms", "p999_ms", "over_200_ms")}
    return out


def summarize(per_node: dict[str, dict]) -> dict:
    """Per node max/p99.9 and samples, and the cluster's (every node's samples together); each also less the
    loop thread's wait for a CPU (server/loop_lag.py)."""
    keys = ("samples", "max_ms", "p99_ms", "p999_ms")
    nodes = {n: {**{k: d.get(k) for k in keys}, "paused": d.get("paused"),
                 "less_cpu_wait": {k: d.get("less_cpu_wait", {}).get(k) for k in keys}}
             for n, d in sorted(per_node.items())}
    reports = list(per_node.values())
    return {"nodes": nodes, "all_nodes": combine(reports),
            "all_nodes_less_cpu_wait": combine([r.get("less_cpu_wait", {}) for r in reports])}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duration-s", type=float, default=20.0)
    p.add_argument("--load", default="ledgers,raft")
    p.add_argument("--base-port", type=int, default=27300)
    p.add_argument("--label", default="run")
    p.add_argument("--out", default=None)
    p.add_argument("--delete-fraction", type=float, default=0.0)
    p.add_argument("--gc-wait-s", type=float, default=65.0)
    p.add_argument("--keep", action="store_true", help="leave the cluster's directory (its logs) for a look")
    a = p.parse_args()
    base = tempfile.mkdtemp(prefix="quorumlog-looplag-")
    data_dir = os.path.join(base, "cluster")
    loads = set(a.load.split(","))
    doc: dict = {"command": "python bench/loop_lag.py " + " ".join(sys.argv[1:]),
                 "date_utc": time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime()), "duration_s": a.duration_s,
                 "loads": sorted(loads), "load_avg_before": os.getloadavg()}
    try:
        peers = five_nodes_and_a_raft_group(data_dir, a.base_port)
        before = asyncio.run(node_loop_lag(peers))
        procs = {}
        if "ledgers" in loads:
            procs["ledgers"] = subprocess.Popen(
                [sys.executable, os.path.join(HERE, "ledgers.py"), "--load", "--peers", peers, "--quorums", "3,2,2",
                 "--writers", "4", "--in-flight", "16", "--entry-bytes", str(64 * 1024), "--duration-s",
                 str(a.duration_s), "--warmup-s", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if "raft" in loads:
            procs["raft"] = subprocess.Popen(
                [QUORUMLOG, "bench", "--cluster", data_dir, "--group", RAFT_GROUP, "--writers", "4", "--batch",
                 "1024", "--value-bytes", "1024", "--duration-s", str(a.duration_s), "--warmup-s", "1", "--json"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        results = {}
        for name, proc in procs.items():
            out, err = proc.communicate(timeout=a.duration_s + 120)
            if proc.returncode != 0:
                raise RuntimeError(f"{name}: {err[-2000:]}")
            d = json.loads(out)
            results[name] = {"mb_per_s": d["mb_per_s"], "errors": d["errors"],
                             "latency_ms": {k: d["latency_ms"][k] for k in ("p50", "p99", "p999")}}
        doc["results"] = results
        doc["loop_lag_idle_before_load"] = {k: v for k, v in summarize(before).items() if k != "nodes"}
        loaded = asyncio.run(node_loop_lag(peers))
        doc["loop_lag"] = summarize(loaded)
        if a.delete_fraction > 0:
            doc["deleted_ledgers"] = asyncio.run(delete_ledgers(peers, a.delete_fraction))
            time.sleep(a.gc_wait_s)
            doc["after_deletes"] = between(loaded, asyncio.run(node_loop_lag(peers)))
    finally:
        subprocess.run([QUORUMLOG, "cluster", "down", "--data-dir", data_dir], timeout=60,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if a.keep:
            print(f"kept {base}", file=sys.stderr)
        else:
            shutil.rmtree(base, ignore_errors=True)
    doc["load_avg_after"] = os.getloadavg()
    print(json.dumps(doc, indent=1))
    if a.out:
        runs = {}
        if os.path.exists(a.out):
            with open(a.out) as f:
                runs = json.load(f)
        runs[a.label] = doc
        with open(a.out, "w") as f:
            json.dump(runs, f, indent=1)


if __name__ == "__main__":
    main()
