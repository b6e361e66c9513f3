"""Ledgers against the Raft group on the same 5-node cluster, in one run.

    python bench/ledgers.py [--duration-s 5] [--warmup-s 1] [--rounds 3] [--recoveries 10] [--keep-page-cache]

One `quorumlog cluster up --nodes 5 --flush sync`, then `quorumlog group create raft3 --replicas 3`: the Raft group
(3 replicas, as bench/peers.py's, acked after a majority fdatasynced; the cluster's own `default` group has all 5
nodes and stays idle); every node is also a bookie whose journal fdatasyncs before it acks. Each workload runs in its own
generator process, the same for both sides:
  single   64 single 1 KiB writes in flight through one pipelining client: `quorumlog bench --writers 64` for
           the Raft group, one LedgerWriter with 64 adds in flight for a ledger (E=3 W=2 A=2, then E=W=A=3);
           and, E=3 W=2 A=2, 64 LedgerWriters (64 ledgers: a ledger has one writer) with one add in flight
           each, through one LedgerClient (`single_64_ledgers`);
  batched  4 writers of 1 MiB per call: `quorumlog bench --writers 4 --batch 1024` (1,024 x 1 KiB values per
           append_batch) against 4 ledgers each with 16 adds of 64 KiB in flight (an application batches
           values into entries, as Pulsar does) — bytes per second of values either way;
  recovery `open_ledger(recovery=True)` of a ledger while its writer keeps 64 adds in flight (fence, read
           forward, write back, close), and of an idle open ledger.
Each run also records the CPU-seconds its generator and each node used, per 100,000 entries (per GB for batched
runs), warm-up included at the measured rate. Everything here shares 2 cores, so a rate follows the CPU summed
over the processes; on machines of their own the busiest process would bound it instead, and `busiest_process`
compares the two sides that way (a projection, not a measurement).
Every workload runs --rounds times, the rounds in alternating order (forward, backward, ...), and reports its
median (what runs first on a fresh cluster gains on this machine). Before each workload the page cache is
emptied (sync, then /proc/sys/vm/drop_caches when writable; --keep-page-cache to skip): on this VM a page cache
growing into memory not used lately costs up to 4x the kernel CPU per GB written, so without it a workload's
figure depends on what ran before it (the Raft group's batched rounds ranged 77-201 MB/s in one run, most of
it its leader's mapped pages, which drop_caches could not free; the store unmaps them since 2026-11-27). The
journal against the disk's ceiling is bench/bookie.py's (bench/results/bookie-*.json).
Each workload's result, the recoveries and the whole run also give the nodes' event-loop lag (bench/loop_lag.py:
max, p99.9, samples over 200 ms; each also less the time the loop thread waited for a CPU).
Results: bench/results/ledgers-<date>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

from loop_lag import between as loop_lag_between, reports as loop_lag_reports  # noqa: E402  (bench/loop_lag.py)
from loop_lag import RAFT_GROUP as LOOP_LAG_RAFT_GROUP, five_nodes_and_a_raft_group, summarize as loop_lag_summary  # noqa: E402
from results_file import (children_cpu_s, cluster_node_pids, empty_page_cache,  # noqa: E402  (bench/results_file.py)
                          process_cpu_s)

log = logging.getLogger(__name__)
QUORUMLOG = os.path.join(os.path.dirname(sys.executable), "quorumlog")
QUORUMS = {"E3W2A2": (3, 2, 2), "E3W3A3": (3, 3, 3)}


# -- the generator (a process of its own: `python bench/ledgers.py --load ...`) ---------------------------------
async def ledger_load(peers: str, e: int, w: int, a: int, writers: int, in_flight: int, entry_bytes: int,
                      duration_s: float, warmup_s: float) -> dict:
    from hdrh.histogram import HdrHistogram

    from quorumlog.ledgers import LedgerClient

    hist = HdrHistogram(1, 60_000_000, 3)
    counts = {"entries": 0, "errors": 0}
    body = os.urandom(entry_bytes)
    measuring = asyncio.Event()
    stop = asyncio.Event()

    async def one_writer(lc: LedgerClient) -> None:
        lw = await lc.create_ledger(e, w, a)

        async def adder() -> None:  # like `quorumlog bench`'s writers: await each add, then the next
            perf = time.perf_counter
            while not stop.is_set():
                t0 = perf()
                try:
                    await lw.add_entry(body)
                except Exception:  # noqa: BLE001 - counted and reported
                    counts["errors"] += 1
                    continue
                if measuring.is_set() and not stop.is_set():
                    counts["entries"] += 1
                    hist.record_value(max(1, int((perf() - t0) * 1e6)))
        await asyncio.gather(*(adder() for _ in range(in_flight)))
        await lw.close()

    async with LedgerClient(peers) as lc:
        runs = [asyncio.create_task(one_writer(lc)) for _ in range(writers)]
        await asyncio.sleep(warmup_s)
        measuring.set()
        t0 = time.perf_counter()
        await asyncio.sleep(duration_s)
        stop.set()
        elapsed = time.perf_counter() - t0
        await asyncio.gather(*runs)
    return {"adds_per_s": round(counts["entries"] / elapsed, 1),
            "mb_per_s": round(counts["entries"] * entry_bytes / 1e6 / elapsed, 2),  # (10^6, as `quorumlog bench`)
            "errors": counts["errors"],
            "latency_ms": {k: round(hist.get_value_at_percentile(p) / 1000, 3)
                           for k, p in (("p50", 50), ("p99", 99), ("p999", 99.9))}}


async def recovery_times(peers: str, n: int) -> dict:
    from quorumlog.errors import LedgerFenced
    from quorumlog.ledgers import LedgerClient

    busy, idle = [], []
    async with LedgerClient(peers) as lc, LedgerClient(peers) as other:
        for i in range(n):
            lw = await lc.create_ledger(3, 2, 2)
            for _ in range(200):
                await lw.add_entry(b"x" * 1024)
            stop = asyncio.Event()

            async def keep_adding() -> None:
                sem = asyncio.Semaphore(64)
                while not stop.is_set():
                    await sem.acquire()

                    async def add() -> None:
                        try:
                            await lw.add_entry(b"y" * 1024)
                        except LedgerFenced:
                            stop.set()
                        finally:
                            sem.release()
                    asyncio.create_task(add())
            writer = asyncio.create_task(keep_adding()) if i % 2 == 0 else None
            await asyncio.sleep(0.3)
            t0 = time.perf_counter()
            r = await other.open_ledger(lw.ledger_id, recovery=True)
            (busy if writer else idle).append((time.perf_counter() - t0) * 1000)
            assert r.is_closed
            stop.set()
            if writer:
                await writer
    return {"under_writer_ms": _stats(busy), "idle_ms": _stats(idle)}


def _stats(xs: list[float]) -> dict:
    return {"n": len(xs), "median": round(statistics.median(xs), 1), "max": round(max(xs), 1)} if xs else {}


# -- the run --------------------------------------------------------------------------------------------------
def _load(a, peers: str, name: str, e: int, w: int, acks: int, writers: int, in_flight: int, entry_bytes: int) -> dict:
    argv = [sys.executable, __file__, "--load", "--peers", peers, "--quorums", f"{e},{w},{acks}",
            "--writers", str(writers), "--in-flight", str(in_flight), "--entry-bytes", str(entry_bytes),
            "--duration-s", str(a.duration_s), "--warmup-s", str(a.warmup_s)]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=a.duration_s + a.warmup_s + 120)
    if out.returncode != 0:
        raise RuntimeError(f"{name}: {out.stderr[-2000:]}")
    return json.loads(out.stdout)


def _with_cpu(run, pids: dict[str, int], a, key: str) -> dict:
    """run()'s result with "cpu_s_per_unit": the CPU-seconds of the generator and of each node per 100,000
    entries (per GB when `key` is mb_per_s), and the busiest of those processes."""
    nodes0, gen0 = {n: process_cpu_s(p) for n, p in pids.items()}, children_cpu_s()
    d = run()
    cpu = {"generator": children_cpu_s() - gen0} | {n: process_cpu_s(p) - nodes0[n] for n, p in pids.items()}
    seconds = a.duration_s + a.warmup_s
    units = d[key] * seconds / (1000 if key == "mb_per_s" else 100_000)  # GB, or 100k entries
    per = {n: round(c / units, 3) for n, c in cpu.items()} if units else {}
    return d | {"cpu_s_per_unit": {"unit": "GB" if key == "mb_per_s" else "100k entries", "processes": per,
                                   "total": round(sum(per.values()), 3), "busiest": max(per.values(), default=0)}}


def _key(workload: str) -> str:
    return "mb_per_s" if workload.endswith("batched") else "appends_per_s" if workload.startswith("raft") \
        else "adds_per_s"


RAFT_GROUP = LOOP_LAG_RAFT_GROUP  # (created with 3 replicas: `cluster up --nodes 5` gives its `default` group all five)


def _raft(a, data_dir: str, writers: int, batch: int) -> dict:
    out = subprocess.run([QUORUMLOG, "bench", "--cluster", data_dir, "--group", RAFT_GROUP,
                          "--writers", str(writers), "--batch", str(batch),
                          "--value-bytes", "1024", "--duration-s", str(a.duration_s), "--warmup-s", str(a.warmup_s),
                          "--json"], capture_output=True, text=True, timeout=a.duration_s + a.warmup_s + 120)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    d = json.loads(out.stdout)
    return {"appends_per_s": d["appends_per_s"], "mb_per_s": d["mb_per_s"], "errors": d["errors"],
            "latency_ms": {k: d["latency_ms"][k] for k in ("p50", "p99", "p999")}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duration-s", type=float, default=5.0)
    p.add_argument("--warmup-s", type=float, default=1.0)
    p.add_argument("--recoveries", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3, help="every workload this many times, in alternating order")
    p.add_argument("--out", default=os.path.join(HERE, "results"))
    p.add_argument("--base-port", type=int, default=27100)
    p.add_argument("--keep-page-cache", action="store_true", help="do not empty the page cache before each workload")
    # generator mode
    p.add_argument("--load", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--peers", help=argparse.SUPPRESS)
    p.add_argument("--quorums", default="3,2,2", help=argparse.SUPPRESS)
    p.add_argument("--writers", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--in-flight", type=int, default=64, help=argparse.SUPPRESS)
    p.add_argument("--entry-bytes", type=int, default=1024, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.load:
        try:
            import uvloop
            uvloop.install()
        except ImportError:
            pass
        e, w, acks = (int(x) for x in a.quorums.split(","))
        print(json.dumps(asyncio.run(ledger_load(a.peers, e, w, acks, a.writers, a.in_flight, a.entry_bytes,
                                                 a.duration_s, a.warmup_s))))
        return
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    base = tempfile.mkdtemp(prefix="quorumlog-ledgers-")
    data_dir = os.path.join(base, "cluster")
    doc = {"bench": "ledgers vs the Raft group", "date_utc": dt.datetime.now(dt.timezone.utc)
           .strftime("%Y-%m-%dT%H:%MZ"), "machine": {"cpus": os.cpu_count(), "load_avg_before": os.getloadavg()},
           "setup": {"cluster": "quorumlog cluster up --nodes 5 --flush sync; quorumlog group create raft3 "
                                "--replicas 3 (the Raft group benched)",
                     "flush": "sync: the Raft group acks after a majority fdatasynced; a bookie acks an add after "
                              "its journal fdatasynced it",
                     "duration_s": a.duration_s, "warmup_s": a.warmup_s,
                     "single": "64 x 1 KiB writes in flight, one client process",
                     "single_64_ledgers": "64 ledgers (64 LedgerWriters of one LedgerClient) x 1 add of 1 KiB in "
                                          "flight each",
                     "batched": "Raft: 4 writers x append_batch of 1,024 x 1 KiB; ledgers: 4 ledgers x 16 adds of "
                                "64 KiB in flight"},
           "command": "python bench/ledgers.py " + " ".join(sys.argv[1:])}
    results: dict = {}
    try:
        peers = five_nodes_and_a_raft_group(data_dir, a.base_port)
        workloads = {"raft_single": lambda: _raft(a, data_dir, 64, 1),
                     "raft_batched": lambda: _raft(a, data_dir, 4, 1024)}
        for name, (e, w, acks) in QUORUMS.items():
            workloads[f"ledger_{name}_single"] = lambda e=e, w=w, acks=acks, name=name: _load(
                a, peers, name, e, w, acks, 1, 64, 1024)
            if name == "E3W2A2":
                workloads[f"ledger_{name}_single_64_ledgers"] = lambda e=e, w=w, acks=acks, name=name: _load(
                    a, peers, name, e, w, acks, 64, 1, 1024)
            workloads[f"ledger_{name}_batched"] = lambda e=e, w=w, acks=acks, name=name: _load(
                a, peers, name, e, w, acks, 4, 16, 64 * 1024)
        # Rounds in alternating order (forward, then backward, ...): on this machine whichever runs first on a
        # fresh cluster gains, so one pass in a fixed order favours the Raft group. Each workload's median.
        runs: dict[str, list[dict]] = {k: [] for k in workloads}
        doc["setup"]["page_cache"] = "kept"
        pids = cluster_node_pids(data_dir)
        for r in range(a.rounds):
            for k in (list(workloads) if r % 2 == 0 else list(reversed(workloads))):
                if not a.keep_page_cache:
                    doc["setup"]["page_cache"] = empty_page_cache()
                lag_before = loop_lag_reports(peers)
                runs[k].append(_with_cpu(workloads[k], pids, a, _key(k)))
                runs[k][-1]["loop_lag"] = loop_lag_between(lag_before, loop_lag_reports(peers))
                log.info("round %d %s: %s", r, k, runs[k][-1])
        for k, got in runs.items():
            key = _key(k)
            results[k] = sorted(got, key=lambda d: d[key])[len(got) // 2] | {
                "rounds": [d[key] for d in got],
                "cpu_total_by_round": [d["cpu_s_per_unit"]["total"] for d in got],
                "cpu_busiest_by_round": [d["cpu_s_per_unit"]["busiest"] for d in got],
                "loop_lag_max_ms_by_round": [d["loop_lag"]["lag"]["max_ms"] for d in got]}
        lag_before = loop_lag_reports(peers)
        results["recovery"] = asyncio.run(recovery_times(peers, a.recoveries))
        results["recovery"]["loop_lag"] = loop_lag_between(lag_before, loop_lag_reports(peers))
        log.info("recovery: %s", results["recovery"])
        # (every node's event-loop lag over the whole run, page cache emptying and recoveries included)
        doc["loop_lag"] = loop_lag_summary(loop_lag_reports(peers))
    finally:
        subprocess.run([QUORUMLOG, "cluster", "down", "--data-dir", data_dir], timeout=60,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(base, ignore_errors=True)
    raft_single, raft_batched = results["raft_single"]["appends_per_s"], results["raft_batched"]["mb_per_s"]
    doc["results"] = results
    doc["ratios"] = {
        f"{name}_single_adds_vs_raft_appends": round(results[f"ledger_{name}_single"]["adds_per_s"] / raft_single, 2)
        for name in QUORUMS} | {
        "E3W2A2_single_64_ledgers_adds_vs_raft_appends": round(
            results["ledger_E3W2A2_single_64_ledgers"]["adds_per_s"] / raft_single, 2)} | {
        f"{name}_batched_mb_vs_raft_mb": round(results[f"ledger_{name}_batched"]["mb_per_s"] / raft_batched, 2)
        for name in QUORUMS}
    # (each round's own ratios too: the page cache's state moves every figure between rounds — see README)
    doc["ratios_by_round"] = {
        f"{name}_{kind}": [round(x / y, 2) for x, y in zip(results[f"ledger_{name}_{kind}"]["rounds"],
                                                          results[f"raft_{kind.split('_')[0]}"]["rounds"])]
        for name in QUORUMS for kind in ("single", "batched", "single_64_ledgers")
        if f"ledger_{name}_{kind}" in results}
    # (CPU per unit, medians over the rounds: all of it, and the busiest process's, whose inverse would bound the
    # rate on machines of their own; the ratio is the Raft group's over the ledger's, as the ratios above)
    cpu = {k: {"total": statistics.median(r["cpu_total_by_round"]), "busiest": statistics.median(
        r["cpu_busiest_by_round"])} for k, r in results.items() if "cpu_total_by_round" in r}
    doc["cpu_s_per_unit"] = cpu
    doc["busiest_process"] = {
        f"{name}_{kind}": round(cpu[f"raft_{kind.split('_')[0]}"]["busiest"] / cpu[f"ledger_{name}_{kind}"]["busiest"],
                                2)
        for name in QUORUMS for kind in ("single", "batched", "single_64_ledgers") if f"ledger_{name}_{kind}" in cpu}
    doc["targets"] = {"single_adds_ge_raft (E3W2A2)": doc["ratios"]["E3W2A2_single_adds_vs_raft_appends"] >= 1.0,
                      "single_adds_ge_raft (E3W3A3)": doc["ratios"]["E3W3A3_single_adds_vs_raft_appends"] >= 1.0,
                      "single_adds_64_ledgers_ge_raft (E3W2A2)":
                          doc["ratios"]["E3W2A2_single_64_ledgers_adds_vs_raft_appends"] >= 1.0,
                      "batched_mb_ge_1.5x_raft (E3W2A2)": doc["ratios"]["E3W2A2_batched_mb_vs_raft_mb"] >= 1.5,
                      "recovery_le_1s": results["recovery"]["under_writer_ms"].get("max", 1e9) <= 1000}
    doc["machine"]["load_avg_after"] = os.getloadavg()
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, f"ledgers-{dt.date.today().isoformat()}.json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    print(json.dumps({"ratios": doc["ratios"], "loop_lag": {k: v for k, v in doc["loop_lag"].items() if k != "nodes"},
                      "busiest_process": doc["busiest_process"], "targets": doc["targets"],
                      "recovery": results["recovery"]}, indent=1))


if __name__ == "__main__":
    main()
