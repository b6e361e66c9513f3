"""Reading a topic (`.option("topic", T)` or Kafka's `.option("subscribe", T)`; docs/topics.md): every queue's
messages with the columns of a group's log plus the message's own.

    index, term, timestamp (the store time), body, topic, queue_id, queue_offset, key, tags, properties,
    born_timestamp

Offsets are per queue, as Kafka's are per partition: `startingOffsets` / `endingOffsets` take "earliest" /
"latest" or JSON `{"T": {"0": 23, "1": -2}}` (-2 earliest, -1 latest, as Kafka's connector). A partition is a
run of one queue's offsets of at most `maxRecordsPerPartition` messages, read by pulls from the queue's group.
Streaming offsets are `{"T/0": n, ...}` (the next queue offset of each queue): queue offsets are dense and
never reused, and the messages they name never change, so a micro-batch replayed after a driver crash reads
exactly the same messages (exactly once with an idempotent or transactional sink, as for the raw log).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from concurrent.futures import Future
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from ..errors import QuorumLogError
from ..topic.message import TOPIC_RE, fast
from ..wire.client import PackedMessages
from .options import EARLIEST, LATEST, OptionError, SourceOptions
from .remote import drop_remote, remote_for, settle_worker_heap

log = logging.getLogger(__name__)
MAX_BATCH_BYTES = 2**31 - 1  # int32 Arrow offsets
DEFAULT_RECORDS_PER_PARTITION = 200_000
PULL_MESSAGES = 16384  # the node's cap per pull (server/services/topics.py)
PULLS_IN_FLIGHT = 4
FIRST_PULL_MESSAGES = 1024  # pulls grow from this to PULL_MESSAGES: a task's first batch comes sooner
KAFKA_EARLIEST, KAFKA_LATEST = -2, -1

TOPIC_SCHEMA = pa.schema([
    pa.field("index", pa.int64(), nullable=False),
    pa.field("term", pa.int64(), nullable=False),
    pa.field("timestamp", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("body", pa.binary(), nullable=False),
    pa.field("topic", pa.string(), nullable=False),
    pa.field("queue_id", pa.int32(), nullable=False),
    pa.field("queue_offset", pa.int64(), nullable=False),
    pa.field("key", pa.string(), nullable=False),
    pa.field("tags", pa.string(), nullable=False),
    pa.field("properties", pa.map_(pa.string(), pa.string()), nullable=False),
    pa.field("born_timestamp", pa.timestamp("us", tz="UTC"), nullable=False),
])


def topic_spark_schema():
    from pyspark.sql.types import (BinaryType, IntegerType, LongType, MapType, StringType, StructField, StructType,
                                   TimestampType)

    return StructType([
        StructField("index", LongType(), False), StructField("term", LongType(), False),
        StructField("timestamp", TimestampType(), False), StructField("body", BinaryType(), False),
        StructField("topic", StringType(), False), StructField("queue_id", IntegerType(), False),
        StructField("queue_offset", LongType(), False), StructField("key", StringType(), False),
        StructField("tags", StringType(), False),
        StructField("properties", MapType(StringType(), StringType(), True), False),
        StructField("born_timestamp", TimestampType(), False),
    ])


class QueueRun(InputPartition):
    """Queue offsets [lo, hi) of one queue, read from `node` (None: the queue's group's leader)."""

    def __init__(self, pid: int, topic: str, queue_id: int, lo: int, hi: int, node: str | None = None) -> None:
        self.pid = pid
        self.topic = topic
        self.queue_id = queue_id
        self.lo = lo
        self.hi = hi
        self.node = node


def _client(opts: SourceOptions):
    from ..client.topics import TopicClient

    return TopicClient(opts.peers, timeout_ms=opts.timeout_ms, token=opts.token, tls_ca=opts.tls_ca)


async def _bounds(opts: SourceOptions) -> dict[int, tuple[int, int]]:
    """Every queue's (min, max) offsets."""
    async with _client(opts) as c:
        queues = len(await c.routes.route(opts.topic))
        got = await asyncio.gather(*(c.offsets(opts.topic, q) for q in range(queues)))
    return dict(enumerate(got))


