"""Offsets, read limits, data loss and planning, against a stub cluster (no JVM, no nodes)."""

from __future__ import annotations

import asyncio
import concurrent.futures

import pytest

pytest.importorskip("pyspark")

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows  # noqa: E402

from quorumlog.errors import NetworkError  # noqa: E402
from quorumlog.spark import batch, stream  # noqa: E402
from quorumlog.spark.options import OptionError, SourceOptions  # noqa: E402
from quorumlog.spark.remote import LogBounds  # noqa: E402
from quorumlog.spark.write import derive_client_id  # noqa: E402
from quorumlog.format import log_entry  # noqa: E402
from quorumlog.format.log_entry import Records  # noqa: E402

PEERS = "n0=127.0.0.1:1,n1=127.0.0.1:2,n2=127.0.0.1:3"


class StubClient:
    """read_records over an in-memory log [begin, committed]; optionally failing for some nodes."""

    def __init__(self, begin: int, committed: int, fail_nodes=(), lag: dict | None = None) -> None:
        self.begin, self.committed = begin, committed
        self.fail_nodes = set(fail_nodes)
        self.lag = lag or {}
        self.calls: list[tuple] = []

    async def read_records(self, start, *, end=-1, max_bytes=1 << 20, node=None, wait_ms=0):
        self.calls.append((start, end, node))
        if node in self.fail_nodes:
            raise NetworkError(f"{node} is down")
        committed = self.committed - self.lag.get(node, 0)
        last = committed if end < 0 else min(end, committed)
        if start < self.begin or start > last:
            return Records(start, start - 1, (), 0), committed, self.begin
        bodies = [b"e%d" % i for i in range(start, last + 1)]
        buf, _, _ = log_entry.encode_batch(start, 1, bodies, 1, 0, 0)
        return Records(start, last, (bytes(buf),), len(buf)), committed, self.begin


class StubRemote:
    def __init__(self, client: StubClient, followers=("n1", "n2")) -> None:
        self.client = self.replica_client = client
        self.followers = followers
        self._loop = asyncio.new_event_loop()

    def bounds(self) -> LogBounds:
        c = self.client
        return LogBounds(c.begin, c.committed, "n0", self.followers, {})

    def run(self, coro, timeout_s=None):
        return self._loop.run_until_complete(coro)

    def submit(self, coro):
        fut = concurrent.futures.Future()
        try:
            fut.set_result(self.run(coro))
        except Exception as e:  # noqa: BLE001 - handed to the caller through the future
            fut.set_exception(e)
        return fut


def _opts(**kw) -> SourceOptions:
    return SourceOptions.parse({"peers": PEERS, **{k: str(v) for k, v in kw.items()}})


@pytest.fixture
def stub(monkeypatch):
    def install(begin=0, committed=999, **kw):
        remote = StubRemote(StubClient(begin, committed, **kw))
        monkeypatch.setattr(stream, "remote_for", lambda opts: remote)
        monkeypatch.setattr(batch, "remote_for", lambda opts: remote)
        return remote
    return install


def test_latest_offset_honours_max_rows_and_ignores_it_for_read_all(stub):
    stub(0, 999)
    reader = stream.QuorumLogStreamReader(_opts(maxOffsetsPerTrigger=300))
    assert reader.getDefaultReadLimit() == ReadMaxRows(300)
    assert reader.initialOffset() == {"index": 0}
    assert reader.latestOffset({"index": 0}, ReadMaxRows(300)) == {"index": 300}
    assert reader.latestOffset({"index": 900}, ReadMaxRows(300)) == {"index": 1000}
    assert reader.latestOffset({"index": 0}, ReadAllAvailable()) == {"index": 1000}


def test_available_now_stops_at_the_commit_point_it_saw(stub):
    remote = stub(0, 499)
    reader = stream.QuorumLogStreamReader(_opts(maxRecordsPerTrigger=200))
    reader.prepareForTriggerAvailableNow()
    remote.client.committed = 999  # more commits after the trigger started: not part of this run
    assert reader.latestOffset({"index": 400}, ReadMaxRows(200)) == {"index": 500}
    assert reader.latestOffset({"index": 500}, ReadMaxRows(200)) == {"index": 500}


