"""Batch read: index ranges sized by bytes, each read as a pipeline of raw-record pages → Arrow batches.

A partition is [start, end) of committed indexes plus the replica that serves it. Its task keeps a few
`read_records` pages in flight (index sub-ranges sized from the planner's bytes-per-entry estimate), turns
each page into RecordBatches without per-row Python objects, and fails over to the leader when its replica
is unreachable or does not commit the range in time. Replicas only ever serve their committed entries.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from typing import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from ..errors import IndexOutOfRange, QuorumLogError, Timeout
from ..format.log_entry import Records
from .arrow import records_to_batches
from .options import EARLIEST, LATEST, SourceOptions
from .remote import LogBounds, Remote, remote_for, settle_worker_heap

log = logging.getLogger(__name__)

SAMPLE_POINTS = 16  # reads used to estimate bytes per entry across the range
SAMPLE_ENTRIES = 64
SAMPLE_BYTES = 64 * 1024
LONG_POLL_MS = 1_000  # one wait for a replica to commit the next index
DEFAULT_ENTRY_BYTES = 256  # when nothing could be sampled


class DataLoss(IndexOutOfRange):
    """Entries a read needs were already removed by retention (failOnDataLoss=true)."""


class LogPartition(InputPartition):
    """Committed entries [start, end) from `node` (None: the leader), ~entry_bytes each."""

    def __init__(self, pid: int, start: int, end: int, node: str | None, entry_bytes: int) -> None:
        assert 0 <= start <= end, (start, end)
        self.pid = pid
        self.start = start
        self.end = end
        self.node = node
        self.entry_bytes = max(1, entry_bytes)

    def __repr__(self) -> str:
        return f"LogPartition({self.pid}, [{self.start}, {self.end}), node={self.node})"


# -- planning (driver) ------------------------------------------------------------------------------

def resolve_range(opts: SourceOptions, bounds: LogBounds) -> tuple[int, int]:
    """startingIndex/endingIndex → [start, end) within what is committed now (endingIndex is exclusive,
    like Kafka's endingOffsets; a number past the commit point is capped at it)."""
    committed_end = bounds.committed_index + 1
    start = {EARLIEST: bounds.begin_index, LATEST: committed_end}.get(opts.starting_index, opts.starting_index)
    end = committed_end if opts.ending_index == LATEST else min(int(opts.ending_index), committed_end)
    if isinstance(opts.ending_index, int) and opts.ending_index > committed_end:
        log.warning("endingIndex %d is past the commit point; reading up to %d", opts.ending_index, committed_end)
    if start < bounds.begin_index:
        if opts.fail_on_data_loss:
            raise DataLoss(f"startingIndex {start} is before begin_index {bounds.begin_index}: retention already "
                           f"removed entries {start}..{bounds.begin_index - 1} (set failOnDataLoss=false to skip them)")
        log.warning("entries %d..%d were removed by retention; starting at %d", start, bounds.begin_index - 1,
                    bounds.begin_index)
        start = bounds.begin_index
    return int(start), int(max(start, end))


async def _sample_entry_bytes(remote: Remote, start: int, end: int) -> list[tuple[int, float]]:
    """(index, bytes per entry) at up to SAMPLE_POINTS evenly spread points of [start, end)."""
    count = end - start
    k = max(1, min(SAMPLE_POINTS, count // SAMPLE_ENTRIES))
    points = sorted({start + (count * i) // k for i in range(k)})

    async def one(p: int) -> tuple[int, float] | None:
        try:
            recs, _, _ = await remote.client.read_records(p, end=min(end - 1, p + SAMPLE_ENTRIES - 1),
                                                          max_bytes=SAMPLE_BYTES)
        except QuorumLogError:
            return None
        return (p, recs.size_bytes / recs.count) if recs.count > 0 else None

    got = await asyncio.gather(*(one(p) for p in points))
    return [g for g in got if g is not None]


def plan_partitions(opts: SourceOptions, remote: Remote, bounds: LogBounds, start: int, end: int,
                    *, byte_sized: bool = True) -> list[LogPartition]:
    """Cut [start, end) into partitions of about maxBytesPerPartition (at least minPartitions) and spread
    them over the replicas readFrom names."""
    count = end - start
    if count <= 0:
        return [LogPartition(0, start, start, None, DEFAULT_ENTRY_BYTES)]
    samples = remote.run(_sample_entry_bytes(remote, start, end)) if byte_sized else []
    if not samples:
        samples = [(start, float(DEFAULT_ENTRY_BYTES))]
    # Piecewise-constant bytes/entry between sample points → cumulative bytes at each region edge.
    edges = [s[0] for s in samples] + [end]
    edges[0] = start
    region_bytes = [(edges[i + 1] - edges[i]) * samples[i][1] for i in range(len(samples))]
    total_bytes = sum(region_bytes)
    n = max(opts.min_partitions or 1, math.ceil(total_bytes / opts.max_bytes_per_partition))
    n = max(1, min(n, count))
    cuts = [start]
    region, acc = 0, 0.0
    for j in range(1, n):
        target = total_bytes * j / n
        while region < len(region_bytes) - 1 and acc + region_bytes[region] < target:
            acc += region_bytes[region]
            region += 1
        per = samples[region][1]
        cut = edges[region] + int((target - acc) / per) if per > 0 else edges[region]
        cuts.append(min(end - 1, max(cuts[-1] + 1, cut)))
    cuts.append(end)
    nodes = _replicas(opts, bounds)
    avg = int(total_bytes / count) if count else DEFAULT_ENTRY_BYTES
    return [LogPartition(i, cuts[i], cuts[i + 1], nodes[i % len(nodes)], avg) for i in range(len(cuts) - 1)
            if cuts[i + 1] > cuts[i]]


def _replicas(opts: SourceOptions, bounds: LogBounds) -> list[str | None]:
    """Which member serves each partition, round-robin: None means "the leader, wherever it is"."""
    if opts.read_from == "followers" and bounds.followers:
        return list(bounds.followers)
    if opts.read_from == "any":
        return [None, *bounds.followers]
    return [None]


# -- reading (tasks) --------------------------------------------------------------------------------

async def fetch_page(remote: Remote, opts: SourceOptions, target: dict, lo: int, hi: int) -> tuple[Records, int]:
    """Committed entries from [lo, hi) (at least one unless skipping): (records, next index).

    `target["node"]` is the partition's replica (None: the leader). A replica that is unreachable or has
    not committed `lo` within followerWaitMs hands the page — and the rest of the partition, by clearing
    target["node"] — to the leader. Retention past `lo`: DataLoss, or a skip to begin_index with
    failOnDataLoss=false.
    """
    node = target["node"]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + opts.timeout_ms / 1000
    replica_until = loop.time() + opts.follower_wait_ms / 1000
    while True:
        wait_ms = int(max(0, min(LONG_POLL_MS, (deadline - loop.time()) * 1000)))
        client = remote.client if node is None else remote.replica_client
        try:
            records, committed, begin = await client.read_records(lo, end=hi - 1, max_bytes=opts.page_bytes,
                                                                  node=node, wait_ms=wait_ms)
        except QuorumLogError as e:
            if node is None or not e.retriable:
                raise
            log.warning("replica %s failed (%s); reading [%d, %d) from the leader", node, e, lo, hi)
            node = target["node"] = None
            continue
        if records.count > 0:
            assert records.first_index == lo and records.last_index < hi, (records, lo, hi)
            return records, records.last_index + 1
        if begin > lo:
            if opts.fail_on_data_loss:
                raise DataLoss(f"entries {lo}..{min(hi, begin) - 1} were removed by retention before Spark read "
                               f"them (begin_index {begin}; set failOnDataLoss=false to skip them)")
            log.warning("entries %d..%d were removed by retention; skipping them", lo, min(hi, begin) - 1)
            return Records(lo, lo - 1, (), 0), min(hi, begin)
        if node is not None and loop.time() >= replica_until:
            log.warning("replica %s has committed only up to %d; reading [%d, %d) from the leader", node,
                        committed, lo, hi)
            node = target["node"] = None
        elif loop.time() >= deadline:
            raise Timeout(f"index {lo} not committed within {opts.timeout_ms} ms (committed_index {committed})")


def read_partition(opts: SourceOptions, start: int, end: int, node: str | None,
                   entry_bytes: int) -> Iterator[pa.RecordBatch]:
    """Entries [start, end) as RecordBatches in index order, `pagesInFlight` pages requested ahead.

    Pages are index sub-ranges of about pageBytes; entry_bytes 0 (unknown) fetches one page first and sizes
    the rest from what it saw.
    """
    if end <= start:
        return
    remote = remote_for(opts)
    per_page = max(1, opts.page_bytes // entry_bytes) if entry_bytes > 0 else 0
    queue: deque = deque()  # (lo, hi, future) in index order
    next_lo = start
    target = {"node": node}  # shared by this partition's pages: a fail-over sticks

    def request(lo: int, hi: int) -> tuple:
        return lo, hi, remote.submit(fetch_page(remote, opts, target, lo, hi))

    def fill() -> None:
        nonlocal next_lo
        if per_page == 0:
            if not queue:  # size unknown: one page (cut by max_bytes) tells us
                queue.append(request(next_lo, end))
                next_lo = end
            return
        while next_lo < end and len(queue) < opts.pages_in_flight:
            hi = min(end, next_lo + per_page)
            queue.append(request(next_lo, hi))
            next_lo = hi

    fill()
    while queue:
        lo, hi, fut = queue.popleft()
        records, got_to = fut.result()
        if per_page == 0 and records.count > 0:
            per_page = max(1, int(opts.page_bytes * records.count / max(1, records.size_bytes)))
            next_lo, hi = got_to, got_to  # the rest is requested in sized pages below
        if got_to < hi:  # cut short by max_bytes (bigger entries than estimated): ask for the rest first
            queue.appendleft(request(got_to, hi))
        fill()
        yield from records_to_batches(records.chunks)
    settle_worker_heap()


class QuorumLogBatchReader(DataSourceReader):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        t0 = time.monotonic()
        remote = remote_for(self.opts)
        bounds = remote.bounds()
        start, end = resolve_range(self.opts, bounds)
        parts = plan_partitions(self.opts, remote, bounds, start, end)
        log.info("planned %d partitions over [%d, %d) in %.0f ms", len(parts), start, end,
                 (time.monotonic() - t0) * 1000)
        return parts

    def read(self, partition: LogPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.opts, partition.start, partition.end, partition.node, partition.entry_bytes)
