"""Batch read of a ledger stream (`.option("ledgerStream", NAME)`, client/ledger_stream.py): the same four columns
as a group's log, with `index` the stream offset (dense across ledgers), `term` the ledger id and `timestamp`
when that ledger was started (ledger entries carry no time of their own).

Planning (driver) reads the stream record and each ledger's extent without fencing: closed ledgers up to their
last entry, the open one up to its last add confirmed, so a writer still adding is never disturbed and a read
sees only acknowledged entries. Each partition is a run of one ledger's entries, read straight from the
bookies by the task, `pagesInFlight` × READ_AHEAD entries ahead.
"""

from __future__ import annotations

import asyncio
import math
from typing import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from ..ledger.metadata import LedgerMetadata
from .arrow import SCHEMA
from .options import EARLIEST, LATEST, OptionError, SourceOptions
from .remote import iterate_on_private_loop
from .stream import cap_end

ROWS_PER_BATCH = 4096
ASSUMED_ENTRY_BYTES = 1024  # for sizing partitions: the metadata knows a closed ledger's length only


class LedgerRunPartition(InputPartition):
    """Entries lo..hi of one ledger, at stream offsets first_offset + entry id."""

    def __init__(self, pid: int, md_json: bytes, first_offset: int, created_ms: int, lo: int, hi: int) -> None:
        self.pid = pid
        self.md_json = md_json
        self.first_offset = first_offset
        self.created_ms = created_ms
        self.lo = lo
        self.hi = hi


def _client(opts: SourceOptions):
    from ..client.ledgers import LedgerClient

    return LedgerClient(opts.peers, timeout_ms=opts.timeout_ms, token=opts.token, tls_ca=opts.tls_ca)


async def _extent(opts: SourceOptions):
    from ..client.ledger_stream import stream_extent

    async with _client(opts) as lc:
        return await stream_extent(lc, opts.ledger_stream)


def _readable_end(extent) -> int:
    """One past the last acknowledged offset: closed ledgers whole, the open one up to its LAC."""
    return max((x.first_offset + last + 1 for x, _, last in extent), default=0)


async def _plan(opts: SourceOptions) -> list[LedgerRunPartition]:
    extent = await _extent(opts)
    end_all = _readable_end(extent)
    start = {EARLIEST: 0, LATEST: end_all}.get(opts.starting_index, opts.starting_index)
    end = end_all if opts.ending_index == LATEST else min(int(opts.ending_index), end_all)
    return _cut(opts, extent, int(start), int(end))


def _cut(opts: SourceOptions, extent, start: int, end: int) -> list[LedgerRunPartition]:
    """Offsets [start, end) as runs of one ledger's entries of about maxBytesPerPartition each."""
    parts: list[LedgerRunPartition] = []
    for x, md, last in extent:
        lo, hi = max(start - x.first_offset, 0), min(last, end - 1 - x.first_offset)
        if lo > hi:
            continue
        entry_bytes = md.length / (md.last_entry_id + 1) if md.last_entry_id >= 0 and md.length else \
            ASSUMED_ENTRY_BYTES
        per_part = max(1, int(opts.max_bytes_per_partition / max(1.0, entry_bytes)))
        for k in range(math.ceil((hi - lo + 1) / per_part)):
            a = lo + k * per_part
            parts.append(LedgerRunPartition(len(parts), md.to_json(), x.first_offset, x.created_ms, a,
                                            min(hi, a + per_part - 1)))
    return parts


def _batch(offsets: list[int], ledger_id: int, created_ms: int, bodies: list[bytes]) -> pa.RecordBatch:
    n = len(offsets)
    return pa.RecordBatch.from_arrays([
        pa.array(offsets, pa.int64()), pa.array([ledger_id] * n, pa.int64()),
        pa.array([created_ms * 1000] * n, pa.timestamp("us", tz="UTC")), pa.array(bodies, pa.binary())],
        schema=SCHEMA)


def read_run(opts: SourceOptions, p: LedgerRunPartition) -> Iterator[pa.RecordBatch]:
    """The partition's entries as RecordBatches, yielded as they arrive (the client runs on a private loop)."""
    from ..client.ledgers import LedgerReader

    md = LedgerMetadata.from_json(p.md_json)

    async def batches():
        async with _client(opts) as lc:
            r = LedgerReader(lc.registry, md)
            r.last_add_confirmed = p.hi  # planned from the LAC or the close: these entries are acknowledged
            offsets, bodies = [], []
            async for e in r.read(p.lo, p.hi):
                offsets.append(p.first_offset + e.entry_id)
                bodies.append(e.body)
                if len(offsets) == ROWS_PER_BATCH:
                    yield _batch(offsets, md.ledger_id, p.created_ms, bodies)
                    offsets, bodies = [], []
            if offsets:
                yield _batch(offsets, md.ledger_id, p.created_ms, bodies)

    return iterate_on_private_loop(batches())


class LedgerStreamStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """readStream of a ledger stream: offsets {"offset": N} (the next stream offset to read). A micro-batch is
    [start, end) of acknowledged offsets, which never change (closed ledgers are immutable, and a recovery
    closes the open one at or after its last add confirmed), so a replay reads exactly the same entries."""

    def __init__(self, opts: SourceOptions) -> None:
        if opts.read_from != "leader":
            raise OptionError("option readFrom does not apply to a ledgerStream (entries are read from bookies)")
        self.opts = opts
        self._available_now_end: int | None = None  # Trigger.AvailableNow's target (exclusive)

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now_end = _readable_end(asyncio.run(_extent(self.opts)))

    def initialOffset(self) -> dict:
        start = self.opts.starting_index
        if start == EARLIEST:
            return {"offset": 0}
        if start == LATEST:
            return {"offset": _readable_end(asyncio.run(_extent(self.opts)))}
        return {"offset": int(start)}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_records_per_trigger is not None:
            return ReadMaxRows(self.opts.max_records_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = int(start["offset"])
        end = cap_end(_readable_end(asyncio.run(_extent(self.opts))), begin, self.opts, self._available_now_end,
                      limit)
        return {"offset": max(begin, end)}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        lo, hi = int(start["offset"]), int(end["offset"])
        if hi <= lo:
            return []
        return _cut(self.opts, asyncio.run(_extent(self.opts)), lo, hi)

    def read(self, partition: LedgerRunPartition) -> Iterator[pa.RecordBatch]:
        return read_run(self.opts, partition)

    def commit(self, end: dict) -> None:
        pass  # ledgers are kept until deleted, not by consumer progress


class LedgerStreamBatchReader(DataSourceReader):
    def __init__(self, opts: SourceOptions) -> None:
        if opts.read_from != "leader":
            raise OptionError("option readFrom does not apply to a ledgerStream (entries are read from bookies)")
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        parts = asyncio.run(_plan(self.opts))
        return parts or [LedgerRunPartition(0, b"", 0, 0, 0, -1)]

    def read(self, partition: LedgerRunPartition) -> Iterator[pa.RecordBatch]:
        if partition.hi < partition.lo:
            return iter(())
        return read_run(self.opts, partition)
