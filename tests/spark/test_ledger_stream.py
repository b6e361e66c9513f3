"""A log made of ledgers (client/ledger_stream.py) against the real 3-node cluster, read back by the client and
by Spark with `.option("ledgerStream", NAME)`: rolls at roll_bytes, a second writer fences the first, offsets
are dense across ledgers and every acknowledged entry is read once, in order."""

from __future__ import annotations

import asyncio
import time

import pytest

from quorumlog.errors import LedgerFenced
from quorumlog.ledgers import LedgerClient

pytestmark = [pytest.mark.spark, pytest.mark.e2e, pytest.mark.timeout(300)]


def _write_with_a_takeover(peers: str, name: str) -> tuple[dict[int, bytes], list[int]]:
    async def main():
        acked: dict[int, bytes] = {}
        async with LedgerClient(peers) as a, LedgerClient(peers) as b:
            first = await a.open_stream_writer(name, roll_bytes=4_000)
            for i in range(300):  # 300 x ~60 bytes: rolls every ~66 entries
                body = b"first-%04d-" % i + b"x" * 50
                acked[await first.add(body)] = body
            second = await b.open_stream_writer(name, roll_bytes=4_000)  # fences the first's ledger
            with pytest.raises(LedgerFenced):
                await first.add(b"after the takeover")
            pending = [second.add(b"second-%04d-" % i + b"y" * 50) for i in range(200)]  # concurrent adds, one roll lock
            for i, off in enumerate(await asyncio.gather(*pending)):
                acked[off] = b"second-%04d-" % i + b"y" * 50
            rec = second.record
            # reads from the client see exactly the acknowledged entries (the open ledger up to its LAC)
            await second.close()
            got = {e.offset: e.body async for e in b.read_stream(name)}
            return acked, [x.ledger_id for x in rec.ledgers], got

    acked, ledgers, got = asyncio.run(main())
    assert got == acked
    return acked, ledgers


def test_a_ledger_stream_rolls_is_fenced_by_a_new_writer_and_reads_in_spark(spark, cluster):
    acked, ledgers = _write_with_a_takeover(cluster.peers, "orders")
    assert sorted(acked) == list(range(len(acked))) == list(range(500))  # dense across ledgers
    assert len(ledgers) >= 8  # 18 kB then 12 kB rolled at 4 kB: 5 ledgers for the first writer, 3-4 for the second
    df = (spark.read.format("quorumlog").option("peers", cluster.peers).option("ledgerStream", "orders")
          .option("maxBytesPerPartition", 2_000).load())
    assert df.rdd.getNumPartitions() >= len(ledgers)
    rows = df.orderBy("index").collect()
    assert [r["index"] for r in rows] == list(range(500))
    assert {r["index"]: bytes(r["body"]) for r in rows} == acked
    assert [r["term"] for r in rows] == sorted(r["term"] for r in rows)  # ledger ids rise along the stream
    assert set(r["term"] for r in rows) <= set(ledgers)
    part = (spark.read.format("quorumlog").option("peers", cluster.peers).option("ledgerStream", "orders")
            .option("startingIndex", 290).option("endingIndex", 310).load().orderBy("index").collect())
    assert [r["index"] for r in part] == list(range(290, 310))
    with pytest.raises(Exception, match="no ledger stream named"):
        spark.read.format("quorumlog").option("peers", cluster.peers).option("ledgerStream", "nope").load().collect()


def test_a_ledger_stream_streams_each_acknowledged_entry_once_while_its_writer_goes_on(spark, cluster, tmp_path):
    async def write(w, first: int, n: int) -> dict[int, bytes]:
        return {await w.add(b"ev-%05d" % i): b"ev-%05d" % i for i in range(first, first + n)}

    def query():
        return (spark.readStream.format("quorumlog").option("peers", cluster.peers).option("ledgerStream", "events")
                .option("maxRecordsPerTrigger", 50).load()
                .writeStream.format("parquet").option("path", str(tmp_path / "out"))
                .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())

    async def main():
        async with LedgerClient(cluster.peers) as lc:
            w = await lc.open_stream_writer("events", roll_bytes=600)
            acked = await write(w, 0, 120)
            # the writer is idle: it tells its bookies its last add confirmed (explicit LAC), so readers see
            # its last entry too without a next add
            deadline = time.monotonic() + 5
            while len([e async for e in lc.read_stream("events")]) < 120:
                assert time.monotonic() < deadline, "the idle writer's last entry never became visible"
                await asyncio.sleep(0.05)
            q = query()
            assert q.awaitTermination(180)
            sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
            assert sizes == [50, 50, 20]  # maxRecordsPerTrigger holds across ledgers
            acked.update(await write(w, 120, 80))  # the writer goes on
            await w.close()  # (closing makes its last entry visible too)
            q = query()  # the same checkpoint: it resumes after offset 119
            assert q.awaitTermination(180)
            return acked

    acked = asyncio.run(main())
    rows = spark.read.parquet(str(tmp_path / "out")).orderBy("index").collect()
    assert [r["index"] for r in rows] == list(range(200))  # each once, none missing
    assert {r["index"]: bytes(r["body"]) for r in rows} == acked
