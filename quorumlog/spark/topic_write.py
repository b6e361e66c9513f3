"""Writing a DataFrame to a topic (`df.write.format("quorumlog").option("topic", T)`; docs/topics.md): columns
`body` (binary or string, required), `key` and `tags` (strings, optional), one message per row.

A row's queue is its key's (client/topics.py queue_for: the same key, the same queue as a Producer's); rows
without a key go round robin over the queues, counted from the task's first row, so a retried task puts them
where its first attempt did. Rows are cut, per group, into chunks in row order, and each chunk is sent as one
request with a derived producer id (write identity, partition, group) and its position as the sequence, one
chunk at a time per group: a retried task or a replayed micro-batch re-sends the same (producer, sequence)
pairs and the group answers with the first attempt's offsets instead of storing them again (as the raw
writer does, spark/write.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from ..errors import DuplicateSequenceTooOld
from ..topic.message import Message, encode
from .options import OptionError, SourceOptions
from .write import SEQ_CHUNK_BITS, AppendedRange, _task_context, body_column, derive_client_id, stream_identity

log = logging.getLogger(__name__)


def _text_column(batch: pa.RecordBatch, name: str) -> list[str]:
    idx = batch.schema.get_field_index(name)
    if idx < 0:
        return [""] * batch.num_rows
    col = batch.column(idx)
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        raise OptionError(f"column {name} must be a string, got {col.type}")
    return ["" if v is None else v for v in col.to_pylist()]


async def _write(opts: SourceOptions, batches: Iterator[pa.RecordBatch], identity: str, seq_base: int,
                 pid: int) -> AppendedRange:
    from ..client.topics import TopicClient, queue_for

    rows = chunks = duplicates = 0
    async with TopicClient(opts.peers, timeout_ms=opts.timeout_ms, token=opts.token, tls_ca=opts.tls_ca) as c:
        placement = await c.routes.route(opts.topic)
        groups = sorted(set(placement))
        lanes = {g: derive_client_id(identity, pid, i) for i, g in enumerate(groups)}
        positions = dict.fromkeys(groups, 0)
        open_chunks: dict[str, tuple[list[bytes], int]] = {g: ([], 0) for g in groups}
        now = int(time.time() * 1000)

        async def flush(group: str) -> None:
            nonlocal chunks, duplicates
            bodies, _ = open_chunks[group]
            if not bodies:
                return
            open_chunks[group] = ([], 0)
            assert positions[group] < (1 << SEQ_CHUNK_BITS)
            try:
                await c.routes.send(group, opts.topic, 0, tuple(bodies), client_id=lanes[group],
                                    seq=seq_base | positions[group])
            except DuplicateSequenceTooOld:
                duplicates += 1  # below the group's dedup window for this producer: stored long ago
            positions[group] += 1
            chunks += 1

        for batch in batches:
            bodies_col = body_column(batch)
            if bodies_col.null_count:
                raise OptionError("column body has nulls; a message needs a body")
            for body, key, tags in zip(bodies_col.to_pylist(), _text_column(batch, "key"), _text_column(batch, "tags")):
                q = queue_for(key, len(placement)) if key else rows % len(placement)
                group = placement[q]
                message = encode(Message(opts.topic, body, q, key, tags, {}, now))
                pending, size = open_chunks[group]
                if pending and (len(pending) >= opts.write_batch_rows or size + len(message) > opts.write_batch_bytes):
                    await flush(group)
                    pending, size = open_chunks[group]
                pending.append(message)
                open_chunks[group] = (pending, size + len(message))
                rows += 1
        for g in groups:
            await flush(g)
    return AppendedRange(pid, rows, chunks, -1, -1, duplicates)


def _run(opts: SourceOptions, batches: Iterator[pa.RecordBatch], identity: str, seq_base: int,
         pid: int) -> AppendedRange:
    return asyncio.run(_write(opts, batches, identity, seq_base, pid))


class TopicWriter(DataSourceArrowWriter):
    """df.write.format("quorumlog").option("topic", T): one producer per (job, partition, group)."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.job_id = opts.write_id or uuid.uuid4().hex  # made on the driver: a retried task keeps it

    def write(self, iterator: Iterator[pa.RecordBatch]) -> AppendedRange:
        ctx = _task_context()
        msg = _run(self.opts, iterator, f"topic-job:{self.job_id}", 0, ctx.partitionId())
        log.info("wrote topic=%s partition=%d rows=%d chunks=%d duplicates=%d", self.opts.topic, msg.partition_id,
                 msg.rows, msg.chunks, msg.duplicate_chunks)
        return msg

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        pass  # every chunk is committed in its group as it is acknowledged

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log.warning("topic job %s aborted; a re-run with the same writeId completes it without duplicates",
                    self.job_id)


class TopicStreamWriter(DataSourceStreamArrowWriter):
    """writeStream to a topic: one producer per (query, partition, group), sequence (batch id, position)."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> AppendedRange:
        ctx = _task_context()
        query_id, batch_id = stream_identity(ctx, self.opts)
        return _run(self.opts, iterator, f"topic-query:{query_id}", batch_id << SEQ_CHUNK_BITS, ctx.partitionId())

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass
