"""`quorumlog bench`: the load generator. N writers share one Client (so concurrent appends coalesce into
few frames, as an application's would) and each waits for its append to commit before the next.

Reports appends/s, MB/s of entry bodies (10^6 bytes), and per-call latency percentiles from an HDR
histogram (microsecond resolution), with the cluster's flush mode, which decides what an ack means.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Optional

import typer

from ..client import Client
from ..client.types import WRITABLE_ROLES
from ..errors import QuorumLogError
from ..heap import keep_freed_buffers
from .common import (ClusterOpt, GroupOpt, JsonOpt, PeersOpt, err_console, new_table, out_console, print_json,
                     resolve_target, run, usage)

MAX_LATENCY_US = 60_000_000  # the histogram's range: 1 µs .. 60 s, 3 significant digits


async def _bench(t, writers: int, duration_s: float, warmup_s: float, value_bytes: int, batch: int,
                 linger_ms: float, max_in_flight: int, timeout_ms: int) -> dict:
    from hdrh.histogram import HdrHistogram

    hist = HdrHistogram(1, MAX_LATENCY_US, 3)
    counts = {"entries": 0, "calls": 0, "errors": 0}
    error_kinds: dict[str, int] = {}
    async with Client(t.peers, group=t.group, linger_ms=linger_ms, max_in_flight=max_in_flight,
                      timeout_ms=timeout_ms) as client:
        statuses = await client.status()
        flush = (t.cluster or {}).get("flush") or next(
            (s.raw.get("flush") for s in statuses if s.raw.get("flush")), "unknown")
        leader = next((s.id for s in statuses if s.role in WRITABLE_ROLES), None)
        loop = asyncio.get_running_loop()
        start = loop.time()
        measure_from = start + warmup_s
        stop_at = measure_from + duration_s
        frames_at_measure: list[int] = []

        async def writer(i: int) -> None:
            value = os.urandom(value_bytes)
            bodies = [value] * batch
            perf = time.perf_counter_ns
            while True:
                now = loop.time()
                if now >= stop_at:
                    return
                t0 = perf()
                try:
                    if batch == 1:
                        await client.append(value)
                    else:
                        await client.append_batch(bodies)
                except QuorumLogError as e:
                    counts["errors"] += 1
                    error_kinds[e.code.name] = error_kinds.get(e.code.name, 0) + 1
                    continue
                if t0 >= measure_ns:
                    done = perf()
                    if done <= stop_ns:
                        hist.record_value(max(1, (done - t0) // 1000))
                        counts["entries"] += batch
                        counts["calls"] += 1

        async def mark() -> None:
            await asyncio.sleep(warmup_s)
            frames_at_measure.append(client.frames_sent)

        offset_ns = time.perf_counter_ns() - int(loop.time() * 1e9)
        measure_ns = int(measure_from * 1e9) + offset_ns
        stop_ns = int(stop_at * 1e9) + offset_ns
        marker = asyncio.ensure_future(mark())
        await asyncio.gather(*(writer(i) for i in range(writers)))
        await marker
        frames = client.frames_sent - (frames_at_measure[0] if frames_at_measure else 0)
    elapsed = duration_s
    entries = counts["entries"]
    return {
        "flush": flush, "nodes": len(t.peers), "leader": leader, "writers": writers, "batch": batch,
        "value_bytes": value_bytes, "linger_ms": linger_ms, "duration_s": elapsed, "warmup_s": warmup_s,
        "appends": entries, "calls": counts["calls"], "errors": counts["errors"], "error_codes": error_kinds,
        "appends_per_s": round(entries / elapsed, 1),
        "mb_per_s": round(entries * value_bytes / elapsed / 1e6, 2),
        "frames": frames, "entries_per_frame": round(entries / frames, 2) if frames else None,
        "latency_ms": {
            "p50": hist.get_value_at_percentile(50) / 1000, "p99": hist.get_value_at_percentile(99) / 1000,
            "p999": hist.get_value_at_percentile(99.9) / 1000, "max": hist.get_max_value() / 1000,
            "mean": round(hist.get_mean_value() / 1000, 3),
        },
    }


def bench(peers: Optional[str] = PeersOpt, cluster: Optional[str] = ClusterOpt, group: Optional[str] = GroupOpt,
          writers: int = typer.Option(1, "--writers", min=1, max=100_000, help="Concurrent writers"),
          duration_s: float = typer.Option(10.0, "--duration-s", min=0.1, help="Measured time"),
          warmup_s: float = typer.Option(2.0, "--warmup-s", min=0, help="Unmeasured time before it"),
          value_bytes: int = typer.Option(100, "--value-bytes", min=0, help="Entry body size"),
          batch: int = typer.Option(1, "--batch", min=1, help="Entries per call (>1: append_batch)"),
          linger_ms: float = typer.Option(0.0, "--linger-ms", min=0, help="Client linger before a frame leaves"),
          max_in_flight: int = typer.Option(32, "--max-in-flight", min=1, help="Append frames in flight"),
          timeout_ms: int = typer.Option(10_000, "--timeout-ms", min=1, help="Per call, retries included"),
          failover_kills: int = typer.Option(0, "--failover-kills", min=0,
                                             help="Instead: kill -9 the leader N times under load (needs --cluster) "
                                                  "and report kill → first append acked by a new leader"),
          json_out: bool = JsonOpt) -> None:
    """Load generator: appends/s, MB/s, latency p50/p99/p999 (per call) against a running cluster."""
    t = resolve_target(peers, cluster, group)
    if failover_kills:
        if cluster is None:
            usage("--failover-kills needs --cluster DIR (it kills and restarts the nodes listed there)")
        from .failover import failover

        r = run(failover(t, cluster, failover_kills, writers, value_bytes, timeout_ms), long_running=True)
        if json_out:
            print_json(r)
        else:
            out_console.print(f"failover over {failover_kills} kills (flush {r['flush']}): median "
                              f"{r['median_ms']} ms, max {r['max_ms']} ms; each: {r['failover_ms']}")
        return
    err_console.print(f"bench: {writers} writers × batch {batch} × {value_bytes} B, "
                      f"{warmup_s:g} s warmup + {duration_s:g} s", highlight=False)
    keep_freed_buffers()  # (a generator of 1 MiB batches moves bulk data as a node does: quorumlog/heap.py)
    r = run(_bench(t, writers, duration_s, warmup_s, value_bytes, batch, linger_ms, max_in_flight, timeout_ms),
            long_running=True)
    if json_out:
        print_json(r)
        return
    table = new_table(title=f"quorumlog bench — flush {r['flush']}, {r['nodes']} nodes, leader {r['leader']}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    lat = r["latency_ms"]
    for k, v in (("writers × batch × bytes", f"{writers} × {batch} × {value_bytes}"),
                 ("appends/s", f"{r['appends_per_s']:,.0f}"), ("MB/s", f"{r['mb_per_s']:.2f}"),
                 ("p50 ms", f"{lat['p50']:.3f}"), ("p99 ms", f"{lat['p99']:.3f}"),
                 ("p999 ms", f"{lat['p999']:.3f}"), ("max ms", f"{lat['max']:.3f}"),
                 ("entries/frame", str(r["entries_per_frame"])), ("errors", str(r["errors"]))):
        table.add_row(k, v)
    out_console.print(table)
