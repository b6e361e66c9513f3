"""`quorumlog bench --failover-kills N`: failover time = kill -9 of the leader → first append acknowledged by
a new leader (an AppendResult of a higher term), measured under load, N times.

After each kill the killed node is restarted from its cluster.json `argv` (cluster.json gets its new pid, so
`cluster down` still stops it) and the next kill waits until it has caught up.
"""

from __future__ import annotations

import asyncio
import os
import signal
import statistics
import subprocess
import time

from ..client import Client
from ..errors import QuorumLogError
from .common import CLUSTER_FILE, Target, err_console

SETTLE_S = 2.0  # appends flow this long between kills
CATCH_UP_TIMEOUT_S = 60.0
FAILOVER_TIMEOUT_S = 30.0


def _write_cluster_json(data_dir: str, doc: dict) -> None:
    from .cluster import _write_json_atomic

    _write_json_atomic(os.path.join(data_dir, CLUSTER_FILE), doc)


async def failover(t: Target, data_dir: str, kills: int, writers: int, value_bytes: int, timeout_ms: int) -> dict:
    assert t.cluster is not None
    doc = t.cluster
    nodes = {n["id"]: n for n in doc["nodes"]}
    times_ms: list[float] = []
    counts = {"appends": 0, "errors": 0}
    watch: dict = {}
    stop = asyncio.Event()
    async with Client(t.peers, group=t.group, timeout_ms=timeout_ms) as client:

        async def writer() -> None:
            value = os.urandom(value_bytes)
            while not stop.is_set():
                try:
                    r = await client.append(value)
                except QuorumLogError:
                    counts["errors"] += 1
                    continue
                counts["appends"] += 1
                w = watch
                if w and "first_s" not in w and r.term > w["old_term"]:
                    w["first_s"] = time.monotonic()
                    w["done"].set()

        tasks = [asyncio.ensure_future(writer()) for _ in range(writers)]
        try:
            for k in range(kills):
                await asyncio.sleep(SETTLE_S)
                leader = await _leader(client)
                pid = nodes[leader.id]["pid"]
                watch = {"old_term": leader.term, "done": asyncio.Event()}
                t_kill = time.monotonic()
                os.kill(pid, signal.SIGKILL)
                await asyncio.wait_for(watch["done"].wait(), FAILOVER_TIMEOUT_S)
                times_ms.append((watch["first_s"] - t_kill) * 1000)
                err_console.print(f"kill {k + 1}/{kills}: {leader.id} (term {leader.term}) → new leader acked "
                                  f"after {times_ms[-1]:.0f} ms", highlight=False)
                watch = {}
                await _restart(client, data_dir, doc, nodes[leader.id])
        finally:
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
    ordered = sorted(times_ms)
    return {
        "mode": "failover", "flush": doc.get("flush", "unknown"), "nodes": len(nodes), "kills": kills,
        "writers": writers, "value_bytes": value_bytes, "appends": counts["appends"], "errors": counts["errors"],
        "failover_ms": [round(x, 1) for x in times_ms],
        "median_ms": round(statistics.median(ordered), 1) if ordered else None,
        "max_ms": round(ordered[-1], 1) if ordered else None,
    }


async def _leader(client: Client):
    deadline = time.monotonic() + FAILOVER_TIMEOUT_S
    while True:
        leaders = [s for s in await client.status() if s.role == "leader"]
        if leaders:
            return max(leaders, key=lambda s: s.term)
        if time.monotonic() > deadline:
            raise TimeoutError("no leader to kill")
        await asyncio.sleep(0.1)


async def _restart(client: Client, data_dir: str, doc: dict, node: dict) -> None:
    """Start the killed node again from its argv; wait until it serves the group's commit point."""
    with open(node["log_file"], "ab") as log:
        proc = subprocess.Popen(node["argv"], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=data_dir)
    node["pid"] = proc.pid
    _write_cluster_json(data_dir, doc)
    deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
    target = None
    while True:
        statuses = {s.id: s for s in await client.status()}
        if target is None:
            target = max((s.committed_index for s in statuses.values() if s.role == "leader"), default=None)
        me = statuses[node["id"]]
        if target is not None and me.reachable and me.committed_index >= target:
            return
        if proc.poll() is not None:
            raise RuntimeError(f"restarted {node['id']} exited with {proc.returncode} (see {node['log_file']})")
        if time.monotonic() > deadline:
            raise TimeoutError(f"restarted {node['id']} did not catch up within {CATCH_UP_TIMEOUT_S:g} s")
        await asyncio.sleep(0.1)


__all__ = ["failover"]
