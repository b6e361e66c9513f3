"""Topics against the raw log on the same group, one run, 3 real nodes on 127.0.0.1.

    python bench/topics.py [--duration-s 5] [--rounds 4] [--flush sync] [--messages 200000]

- produce: 64 writer tasks of 100 B entries through one `quorumlog.Client` (raw appends) and 64 producer
  tasks of 100 B messages through one `quorumlog.Producer` (keys spread over the topic's 8 queues), on the
  same topic group, alternated ABBA over --rounds rounds; the ratio of the medians is the issue's "≥ 80% of
  the raw group's appends/s".
- consume: one consumer pulls a caught-up topic of --messages messages from every queue (--pull-batch per pull),
  then a `quorumlog.Consumer` (a consumer group's only member: a long poll per queue, `poll()` lists) reads the
  same messages; messages/s of each (target ≥ 500,000).
- latency: one producer sends one message at a time while a consumer long-polls its queue; send → delivered,
  p50 / p99 (target p50 ≤ 2 ms).
- spark (unless --no-spark): a Spark batch read of the topic (`.option("topic", ...)`, from the leader and with
  `readFrom=any`) against its in-memory Arrow ceiling (bench/spark.py's source: the same rows as the same Arrow
  batches in as many partitions, memory-mapped; target ≥ 70%), alternated 5 times, best of each; the raw
  source reading the same group's log beside them. Twice: on the topic as the steps above left it (~0.5M
  messages: a read of 0.5–0.7 s, where the source's fixed costs — planning through `_meta` and the leaders,
  a client per Python worker — weigh), then after batched sends filled it to --spark-messages (queues
  interleaved in the log).
Results: bench/results/topics-<date>.json (flush mode included).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import quorumlog  # noqa: E402
from quorumlog.client.groups import GroupAdmin  # noqa: E402
from quorumlog.peers import parse_peers  # noqa: E402
from quorumlog.soak.processes import Cluster  # noqa: E402

import results_file  # noqa: E402  (bench/results_file.py)

WRITERS = 64
BODY = b"x" * 100
QUEUES = 8


async def _setup(cluster: Cluster) -> None:
    nodes = parse_peers(cluster.peers)
    async with GroupAdmin(nodes, timeout_ms=30_000) as admin:
        deadline = time.monotonic() + 30
        while not all(isinstance(s, dict) for s in (await admin.cluster_status()).values()):
            assert time.monotonic() < deadline, "nodes never answered"
            await asyncio.sleep(0.1)
        await admin.create_meta()
        await admin.create("tg", replicas=3, state_machine="topics")
    async with quorumlog.TopicAdmin(cluster.peers, timeout_ms=10_000) as t:
        await t.create("bench", queues=QUEUES, groups=["tg"])


async def _rate(one, duration_s: float) -> float:
    """Calls/s of `one()` from WRITERS tasks over duration_s (after a 1 s warm-up)."""
    count = 0
    measuring = False
    stop = False

    async def task(i: int) -> None:
        nonlocal count
        while not stop:
            await one(i)
            if measuring:
                count += 1

    tasks = [asyncio.create_task(task(i)) for i in range(WRITERS)]
    await asyncio.sleep(1.0)
    measuring = True
    t0 = time.perf_counter()
    await asyncio.sleep(duration_s)
    measuring = False
    elapsed = time.perf_counter() - t0
    stop = True
    await asyncio.gather(*tasks)
    return count / elapsed


async def _produce(cluster: Cluster, duration_s: float, rounds: int) -> dict:
    """Raw appends and topic sends on the same group, alternated round by round in ABBA order (raw, topic,
    topic, raw, ...): on this machine whichever runs first on a fresh cluster gains (docs: free page
    reporting), so a single raw-then-topic pair favours raw. Medians of each, and each round's ratio."""
    raw_rates: list[float] = []
    topic_rates: list[float] = []
    async with quorumlog.Client(cluster.peers, group="tg", timeout_ms=30_000) as c, \
            quorumlog.Producer(cluster.peers, timeout_ms=30_000) as p:
        for r in range(rounds):
            order = ("raw", "topic") if r % 2 == 0 else ("topic", "raw")
            for name in order:
                if name == "raw":
                    raw_rates.append(await _rate(lambda i: c.append(BODY), duration_s))
                else:
                    topic_rates.append(await _rate(lambda i: p.send("bench", BODY, key=f"k{i}"), duration_s))
    raw, topic = statistics.median(raw_rates), statistics.median(topic_rates)
    return {"raw_appends_per_s": round(raw), "topic_messages_per_s": round(topic), "ratio": round(topic / raw, 3),
            "rounds": rounds, "ratio_by_round": [round(t / r, 3) for r, t in zip(raw_rates, topic_rates)],
            "raw_by_round": [round(x) for x in raw_rates], "topic_by_round": [round(x) for x in topic_rates],
            "target_ratio": 0.8}


async def _consume(cluster: Cluster, messages: int, pull_batch: int) -> dict:
    async with quorumlog.Producer(cluster.peers, timeout_ms=30_000) as p:
        per_queue = messages // QUEUES
        for q in range(QUEUES):
            lo, hi = await p.offsets("bench", q)
            for start in range(0, max(0, per_queue - (hi - lo)), 1000):
                await p.send_batch("bench", q, [(BODY, "", "", None)] * min(1000, per_queue - start))
        totals = [await p.offsets("bench", q) for q in range(QUEUES)]
        t0 = time.perf_counter()
        got = 0
        for q in range(QUEUES):
            offset, end = totals[q]
            while offset < end:
                r = await p.pull("bench", q, offset, max_messages=pull_batch)
                got += len(r.messages)
                offset = r.next_offset
        elapsed = time.perf_counter() - t0
    # the same messages through a consumer group's member: join, a long poll per queue kept in flight,
    # Consumer.poll() lists, auto-commit
    async with quorumlog.Consumer(cluster.peers, consumer_group="bench", topics=["bench"], timeout_ms=30_000,
                                  max_messages=pull_batch) as consumer:
        t1 = time.perf_counter()
        delivered = 0
        while delivered < got:
            delivered += len(await consumer.poll(max_messages=16_384))
        group_elapsed = time.perf_counter() - t1
    return {"messages": got, "pull_batch": pull_batch, "messages_per_s": round(got / elapsed),
            "consumer_group_messages_per_s": round(delivered / group_elapsed), "target_per_s": 500_000}


async def _fill(cluster: Cluster, total: int, batch: int = 1000) -> int:
    """Batched sends to every queue at once until the topic holds `total` messages; returns how many it holds."""
    async with quorumlog.Producer(cluster.peers, timeout_ms=60_000) as p:
        have = sum(hi - lo for lo, hi in [await p.offsets("bench", q) for q in range(QUEUES)])
        per_queue = max(0, total - have) // QUEUES

        async def one(q: int) -> None:
            for start in range(0, per_queue, batch):
                await p.send_batch("bench", q, [(BODY, f"k{q}", "", None)] * min(batch, per_queue - start))

        await asyncio.gather(*(one(q) for q in range(QUEUES)))
        return sum(hi - lo for lo, hi in [await p.offsets("bench", q) for q in range(QUEUES)])


async def _latency(cluster: Cluster, samples: int = 300) -> dict:
    async with quorumlog.Producer(cluster.peers, timeout_ms=30_000) as p, \
            quorumlog.TopicClient(cluster.peers, timeout_ms=30_000) as consumer:
        q = await p.queue_of("bench", "lat")
        _, offset = await p.offsets("bench", q)
        lat = []
        for i in range(samples):
            poll = asyncio.ensure_future(consumer.pull("bench", q, offset, max_messages=16, wait_ms=5_000))
            await asyncio.sleep(0.002)  # the pull is waiting on the node
            t0 = time.perf_counter()
            await p.send("bench", b"%d" % i, key="lat")
            r = await poll
            lat.append((time.perf_counter() - t0) * 1000)
            offset = r.next_offset
    lat.sort()
    return {"samples": samples, "p50_ms": round(statistics.median(lat), 3),
            "p99_ms": round(lat[int(0.99 * (len(lat) - 1))], 3), "target_p50_ms": 2.0,
            "note": "send → delivered to a long-polling consumer: the send's own ack is included, the "
                    "pull answers when the dispatcher applies the message (commit + apply)"}


def _dump_topic_as_arrow(peers: str, path: str) -> None:
    """The topic's rows as format("quorumlog").option("topic") yields them, written once to an Arrow IPC file
    for the ceiling source."""
    import pyarrow as pa

    from quorumlog.spark.options import SourceOptions
    from quorumlog.spark.topic import TOPIC_SCHEMA, TopicBatchReader

    reader = TopicBatchReader(SourceOptions.parse({"peers": peers, "topic": "bench"}))
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, TOPIC_SCHEMA) as writer:
        for part in reader.partitions():
            for batch in reader.read(part):
                writer.write_batch(batch)


