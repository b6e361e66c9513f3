"""Pop consumption at one door: a PopQueue (topic/pop.py) per (consumer group, topic, queue) this door serves,
fed by a fetcher that long-polls the queue through the own client, and its progress kept in `_meta`.

- Progress: PopQueue.committed (every offset below it resolved: acked, filtered out, rolled back or
  dead-lettered) is written to `offsets/<group>/<topic>/<queue>` every PERSIST_INTERVAL_MS when it moved, the
  key `quorumlog consume --consumer-group` and `consumer-group describe` use. A door that starts serving a
  queue starts from it, so a failure loses none and skips none; at worst what was in flight is delivered again.
- Receipt handles: `<node id>/<door nonce>/<queue id>/<PopQueue handle>`. A handle of another door, of this
  door before a restart, of an older delivery or a forged one names nothing: INVALID_RECEIPT_HANDLE.
- Tag filters are applied as messages are handed out: a message the receiving consumer's filter does not
  take is acked at once (RocketMQ's consumer groups share one subscription).
- Half messages are held until a decision appears in `_meta` (rocketmq/transactions/...): polled every
  TRANSACTION_POLL_MS while some are undecided; one undecided for TRANSACTION_CHECK_AFTER_MS is checked back
  through a connected producer (`check_back`), again after as long if still undecided.
- Messages out of attempts (and those a client forwards) go to `%DLQ%<group>`, created on first use.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from ...client.topics import TopicAdmin, TopicClient, TopicMessage
from ...errors import MetadataVersionConflict, OffsetTooSmall, QuorumLogError, TopicNotExist
from ...topic.group_coordinator import offset_key
from ...topic.pop import AckResult, Decision, Delivery, PopMessage, PopQueue
from . import metadata
from .convert import (P_MESSAGE_GROUP, P_TRANSACTION, TagFilter, dead_letter_properties, deliver_at_ms)

log = logging.getLogger(__name__)

PERSIST_INTERVAL_MS = 100
HOUSEKEEPING_INTERVAL_MS = 200
TRANSACTION_POLL_MS = 500
TRANSACTION_CHECK_AFTER_MS = 6_000  # RocketMQ's transactionTimeout
POLICY_CACHE_MS = 5_000
RENEW_AHEAD_MS = 5_000  # renew an auto_renew delivery this long before its invisible time ends
RENEW_MAX_MS = 3 * 3600 * 1000  # and for at most this long (RocketMQ's proxy: renewMaxTimeMills 3 h)
CLIENT_ALIVE_MS = 30_000  # a client heard from within this is alive (clients heartbeat every 10 s)
STATE_IDLE_MS = 300_000  # a queue no consumer of the group asked for this long, with nothing in flight: dropped
FETCH_BATCH = 256
FETCH_WAIT_MS = 1_000
FETCH_FULL_SLEEP_MS = 50
ERROR_BACKOFF_MS = 500
assert PERSIST_INTERVAL_MS <= HOUSEKEEPING_INTERVAL_MS <= TRANSACTION_POLL_MS < TRANSACTION_CHECK_AFTER_MS


def wall_ms() -> int:
    """Wall-clock ms: delivery timestamps and invisible times are wall-clock times."""
    return int(time.time() * 1000)


class InvalidHandle(Exception):
    pass


@dataclass(eq=False)
class Renewal:
    """A push consumer's delivery (auto_renew) the door keeps invisible while its client heartbeats: the client
    keeps the handle it was given; the door renews under a new one and translates."""
    state: "QueueState"
    current: str  # the PopQueue handle of the live delivery
    invisible_ms: int
    invisible_until_ms: int
    client_id: str
    started_ms: int


@dataclass(eq=False)
class QueueState:
    group: str
    topic: str
    queue_id: int
    pop: PopQueue
    persisted: int
    held: dict[int, TopicMessage] = field(default_factory=dict)  # offset -> message, unresolved ones
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    fetcher: asyncio.Task | None = None
    next_transaction_poll_ms: int = 0
    last_receive_ms: int = 0
    forwarding: set[int] = field(default_factory=set)  # offsets on their way to the DLQ


class Consuming:
    def __init__(self, tc: TopicClient, admin: TopicAdmin, *, node_id: str, nonce: str,
                 check_back: Callable[[str, TopicMessage], Awaitable[bool]]) -> None:
        self.tc = tc
        self.meta = tc.routes.meta
        self.admin = admin
        self.node_id = node_id
        self.nonce = nonce
        self.check_back = check_back
        self.states: dict[tuple[str, str, int], QueueState] = {}
        self._loading: dict[tuple[str, str, int], asyncio.Future] = {}
        self._wake: dict[tuple[str, str], asyncio.Event] = {}
        self._policies: dict[str, tuple[metadata.GroupPolicy, float]] = {}
        self._serial = itertools.count(1)
        self._checked: dict[tuple[str, int, int], int] = {}  # (topic, queue, offset) -> when checked back
        self._dlq_topics: set[str] = set()
        self._tasks: list[asyncio.Task] = []
        self._renewals: dict[str, Renewal] = {}  # the handle the client holds -> its renewal
        self.client_seen_ms: dict[str, int] = {}  # client id -> when last heard from (the service updates it)
        self._closed = False

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        self._tasks = [asyncio.ensure_future(self._persist_loop()), asyncio.ensure_future(self._housekeeping())]

    async def close(self) -> None:
        self._closed = True
        for t in self._tasks + [s.fetcher for s in self.states.values() if s.fetcher]:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except BaseException:  # noqa: BLE001 - cancelled
                pass
        try:
            await asyncio.wait_for(self._persist(), 2.0)
        except (asyncio.TimeoutError, QuorumLogError, OSError):
            pass

    def status(self) -> dict[str, Any]:
        now = wall_ms()
        return {f"{g}/{t}/{q}": s.pop.stats(now) for (g, t, q), s in self.states.items()}

    # -- policies --------------------------------------------------------------------------------
    async def policy(self, group: str) -> metadata.GroupPolicy:
        got = self._policies.get(group)
        if got is not None and time.monotonic() - got[1] < POLICY_CACHE_MS / 1000:
            return got[0]
        raw = await self.meta.kv_get(metadata.group_key(group))
        p = metadata.GroupPolicy.decode(raw[0] if raw else None)
        self._policies[group] = (p, time.monotonic())
        return p

    # -- states ----------------------------------------------------------------------------------
    def wake_event(self, group: str, topic: str) -> asyncio.Event:
        ev = self._wake.get((group, topic))
        if ev is None:
            ev = self._wake[(group, topic)] = asyncio.Event()
        return ev

    async def state(self, group: str, topic: str, queue_id: int) -> QueueState:
        key = (group, topic, queue_id)
        st = self.states.get(key)
        if st is not None:
            return st
        fut = self._loading.get(key)
        if fut is None:
            fut = self._loading[key] = asyncio.ensure_future(self._load(group, topic, queue_id))
            fut.add_done_callback(lambda _f: self._loading.pop(key, None))
        return await asyncio.shield(fut)

    async def _load(self, group: str, topic: str, queue_id: int) -> QueueState:
        policy = await self.policy(group)
        got = await self.meta.kv_get(offset_key(group, topic, queue_id))
        if got is not None:
            committed = int(got[0])
        else:
            lo, hi = await self.tc.offsets(topic, queue_id)
            committed = hi if policy.start_from == "latest" else lo
        pop = PopQueue(committed, fifo=policy.fifo, max_attempts=policy.max_attempts,
                       nonce=f"{self.nonce}/{next(self._serial)}")
        st = QueueState(group, topic, queue_id, pop, persisted=committed, last_receive_ms=wall_ms())
        st.wake = self.wake_event(group, topic)
        self.states[(group, topic, queue_id)] = st
        st.fetcher = asyncio.ensure_future(self._fetch(st))
        log.info("rocketmq door serves group=%s topic=%s queue=%d from offset=%d fifo=%s max_attempts=%d", group,
                 topic, queue_id, committed, policy.fifo, policy.max_attempts)
        return st

    async def _fetch(self, st: QueueState) -> None:
        """Keep the PopQueue offered with what its queue holds, long-polling at its end."""
        while not self._closed:
            try:
                await self._fetch_once(st)
            except asyncio.CancelledError:
                raise
            except (QuorumLogError, OSError) as e:
                log.info("rocketmq door: reading %s/%d for %s failed: %s", st.topic, st.queue_id, st.group, e)
                await asyncio.sleep(ERROR_BACKOFF_MS / 1000)
            except Exception:  # noqa: BLE001 - a bug must not stop the queue for good: logged, and again
                log.exception("rocketmq door: reading %s/%d for %s", st.topic, st.queue_id, st.group)
                await asyncio.sleep(ERROR_BACKOFF_MS / 1000)

    async def _fetch_once(self, st: QueueState) -> None:
        if not st.pop.wants_more():
            await asyncio.sleep(FETCH_FULL_SLEEP_MS / 1000)
            return
        start = st.pop.next_fetch
        try:
            pulled = await self.tc.pull(st.topic, st.queue_id, start, max_messages=FETCH_BATCH, wait_ms=FETCH_WAIT_MS)
        except OffsetTooSmall as e:
            # retention removed messages this group had not consumed: go on from the queue's start (a new
            # PopQueue: what was in flight is gone with the messages; its handles die)
            lo, _ = await self.tc.offsets(st.topic, st.queue_id)
            policy = await self.policy(st.group)
            log.warning("rocketmq door: %s/%d offset %d removed by retention (%s): group %s goes on from %d",
                        st.topic, st.queue_id, start, e, st.group, lo)
            st.pop = PopQueue(max(lo, start), fifo=policy.fifo, max_attempts=policy.max_attempts,
                              nonce=f"{self.nonce}/{next(self._serial)}")
            st.held.clear()
            return
        self._offer(st, pulled.messages, pulled.next_offset)

    def _offer(self, st: QueueState, messages: list[TopicMessage], next_offset: int) -> None:
        """Offer `messages` (from st.pop.next_fetch on, maybe with gaps) and mark every offset up to next_offset
        that is not among them as resolved (filtered)."""
        expect = st.pop.next_fetch
        batch: list[PopMessage] = []
        for m in messages:
            if m.queue_offset < expect:
                continue
            batch.extend(PopMessage(o, filtered=True) for o in range(expect, m.queue_offset))
            props = m.properties
            batch.append(PopMessage(m.queue_offset, message_group=props.get(P_MESSAGE_GROUP, ""),
                                    deliver_at_ms=deliver_at_ms(props),
                                    transactional=props.get(P_TRANSACTION) == "true", ref=m))
            st.held[m.queue_offset] = m
            expect = m.queue_offset + 1
        batch.extend(PopMessage(o, filtered=True) for o in range(expect, next_offset))
        if batch:
            st.pop.offer(batch, now_ms=wall_ms())
            st.wake.set()

    # -- receiving -------------------------------------------------------------------------------
    def handle_of(self, st: QueueState, d: Delivery) -> str:
        return f"{self.node_id}/{self.nonce}/{st.queue_id}/{d.handle}"

    async def receive(self, group: str, topic: str, queues: int, first_queue: int, tag_filter: TagFilter,
                      batch: int, invisible_ms: int, wait_ms: int) -> list[tuple[QueueState, Delivery]]:
        """Up to `batch` deliveries from the topic's queues (round robin from first_queue), waiting up to
        wait_ms for the first."""
        order = [(first_queue + i) % queues for i in range(queues)]
        states = [await self.state(group, topic, q) for q in order]
        now = wall_ms()
        for st in states:
            st.last_receive_ms = now
        ev = self.wake_event(group, topic)
        deadline = time.monotonic() + wait_ms / 1000
        while True:
            ev.clear()
            out = self._take(states, tag_filter, batch, invisible_ms)
            if out:
                return out
            left = deadline - time.monotonic()
            if left <= 0 or self._closed:
                return []
            wakeups = [w for s in states if (w := s.pop.next_wakeup_ms()) is not None]
            if wakeups:
                left = min(left, max(0.0, (min(wakeups) - wall_ms()) / 1000) + 0.005)
            try:
                await asyncio.wait_for(ev.wait(), left)
            except asyncio.TimeoutError:
                pass

    def _take(self, states: list[QueueState], tag_filter: TagFilter, batch: int,
              invisible_ms: int) -> list[tuple[QueueState, Delivery]]:
        out: list[tuple[QueueState, Delivery]] = []
        now = wall_ms()
        for st in states:
            while len(out) < batch:
                ds = st.pop.receive(now, batch - len(out), invisible_ms)
                if not ds:
                    break
                for d in ds:
                    m = d.message.ref
                    if m is None or not tag_filter.matches(m.tags):
                        st.pop.ack(d.handle, now)  # not for this subscription: resolved without a delivery
                        st.held.pop(d.offset, None)
                    else:
                        out.append((st, d))
            if st.pop.dead_letters():
                self._forward_dead_letters(st)
            if len(out) >= batch:
                break
        return out

    def auto_renew(self, st: QueueState, d: Delivery, invisible_ms: int, client_id: str) -> None:
        now = wall_ms()
        self._renewals[self.handle_of(st, d)] = Renewal(st, d.handle, invisible_ms, d.invisible_until_ms, client_id,
                                                        now)
        self.client_seen_ms[client_id] = now

    def _renew_all(self, now: int) -> None:
        for handle, r in list(self._renewals.items()):
            if r.invisible_until_ms - now > RENEW_AHEAD_MS:
                continue
            alive = now - self.client_seen_ms.get(r.client_id, 0) < CLIENT_ALIVE_MS
            if not alive or now - r.started_ms > RENEW_MAX_MS:
                del self._renewals[handle]  # (its invisible time runs out: delivered again)
                continue
            d = r.state.pop.change_invisible(r.current, r.invisible_ms, now)
            if d is None:  # acked, expired, or delivered again meanwhile
                del self._renewals[handle]
            else:
                r.current, r.invisible_until_ms = d.handle, d.invisible_until_ms

    def _parse(self, group: str, topic: str, handle: str) -> tuple[QueueState, str]:
        """The state and PopQueue handle a client's handle names (through its renewal, if renewed)."""
        r = self._renewals.get(handle)
        if r is not None:
            if (r.state.group, r.state.topic) != (group, topic) or self.states.get(
                    (group, topic, r.state.queue_id)) is not r.state:
                raise InvalidHandle(handle)
            del self._renewals[handle]  # (the client acts on it now: renewing ends)
            return r.state, r.current
        parts = handle.rsplit("/", 3)
        if len(parts) != 4 or parts[0] != self.node_id or parts[1] != self.nonce or not parts[2].isdigit():
            raise InvalidHandle(handle)
        st = self.states.get((group, topic, int(parts[2])))
        if st is None:
            raise InvalidHandle(handle)
        return st, parts[3]

    def ack(self, group: str, topic: str, handle: str) -> bool:
        try:
            st, h = self._parse(group, topic, handle)
        except InvalidHandle:
            return False
        if st.pop.ack(h, wall_ms()) is not AckResult.OK:
            return False
        st.wake.set()  # (FIFO: the group's next message may go now)
        return True

    def change_invisible(self, group: str, topic: str, handle: str, invisible_ms: int) -> str | None:
        """The new receipt handle, or None for an invalid one."""
        try:
            st, h = self._parse(group, topic, handle)
        except InvalidHandle:
            return None
        d = st.pop.change_invisible(h, invisible_ms, wall_ms())
        if d is None:
            return None
        if invisible_ms == 0:
            st.wake.set()
        return self.handle_of(st, d)

    def forward_to_dead_letter(self, group: str, topic: str, handle: str) -> bool:
        try:
            st, h = self._parse(group, topic, handle)
        except InvalidHandle:
            return False
        if st.pop.forward_to_dead_letter(h) is not AckResult.OK:
            return False
        self._forward_dead_letters(st)
        return True

    def decide(self, topic: str, queue_id: int, offset: int, decision: Decision) -> None:
        """A transaction's outcome, for every group this door serves the queue to."""
        for (g, t, q), st in self.states.items():
            if t == topic and q == queue_id:
                st.pop.decide(offset, decision)
                if decision is Decision.ROLLBACK and offset < st.pop.next_fetch:
                    st.held.pop(offset, None)
                st.wake.set()

    # -- dead letters ----------------------------------------------------------------------------
    def _forward_dead_letters(self, st: QueueState) -> None:
        for offset in st.pop.dead_letters():
            if offset not in st.forwarding:
                st.forwarding.add(offset)
                asyncio.ensure_future(self._forward(st, offset))

    async def _forward(self, st: QueueState, offset: int) -> None:
        dlq = metadata.dead_letter_topic(st.group)
        try:
            while not self._closed:
                m = st.held.get(offset)
                try:
                    if m is not None:
                        await self._ensure_dlq(dlq)
                        await self.tc.send_batch(dlq, 0, [(m.body, m.key, m.tags, dead_letter_properties(m))])
                        log.info("rocketmq door: %s/%d@%d to %s", st.topic, st.queue_id, offset, dlq)
                    st.pop.dead_lettered(offset)
                    st.held.pop(offset, None)
                    st.wake.set()
                    return
                except (QuorumLogError, OSError) as e:
                    log.warning("rocketmq door: forwarding %s/%d@%d to %s failed (%s): again", st.topic,
                                st.queue_id, offset, dlq, e)
                    await asyncio.sleep(ERROR_BACKOFF_MS / 1000)
        finally:
            st.forwarding.discard(offset)

    async def _ensure_dlq(self, dlq: str) -> None:
        if dlq in self._dlq_topics:
            return
        try:
            await self.tc.routes.route(dlq)
        except TopicNotExist:
            try:
                await self.admin.create(dlq, queues=1)
                log.info("rocketmq door: created the dead-letter topic %s", dlq)
            except MetadataVersionConflict:
                pass
        self._dlq_topics.add(dlq)

    # -- background ------------------------------------------------------------------------------
    async def _persist(self) -> None:
        todo = [st for st in list(self.states.values()) if st.pop.committed > st.persisted]

        async def one(st: QueueState) -> None:
            c = st.pop.committed
            await self.meta.kv_put(offset_key(st.group, st.topic, st.queue_id), str(c).encode())
            st.persisted = max(st.persisted, c)

        if todo:
            await asyncio.gather(*(one(st) for st in todo))
        for st in todo:  # what is below committed is resolved: its messages are not needed any more
            for o in [o for o in st.held if o < st.persisted]:
                del st.held[o]

    async def _persist_loop(self) -> None:
        while not self._closed:
            await asyncio.sleep(PERSIST_INTERVAL_MS / 1000)
            try:
                await self._persist()
            except (QuorumLogError, OSError) as e:
                log.info("rocketmq door: persisting consumer offsets failed: %s", e)
                await asyncio.sleep(ERROR_BACKOFF_MS / 1000)

    async def _housekeeping(self) -> None:
        while not self._closed:
            await asyncio.sleep(HOUSEKEEPING_INTERVAL_MS / 1000)
            now = wall_ms()
            self._checked = {k: t for k, t in self._checked.items() if now - t < 2 * TRANSACTION_CHECK_AFTER_MS}
            self._renew_all(now)
            if len(self.client_seen_ms) > 1000:
                self.client_seen_ms = {c: t for c, t in self.client_seen_ms.items() if now - t < 10 * CLIENT_ALIVE_MS}
            for st in list(self.states.values()):
                if now - st.last_receive_ms > STATE_IDLE_MS and await self._drop_if_idle(st, now):
                    continue
                try:
                    if st.pop.dead_letters():
                        self._forward_dead_letters(st)
                    if now >= st.next_transaction_poll_ms and st.pop.stats(now)["undecided"]:
                        st.next_transaction_poll_ms = now + TRANSACTION_POLL_MS
                        await self._poll_transactions(st, now)
                except (QuorumLogError, OSError) as e:
                    log.info("rocketmq door: housekeeping of %s/%s/%d failed: %s", st.group, st.topic,
                             st.queue_id, e)

    async def _drop_if_idle(self, st: QueueState, now: int) -> bool:
        """Stop serving a queue no consumer asked for lately, once nothing of it is in flight and its progress
        is stored (a later receive loads it again from there)."""
        stats = st.pop.stats(now)
        if stats["in_flight"] or stats["dead_letters"] or st.forwarding:
            return False
        try:
            await self._persist()
        except (QuorumLogError, OSError):
            return False
        if st.pop.committed > st.persisted:
            return False
        self.states.pop((st.group, st.topic, st.queue_id), None)
        if st.fetcher is not None:
            st.fetcher.cancel()
        log.info("rocketmq door: idle, no longer serving group=%s topic=%s queue=%d (offset %d stored)", st.group,
                 st.topic, st.queue_id, st.persisted)
        return True

    async def _poll_transactions(self, st: QueueState, now: int) -> None:
        prefix = metadata.transaction_prefix(st.topic, st.queue_id)
        for kv in await self.meta.kv_list(prefix):
            try:
                offset = int(kv.key[len(prefix):])
            except ValueError:
                continue
            decision = Decision.COMMIT if kv.value == b"commit" else Decision.ROLLBACK
            st.pop.decide(offset, decision)
            if decision is Decision.ROLLBACK and offset < st.pop.next_fetch:
                st.held.pop(offset, None)
            st.wake.set()
        for offset in st.pop.undecided(now, TRANSACTION_CHECK_AFTER_MS):
            st.pop.checked(offset, now)
            key = (st.topic, st.queue_id, offset)
            if self.recently_checked(key, now):
                continue  # (another group of this door, or the door that took the send, asked just now)
            m = st.held.get(offset)
            if m is not None and await self.check_back(st.topic, m):
                self.mark_checked(key, now)

    def recently_checked(self, key: tuple[str, int, int], now: int) -> bool:
        return now - self._checked.get(key, 0) < TRANSACTION_CHECK_AFTER_MS

    def mark_checked(self, key: tuple[str, int, int], now: int) -> None:
        self._checked[key] = now
