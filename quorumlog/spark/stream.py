"""Streaming read: offsets {"index": N} (the next index to read), Kafka-like read limits, Trigger.AvailableNow.

Exactly once comes from Spark's offset log: a micro-batch is the index range [start, end) written to the
checkpoint before it runs, and the log never changes committed entries, so a replay after a driver crash
reads exactly the same entries.
"""

from __future__ import annotations

import logging
import math
from typing import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (ReadAllAvailable, ReadLimit, ReadMaxRows,
                                              SupportsTriggerAvailableNow)

from .batch import SAMPLE_ENTRIES, DataLoss, LogPartition, _replicas, _sample_entry_bytes, read_partition
from .options import EARLIEST, LATEST, SourceOptions
from .remote import remote_for

log = logging.getLogger(__name__)

MIN_ROWS_PER_PARTITION = 20_000  # below this one task is cheaper than two
DEFAULT_STREAM_PARTITIONS = 2


def _index(offset: dict) -> int:
    return int(offset["index"])


class QuorumLogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._available_now_end: int | None = None  # Trigger.AvailableNow's target (exclusive)

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
        bounds = self._remote().bounds()
        begin = _index(start)
        if begin < bounds.begin_index:
            self._on_data_loss(begin, bounds.begin_index)
            begin = bounds.begin_index
        end = bounds.committed_index + 1
        if self._available_now_end is not None:
            end = min(end, self._available_now_end)
        if self.opts.ending_index not in (EARLIEST, LATEST):
            end = min(end, int(self.opts.ending_index))
        if isinstance(limit, ReadMaxRows):
            end = min(end, begin + limit.max_rows)
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
        n = self.opts.min_partitions or DEFAULT_STREAM_PARTITIONS
        n = max(1, min(n, math.ceil(count / MIN_ROWS_PER_PARTITION)))
        remote = self._remote()
        nodes = _replicas(self.opts, remote.bounds()) if self.opts.read_from != "leader" else [None]
        # One small read tells the tasks how big entries are, so they can keep sized pages in flight at once.
        sample = remote.run(_sample_entry_bytes(remote, lo, min(hi, lo + SAMPLE_ENTRIES)))
        entry_bytes = int(sample[0][1]) if sample else 0
        cuts = [lo + (count * i) // n for i in range(n + 1)]
        return [LogPartition(i, cuts[i], cuts[i + 1], nodes[i % len(nodes)], entry_bytes) for i in range(n)]

    def read(self, partition: LogPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.opts, partition.start, partition.end, partition.node, partition.entry_bytes)

    def commit(self, end: dict) -> None:
        pass  # the log keeps entries by retention, not by consumer progress

    def stop(self) -> None:
        pass