def test_starting_latest_and_a_number(stub):
    stub(10, 99)
    assert stream.QuorumLogStreamReader(_opts(startingIndex="latest")).initialOffset() == {"index": 100}
    assert stream.QuorumLogStreamReader(_opts(startingIndex=42)).initialOffset() == {"index": 42}
    assert stream.QuorumLogStreamReader(_opts()).initialOffset() == {"index": 10}


def test_fail_on_data_loss_is_a_clear_error_by_default(stub):
    stub(begin=100, committed=999)
    reader = stream.QuorumLogStreamReader(_opts(maxRecordsPerTrigger=50))
    with pytest.raises(batch.DataLoss, match=r"entries 40\.\.99 were removed by retention"):
        reader.latestOffset({"index": 40}, ReadMaxRows(50))


def test_fail_on_data_loss_false_skips_ahead(stub, caplog):
    stub(begin=100, committed=999)
    opts = _opts(maxRecordsPerTrigger=50, failOnDataLoss="false")
    reader = stream.QuorumLogStreamReader(opts)
    end = reader.latestOffset({"index": 40}, ReadMaxRows(50))
    assert end == {"index": 150}
    rows = [i for p in reader.partitions({"index": 40}, end) for b in reader.read(p)
            for i in b.column("index").to_pylist()]
    assert rows == list(range(100, 150))
    assert "removed by retention" in caplog.text


def test_a_micro_batch_costs_the_driver_one_read_and_is_cut_by_bytes(stub):
    remote = stub(0, 199_999)
    reader = stream.QuorumLogStreamReader(_opts(maxRecordsPerTrigger=100_000))
    end = reader.latestOffset({"index": 0}, ReadMaxRows(100_000))
    assert end == {"index": 100_000}
    assert len(remote.client.calls) == 1  # the leader's bounds and the entry size in one read
    parts = reader.partitions({"index": 0}, end)
    assert len(remote.client.calls) == 1  # planning reuses what latestOffset saw
    assert [(p.start, p.end, p.node) for p in parts] == [(0, 100_000, None)]  # a few MB: one task
    small = stream.QuorumLogStreamReader(_opts(maxRecordsPerTrigger=100_000, maxBytesPerPartition=1_000_000))
    parts = small.partitions({"index": 0}, end)  # no latestOffset first (a replay after a restart): samples
    assert len(remote.client.calls) == 2 and len(parts) == 5
    assert parts[0].start == 0 and parts[-1].end == 100_000
    assert [p.start for p in parts[1:]] == [p.end for p in parts[:-1]]
    assert len(stream.QuorumLogStreamReader(_opts(minPartitions=3)).partitions({"index": 0}, end)) == 3


def test_a_replayed_micro_batch_is_cut_into_the_same_partitions(stub):
    """After a restart Spark asks for the partitions of the logged batch without a latestOffset first; a
    sink keyed on partitions (format("quorumlog")'s) re-sends the same keys only if the cut is the same."""
    stub(0, 99_999)
    opts = _opts(maxRecordsPerTrigger=30_000, maxBytesPerPartition=200_000)
    first = stream.QuorumLogStreamReader(opts)
    cuts, start = [], {"index": 0}
    for _ in range(4):
        end = first.latestOffset(start, ReadMaxRows(30_000))
        cuts.append([(p.start, p.end) for p in first.partitions(start, end)])
        start = end
    assert len(cuts[0]) > 1
    starts = [0, 30_000, 60_000, 90_000]
    ends = [30_000, 60_000, 90_000, 100_000]
    for s_, e_, expected in zip(starts, ends, cuts):
        replay = stream.QuorumLogStreamReader(opts)
        assert [(p.start, p.end) for p in replay.partitions({"index": s_}, {"index": e_})] == expected


