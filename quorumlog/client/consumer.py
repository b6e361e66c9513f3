"""`quorumlog.Consumer`: a member of a consumer group (docs/topics.md "Consumer groups").

    async with quorumlog.Consumer(peers, consumer_group="cg", topics=["T"]) as c:
        async for m in c:          # TopicMessage
            ...
        await c.commit()           # also every auto_commit_interval_ms, and on close

- Joins the group at the coordinator (the `_meta` leader, server/services/consumer_groups.py) and gets its queues with
  a generation; heartbeats every heartbeat_interval_ms; when told ILLEGAL_GENERATION (the members or queues
  changed) or UNKNOWN_MEMBER (its session expired, or the coordinator moved) it joins again. A queue it lost
  is given up before anyone else gets it (cooperative rebalancing): its pull is cancelled, what was fetched
  from it dropped, what was delivered committed, then a heartbeat confirms. Unheard by the coordinator for a
  session timeout, it delivers nothing more until it has joined again.
- Reads each owned queue from its committed offset (`offsets/<group>/<topic>/<queue>` in `_meta`), or from
  `start_from` (earliest | latest) when the group has none; an offset retention deleted resets to the
  queue's earliest. One long poll per owned queue is kept outstanding, so a message is delivered as soon as
  it is dispatched, whichever queue it is in.
- Commits what it delivered (the next offset of each queue) with its generation: a consumer that lost a
  queue cannot commit it (ILLEGAL_GENERATION), so a queue's committed offset only ever comes from its owner
  of the moment. Delivery is at least once: after a crash or a rebalance, the new owner starts from the last
  commit.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections import deque
from typing import Any

from ..errors import IllegalGeneration, OffsetTooBig, OffsetTooSmall, QuorumLogError, UnknownMember
from ..peers import Address
from ..topic.group_coordinator import offset_key
from ..wire.client import ConsumerGroupRequest
from .topics import TopicClient, TopicMessage

log = logging.getLogger(__name__)

Queue = tuple[str, int]
MAX_JOIN_ROUNDS = 4  # a join, then one more once the queues it gave up moved (a few more if the group moves on)


class Consumer:
    def __init__(self, peers: str | dict[str, Address], *, consumer_group: str, topics: list[str],
                 start_from: str = "earliest", auto_commit_interval_ms: int = 5_000, session_timeout_ms: int = 10_000,
                 heartbeat_interval_ms: int | None = None, pull_timeout_ms: int = 1_000, max_messages: int = 256,
                 tags: str = "", member_id: str | None = None, **client_kw: Any) -> None:
        if start_from not in ("earliest", "latest"):
            raise ValueError(f"start_from {start_from!r}: earliest or latest")
        if not topics or not consumer_group or "/" in consumer_group:
            raise ValueError("a consumer needs a consumer_group (no '/') and at least one topic")
        self.group = consumer_group
        self.topics = list(topics)
        self.start_from = start_from
        self.auto_commit_interval_ms = auto_commit_interval_ms
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms or max(100, session_timeout_ms // 3)
        self.pull_timeout_ms = pull_timeout_ms
        self.max_messages = max_messages
        self.tags = tags
        self.member_id = member_id or f"consumer-{uuid.uuid4().hex[:12]}"
        self._tc = TopicClient(peers, **client_kw)
        self._meta = self._tc.routes.meta
        self.generation = -1
        self.assignment: tuple[Queue, ...] = ()
        self._fetch: dict[Queue, int] = {}  # next offset to pull
        self._consumed: dict[Queue, int] = {}  # next offset after what was delivered
        self._committed: dict[Queue, int] = {}
        self._buffer: deque[TopicMessage] = deque()
        self._pulls: dict[Queue, tuple[int, asyncio.Task]] = {}  # queue -> (generation, its pull)
        self._rejoin = True
        self._heard = 0.0  # when the last heartbeat the coordinator answered was sent (monotonic s)
        self._heartbeat: asyncio.Task | None = None
        self._next_commit = 0.0
        self._closed = False

    # -- lifecycle -----------------------------------------------------------------------------------------
    async def __aenter__(self) -> "Consumer":
        try:
            await self._join()
        except BaseException:
            self._closed = True
            await self._tc.close()
            raise
        self._heartbeat = asyncio.ensure_future(self._heartbeats())
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        """Commit what was delivered, leave the group (its queues move at once), close the connections."""
        if self._closed:
            return
        self._closed = True
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        self._cancel_pulls(set())
        try:
            await self.commit()
            await self._call("leave", {})
        except QuorumLogError as e:
            log.info("consumer %s of %s: leaving: %s", self.member_id, self.group, e)
        await self._tc.close()

    # -- the coordinator -------------------------------------------------------------------------------------
    async def _call(self, op: str, body: dict) -> dict:
        meta = self._meta
        doc = json.dumps({"group": self.group, "member": self.member_id, **body}).encode()
        resp = await meta.call_leader(lambda rid: ConsumerGroupRequest(rid, op, doc),
                                      f"consumer group {self.group} {op}")
        return json.loads(resp.body or b"{}")

    async def _join(self) -> None:
        """Join (again) and apply the assignment. Queues it lost are given up the cooperative way: their pulls
        stop, what was fetched from them is dropped, what was delivered is committed, and only then a heartbeat
        tells the coordinator they are free for their new owner (which starts from that commit)."""
        for _ in range(MAX_JOIN_ROUNDS):
            sent = time.monotonic()
            got = await self._call("join", {"topics": self.topics, "session_timeout_ms": self.session_timeout_ms,
                                            "owned": [list(q) for q in self.assignment]})
            self._heard = sent
            self.generation = got["generation"]
            owned = tuple((t, q) for t, q in got["queues"])
            revoked = [q for q in self._fetch if q not in owned]
            self._cancel_pulls(set(owned))
            self._buffer = deque(m for m in self._buffer if (m.topic, m.queue_id) in owned)
            if revoked:
                await self._commit_revoked(revoked)
            for q in revoked:
                for d in (self._fetch, self._consumed, self._committed):
                    d.pop(q, None)
            for q in owned:
                if q in self._fetch:
                    continue  # still ours: keep our place
                self._fetch[q] = self._consumed[q] = self._committed[q] = await self._start_offset(q)
            self.assignment = owned
            self._rejoin = False
            self._next_commit = time.monotonic() + self.auto_commit_interval_ms / 1000
            log.info("consumer %s of %s: generation %d, queues %s, gave up %s", self.member_id, self.group,
                     self.generation, owned, revoked)
            if not revoked:
                return
            try:  # (the queues it gave up move now, in a new generation: join it)
                await self._call("heartbeat", {"generation": self.generation})
                return
            except (IllegalGeneration, UnknownMember):
                continue
        self._rejoin = True  # (the group keeps moving: the next delivery tries again)

    async def _commit_revoked(self, revoked: list[Queue]) -> None:
        """Commit what was delivered from queues being given up: their holder may, until it confirms."""
        todo = {f"{t}/{q}": self._consumed[(t, q)] for t, q in revoked
                if self._consumed.get((t, q), -1) > self._committed.get((t, q), -1)}
        if not todo:
            return
        try:
            await self._call("commit", {"generation": self.generation, "offsets": todo})
        except (IllegalGeneration, UnknownMember) as e:  # (its session expired: the next owner redelivers)
            log.info("consumer %s: commit of the queues it gives up refused: %s", self.member_id, e)

    async def _start_offset(self, q: Queue) -> int:
        got = await self._meta.kv_get(offset_key(self.group, *q))
        if got is not None:
            return int(got[0])
        lo, hi = await self._tc.offsets(*q)
        return hi if self.start_from == "latest" else lo

    async def _heartbeats(self) -> None:
        while not self._closed:
            await asyncio.sleep(self.heartbeat_interval_ms / 1000)
            if self._rejoin:
                continue
            try:
                sent = time.monotonic()
                await self._call("heartbeat", {"generation": self.generation})
                self._heard = sent
            except (IllegalGeneration, UnknownMember):
                self._rejoin = True  # the iterator joins again before it delivers anything more
            except QuorumLogError as e:
                log.info("consumer %s: heartbeat failed: %s", self.member_id, e)

    # -- committing ------------------------------------------------------------------------------------------
    async def commit(self) -> None:
        """Commit the next offset of every owned queue delivered from since the last commit. Raises
        IllegalGeneration if the group moved on (the consumer joins again before its next message)."""
        todo = {f"{t}/{q}": off for (t, q), off in self._consumed.items()
                if (t, q) in self.assignment and off > self._committed.get((t, q), -1)}
        if not todo:
            return
        try:
            await self._call("commit", {"generation": self.generation, "offsets": todo})
        except (IllegalGeneration, UnknownMember):
            self._rejoin = True
            raise
        for name, off in todo.items():
            t, _, q = name.rpartition("/")
            self._committed[(t, int(q))] = off

    # -- delivering ------------------------------------------------------------------------------------------
    def __aiter__(self) -> "Consumer":
        return self

    async def __anext__(self) -> TopicMessage:
        while True:
            if self._closed:
                raise StopAsyncIteration
            if not await self._ready():
                continue
            if self._buffer:
                m = self._buffer.popleft()
                self._consumed[(m.topic, m.queue_id)] = m.queue_offset + 1
                return m
            await self._fill()

    async def poll(self, max_messages: int = 4096) -> list[TopicMessage]:
        """The next messages, up to max_messages, as one list (Kafka's poll; RocketMQ hands its listeners a
        list too): what the pulls brought, waiting for the first as iteration does. Each counts as delivered
        for commit once returned. Empty once the consumer is closed."""
        while not self._closed:
            if not await self._ready():
                continue
            if self._buffer:
                n = min(max_messages, len(self._buffer))
                out = [self._buffer.popleft() for _ in range(n)]
                consumed = self._consumed
                for m in out:  # (the last of each queue wins: a queue's messages come in offset order)
                    consumed[(m.topic, m.queue_id)] = m.queue_offset + 1
                return out
            await self._fill()
        return []

    async def _ready(self) -> bool:
        """Before delivering: join again if told to, auto-commit when due. False if the group moved on (the
        caller starts over, joining first)."""
        if time.monotonic() - self._heard > self.session_timeout_ms / 1000:
            # unheard for a session timeout: the coordinator may have given our queues away, so deliver
            # nothing more before joining again (a heartbeat sent after this moment renews the session)
            self._rejoin = True
        if self._rejoin:
            await self._join()
        if time.monotonic() >= self._next_commit:
            self._next_commit = time.monotonic() + self.auto_commit_interval_ms / 1000
            try:
                await self.commit()
            except (IllegalGeneration, UnknownMember):
                return False
        return True

    async def _fill(self) -> None:
        """Keep one long poll per owned queue in flight; wait for the first to answer (or for a heartbeat's
        worth of time, so a rejoin or a commit is never late)."""
        for q in self.assignment:
            if q not in self._pulls:
                task = asyncio.ensure_future(self._tc.pull(q[0], q[1], self._fetch[q], max_messages=self.max_messages,
                                                           wait_ms=self.pull_timeout_ms, tags=self.tags))
                self._pulls[q] = (self.generation, task)
        if not self._pulls:
            await asyncio.sleep(self.heartbeat_interval_ms / 1000)
            return
        done, _ = await asyncio.wait([t for _, t in self._pulls.values()], return_when=asyncio.FIRST_COMPLETED,
                                     timeout=self.heartbeat_interval_ms / 1000)
        for q, (gen, task) in list(self._pulls.items()):
            if task not in done:
                continue
            del self._pulls[q]
            if gen != self.generation or q not in self.assignment:
                continue
            try:
                p = task.result()
            except (OffsetTooSmall, OffsetTooBig) as e:
                # retention deleted it: the earliest kept; beyond the end (a bad commit): the end, so nothing
                # that fills the gap is skipped. Never forward on OFFSET_TOO_BIG: a deposed leader that does not
                # know it yet answers it from its shorter log while the group's end (which `offsets` may get
                # from the new leader) is past our offset; jumping there would skip messages
                lo, hi = await self._tc.offsets(*q)
                to = lo if isinstance(e, OffsetTooSmall) else min(hi, self._fetch[q])
                log.warning("consumer %s: %s/%d offset %d: %s; reset to %d", self.member_id, *q, self._fetch[q],
                            e.code.name, to)
                self._fetch[q] = self._consumed[q] = to
                continue
            except QuorumLogError as e:
                log.info("consumer %s: pull of %s/%d failed: %s", self.member_id, *q, e)
                continue
            self._buffer.extend(p.messages)
            self._fetch[q] = p.next_offset

    def _cancel_pulls(self, keep: set[Queue]) -> None:
        for q in list(self._pulls):
            if q not in keep:
                self._pulls.pop(q)[1].cancel()

    async def lag(self) -> dict[Queue, int]:
        """Per owned queue: messages after what this consumer delivered."""
        out = {}
        for q in self.assignment:
            _, hi = await self._tc.offsets(*q)
            out[q] = max(0, hi - self._consumed.get(q, hi))
        return out



async def describe_group(peers: str | dict[str, Address], group: str, **client_kw: Any) -> dict[str, Any]:
    """A consumer group as `consumer-group describe` shows it: generation, members, and per queue its owner,
    committed offset and lag (messages after the committed offset)."""
    async with TopicClient(peers, **client_kw) as tc:
        meta = tc.routes.meta
        doc = json.dumps({"group": group}).encode()
        resp = await meta.call_leader(lambda rid: ConsumerGroupRequest(rid, "describe", doc),
                                      f"consumer group {group} describe")
        state = json.loads(resp.body)
        owners = {(t, q): owner for t, q, owner in state["owners"]}
        committed = {}
        for kv in await meta.kv_list(f"offsets/{group}/"):
            t, _, q = kv.key[len(f"offsets/{group}/"):].rpartition("/")
            committed[(t, int(q))] = int(kv.value)
        rows = []
        for t, q in sorted(set(owners) | set(committed)):
            try:
                _, hi = await tc.offsets(t, q)
            except QuorumLogError:
                hi = None  # the topic was deleted
            c = committed.get((t, q))
            rows.append({"topic": t, "queue_id": q, "owner": owners.get((t, q)), "committed_offset": c,
                         "max_offset": hi, "lag": None if hi is None else hi - (c or 0)})
        return {"group": group, "generation": state["generation"], "members": state["members"], "queues": rows}