async def _spread(opts: SourceOptions, parts: list[QueueRun]) -> list[QueueRun]:
    """readFrom for topic runs (as the raw source's): runs go round robin to the members of each queue's group
    that readFrom names, a follower serving what it has dispatched (None: the leader)."""
    if opts.read_from == "leader" or not parts:
        return parts
    async with _client(opts) as c:
        placement = await c.routes.route(opts.topic)
        readers: dict[str, list[str | None]] = {}
        for group in sorted(set(placement)):
            followers = [st.id for st in await c.routes.group_client(group).status() if st.role == "follower"]
            readers[group] = followers if opts.read_from == "followers" and followers else [None, *followers]
    for i, p in enumerate(parts):
        members = readers[placement[p.queue_id]]
        p.node = members[i % len(members)]
    return parts


def _positions(text: str | None, default: str, topic: str, bounds: dict[int, tuple[int, int]],
               what: str) -> dict[int, int]:
    """Per queue offsets from "earliest" / "latest" / Kafka-style JSON (queues it omits take `default`)."""
    text = text or default
    if text.lower() in (EARLIEST, LATEST):
        return {q: (lo if text.lower() == EARLIEST else hi) for q, (lo, hi) in bounds.items()}
    try:
        doc = json.loads(text)[topic]
        given = {int(q): int(v) for q, v in doc.items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        raise OptionError(f"option {what}: earliest, latest or JSON like {{\"{topic}\": {{\"0\": 23, \"1\": -2}}}}, "
                          f"got {text!r}") from None
    out = {}
    for q, (lo, hi) in bounds.items():
        v = given.get(q, KAFKA_EARLIEST if default == EARLIEST else KAFKA_LATEST)
        out[q] = lo if v == KAFKA_EARLIEST else hi if v == KAFKA_LATEST else max(lo, min(v, hi))
    unknown = set(given) - set(bounds)
    if unknown:
        raise OptionError(f"option {what}: topic {topic!r} has no queues {sorted(unknown)}")
    return out


def _cut(topic: str, start: dict[int, int], end: dict[int, int], per_part: int) -> list[QueueRun]:
    parts: list[QueueRun] = []
    for q in sorted(start):
        lo, hi = start[q], end.get(q, start[q])
        while lo < hi:
            parts.append(QueueRun(len(parts), topic, q, lo, min(hi, lo + per_part)))
            lo += per_part
    return parts


def _batch(rows: list) -> pa.RecordBatch:
    cols = list(zip(*rows))
    return pa.RecordBatch.from_arrays([
        pa.array(cols[0], pa.int64()), pa.array(cols[1], pa.int64()),
        pa.array([t * 1000 for t in cols[2]], pa.timestamp("us", tz="UTC")), pa.array(cols[3], pa.binary()),
        pa.array(cols[4], pa.string()), pa.array(cols[5], pa.int32()), pa.array(cols[6], pa.int64()),
        pa.array(cols[7], pa.string()), pa.array(cols[8], pa.string()),
        pa.array([list(p.items()) for p in cols[9]], pa.map_(pa.string(), pa.string())),
        pa.array([t * 1000 for t in cols[10]], pa.timestamp("us", tz="UTC"))], schema=TOPIC_SCHEMA)


_HEAD_BYTES = 18  # magic 3, version 1, flags 4, queue_id 2, born_timestamp 8 (topic/message.py)


def _be(raw: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """Big-endian unsigned integers of `width` bytes at offsets `at` of `raw`, as int64."""
    return raw[at[:, None] + np.arange(width)].view(f">u{width}").ravel().astype(np.int64)


def messages_batch(pulled) -> pa.RecordBatch:
    """Pulled messages (PackedMessages as they came, or PulledMessages) → one RecordBatch, parsed column-wise
    with numpy and cut by Arrow (no Python object per message), as the raw source's records_to_batch does.
    Messages with properties, or anything unexpected, take the per-message decoder."""
    packed = pulled if isinstance(pulled, PackedMessages) else PackedMessages.of(pulled)
    n = packed.count
    if n == 0:
        return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in TOPIC_SCHEMA], schema=TOPIC_SCHEMA)
    cols = fast.pulled_columns(packed.head, packed.blob) if fast is not None else None
    if cols is not None:  # one C pass (topic/_fastmessage.c) instead of the numpy passes below
        return _columns_batch(cols)
    head = np.frombuffer(packed.head, ">i8").reshape(n, 5).astype(np.int64)
    queue_offset, index, term, store_ms, size = (np.ascontiguousarray(head[:, k]) for k in range(5))
    buf = packed.blob
    start = np.zeros(n, np.int64)
    np.cumsum(size[:-1], out=start[1:])
    raw = np.frombuffer(buf, np.uint8)
    end = start + size
    if len(buf) > MAX_BATCH_BYTES or size.min() < _HEAD_BYTES + 7 or int(size.sum()) != len(buf) or not (
            (raw[start] == 0x51) & (raw[start + 1] == 0x4C) & (raw[start + 2] == 0x4D) & (raw[start + 3] == 1)).all():
        return _batch_slow(packed)  # (b"QLM", version 1: anything else is the decoder's to judge)
    # each length is read only once the previous field is known to end inside its own message
    t0 = start + _HEAD_BYTES + 1
    t1 = t0 + raw[start + _HEAD_BYTES]
    if (t1 + 2 > end).any():
        return _batch_slow(packed)
    k0 = t1 + 2
    k1 = k0 + _be(raw, t1, 2)
    if (k1 + 2 > end).any():
        return _batch_slow(packed)
    g0 = k1 + 2
    g1 = g0 + _be(raw, k1, 2)
    if (g1 + 2 > end).any() or _be(raw, g1, 2).any():  # (properties: the per-message decoder)
        return _batch_slow(packed)
    b0 = g1 + 2
    cuts = np.empty(8 * n + 1, np.int32)  # header | topic | key length | key | tags length | tags | count | body
    for i, col in enumerate((start, t0, t1, k0, k1, g0, g1, b0)):
        cuts[i:8 * n:8] = col
    cuts[-1] = len(buf)
    pieces = pa.Array.from_buffers(pa.binary(), 8 * n, [None, pa.py_buffer(cuts), pa.py_buffer(buf)])

    def piece(k: int) -> pa.Array:
        return pieces.take(pa.array(np.arange(k, 8 * n, 8, dtype=np.int32)))

    topics = piece(1)
    if not all(TOPIC_RE.match(t.decode("latin-1")) for t in pc.unique(topics).to_pylist()):
        return _batch_slow(packed)  # (a topic name the decoder refuses: it raises the reference error)
    born_ms = _be(raw, start + 10, 8)
    limit = np.iinfo(np.int64).max // 1000
    if any(((t > limit) | (t < -limit)).any() for t in (born_ms, store_ms)):
        return _batch_slow(packed)  # (past int64 microseconds: the decoder's error)
    born_us = born_ms * 1000
    return pa.RecordBatch.from_arrays([
        pa.array(index, pa.int64()), pa.array(term, pa.int64()),
        pa.array(store_ms.astype(np.int64) * 1000, pa.timestamp("us", tz="UTC")), piece(7),
        topics.cast(pa.string()), pa.array(_be(raw, start + 8, 2).astype(np.int32), pa.int32()),
        pa.array(queue_offset, pa.int64()), piece(3).cast(pa.string()), piece(5).cast(pa.string()),
        _no_properties(n),
        pa.array(born_us, pa.timestamp("us", tz="UTC"))], schema=TOPIC_SCHEMA)


