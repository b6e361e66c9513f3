"""Exactly once: a killed streaming driver, a failed-and-retried write task, a replayed micro-batch."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import quorumlog
from quorumlog.spark.local import wait_until

from .helpers import append, client_entries, descendants, kill_tree

pytestmark = [pytest.mark.spark, pytest.mark.e2e, pytest.mark.timeout(420)]

DRIVER = str(Path(__file__).with_name("stream_driver.py"))


def _committed(peers: str) -> int:
    with quorumlog.connect(peers) as c:
        _, committed, _ = c.read_records(0, max_bytes=1)
    return committed


def _commits(checkpoint: Path) -> list[int]:
    d = checkpoint / "commits"
    return sorted(int(p.name) for p in d.glob("[0-9]*")) if d.exists() else []


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:  # exited meanwhile
        return b""


def test_stream_killed_and_restarted_delivers_every_entry_once(spark, cluster, tmp_path):
    start, end = append(cluster.peers, [b"k%d" % i for i in range(8_000)])
    checkpoint, out = tmp_path / "ck", tmp_path / "out"
    argv = [sys.executable, DRIVER, cluster.peers, str(checkpoint), str(out), str(start), str(end), "1000"]
    with open(tmp_path / "driver1.log", "w") as log:
        first = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: len(_commits(checkpoint)) >= 2 or first.poll() is not None, 240,
                   what="two micro-batches committed")
        assert first.poll() is None, "the query finished before it could be killed"
        jvms = [p for p in descendants(first.pid) if b"java" in _cmdline(p)]
        assert jvms, "the driver's JVM was not found among its children"
        killed = kill_tree(first.pid)  # kill -9: the driver and its JVM, by pid
        # a short-lived "java" process (the JVM starts its Python workers through jspawnhelper, under the
        # JDK's path) that exited by itself between the two listings is gone all the same
        assert all(p in killed or not Path(f"/proc/{p}").exists() for p in jvms), (jvms, killed)
    finally:
        kill_tree(first.pid)
        first.wait(30)
    done_before = _commits(checkpoint)
    assert 2 <= len(done_before) < 8

    # Restarted from the checkpoint: the interrupted batch is replayed with its logged offsets; the rest
    # may come in bigger batches (the cap applies to new batches only).
    argv[-1] = "8000"
    second = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "done" in second.stdout
    rows = spark.read.parquet(str(out)).select("index", "body").collect()
    indexes = Counter(r["index"] for r in rows)
    assert sorted(indexes) == list(range(start, end))
    assert max(indexes.values()) == 1  # no entry delivered twice
    by_index = {e.index: e.body for e in client_entries(cluster.peers, start, end)}
    assert all(bytes(r["body"]) == by_index[r["index"]] for r in rows)


def test_write_task_failing_once_is_retried_without_duplicates(spark, cluster, tmp_path):
    from pyspark import TaskContext
    from pyspark.sql import functions as F

    n = 6000
    fail_at = n // 2 - 500  # in partition 0 of two
    peers = cluster.peers
    before = _committed(peers)
    failed_marker = str(tmp_path / "failed-once")
    partial_marker = str(tmp_path / "partial-append-seen")

    @F.udf("binary")
    def body_of(i):
        ctx = TaskContext.get()
        if i == fail_at and ctx.attemptNumber() == 0:
            import os
            import time

            import quorumlog as ql

            # Fail only once this attempt's writer has appended some chunks, so the retry must dedup them.
            with ql.connect(peers) as c:
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    if c.read_records(before + 1, max_bytes=1)[0].count > 0:
                        open(partial_marker, "w").close()
                        break
                    time.sleep(0.05)
            open(failed_marker, "w").close()
            os._exit(3)  # the task's Python worker dies: Spark retries the task
        return b"r-%d" % i

    df = spark.range(0, n, 1, numPartitions=2).select(body_of("id").alias("body"))
    (df.write.format("quorumlog").option("peers", peers).option("writeBatchRows", 250)
     .option("writesInFlight", 2).mode("append").save())
    assert Path(failed_marker).exists(), "the planted failure did not happen"
    assert Path(partial_marker).exists(), "the failed attempt appended nothing before failing"
    after = _committed(peers)
    bodies = Counter(e.body for e in client_entries(peers, before + 1, after + 1) if e.body.startswith(b"r-"))
    assert set(bodies) == {b"r-%d" % i for i in range(n)}
    assert max(bodies.values()) == 1  # every row exactly once


def test_replayed_micro_batch_appends_nothing_twice(spark, cluster, tmp_path):
    peers = cluster.peers
    start, end = append(peers, [b"src-%d" % i for i in range(3000)])
    checkpoint = tmp_path / "ck"

    def run():
        q = (spark.readStream.format("quorumlog").option("peers", peers).option("startingIndex", start)
             .option("endingIndex", end).option("maxRecordsPerTrigger", 1000).load()
             .selectExpr("concat(cast('copy-' AS binary), body) AS body")
             .writeStream.format("quorumlog").option("peers", peers).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
        assert q.awaitTermination(180)
        return [p["batchId"] for p in q.recentProgress if p["numInputRows"]]

    batches = -(-(end - start) // 1000)  # 3, or 4 if a new leader's no-op entry landed in the range
    assert run() == list(range(batches))
    # Forget that the last micro-batch finished: on restart Spark runs it again, same offsets, same id.
    last = max(_commits(checkpoint))
    assert last == batches - 1
    for p in (checkpoint / "commits").glob(f"*{last}*"):
        p.unlink()
    assert run() == [last]
    copies = Counter(e.body for e in client_entries(peers, end, _committed(peers) + 1)
                     if e.body.startswith(b"copy-src-"))
    assert set(copies) == {b"copy-src-%d" % i for i in range(3000)}
    assert max(copies.values()) == 1
