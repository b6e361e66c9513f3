"""Many groups on 3 real nodes (127.0.0.1): what idle groups cost, and what spreading leaders buys.

    python bench/groups.py [--idle-groups 1000] [--measure-s 30] [--throughput-s 10] [--flush sync]

idle: --idle-groups groups, each on all 3 nodes with leaders spread (preferred leaders round robin), once
  written to and left idle: each node's CPU (utime+stime from /proc) over --measure-s, as % of one core,
  with quiescence on (the default) and, side by side in the same run, off (`--quiesce false`, every group
  heart-beating; 200 groups at most, since a thousand of them do not even fit on 2 cores: per-group ratio). Then n0 is killed with kill -9: seconds until every group has a leader again (quiet groups
  learn of it from node-level liveness).
throughput: aggregate append throughput of 8 groups (leaders on all 3 nodes) against 1 group, same machine,
  same load: 8 client processes × 4 writer tasks appending batches of 64 × 1 KiB entries, spread over the
  groups (all on the one group, or one process per group).
Results: bench/results/groups-<date>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

from quorumlog.client import Client  # noqa: E402
from quorumlog.client.groups import GroupAdmin  # noqa: E402
from quorumlog.peers import format_address, parse_peers  # noqa: E402
from quorumlog.soak.processes import Cluster  # noqa: E402
from results_file import process_cpu_s as cpu_s  # noqa: E402  (bench/results_file.py)

CREATE_WAVE = 100
OFF_GROUPS = 200
WRITER_PROCESSES = 8  # the same load for 1 group and for 8: 8 client processes × 4 writer tasks


def machine_cpu() -> tuple[int, int]:
    """(busy, total) jiffies of all cores (/proc/stat): how much of the machine a run used."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return sum(values) - idle, sum(values)