def _spark(cluster: Cluster, work: str, repeat: int = 5) -> dict:
    """The topic read against the in-memory Arrow ceiling (bench/spark.py's source: the same rows as the same
    Arrow batches in as many partitions, memory-mapped), alternated `repeat` times, best of each; the raw
    source over the group's log beside them."""
    from pyspark.sql import functions as F

    from quorumlog.spark.local import spark_session
    from spark import InMemoryArrowSource  # bench/spark.py

    # (the Python workers import the ceiling source's module by name, as this process did)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, os.environ.get("PYTHONPATH")) if p)
    spark = spark_session("quorumlog-topics-bench")
    try:
        spark.dataSource.register(InMemoryArrowSource)
        topic_df = spark.read.format("quorumlog").option("peers", cluster.peers).option("topic", "bench").load()
        topic_any_df = (spark.read.format("quorumlog").option("peers", cluster.peers).option("topic", "bench")
                        .option("readFrom", "any").load())
        raw_df = spark.read.format("quorumlog").option("peers", cluster.peers).option("group", "tg").load()
        arrow_path = os.path.join(work, "topic.arrow")
        _dump_topic_as_arrow(cluster.peers, arrow_path)
        partitions = topic_df.rdd.getNumPartitions()
        mem_df = (spark.read.format("arrowmem").option("path", arrow_path).option("schema", "topic")
                  .option("partitions", partitions).load())
        reads = {"topic": topic_df, "topic_any": topic_any_df, "ceiling": mem_df, "raw": raw_df}

        def count(df):
            return tuple(df.select(F.count(F.lit(1)), F.sum(F.length("body"))).collect()[0])

        rows = {k: count(df) for k, df in reads.items()}  # (also warms the Python workers)
        assert rows["topic"] == rows["ceiling"] == rows["topic_any"], rows
        best = {k: float("inf") for k in reads}
        for _ in range(repeat):
            for k, df in reads.items():
                t0 = time.perf_counter()
                count(df)
                best[k] = min(best[k], time.perf_counter() - t0)
    finally:
        spark.stop()
    rate = {k: rows[k][0] / best[k] for k in reads}
    return {"topic_rows": rows["topic"][0], "partitions": partitions, "topic_rows_per_s": round(rate["topic"]),
            "ceiling_rows_per_s": round(rate["ceiling"]), "topic_vs_ceiling": round(rate["topic"] / rate["ceiling"], 3),
            "topic_read_from_any_rows_per_s": round(rate["topic_any"]),
            "topic_read_from_any_vs_ceiling": round(rate["topic_any"] / rate["ceiling"], 3),
            "raw_rows": rows["raw"][0], "raw_rows_per_s": round(rate["raw"]),
            "topic_vs_raw": round(rate["topic"] / rate["raw"], 3), "repeat": repeat,
            "target": "topic read >= 70% of the in-memory Arrow ceiling (same rows, batches and partitions)"}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duration-s", type=float, default=5.0)
    p.add_argument("--flush", default="sync", choices=["sync", "async"])
    p.add_argument("--rounds", type=int, default=4, help="produce: raw/topic rounds, alternated ABBA")
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--pull-batch", type=int, default=1024, help="max_messages per pull")
    p.add_argument("--no-spark", action="store_true", help="skip the Spark read")
    p.add_argument("--spark-messages", type=int, default=2_000_000,
                   help="the second Spark read's topic size (0: only the first read)")
    p.add_argument("--out", default=os.path.join(HERE, "results"))
    a = p.parse_args()
    base = tempfile.mkdtemp(prefix="quorumlog-topics-bench-")
    cluster = Cluster(base, n=3, extra_args=("--flush", a.flush))

    async def run() -> dict:
        await _setup(cluster)
        return {"produce_64_writers_100B": await _produce(cluster, a.duration_s, a.rounds),
                "consume_one_consumer": await _consume(cluster, a.messages, a.pull_batch),
                "end_to_end_latency": await _latency(cluster)}

    try:
        cluster.start()
        results = asyncio.run(run())
        if not a.no_spark:
            results["spark_batch_read_as_produced"] = _spark(cluster, base)
            if a.spark_messages:
                t0 = time.perf_counter()
                held = asyncio.run(_fill(cluster, a.spark_messages))
                print(f"filled the topic to {held:,} messages in {time.perf_counter() - t0:.1f} s", flush=True)
                results["spark_batch_read"] = _spark(cluster, base)
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)  # three nodes' segments: ~0.3 GB a run
    doc = {"bench": "topics against the raw log on the same group",
           "date_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%MZ"),
           "machine": {"cpus": os.cpu_count(), "load_avg": os.getloadavg()},
           "setup": f"3 nodes on 127.0.0.1, flush {a.flush}, topic group tg (3 replicas), topic bench with "
                    f"{QUEUES} queues; one client process", "command": " ".join(["python", *sys.argv]),
           "results": results}
    results_file.write(a.out, "topics", doc, results)


if __name__ == "__main__":
    main()
