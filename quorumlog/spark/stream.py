"""Streaming read: offsets {"index": N} (the next index to read), Kafka-like read limits, Trigger.AvailableNow.

Exactly once comes from Spark's offset log: a micro-batch is the index range [start, end) written to the
checkpoint before it runs, and the log never changes committed entries, so a replay after a driver crash
reads exactly the same entries.

Per micro-batch the driver makes one round trip to the cluster: latestOffset reads the first few entries
at `start` from the leader, which answers with its commit point and begin index and shows how big entries
are; partitions() reuses that estimate. Spark's own per-micro-batch work (offset and commit logs, planning,
scheduling a task) costs far more (see bench/spark.py), so a micro-batch of maxRecordsPerTrigger 100,000 is
one task unless its bytes call for more.
"""

from __future__ import annotations

import logging
import math
from typing import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (ReadAllAvailable, ReadLimit, ReadMaxRows,
                                              SupportsTriggerAvailableNow)

from ..errors import QuorumLogError
from .batch import DEFAULT_ENTRY_BYTES, SAMPLE_BYTES, SAMPLE_ENTRIES, DataLoss, LogPartition, _replicas, read_partition
from .options import EARLIEST, LATEST, SourceOptions
from .remote import Remote, remote_for

log = logging.getLogger(__name__)

# A task costs Spark ~50-100 ms on 2 busy cores whatever it reads: split a micro-batch only by bytes
# (maxBytesPerPartition, like the batch read) and never into pieces smaller than this.
MIN_ROWS_PER_PARTITION = 20_000


async def _head(remote: Remote, index: int, end: int) -> tuple[int, int, float | None, int]:
    """One read of up to SAMPLE_ENTRIES entries from `index` (below `end`) from the leader: (begin_index,
    committed_index, bytes per entry or None when nothing at `index` is readable, entries read). The answer
    carries the leader's bounds, so no status round is needed."""
    records, committed, begin = await remote.client.read_records(
        index, end=min(end, index + SAMPLE_ENTRIES) - 1, max_bytes=SAMPLE_BYTES)
    per_entry = records.size_bytes / records.count if records.count > 0 else None
    return max(0, begin), committed, per_entry, records.count


def _index(offset: dict) -> int:
    return int(offset["index"])


def cap_end(end: int, begin: int, opts: SourceOptions, available_now_end: int | None, limit: ReadLimit) -> int:
    """A micro-batch's end (exclusive) from what is readable: at most Trigger.AvailableNow's target, the
    endingIndex option and `begin` + maxRecordsPerTrigger."""
    if available_now_end is not None:
        end = min(end, available_now_end)
    if opts.ending_index not in (EARLIEST, LATEST):
        end = min(end, int(opts.ending_index))
    if isinstance(limit, ReadMaxRows):
        end = min(end, begin + limit.max_rows)
    return end


class QuorumLogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._available_now_end: int | None = None  # Trigger.AvailableNow's target (exclusive)
        # (index, bytes per entry, entries read) from latestOffset's read at the start of the next micro-batch
        self._head_sample: tuple[int, float, int] | None = None

    def _remote(self):
        return remote_for(self.opts)

    def initialOffset(self) -> dict:
        bounds = self._remote().bounds()
        start = self.opts.starting_index
        if start == EARLIEST:
            return {"index": bounds.begin_index}
        if start == LATEST:
            return {"index": bounds.committed_index + 1}
        return {"index": int(start)}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_records_per_trigger is not None:
            return ReadMaxRows(self.opts.max_records_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now_end = self._remote().bounds().committed_index + 1
        log.info("Trigger.AvailableNow: reading up to index %d", self._available_now_end)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = _index(start)
        begin_index, committed_index, per_entry, got = self._remote().run(
            _head(self._remote(), begin, begin + SAMPLE_ENTRIES))
        self._head_sample = (begin, per_entry, got) if per_entry is not None else None
        if begin < begin_index:
            self._on_data_loss(begin, begin_index)
            begin = begin_index
        end = cap_end(committed_index + 1, begin, self.opts, self._available_now_end, limit)
        return {"index": max(begin, end, _index(start))}

    def _on_data_loss(self, needed: int, begin_index: int) -> None:
        if self.opts.fail_on_data_loss:
            raise DataLoss(f"entries {needed}..{begin_index - 1} were removed by retention before the query read "
                           f"them (begin_index {begin_index}; set failOnDataLoss=false to skip them)")
        log.warning("entries %d..%d were removed by retention; skipping them", needed, begin_index - 1)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        lo, hi = _index(start), _index(end)
        count = hi - lo
        if count <= 0:
            return []
        remote = self._remote()
        entry_bytes = self._entry_bytes(remote, lo, hi)
        by_bytes = math.ceil(count * entry_bytes / self.opts.max_bytes_per_partition)
        n = max(self.opts.min_partitions or 1, by_bytes)
        n = max(1, min(n, math.ceil(count / MIN_ROWS_PER_PARTITION)))
        nodes = _replicas(self.opts, remote.bounds()) if self.opts.read_from != "leader" else [None]
        cuts = [lo + (count * i) // n for i in range(n + 1)]
        return [LogPartition(i, cuts[i], cuts[i + 1], nodes[i % len(nodes)], int(entry_bytes)) for i in range(n)]

    def _entry_bytes(self, remote: Remote, lo: int, hi: int) -> float:
        """Bytes per entry of the first entries of [lo, hi): a function of committed entries only, so a
        micro-batch replayed after a restart is cut into the same partitions (a sink keyed on partitions,
        like format("quorumlog")'s, then re-sends the same keys). latestOffset's read usually is that read."""
        sample = self._head_sample
        if sample is not None and sample[0] == lo and lo + sample[2] <= hi:
            return sample[1]
        try:  # a replay right after a restart, or a micro-batch shorter than the sample
            _, _, per_entry, _ = remote.run(_head(remote, lo, hi))
        except QuorumLogError as e:  # only sizing is at stake: tasks handle pages cut short
            log.warning("could not sample entry sizes at %d: %s", lo, e)
            per_entry = None
        return per_entry or DEFAULT_ENTRY_BYTES

    def read(self, partition: LogPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.opts, partition.start, partition.end, partition.node, partition.entry_bytes)

    def commit(self, end: dict) -> None:
        pass  # the log keeps entries by retention, not by consumer progress

    def stop(self) -> None:
        pass
