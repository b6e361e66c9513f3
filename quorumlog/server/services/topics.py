"""The topic requests of a group that runs the topic dispatcher (topic/dispatcher.py), on one member: a Raft
replica (raft_group/replica.py) or a master/slave group's member (master_slave/member.py), which each store a
send their way (`append_messages`, answered through `sent`).

- send: the encoded messages (topic/message.py, checked again here) are appended as one batch with the
  client's producer id and sequence, so a retry is stored once; the answer waits until the dispatcher applied
  the batch and carries each message's queue offset (RocketMQ's SendResult). A retry of a batch applied so
  long ago that its offsets are no longer remembered is answered with -1 for each (it is stored, once).
- pull: from a queue offset, the units of the consume queue, then the entries they point at, read from the
  log in one pass. Any member of a Raft group serves it, a master/slave group's slave only with
  slave_read_enable (its consume queue never runs ahead of what it knows committed, or confirmed); with nothing
  to read it waits up to wait_ms for the next entry the dispatcher applies (long polling).
  An offset below the queue's first kept one is OFFSET_TOO_SMALL (retention deleted it). One past the end is
  OFFSET_TOO_BIG when this member leads and holds and dispatched everything ever committed (a Raft leader that
  committed an entry of its term, a master whose confirm offset passed its epoch's start): a commit beyond the
  end, which would otherwise make a consumer skip the messages that fill the gap. Anywhere else it waits like
  an empty read (a new leader's dispatcher may still be behind what its predecessor served).
- offsets: the queue's min and max offsets.
"""

from __future__ import annotations

import asyncio
import struct
from bisect import bisect_left, bisect_right
from operator import attrgetter
from typing import Any, Callable, Iterator

from ...codes import ResponseCode
from ...errors import IndexOutOfRange
from ...format.log_entry import iter_records, record_columns, record_positions
from ...topic.consume_queue import UNIT, ConsumeQueue, Unit
from ...topic.dispatcher import TopicDispatcher
from ...topic.message import TOPIC_RE, fast, head, tag_hash
from ...wire.client import PackedMessages, TopicRequest, TopicResponse
from ..host import Handled, ServedGroup, Session, send_response


_LOG_INDEX = attrgetter("log_index")
_LAST_OFFSET = struct.Struct(">q")  # a packed message's queue offset (the first of its five int64s)
_LAST_INDEX = struct.Struct(">8xq")  # its log index (the second)
MAX_PULL_WAIT_MS = 60_000
MAX_PULL_MESSAGES = 16384
MAX_PULL_BYTES = 8 << 20


def _packed(heads: bytearray, blob: bytearray, n: int, used: int) -> PackedMessages:
    """A pull's filled buffers as they go on the wire: views, not copies (nothing writes them again)."""
    return PackedMessages(n, memoryview(heads)[:40 * n], memoryview(blob)[:used])


def _records(chunk: memoryview, units: list[Unit]) -> Iterator[tuple[Unit, int, int, int, bytes]]:
    """(unit, index, term, timestamp ms, body) of the records in `chunk` that `units` (ascending by log index)
    point at: with the compiled column scan, each unit is found by bisection among the chunk's indexes, so the
    records of a group's other queues cost nothing here; the record walk otherwise."""
    cols = record_columns(chunk)
    if cols is None:
        by_index = {u.log_index: u for u in units}
        for h, body in iter_records(chunk):
            u = by_index.get(h.index)
            if u is not None:
                yield u, h.index, h.term, h.timestamp_ms, bytes(body)
        return
    n, index_b, term_b, ts_b, offsets_b, data = cols
    if n == 0:
        return
    indexes, terms = memoryview(index_b).cast("q"), memoryview(term_b).cast("q")
    ts_us, offsets = memoryview(ts_b).cast("q"), memoryview(offsets_b).cast("i")
    first, last = indexes[0], indexes[n - 1]
    k = 0
    for u in units[bisect_left(units, first, key=_LOG_INDEX):bisect_right(units, last, key=_LOG_INDEX)]:
        k = bisect_left(indexes, u.log_index, k)
        if k < n and indexes[k] == u.log_index:
            yield u, u.log_index, terms[k], ts_us[k] // 1000, data[offsets[k]:offsets[k + 1]]


