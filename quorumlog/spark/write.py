"""Batch and streaming writes: every task appends with the idempotent client, so nothing lands twice.

The idempotence key of each append is derived, never random:
- client_id = hash(write identity, partition id, lane): the batch job's id (made once on the driver and
  shipped to every task, so a retried task has it too) or the streaming query's id (kept in its checkpoint,
  so it survives a driver restart). A task keeps `writesInFlight` appends in flight, chunk k on lane
  k % writesInFlight, and each lane is a producer with one append at a time, so its seqs reach the leader in
  order (the group answers a seq below a producer's oldest remembered one with DUPLICATE_SEQUENCE_TOO_OLD);
- seq = the chunk's position in its lane (batch) or (batch id << 20) | that position (streaming).
A retried task or a replayed micro-batch therefore re-sends the same (client_id, seq) pairs and the group
answers with the original indexes instead of storing the entries again. Chunks are cut by rows and bytes
from the task's row order, independently of how Spark sliced its Arrow batches, so the same input gives the
same chunks. (Like any Spark sink, this needs a task's input to be the same rows in the same order when it
is re-run.)
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections import deque
from dataclasses import dataclass
from typing import Iterable, Iterator

import pyarrow as pa
from pyspark.sql.datasource import (DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage)

from ..errors import DuplicateSequenceTooOld
from .options import OptionError, SourceOptions
from .remote import remote_for, settle_worker_heap

log = logging.getLogger(__name__)

SEQ_CHUNK_BITS = 20  # chunks per task per micro-batch (1M chunks of ≤ 1 MiB: far beyond a task)
MAX_BATCH_ID = (1 << (63 - SEQ_CHUNK_BITS)) - 1
U64_MASK = (1 << 64) - 1
QUERY_ID_PROPERTY = "sql.streaming.queryId"  # set by Spark on every task of a streaming query
BATCH_ID_PROPERTY = "streaming.sql.batchId"


def derive_client_id(identity: str, partition_id: int, lane: int = 0) -> int:
    """A stable non-zero 64-bit producer id for (write identity, Spark partition, lane)."""
    key = f"quorumlog-spark\0{identity}\0{partition_id}\0{lane}".encode()
    digest = hashlib.blake2b(key, digest_size=8).digest()
    return int.from_bytes(digest, "big") & U64_MASK or 1


@dataclass(frozen=True, slots=True)
class AppendedRange(WriterCommitMessage):
    partition_id: int
    rows: int
    chunks: int
    first_index: int  # -1 when the task wrote nothing (or only re-sent chunks too old to be answered)
    last_index: int
    duplicate_chunks: int  # re-sent chunks older than the group's dedup window (stored long ago)


def body_column(batch: pa.RecordBatch) -> pa.Array:
    idx = batch.schema.get_field_index("body")
    if idx < 0:
        raise OptionError(f"writing to quorumlog needs a `body` column (binary or string); got "
                          f"{', '.join(batch.schema.names)}")
    col = batch.column(idx)
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type) or pa.types.is_large_binary(col.type):
        return col.cast(pa.binary())  # UTF-8 text is sent as its bytes
    if not pa.types.is_binary(col.type):
        raise OptionError(f"column body must be binary or string, got {col.type}")
    return col


def chunk_bodies(batches: Iterable[pa.RecordBatch], max_rows: int, max_bytes: int) -> Iterator[list[bytes]]:
    """Bodies in row order, cut into chunks of ≤ max_rows rows and ≤ max_bytes bytes (at least one row)."""
    chunk: list[bytes] = []
    size = 0
    for batch in batches:
        col = body_column(batch)
        if col.null_count:
            raise OptionError("column body has nulls; an entry needs a body")
        for body in col.to_pylist():
            if chunk and (len(chunk) >= max_rows or size + len(body) > max_bytes):
                yield chunk
                chunk, size = [], 0
            chunk.append(body)
            size += len(body)
    if chunk:
        yield chunk


def append_chunks(remote, chunks: Iterable[list[bytes]], identity: str, seq_base: int, in_flight: int,
                  partition_id: int) -> AppendedRange:
    """Append each chunk as one idempotent batch, up to `in_flight` at once (one per lane).

    Spark's row iterator is drained here, in the task's thread; only the appends run on the loop thread.
    Chunk k goes on lane k % in_flight as that lane's (k // in_flight)-th batch; the deque is FIFO, so a
    lane's previous batch is settled before its next one is sent.
    """
    lanes = [derive_client_id(identity, partition_id, lane) for lane in range(in_flight)]
    pending: deque = deque()
    spans: list[tuple[int, int]] = []
    rows = chunks_sent = duplicates = 0

    def settle(fut) -> None:
        nonlocal duplicates
        try:
            res = fut.result()
        except DuplicateSequenceTooOld:
            # Below the group's dedup window for this producer: stored long ago (our seqs only grow).
            duplicates += 1
            return
        spans.append((res[0].index, res[-1].index))

    try:
        for position, bodies in enumerate(chunks):
            while len(pending) >= in_flight:
                settle(pending.popleft())
            rows += len(bodies)
            chunks_sent += 1
            lane, lane_position = position % in_flight, position // in_flight
            assert lane_position < (1 << SEQ_CHUNK_BITS), lane_position
            pending.append(remote.submit(remote.client.append_batch(bodies, client_id=lanes[lane],
                                                                    seq=seq_base | lane_position)))
        while pending:
            settle(pending.popleft())
    finally:
        for fut in pending:  # a failure above: let the rest finish or fail on their own, unobserved
            fut.add_done_callback(lambda f: f.exception())
    first = min((a for a, _ in spans), default=-1)
    last = max((b for _, b in spans), default=-1)
    return AppendedRange(partition_id, rows, chunks_sent, first, last, duplicates)


def _task_context():
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:  # pragma: no cover - Spark always runs write() inside a task
        raise RuntimeError("quorumlog writer must run inside a Spark task")
    return ctx


def stream_identity(ctx, opts: SourceOptions) -> tuple[str, int]:
    """(query id, batch id) of a streaming write's task: what its producer ids and sequences derive from."""
    query_id = opts.write_id or ctx.getLocalProperty(QUERY_ID_PROPERTY)
    batch_text = ctx.getLocalProperty(BATCH_ID_PROPERTY)
    if not query_id or batch_text is None:
        raise RuntimeError(f"streaming write without the query id / batch id task properties "
                           f"({QUERY_ID_PROPERTY}={query_id!r}, {BATCH_ID_PROPERTY}={batch_text!r})")
    batch_id = int(batch_text)
    assert 0 <= batch_id <= MAX_BATCH_ID, batch_id
    return query_id, batch_id