def _no_properties(n: int) -> pa.Array:
    """The properties column of n messages that have none (the fast paths take only those)."""
    return pa.MapArray.from_arrays(pa.array(np.zeros(n + 1, np.int32)), pa.array([], pa.string()),
                                   pa.array([], pa.string()))


def _columns_batch(cols: tuple) -> pa.RecordBatch:
    n, index, term, store_us, queue_offset, queue_id, born_us = cols[:7]
    t_off, t_data, k_off, k_data, g_off, g_data, b_off, b_data = cols[7:]

    def fixed(typ: pa.DataType, buf: bytes) -> pa.Array:
        return pa.Array.from_buffers(typ, n, [None, pa.py_buffer(buf)])

    def varying(typ: pa.DataType, offsets: bytes, data: bytes) -> pa.Array:
        return pa.Array.from_buffers(typ, n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])

    us = pa.timestamp("us", tz="UTC")
    return pa.RecordBatch.from_arrays([
        fixed(pa.int64(), index), fixed(pa.int64(), term), fixed(us, store_us), varying(pa.binary(), b_off, b_data),
        varying(pa.string(), t_off, t_data), fixed(pa.int32(), queue_id), fixed(pa.int64(), queue_offset),
        varying(pa.string(), k_off, k_data), varying(pa.string(), g_off, g_data),
        _no_properties(n),
        fixed(us, born_us)], schema=TOPIC_SCHEMA)


