"""Spark by topic (`.option("topic", T)` / `.option("subscribe", T)`, quorumlog/spark/topic.py) on the real
3-node cluster: every message once with its queue, offset, key, tags and properties; Kafka-style per-queue
startingOffsets; a stream with per-queue offsets reads each message exactly once across restarts."""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict

import pytest

import quorumlog
from quorumlog.client.groups import GroupAdmin
from quorumlog.peers import parse_peers
from quorumlog.spark.options import SourceOptions
from quorumlog.spark.topic import TopicBatchReader

pytestmark = [pytest.mark.spark, pytest.mark.e2e, pytest.mark.timeout(300)]


def _topic(peers: str, name: str, queues: int) -> None:
    """Topic `name` on the topic group tg (made by the first test that needs it)."""
    async def create():
        async with GroupAdmin(parse_peers(peers), timeout_ms=30_000) as admin:
            if "tg" not in [p.group for p in await admin.list()]:
                await admin.create("tg", replicas=3, state_machine="topics")
        async with quorumlog.TopicAdmin(peers, timeout_ms=10_000) as t:
            await t.create(name, queues=queues)

    asyncio.run(create())


def _produce(peers: str, first: int, n: int, create: bool = False) -> dict[tuple[int, int], bytes]:
    if create:
        _topic(peers, "flights", 4)

    async def main():
        out = {}
        async with quorumlog.Producer(peers, timeout_ms=10_000) as p:
            for i in range(first, first + n, 20):
                rs = await asyncio.gather(*(p.send("flights", b"f%04d" % j, key=f"c{j % 9}", tags=f"t{j % 2}",
                                                   properties={"j": str(j)}) for j in range(i, min(first + n, i + 20))))
                for j, r in zip(range(i, first + n), rs):
                    out[(r.queue_id, r.queue_offset)] = b"f%04d" % j
        return out

    return asyncio.run(main())