async def wait_up(admin: GroupAdmin, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not all(isinstance(s, dict) for s in (await admin.cluster_status()).values()):
        assert time.monotonic() < deadline, "nodes never answered"
        await asyncio.sleep(0.2)


async def create_groups(admin: GroupAdmin, names: list[str]) -> None:
    """Every group on all 3 nodes, preferred leaders round robin: placed as `group create` would on 3 nodes."""
    nodes = sorted(admin.nodes)
    peers = {n: format_address(admin.nodes[n]) for n in nodes}
    sem = asyncio.Semaphore(32)

    async def one(i: int, g: str) -> None:
        async with sem:
            d = {"group": g, "peers": peers, "preferred_leader_id": nodes[i % len(nodes)]}
            await asyncio.gather(*(admin.call(n, "create", d) for n in nodes))

    await asyncio.gather(*(one(i, g) for i, g in enumerate(names)))


async def all_rows(admin: GroupAdmin) -> list[dict]:
    return [g for s in (await admin.cluster_status()).values() if isinstance(s, dict) for g in s["groups"]]


async def idle(base: str, groups: int, measure_s: float, quiesce: bool, kill: bool) -> dict:
    os.makedirs(base, exist_ok=True)
    cluster = Cluster(base, n=3, extra_args=("--quiesce", "true" if quiesce else "false"))
    with cluster:
        nodes = parse_peers(cluster.peers)
        async with GroupAdmin(nodes, timeout_ms=60_000) as admin:
            await wait_up(admin)
            names = [f"idle{i:04d}" for i in range(groups)]
            sem = asyncio.Semaphore(32)

            async def touch(g: str) -> None:  # one entry each: a group that was used, then left idle
                async with sem:
                    async with Client(cluster.peers, group=g, timeout_ms=60_000) as c:
                        await c.append(b"x")

            # In waves, as an operator's script would create them: a new group is awake until it has elected a
            # leader and written, so a thousand created at once would all heart-beat and tick together.
            t0 = time.monotonic()
            for i in range(0, groups, CREATE_WAVE):
                wave = names[i:i + CREATE_WAVE]
                await create_groups(admin, wave)
                await asyncio.gather(*(touch(g) for g in wave))
            created_s = time.monotonic() - t0
            settle_deadline = time.monotonic() + 60
            while quiesce:
                rows = await all_rows(admin)
                quiet = sum(1 for r in rows if r["quiet"])
                if quiet == len(rows):
                    break
                assert time.monotonic() < settle_deadline, f"only {quiet} of {len(rows)} replicas quiet"
                await asyncio.sleep(1)
            pids = {n: cluster.nodes[n].pid for n in nodes}
            before = {n: cpu_s(p) for n, p in pids.items()}
            t1 = time.monotonic()
            await asyncio.sleep(measure_s)
            elapsed = time.monotonic() - t1
            cpu = {n: round(100 * (cpu_s(p) - before[n]) / elapsed, 2) for n, p in pids.items()}
            rss = {n: round(cluster.nodes[n].rss_bytes() / 2**20, 1) for n in nodes}
            out = {"quiesce": quiesce, "groups": groups + 1, "create_s": round(created_s, 1),
                   "measured_s": round(elapsed, 1), "cpu_pct_of_one_core": cpu, "rss_mib": rss}
            if kill:
                cluster.nodes["n0"].kill9()
                t2 = time.monotonic()
                survivors = GroupAdmin({n: a for n, a in nodes.items() if n != "n0"}, timeout_ms=10_000)
                async with survivors:
                    while True:
                        rows = await all_rows(survivors)
                        leaders = {r["group"] for r in rows if r["role"] == "leader"}
                        if len(leaders) == groups + 1:
                            break
                        assert time.monotonic() - t2 < 60, f"{groups + 1 - len(leaders)} groups without a leader"
                        await asyncio.sleep(0.1)
                out["all_groups_led_again_after_kill9_s"] = round(time.monotonic() - t2, 2)
            return out


WRITER = r"""
import asyncio, sys, time
sys.path.insert(0, sys.argv[1])
from quorumlog.client import Client
peers, group, seconds, writers = sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5])
batch = [b"y" * 1024] * 64
async def main():
    async with Client(peers, group=group, timeout_ms=30_000) as c:
        await c.append(b"warm")
        start = asyncio.Event()
        counts = [0] * writers
        async def w(i):
            await start.wait()
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                await c.append_batch(batch)
                counts[i] += len(batch)
        tasks = [asyncio.create_task(w(i)) for i in range(writers)]
        print("ready", flush=True)
        sys.stdin.readline()
        start.set()
        await asyncio.gather(*tasks)
        print(sum(counts), flush=True)
asyncio.run(main())
"""


async def throughput(base: str, groups: int, seconds: float, flush: str) -> dict:
    os.makedirs(base, exist_ok=True)
    cluster = Cluster(base, n=3, extra_args=("--flush", flush))
    with cluster:
        nodes = parse_peers(cluster.peers)
        async with GroupAdmin(nodes, timeout_ms=60_000) as admin:
            await wait_up(admin)
            names = [f"tp{i}" for i in range(groups)]
            for g in names:
                await admin.create(g, replicas=3)
            placements = {p.group: p.leader for p in await admin.list()}
        targets = [names[i % groups] for i in range(WRITER_PROCESSES)]
        procs = [subprocess.Popen([sys.executable, "-c", WRITER, ROOT, cluster.peers, g, str(seconds), "4"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for g in targets]
        for p in procs:
            assert p.stdout.readline().strip() == "ready"
        pids = {n: cluster.nodes[n].pid for n in nodes}
        before = {n: cpu_s(pid) for n, pid in pids.items()}
        busy0, total0 = machine_cpu()
        t0 = time.monotonic()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        entries = sum(int(p.stdout.readline()) for p in procs)
        elapsed = time.monotonic() - t0
        busy1, total1 = machine_cpu()
        node_cpu = {n: round(100 * (cpu_s(pid) - before[n]) / elapsed) for n, pid in pids.items()}
        for p in procs:
            p.wait(30)
        return {"groups": groups, "leaders": sorted(placements[g] for g in names), "seconds": seconds,
                "entries": entries, "entries_per_s": round(entries / seconds),
                "mb_per_s": round(entries * 1024 / seconds / 1e6, 1),
                "node_cpu_pct_of_one_core": node_cpu,
                "machine_cpu_busy_pct": round(100 * (busy1 - busy0) / max(1, total1 - total0))}


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--idle-groups", type=int, default=1000)
    ap.add_argument("--measure-s", type=float, default=30)
    ap.add_argument("--throughput-s", type=float, default=10)
    ap.add_argument("--flush", default="sync", choices=("sync", "async"))
    ap.add_argument("--skip", choices=("idle", "throughput"), default=None)
    args = ap.parse_args()
    out: dict = {"date": dt.date.today().isoformat(), "machine": f"{platform.machine()} {os.cpu_count()} cores",
                 "flush": args.flush}
    with tempfile.TemporaryDirectory(prefix="ql-groups-") as tmp:
        if args.skip != "idle":
            out["idle_quiesce_on"] = await idle(os.path.join(tmp, "on"), args.idle_groups, args.measure_s, True, True)
            print(json.dumps(out["idle_quiesce_on"]), flush=True)
            # Without quiescence a thousand groups do not fit on 2 cores at all (creating them times out): the
            # peer run takes OFF_GROUPS and the comparison is per group.
            off_groups = min(args.idle_groups, OFF_GROUPS)
            out["idle_quiesce_off"] = await idle(os.path.join(tmp, "off"), off_groups, args.measure_s / 3,
                                                 False, False)
            print(json.dumps(out["idle_quiesce_off"]), flush=True)
            per_group = {k: sum(out[k]["cpu_pct_of_one_core"].values()) / out[k]["groups"]
                         for k in ("idle_quiesce_on", "idle_quiesce_off")}
            out["idle_cpu_per_group_ratio_off_to_on"] = round(per_group["idle_quiesce_off"]
                                                              / max(1e-6, per_group["idle_quiesce_on"]), 1)
        if args.skip != "throughput":
            one = await throughput(os.path.join(tmp, "tp1"), 1, args.throughput_s, args.flush)
            print(json.dumps(one), flush=True)
            eight = await throughput(os.path.join(tmp, "tp8"), 8, args.throughput_s, args.flush)
            print(json.dumps(eight), flush=True)
            out["throughput_1_group"], out["throughput_8_groups"] = one, eight
            out["throughput_ratio_8_to_1"] = round(eight["entries_per_s"] / one["entries_per_s"], 2)
    path = os.path.join(HERE, "results", f"groups-{out['date']}.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps({k: v for k, v in out.items() if "ratio" in k}), "->", path)


if __name__ == "__main__":
    asyncio.run(main())
