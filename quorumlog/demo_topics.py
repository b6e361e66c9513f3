"""`make run`'s topic step (docs/topics.md): the flights as messages of topic `flights` keyed by carrier, a
2-member consumer group reading them while one member (a separate `quorumlog consume` process) is killed
with SIGKILL, and Spark reading the topic.

- produce: every flight to the topic's 8 queues on a topic group (`--state-machine topics`), key = carrier,
  so one carrier's flights stay in one queue, in order.
- consume: member `a` runs here, member `b` is `quorumlog consume --consumer-group dashboard --follow`; once
  `b` printed some messages it is killed; after its session timeout its queues move to `a`, which then
  finishes. Every message is delivered at least once: what a member delivered after its last commit before
  its queues moved (b's join, b's death) is delivered again by their next owner.
- Spark: `.option("topic", "flights")`, flights per key (carrier) from the message columns.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

from rich.console import Console

from .demo_console import working

TOPIC = "flights"
GROUP = "flights-topics"
QUEUES = 8
SEND_BATCH = 500
SEND_IN_FLIGHT = 16
SESSION_TIMEOUT_MS = 3_000
B_KILL_AFTER = 5_000  # messages member b prints before it is killed


async def _produce(peers: str, bodies: list[bytes], keys: list[str]) -> float:
    import quorumlog
    from quorumlog.client.groups import GroupAdmin
    from quorumlog.peers import parse_peers

    async with GroupAdmin(parse_peers(peers), timeout_ms=60_000) as admin:
        await admin.create(GROUP, replicas=3, state_machine="topics")
    async with quorumlog.TopicAdmin(peers, timeout_ms=30_000) as t:
        await t.create(TOPIC, queues=QUEUES, groups=[GROUP])
    async with quorumlog.Producer(peers, timeout_ms=60_000) as p:
        by_queue: dict[int, list] = {}
        for body, key in zip(bodies, keys):
            by_queue.setdefault(await p.queue_of(TOPIC, key), []).append((body, key, "", None))
        chunks = [(q, ms[i:i + SEND_BATCH]) for q, ms in by_queue.items() for i in range(0, len(ms), SEND_BATCH)]
        t0 = time.perf_counter()
        lanes = {q: asyncio.Lock() for q in by_queue}  # one batch at a time per queue: a carrier's order is kept
        sem = asyncio.Semaphore(SEND_IN_FLIGHT)

        async def send(q: int, ms: list) -> None:
            async with sem, lanes[q]:
                await p.send_batch(TOPIC, q, ms)

        await asyncio.gather(*(send(q, ms) for q, ms in chunks))
        return time.perf_counter() - t0


async def _consume(cluster, total: int, console: Console) -> dict:
    import quorumlog

    env = dict(os.environ)
    b = subprocess.Popen([sys.executable, "-m", "quorumlog.cli", "consume", "--topic", TOPIC, "--consumer-group",
                          "dashboard", "--follow", "--json", "--session-timeout-ms", str(SESSION_TIMEOUT_MS),
                          "--cluster", str(cluster.data_dir)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         env=env, text=True)
    seen: set[tuple[int, int]] = set()
    by_member = Counter()
    b_lines: list[str] = []

    def read_b() -> None:
        for line in b.stdout:
            b_lines.append(line)
            if len(b_lines) >= B_KILL_AFTER:
                return

    reader = asyncio.get_running_loop().run_in_executor(None, read_b)
    t0 = time.perf_counter()
    killed_at = None
    async with quorumlog.Consumer(cluster.peers, consumer_group="dashboard", topics=[TOPIC], member_id="a",
                                  session_timeout_ms=SESSION_TIMEOUT_MS, timeout_ms=30_000) as a:
        it = a.__aiter__()
        while len(seen) < total:
            if killed_at is None and reader.done():
                os.kill(b.pid, signal.SIGKILL)  # mid-stream: no commit, no leave
                b.wait()
                killed_at = time.perf_counter()
                for line in b_lines:
                    d = json.loads(line)
                    seen.add((d["queue_id"], d["queue_offset"]))
                by_member["b"] += len(b_lines)
                console.print(f"  member b (pid {b.pid}) killed with SIGKILL after {len(b_lines):,} messages; its "
                              f"queues move to a after the {SESSION_TIMEOUT_MS / 1000:.0f} s session timeout")
            try:
                m = await asyncio.wait_for(it.__anext__(), 60)
            except asyncio.TimeoutError:
                raise RuntimeError(f"consumer group stalled at {len(seen):,} of {total:,} messages") from None
            seen.add((m.queue_id, m.queue_offset))
            by_member["a"] += 1
        took = time.perf_counter() - t0
    if b.poll() is None:
        b.kill()
        b.wait()
    return {"consumed": len(seen), "by_member": dict(by_member), "consume_seconds": round(took, 2),
            "member_b_killed": killed_at is not None,
            "redelivered": by_member["a"] + by_member["b"] - len(seen)}


def topic_step(spark, cluster, bodies: list[bytes], keys: list[str], console: Console) -> dict:
    with working(f"topics: producing {len(bodies):,} flights to topic {TOPIC} keyed by carrier ..."):
        produce_s = asyncio.run(_produce(cluster.peers, bodies, keys))
    console.print(f"[green]✓[/green] topic {TOPIC}: {len(bodies):,} messages on {QUEUES} queues in {produce_s:.1f} s "
                  f"([bold]{len(bodies) / produce_s:,.0f} messages/s[/bold]; each acknowledged with its queue offset)")
    with working("topics: consumer group `dashboard`, 2 members, one killed mid-stream ..."):
        consumed = asyncio.run(_consume(cluster, len(bodies), console))
    console.print(f"[green]✓[/green] consumer group dashboard: all {consumed['consumed']:,} messages delivered in "
                  f"{consumed['consume_seconds']:.1f} s (a: {consumed['by_member'].get('a', 0):,}, "
                  f"b: {consumed['by_member'].get('b', 0):,} before SIGKILL; {consumed['redelivered']:,} delivered "
                  f"again: what a member delivered after its last commit before its queues moved)")
    with working("Spark: reading the topic (a partition per queue) ..."):
        from pyspark.sql import functions as F

        t0 = time.perf_counter()
        df = spark.read.format("quorumlog").option("cluster", str(cluster.data_dir)).option("topic", TOPIC).load()
        per_key = df.groupBy("key").agg(F.count(F.lit(1)).alias("n"), F.countDistinct("queue_id").alias("queues")) \
            .orderBy(F.desc("n")).collect()
        read_s = time.perf_counter() - t0
    n = sum(r["n"] for r in per_key)
    assert n == len(bodies) and all(r["queues"] == 1 for r in per_key), "a carrier spread over queues"
    top = ", ".join(f"{r['key']} {r['n']:,}" for r in per_key[:5])
    console.print(f"[green]✓[/green] Spark read topic {TOPIC}: {n:,} messages in {read_s:.1f} s "
                  f"({n / read_s:,.0f} rows/s); each carrier in one queue; busiest: {top}")
    return {"topic_messages": len(bodies), "topic_produce_per_s": round(len(bodies) / produce_s),
            **consumed, "spark_topic_rows_per_s": round(n / read_s)}