def _batch_slow(pulled) -> pa.RecordBatch:
    from ..topic.message import decode

    rows = []
    for pm in pulled:
        m = decode(pm.body)
        if m is None:
            raise OptionError(f"queue offset {pm.queue_offset}: entry {pm.index} is not a readable message")
        rows.append((pm.index, pm.term, pm.store_timestamp_ms, m.body, m.topic, m.queue_id, pm.queue_offset, m.key,
                     m.tags, m.properties, m.born_timestamp_ms))
    return _batch(rows)


def read_run(opts: SourceOptions, p: QueueRun) -> Iterator[pa.RecordBatch]:
    """The run's messages as RecordBatches, one per pull. The pulls run on the worker's Remote loop thread
    (remote.py: its TopicClient keeps routes and connections from task to task), PULLS_IN_FLIGHT ahead of the
    batch Spark is taking, so the network and the frames' decoding overlap the Arrow work here."""

    async def pull_range(c, lo: int, hi: int) -> list:
        """Every message of [lo, hi) as packed answers (more than one when the node's byte budget cuts a pull
        short; a pull of hi - offset messages from offset never reaches past hi)."""
        out, offset = [], lo
        while offset < hi:
            node = target["node"]
            try:
                # (a follower waits up to followerWaitMs for what it has not dispatched yet)
                got = await c.pull_raw(p.topic, p.queue_id, offset, max_messages=hi - offset, node=node,
                                       wait_ms=opts.follower_wait_ms if node is not None else 0)
            except (QuorumLogError, OSError) as e:
                if node is None:
                    raise
                log.info("topic run %s/%d: %s did not serve offset %d (%s); the leader does", p.topic, p.queue_id,
                         node, offset, e)
                target["node"] = None  # (the rest of the run too)
                continue
            if got.next_offset <= offset:
                if node is not None:
                    target["node"] = None
                    continue
                raise OptionError(f"{p.topic}/{p.queue_id}: offset {offset} planned but not readable (the queue "
                                  f"ends at {got.max_offset})")
            out.append(got.messages)
            offset = got.next_offset
        return out

    target = {"node": p.node}  # the run's member, until it fails to serve: then its group's leader

    remote = remote_for(opts)
    c = remote.topic_client()
    # Queue offsets are dense, so the run splits into ranges known in advance, pulled in order.
    ranges: deque[tuple[int, int]] = deque()
    lo, size = p.lo, FIRST_PULL_MESSAGES
    while lo < p.hi:
        ranges.append((lo, min(lo + size, p.hi)))
        lo, size = lo + size, min(PULL_MESSAGES, size * 4)
    window: deque[Future] = deque()
    try:
        while ranges or window:
            while ranges and len(window) < PULLS_IN_FLIGHT:
                window.append(remote.submit(pull_range(c, *ranges.popleft())))
            try:
                answers = window.popleft().result()
            except (QuorumLogError, OSError):
                drop_remote(opts)  # (connections that broke in a way the client's retries missed)
                raise
            for packed in answers:
                if len(packed):
                    yield messages_batch(packed)
    finally:
        for f in window:
            f.cancel()
        settle_worker_heap()