class QuorumLogWriter(DataSourceArrowWriter):
    """df.write.format("quorumlog"): one producer per (job, partition), seq = chunk position."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        # Made once on the driver and pickled into every task: a retried task appends with the same key.
        self.job_id = opts.write_id or uuid.uuid4().hex

    def write(self, iterator: Iterator[pa.RecordBatch]) -> AppendedRange:
        ctx = _task_context()
        pid = ctx.partitionId()
        chunks = chunk_bodies(iterator, self.opts.write_batch_rows, self.opts.write_batch_bytes)
        remote = remote_for(self.opts)
        msg = append_chunks(remote, chunks, f"job:{self.job_id}", 0, self.opts.writes_in_flight, pid)
        log.info("wrote partition=%d attempt=%d rows=%d chunks=%d duplicates=%d", pid, ctx.attemptNumber(),
                 msg.rows, msg.chunks, msg.duplicate_chunks)
        settle_worker_heap()
        return msg

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        rows = sum(m.rows for m in messages if isinstance(m, AppendedRange))
        log.info("job %s appended %d rows from %d tasks", self.job_id, rows, len(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        # What tasks appended stays in the log (it is committed); a re-run of the same job id re-sends the
        # same keys, so it completes the job without duplicates.
        log.warning("job %s aborted; %d of %d tasks had finished", self.job_id,
                    sum(m is not None for m in messages), len(messages))


class QuorumLogStreamWriter(DataSourceStreamArrowWriter):
    """writeStream.format("quorumlog"): one producer per (query, partition), seq = (batch id, position)."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> AppendedRange:
        ctx = _task_context()
        pid = ctx.partitionId()
        query_id, batch_id = stream_identity(ctx, self.opts)
        chunks = chunk_bodies(iterator, self.opts.write_batch_rows, self.opts.write_batch_bytes)
        remote = remote_for(self.opts)
        msg = append_chunks(remote, chunks, f"query:{query_id}", batch_id << SEQ_CHUNK_BITS,
                            self.opts.writes_in_flight, pid)
        log.info("wrote query=%s batch=%d partition=%d rows=%d duplicates=%d", query_id, batch_id, pid, msg.rows,
                 msg.duplicate_chunks)
        settle_worker_heap()
        return msg

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass  # entries are committed in the log as each task appends; nothing to publish

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("micro-batch %d aborted; its replay re-sends the same keys", batchId)