def test_batch_read_before_begin_index(stub):
    stub(begin=100, committed=199)
    with pytest.raises(batch.DataLoss):
        batch.QuorumLogBatchReader(_opts(startingIndex=5)).partitions()
    parts = batch.QuorumLogBatchReader(_opts(startingIndex=5, failOnDataLoss="false")).partitions()
    assert parts[0].start == 100 and parts[-1].end == 200


def test_partitions_cover_the_range_and_spread_over_followers(stub):
    stub(0, 9999)
    reader = batch.QuorumLogBatchReader(_opts(maxBytesPerPartition=20_000, readFrom="followers"))
    parts = reader.partitions()
    assert len(parts) > 4
    assert [p.start for p in parts[1:]] == [p.end for p in parts[:-1]]
    assert parts[0].start == 0 and parts[-1].end == 10_000
    assert {p.node for p in parts} == {"n1", "n2"}
    rows = [i for p in parts for b in reader.read(p) for i in b.column("index").to_pylist()]
    assert rows == list(range(10_000))


def test_a_dead_replica_hands_its_partition_to_the_leader(stub):
    remote = stub(0, 999, fail_nodes=("n1",))
    reader = batch.QuorumLogBatchReader(_opts(readFrom="followers", minPartitions=2))
    parts = reader.partitions()
    rows = [i for p in parts for b in reader.read(p) for i in b.column("index").to_pylist()]
    assert rows == list(range(1000))
    assert any(node is None for _, _, node in remote.client.calls)  # the leader served n1's share


def test_a_lagging_replica_serves_only_what_it_committed(stub):
    remote = stub(0, 999, lag={"n1": 700})  # n1 has committed only up to 299
    reader = batch.QuorumLogBatchReader(_opts(readFrom="followers", minPartitions=2, followerWaitMs=0))
    parts = reader.partitions()
    assert (parts[0].start, parts[0].end, parts[0].node) == (0, 500, "n1")
    rows = [i for p in parts for b in reader.read(p) for i in b.column("index").to_pylist()]
    assert rows == list(range(1000))
    # n1 served 0..299 (its committed entries), found nothing more committed, and the leader served the rest.
    assert (0, 499, "n1") in remote.client.calls and (300, 499, "n1") in remote.client.calls
    assert (300, 499, None) in remote.client.calls


def test_options_are_checked():
    with pytest.raises(OptionError, match="peers"):
        SourceOptions.parse({})
    with pytest.raises(OptionError, match="readFrom"):
        _opts(readFrom="nearest")
    with pytest.raises(OptionError, match="maxRecordsPerTrigger"):
        _opts(maxRecordsPerTrigger=0)
    with pytest.raises(OptionError, match="endingIndex"):
        _opts(startingIndex=10, endingIndex=5)


def test_client_ids_are_stable_distinct_and_nonzero():
    a = derive_client_id("job:x", 0)
    assert a == derive_client_id("job:x", 0) != 0
    assert len({derive_client_id("job:x", p, lane) for p in range(50) for lane in range(4)}) == 200
    assert derive_client_id("job:x", 0) != derive_client_id("job:y", 0)


def test_a_worker_heap_is_frozen_once_it_is_big_and_only_in_a_spark_worker():
    import subprocess
    import sys

    code = """
import gc, sys, types
from quorumlog.spark.remote import FREEZE_AFTER_OBJECTS, settle_worker_heap
keep = [[i] for i in range(2 * FREEZE_AFTER_OBJECTS)]   # objects that live across tasks
assert not settle_worker_heap(), "froze outside a Spark worker"
sys.modules["pyspark.worker"] = types.ModuleType("pyspark.worker")
assert settle_worker_heap() and gc.get_freeze_count() >= len(keep)
assert len(gc.get_objects()) < FREEZE_AFTER_OBJECTS
assert not settle_worker_heap(), "froze again without new long-lived objects"
print("ok")
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-2000:]