class TopicBatchReader(DataSourceReader):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        bounds = asyncio.run(_bounds(self.opts))
        start = _positions(self.opts.starting_offsets, EARLIEST, self.opts.topic, bounds, "startingOffsets")
        end = _positions(self.opts.ending_offsets, LATEST, self.opts.topic, bounds, "endingOffsets")
        parts = asyncio.run(_spread(self.opts, _cut(self.opts.topic, start, end, DEFAULT_RECORDS_PER_PARTITION)))
        return parts or [QueueRun(0, self.opts.topic, 0, 0, 0)]

    def read(self, partition: QueueRun) -> Iterator[pa.RecordBatch]:
        if partition.hi <= partition.lo:
            return iter(())
        return read_run(self.opts, partition)


def _key(topic: str, q: int) -> str:
    return f"{topic}/{q}"


class TopicStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """readStream of a topic: offsets {"T/0": n, ...}; maxRecordsPerTrigger bounds a micro-batch in total,
    shared out over the queues in proportion to what each has."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._available_now_end: dict[int, int] | None = None

    def _ends(self) -> dict[int, int]:
        return {q: hi for q, (_, hi) in asyncio.run(_bounds(self.opts)).items()}

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now_end = self._ends()

    def initialOffset(self) -> dict:
        bounds = asyncio.run(_bounds(self.opts))
        start = _positions(self.opts.starting_offsets, EARLIEST, self.opts.topic, bounds, "startingOffsets")
        return {_key(self.opts.topic, q): v for q, v in start.items()}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_records_per_trigger is not None:
            return ReadMaxRows(self.opts.max_records_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        topic = self.opts.topic
        ends = self._ends()
        if self._available_now_end is not None:
            ends = {q: min(v, self._available_now_end.get(q, v)) for q, v in ends.items()}
        begin = {q: int(start.get(_key(topic, q), 0)) for q in ends}
        ends = {q: max(begin[q], v) for q, v in ends.items()}
        if isinstance(limit, ReadMaxRows):
            avail = ends
            budget, total = limit.max_rows, sum(avail[q] - begin[q] for q in avail)
            if total > budget:
                ends = {q: begin[q] + (avail[q] - begin[q]) * budget // total for q in avail}
                if all(ends[q] == begin[q] for q in ends):  # a budget smaller than the queue count: one queue
                    q = max(avail, key=lambda x: avail[x] - begin[x])
                    ends[q] = begin[q] + min(budget, avail[q] - begin[q])
        return {_key(topic, q): v for q, v in ends.items()}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        topic = self.opts.topic
        s = {int(k.rpartition("/")[2]): int(v) for k, v in start.items()}
        e = {int(k.rpartition("/")[2]): int(v) for k, v in end.items()}
        return asyncio.run(_spread(self.opts, _cut(topic, {q: s.get(q, 0) for q in e}, e,
                                                   DEFAULT_RECORDS_PER_PARTITION)))

    def read(self, partition: QueueRun) -> Iterator[pa.RecordBatch]:
        return read_run(self.opts, partition)

    def commit(self, end: dict) -> None:
        pass  # a topic's messages are kept by retention, not by a reader's progress