def test_a_topic_reads_in_spark_in_batch_and_streams_each_message_once(spark, cluster, tmp_path):
    sent = _produce(cluster.peers, 0, 300, create=True)
    df = spark.read.format("quorumlog").option("peers", cluster.peers).option("topic", "flights").load()
    assert df.columns == ["index", "term", "timestamp", "body", "topic", "queue_id", "queue_offset", "key", "tags",
                          "properties", "born_timestamp"]
    rows = df.collect()
    assert {(r["queue_id"], r["queue_offset"]): bytes(r["body"]) for r in rows} == sent and len(rows) == 300
    for r in rows:
        j = int(bytes(r["body"])[1:])
        assert r["topic"] == "flights" and r["key"] == f"c{j % 9}" and r["tags"] == f"t{j % 2}"
        assert r["properties"] == {"j": str(j)} and r["born_timestamp"] <= r["timestamp"]
    per_queue = defaultdict(list)
    for r in rows:
        per_queue[r["queue_id"]].append(r["queue_offset"])
    assert all(sorted(v) == list(range(len(v))) for v in per_queue.values())

    # readFrom spreads the runs over the group's members, a follower serving what it has dispatched
    def seen(rs):
        return {(r["queue_id"], r["queue_offset"]): (bytes(r["body"]), r["index"], r["key"], r["tags"]) for r in rs}

    for read_from in ("any", "followers"):
        again = (spark.read.format("quorumlog").option("peers", cluster.peers).option("topic", "flights")
                 .option("readFrom", read_from).load().collect())
        assert len(again) == 300 and seen(again) == seen(rows)
    opts = SourceOptions.parse({"peers": cluster.peers, "topic": "flights", "readFrom": "followers"})
    assert all(p.node is not None for p in TopicBatchReader(opts).partitions())

    # Kafka's names and per-queue JSON offsets (-2 earliest, -1 latest); queues left out start at the earliest
    q = next(iter(per_queue))
    part = (spark.read.format("quorumlog").option("peers", cluster.peers).option("subscribe", "flights")
            .option("startingOffsets", json.dumps({"flights": {str(q): 5}}))
            .option("endingOffsets", json.dumps({"flights": {str(q): 9}})).load()
            .where(f"queue_id = {q}").orderBy("queue_offset").collect())
    assert [r["queue_offset"] for r in part] == [5, 6, 7, 8]
    with pytest.raises(Exception, match="startingOffsets"):
        (spark.read.format("quorumlog").option("peers", cluster.peers).option("topic", "flights")
         .option("startingOffsets", "{bad").load().collect())

    def stream():
        return (spark.readStream.format("quorumlog").option("peers", cluster.peers).option("topic", "flights")
                .option("maxRecordsPerTrigger", 120).load()
                .writeStream.format("parquet").option("path", str(tmp_path / "out"))
                .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())

    s = stream()
    assert s.awaitTermination(180)
    sizes = [p["numInputRows"] for p in s.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 300 and max(sizes) <= 120 and len(sizes) >= 3
    sent.update(_produce(cluster.peers, 300, 100))
    s = stream()  # the same checkpoint: it resumes at each queue's next offset
    assert s.awaitTermination(180)
    out = spark.read.parquet(str(tmp_path / "out")).collect()
    got = [(r["queue_id"], r["queue_offset"]) for r in out]
    assert len(got) == len(set(got)) == 400  # each once, none missing
    assert {(r["queue_id"], r["queue_offset"]): bytes(r["body"]) for r in out} == sent


def test_a_dataframe_writes_to_a_topic_keyed_and_a_rerun_of_the_job_stores_nothing_twice(spark, cluster):
    from quorumlog.client.topics import queue_for

    _topic(cluster.peers, "written", 4)
    rows = [(f"row-{i}", f"k{i % 7}" if i % 5 else None, "even" if i % 2 == 0 else "odd") for i in range(500)]
    df = spark.createDataFrame(rows, "body string, key string, tags string").repartition(3)

    def write():
        (df.write.format("quorumlog").option("peers", cluster.peers).option("topic", "written")
         .option("writeId", "job-1").option("writeBatchRows", 40).mode("append").save())

    write()
    write()  # the same job again (a retried job): every chunk is answered from the first run, none stored
    out = spark.read.format("quorumlog").option("peers", cluster.peers).option("topic", "written").load().collect()
    assert sorted(bytes(r["body"]).decode() for r in out) == sorted(b for b, _, _ in rows)
    for r in out:
        i = int(bytes(r["body"])[4:])
        assert r["tags"] == ("even" if i % 2 == 0 else "odd")
        if i % 5:
            assert r["key"] == f"k{i % 7}" and r["queue_id"] == queue_for(f"k{i % 7}", 4)


def test_a_stream_writes_to_a_topic_and_a_restarted_query_stores_each_row_once(spark, cluster, tmp_path):
    _topic(cluster.peers, "streamed", 2)
    src = tmp_path / "src"
    spark.createDataFrame([(f"s-{i}", f"k{i % 3}") for i in range(200)], "body string, key string") \
        .write.parquet(str(src / "part1"))

    def run():
        q = (spark.readStream.schema("body string, key string").parquet(str(src / "*"))
             .writeStream.format("quorumlog").option("peers", cluster.peers).option("topic", "streamed")
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
        assert q.awaitTermination(180)

    run()
    spark.createDataFrame([(f"s-{i}", f"k{i % 3}") for i in range(200, 260)], "body string, key string") \
        .write.parquet(str(src / "part2"))
    run()  # the same checkpoint: only the new file's rows
    out = spark.read.format("quorumlog").option("peers", cluster.peers).option("topic", "streamed").load().collect()
    assert sorted(bytes(r["body"]).decode() for r in out) == sorted(f"s-{i}" for i in range(260))


def test_a_run_on_a_follower_that_does_not_answer_is_read_from_the_leader(cluster):
    """readFrom's fallback: a run planned on a follower that stopped answering (SIGSTOP) is handed to the
    group's leader, and every message of the run still comes back once."""
    import signal

    from quorumlog.spark.topic import QueueRun, read_run

    _topic(cluster.peers, "fallback", 1)

    async def produce_and_find_a_follower():
        async with quorumlog.Producer(cluster.peers, timeout_ms=10_000) as p:
            await p.send_batch("fallback", 0, [(b"m%03d" % i, "", "", None) for i in range(120)])
            lo, hi = await p.offsets("fallback", 0)
            group = (await p.routes.route("fallback"))[0]
            members = await p.routes.group_client(group).status()
        return lo, hi, next(s.id for s in members if s.role == "follower")

    lo, hi, follower = asyncio.run(produce_and_find_a_follower())
    opts = SourceOptions.parse({"peers": cluster.peers, "topic": "fallback", "readFrom": "followers",
                                "followerWaitMs": "200"})
    cluster.kill(follower, signal.SIGSTOP)
    try:
        batches = list(read_run(opts, QueueRun(0, "fallback", 0, lo, hi, node=follower)))
    finally:
        cluster.kill(follower, signal.SIGCONT)
    offsets = [o for b in batches for o in b.column("queue_offset").to_pylist()]
    assert offsets == list(range(lo, hi)) and hi - lo >= 120