class TopicService:
    serves = (TopicRequest,)

    def __init__(self, replica: ServedGroup) -> None:
        self.replica = replica
        self._tasks: set[asyncio.Task] = set()

    @property
    def dispatcher(self) -> TopicDispatcher:
        return self.replica.sm.machine

    def queue_end(self, topic: str, queue_id: int) -> int | None:
        """The queue's end offset here (0 if it holds nothing yet); None if this group carries no topics."""
        r = self.replica
        if r.state_machine != "topics" or r.sm is None:
            return None
        q = self.dispatcher.queue(topic, queue_id)
        return 0 if q is None else q.max_offset

    def on_request(self, session: Session, req: TopicRequest) -> Handled:
        r = self.replica

        def answer(code: ResponseCode, message: str = "", **fields: Any) -> None:
            send_response(session, TopicResponse(req.request_id, code, message=message, **fields))

        if r.state_machine != "topics":
            return answer(ResponseCode.BAD_REQUEST, f"group {r.group!r} carries no topics (create one with "
                                                    f"`group create G --state-machine topics`)")
        if r.stopping:
            return answer(ResponseCode.LEADER_NOT_READY, "node shutting down")
        if req.op == "send":
            return self._send_batch(session, req, answer)
        if not TOPIC_RE.match(req.topic) or not 0 <= req.queue_id <= 0xFFFF:
            return answer(ResponseCode.BAD_REQUEST, f"{req.op}: bad topic {req.topic!r} or queue {req.queue_id}")
        refusal = r.read_refusal()
        if refusal is not None and req.op in ("pull", "offsets"):
            return answer(ResponseCode.NOT_LEADER, refusal, leader_id=r.leader_id)
        if req.op == "pull":
            if req.offset < 0 or req.max_messages < 1 or req.wait_ms < 0:
                return answer(ResponseCode.BAD_REQUEST, f"pull: offset={req.offset} max_messages="
                                                        f"{req.max_messages} wait_ms={req.wait_ms}")
            return self._pull(session, req)
        if req.op == "offsets":
            lo, hi = self._bounds(self.dispatcher.queue(req.topic, req.queue_id))
            return answer(ResponseCode.SUCCESS, min_offset=lo, max_offset=hi)
        return answer(ResponseCode.BAD_REQUEST, f"unknown topic op {req.op!r} (send, pull, offsets)")

    # -- send ----------------------------------------------------------------------------------------------
    def _send_batch(self, session: Session, req: TopicRequest, answer: Callable[..., None]) -> None:
        r = self.replica
        if not req.bodies:
            return answer(ResponseCode.REQUEST_WITH_EMPTY_BODYS, "send: no message")
        for i, body in enumerate(req.bodies):
            if len(body) > r.config.max_entry_bytes:
                return answer(ResponseCode.ENTRY_TOO_LARGE, f"send: message {i} is {len(body)} bytes, over "
                                                            f"max_entry_bytes {r.config.max_entry_bytes}")
            if head(body) is None:
                return answer(ResponseCode.BAD_REQUEST, f"send: entry {i} is not a topic message")
        r.append_messages(session, req)  # (the group's mode stores them; its answer comes back to sent())

    def sent(self, session: Session, request_id: int, code: ResponseCode, first: int, last: int,
             stored_term: int | None = None, leader_id: str | None = None, message: str = "") -> None:
        """A send's batch stored (entries first..last) or refused: answered once the dispatcher applied it.
        `stored_term` is the term (epoch) the batch was stored in when the store's answer comes before the commit
        point passes it (a master/slave group's: held by min_in_sync_replicas members, not yet confirmed): the
        entries applied at those indexes must be that batch, not a new master's, or the offsets are not ours."""
        if code != ResponseCode.SUCCESS:
            send_response(session, TopicResponse(request_id, code, leader_id, message=message))
            return
        if self.replica.sm.applied_index >= last and stored_term is None:  # (the usual case: applied as committed)
            self._answer_applied(session, request_id, first, last)
            return
        task = asyncio.ensure_future(self._answer_sent(session, request_id, first, last, stored_term))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer_sent(self, session: Session, request_id: int, first: int, last: int,
                           stored_term: int | None) -> None:
        r = self.replica
        await r.sm.wait_applied(last)
        if stored_term is not None:
            try:
                term = r.store.term_at(last)
            except IndexOutOfRange:  # (deleted by retention since: committed long ago)
                term = stored_term
            if term != stored_term:
                send_response(session, TopicResponse(request_id, ResponseCode.TERM_CHANGED, r.leader_id,
                                               message=f"the batch stored at {first}..{last} in term {stored_term} "
                                                       f"was replaced by a new master's entries; send it again"))
                return
        self._answer_applied(session, request_id, first, last)

    def _answer_applied(self, session: Session, request_id: int, first: int, last: int) -> None:
        sm = self.replica.sm
        offsets = []
        for i in range(first, last + 1):
            q = sm.result_of(i)
            offsets.append(q if isinstance(q, int) else -1)
        send_response(session, TopicResponse(request_id, ResponseCode.SUCCESS, offsets=tuple(offsets)))

    # -- pull ----------------------------------------------------------------------------------------------
    async def _pull(self, session: Session, req: TopicRequest) -> None:
        r = self.replica
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(req.wait_ms, MAX_PULL_WAIT_MS) / 1000
        wanted = None if req.tags in ("", "*") else frozenset(tag_hash(t.strip()) for t in req.tags.split("||"))
        while True:
            d = self.dispatcher
            q = d.queue(req.topic, req.queue_id)
            lo, hi = self._bounds(q)
            if req.offset < lo:
                send_response(session, TopicResponse(req.request_id, ResponseCode.OFFSET_TOO_SMALL, min_offset=lo,
                                               max_offset=hi, next_offset=lo,
                                               message=f"offset {req.offset} < first kept offset {lo}"))
                return
            if req.offset < hi:
                break
            if req.offset > hi and r.holds_everything_committed():
                send_response(session, TopicResponse(req.request_id, ResponseCode.OFFSET_TOO_BIG, min_offset=lo,
                                               max_offset=hi, next_offset=hi,
                                               message=f"offset {req.offset} > the queue's end {hi}"))
                return
            left = deadline - loop.time()
            if left <= 0 or r.stopping:
                send_response(session, TopicResponse(req.request_id, ResponseCode.SUCCESS, min_offset=lo, max_offset=hi,
                                               next_offset=req.offset))
                return
            try:
                await asyncio.wait_for(r.sm.wait_applied(d.applied_index + 1), left)
            except asyncio.TimeoutError:
                pass
        count = min(req.max_messages, MAX_PULL_MESSAGES)
        next_offset = min(hi, max(req.offset, lo) + count)
        try:
            packed = self._pack(q, req.offset, count, wanted) if fast is not None else None
            if packed is not None:
                messages, next_offset = packed
            else:
                units = list(q.read(req.offset, count, wanted))
                messages = self._read_units(units)
                if messages.count < len(units):  # the byte budget cut the read: resume after the last one returned
                    next_offset = _LAST_OFFSET.unpack_from(messages.head, (messages.count - 1) * 40)[0] + 1 \
                        if messages.count else req.offset
        except IndexOutOfRange:  # log retention ran since the bounds were read
            lo, hi = self._bounds(q)
            send_response(session, TopicResponse(req.request_id, ResponseCode.OFFSET_TOO_SMALL, min_offset=lo,
                                           max_offset=hi, next_offset=lo, message="deleted by log retention"))
            return
        # (the log index of the last message pulled: a master/slave master may send a reader far behind to a slave)
        suggest = r.suggested_slave(_LAST_INDEX.unpack_from(messages.head, (messages.count - 1) * 40)[0]) \
            if messages.count else None
        send_response(session, TopicResponse(req.request_id, ResponseCode.SUCCESS, min_offset=lo, max_offset=hi,
                                       next_offset=next_offset, messages=messages, suggest_slave=suggest))

    def _bounds(self, q: ConsumeQueue | None) -> tuple[int, int]:
        """A queue's (min, max) offsets here: its min also skips messages this member's log retention deleted
        (members delete on their own schedules, so the consume queue itself is not changed by it)."""
        if q is None:
            return 0, 0
        return max(q.min_offset, q.first_offset_from(self.replica.store.begin_index)), q.max_offset

    def _pack(self, q: ConsumeQueue, offset: int, count: int, wanted: frozenset[int] | None
              ) -> tuple[PackedMessages, int] | None:
        """_read_units in C (topic/_fastmessage.c pack_pulled) instead of Python work per message: (the messages,
        the queue offset the next pull starts at). The entries are found through the store's index
        (FileStore.records_at), else by walking the range they span, a call per chunk; None if a chunk has no
        record columns (the reference record walk then decides)."""
        first, units = q.raw_units(offset, count)
        n_units = len(units) // UNIT.size
        if n_units == 0:
            return PackedMessages(0, b"", b""), first
        # (sized once: a growing buffer copied the pull again at every resize)
        heads, blob = bytearray(40 * n_units), bytearray(fast.pulled_capacity(units, MAX_PULL_BYTES))
        store = self.replica.store
        pos = n = used = 0
        # The queue's entries read in place through the store's index: the group's other queues' entries
        # between them are never walked (with 8 queues on a group, 7 of every 8 records of the range).
        located = store.records_at(fast.unit_indexes(units))
        if located is not None:
            for view, cols in located:
                pos, n, used = fast.pack_pulled(units, first, pos, wanted, *cols[1:], view, heads, blob, n, used,
                                                MAX_PULL_BYTES)
            return _packed(heads, blob, n, used), first + pos
        start, end = UNIT.unpack_from(units)[0], UNIT.unpack_from(units, len(units) - UNIT.size)[0]
        while pos < n_units and start <= end and used < MAX_PULL_BYTES:
            records = store.read(start, MAX_PULL_BYTES - used, end)
            if records.count == 0:
                break
            for chunk in records.chunks:
                cols = record_positions(chunk)  # (the group's other queues' records are never copied)
                if cols is None:
                    return None
                pos, n, used = fast.pack_pulled(units, first, pos, wanted, *cols[1:], chunk, heads, blob, n, used,
                                                MAX_PULL_BYTES)
            start = records.last_index + 1
        return _packed(heads, blob, n, used), first + pos

    def _read_units(self, units: list[Unit]) -> PackedMessages:
        """The entries the units point at, in one pass over the log range they span (bounded in bytes), packed
        as they travel (no object per message)."""
        if not units:
            return PackedMessages(0, b"", b"")
        store = self.replica.store
        head: list[int] = []
        bodies: list[bytes] = []
        budget = MAX_PULL_BYTES
        start, end = units[0].log_index, units[-1].log_index
        while start <= end and budget > 0:
            records = store.read(start, min(budget, MAX_PULL_BYTES), end)
            if records.count == 0:
                break
            for chunk in records.chunks:
                for u, index, term, ts_ms, body in _records(chunk, units):
                    # (a message entry's body is the message; a producer tag, if any, follows it)
                    head += (u.queue_offset, index, term, ts_ms, u.size)
                    bodies.append(body[:u.size])
                    budget -= u.size
            start = records.last_index + 1
        return PackedMessages(len(bodies), struct.pack(f">{len(head)}q", *head), b"".join(bodies))

    def close(self) -> None:
        for t in self._tasks:
            t.cancel()
