"""format("quorumlog") batch and streaming reads against a real 3-node cluster."""

from __future__ import annotations

import os
import random
import signal

import pytest

import quorumlog
from quorumlog.spark.flights import (flights_frame, json_bodies, load_airlines, load_flights, per_carrier,
                                     per_carrier_pandas)
from quorumlog.spark.local import wait_until

from .helpers import append, client_entries

pytestmark = [pytest.mark.spark, pytest.mark.e2e, pytest.mark.timeout(300)]


def _rows(df):
    from pyspark.sql import functions as F

    out = df.select("index", "term", F.unix_micros("timestamp").alias("ts_us"), "body").orderBy("index").collect()
    return [(r["index"], r["term"], r["ts_us"], bytes(r["body"])) for r in out]


def _expected(entries):
    return [(e.index, e.term, e.timestamp_ms * 1000, e.body) for e in entries]


def test_batch_read_equals_client_read(spark, cluster):
    rng = random.Random(7)
    bodies = [rng.randbytes(rng.randint(0, 600)) for _ in range(6000)]  # binary, not UTF-8, some empty
    start, end = append(cluster.peers, bodies)
    df = (spark.read.format("quorumlog").option("peers", cluster.peers)
          .option("startingIndex", start).option("endingIndex", end)
          .option("maxBytesPerPartition", 400_000).option("pageBytes", 64 * 1024).load())
    assert df.rdd.getNumPartitions() >= 3  # ~2 MB of records in ≤ 400 kB partitions
    got = _rows(df)
    assert len(got) == end - start
    assert got == _expected(client_entries(cluster.peers, start, end))
    assert _is_subsequence(bodies, [r[3] for r in got])  # ours, in order (plus a no-op if a leader changed)


def _is_subsequence(small, big) -> bool:
    it = iter(big)
    return all(any(x == y for y in it) for x in small) and len(big) - len(small) <= 3


def test_earliest_to_latest_is_everything_committed(spark, cluster):
    append(cluster.peers, [b"x%d" % i for i in range(100)])
    with quorumlog.connect(cluster.peers) as c:
        records, committed, begin = c.read_records(0, max_bytes=1)
    df = spark.read.format("quorumlog").option("cluster", str(cluster.data_dir)).load()
    stats = df.selectExpr("min(index) AS lo", "max(index) AS hi", "count(*) AS n").collect()[0]
    # Only committed entries, and all of them up to the commit point seen when the read was planned.
    assert stats["lo"] == begin and stats["n"] == stats["hi"] - stats["lo"] + 1
    assert stats["hi"] >= committed


def test_per_carrier_aggregates_equal_pandas(spark, cluster):
    flights = load_flights().iloc[::23].reset_index(drop=True)  # ~14.6k rows, every carrier
    airlines = load_airlines()
    start, end = append(cluster.peers, json_bodies(flights))
    log_df = (spark.read.format("quorumlog").option("peers", cluster.peers)
              .option("startingIndex", start).option("endingIndex", end).option("minPartitions", 2).load())
    got = per_carrier(spark, flights_frame(spark, log_df), airlines).toPandas()
    want = per_carrier_pandas(flights, airlines)
    assert list(got["carrier"]) == list(want["carrier"])
    assert list(got["flights"]) == list(want["flights"])
    assert list(got["name"]) == list(want["name"])
    for col in ("mean_dep_delay", "mean_arr_delay"):
        assert got[col].to_numpy() == pytest.approx(want[col].to_numpy(), rel=1e-9)


def test_stream_honours_max_records_per_trigger(spark, cluster, tmp_path):
    start, end = append(cluster.peers, [b"s%d" % i for i in range(5000)])
    q = (spark.readStream.format("quorumlog").option("peers", cluster.peers)
         .option("startingIndex", start).option("endingIndex", end).option("maxRecordsPerTrigger", 2000).load()
         .writeStream.format("memory").queryName("capped").option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(availableNow=True).start())
    assert q.awaitTermination(180)
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    count = end - start  # 5000, or one more if a new leader's no-op entry landed in between
    assert sizes == [2000] * (count // 2000) + ([count % 2000] if count % 2000 else [])
    rows = spark.sql("SELECT index FROM capped ORDER BY index").collect()
    assert [r["index"] for r in rows] == list(range(start, end))


def test_read_from_followers_only_committed_while_a_follower_lags(spark, cluster):
    with quorumlog.connect(cluster.peers) as c:
        status = c.status()
    leader = next(s.id for s in status if s.role == "leader")
    lagging = next(s.id for s in status if s.role == "follower")
    pid = cluster.pid(lagging)
    os.kill(pid, signal.SIGSTOP)
    try:
        # The leader and the other follower commit these; the stopped follower has none of them.
        start, end = append(cluster.peers, [b"f%d" % i for i in range(20_000)])
        with quorumlog.connect(cluster.peers) as c:
            leader_status = next(s for s in c.status() if s.id == leader)
        assert leader_status.watermarks.get(lagging, -1) < start  # it lags by the whole range
    finally:
        os.kill(pid, signal.SIGCONT)
    # Read at once, while it catches up: its partitions get only what it has committed (long-polling for
    # the rest, or handing it to the leader), never an entry past the commit point.
    df = (spark.read.format("quorumlog").option("peers", cluster.peers).option("readFrom", "followers")
          .option("startingIndex", start).option("minPartitions", 4).option("pageBytes", 32 * 1024).load())
    assert df.rdd.getNumPartitions() == 4
    got = _rows(df)
    assert got[-1][0] == end - 1
    assert got == _expected(client_entries(cluster.peers, start, end))
    with quorumlog.connect(cluster.peers) as c:
        wait_until(lambda: all(s.committed_index >= end - 1 for s in c.status()), 30, what="follower caught up")
