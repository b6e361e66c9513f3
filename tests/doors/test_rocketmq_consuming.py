"""The RocketMQ door's pop consumption (doors/rocketmq/consuming.py) over an in-memory topic: receipt handles
(forged, stale, of another door), tag filters acked for the group, progress written to `_meta` only over
resolved offsets, the dead-letter queue, transaction outcomes from `_meta`. No processes."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from quorumlog.client.topics import Pulled, TopicMessage
from quorumlog.doors.rocketmq import metadata
from quorumlog.doors.rocketmq.consuming import Consuming
from quorumlog.doors.rocketmq.convert import MATCH_ALL, parse_tags
from quorumlog.errors import TopicNotExist
from quorumlog.topic.group_coordinator import offset_key


class FakeMeta:
    def __init__(self) -> None:
        self.kv: dict[str, bytes] = {}

    async def kv_get(self, key):
        return (self.kv[key], 1) if key in self.kv else None

    async def kv_put(self, key, value, expected_version=None):
        self.kv[key] = bytes(value)
        return 1

    async def kv_list(self, prefix=""):
        return [SimpleNamespace(key=k, value=v) for k, v in sorted(self.kv.items()) if k.startswith(prefix)]


class FakeTopics:
    """One topic's queues in memory, and what the door sends (dead letters)."""

    def __init__(self, queues: int) -> None:
        self.queues: dict[tuple[str, int], list[TopicMessage]] = {("t", q): [] for q in range(queues)}
        self.routes = SimpleNamespace(meta=FakeMeta(), route=self._route)
        self.created: list[str] = []

    async def _route(self, topic, refresh=False):
        if ("t" if topic == "t" else topic, 0) not in self.queues:
            raise TopicNotExist(topic)
        return ["g"] * len([k for k in self.queues if k[0] == topic])

    def add(self, q: int, body: bytes, tags: str = "", **props: str) -> None:
        log = self.queues[("t", q)]
        log.append(TopicMessage("t", q, len(log), body, "", tags, dict(props)))

    async def offsets(self, topic, q):
        return 0, len(self.queues[(topic, q)])

    async def pull(self, topic, q, offset, *, max_messages=256, wait_ms=0, tags=""):
        log = self.queues[(topic, q)]
        if offset >= len(log):
            await asyncio.sleep(0.01)
        got = log[offset:offset + max_messages]
        return Pulled(got, offset + len(got), 0, len(log))

    async def send_batch(self, topic, q, messages):
        log = self.queues.setdefault((topic, q), [])
        for body, key, tags, props in messages:
            log.append(TopicMessage(topic, q, len(log), body, key, tags, dict(props or {})))
        return [SimpleNamespace(queue_offset=len(log) - 1)]


class FakeAdmin:
    def __init__(self, topics: FakeTopics) -> None:
        self.topics = topics

    async def create(self, name, queues=8):
        self.topics.created.append(name)
        for q in range(queues):
            self.topics.queues.setdefault((name, q), [])


def _run(coro):
    return asyncio.run(asyncio.wait_for(coro, 10))


async def _door(topics: FakeTopics, node: str = "n0", checked=None) -> Consuming:
    async def check_back(topic, m):
        (checked if checked is not None else []).append(m.queue_offset)
        return True

    c = Consuming(topics, FakeAdmin(topics), node_id=node, nonce=f"nonce-{node}", check_back=check_back)
    c.start()
    return c


async def _receive(c: Consuming, *, batch=32, wait_ms=300, tags=MATCH_ALL, invisible_ms=10_000, group="cg"):
    return await c.receive(group, "t", 2, 0, tags, batch, invisible_ms, wait_ms)


def test_handles_ack_once_and_stale_forged_or_foreign_ones_ack_nothing():
    async def main():
        topics = FakeTopics(2)
        topics.add(0, b"a")
        topics.add(1, b"b")
        c = await _door(topics)
        other = await _door(topics, node="n1")
        try:
            got = await _receive(c)
            assert sorted(d.message.ref.body for _, d in got) == [b"a", b"b"]
            handles = {d.message.ref.body: c.handle_of(st, d) for st, d in got}
            assert not other.ack("cg", "t", handles[b"a"])  # another door's handle
            assert not c.ack("cg", "t", "n0/nonce-n0/0/0.1.0123456789abcdef")  # forged
            assert not c.ack("cg", "t", "junk") and not c.ack("cg", "t", "")
            assert not c.ack("other-group", "t", handles[b"a"])
            renewed = c.change_invisible("cg", "t", handles[b"a"], 0)
            assert renewed and renewed != handles[b"a"]
            assert not c.ack("cg", "t", handles[b"a"])  # stale: the message's later delivery stays unacked
            again = await _receive(c)
            assert [(d.message.ref.body, d.attempt) for _, d in again] == [(b"a", 2)]
            assert not c.ack("cg", "t", renewed)  # the redelivery made that one stale too
            assert c.ack("cg", "t", c.handle_of(*again[0])) and c.ack("cg", "t", handles[b"b"])
            assert not c.ack("cg", "t", handles[b"b"])  # once
            await asyncio.sleep(0.3)
            meta = topics.routes.meta.kv
            assert meta[offset_key("cg", "t", 0)] == b"1" and meta[offset_key("cg", "t", 1)] == b"1"
        finally:
            await c.close()
            await other.close()

    _run(main())


def test_progress_moves_only_over_resolved_offsets_and_a_new_door_starts_there():
    async def main():
        topics = FakeTopics(2)
        for i in range(3):
            topics.add(0, b"m%d" % i)
        c = await _door(topics)
        got = await _receive(c, batch=3)
        by_offset = {d.offset: (st, d) for st, d in got}
        assert c.ack("cg", "t", c.handle_of(*by_offset[0])) and c.ack("cg", "t", c.handle_of(*by_offset[2]))
        await asyncio.sleep(0.3)
        assert topics.routes.meta.kv[offset_key("cg", "t", 0)] == b"1"  # offset 1 is still in flight
        await c.close()
        d = await _door(topics, node="n1")  # the next door: offset 1 again (and 2, whose ack was above it)
        try:
            again = await _receive(d)
            assert sorted(x.offset for _, x in again) == [1, 2]
        finally:
            await d.close()

    _run(main())


def test_a_tag_filter_acks_what_it_does_not_take():
    async def main():
        topics = FakeTopics(2)
        topics.add(0, b"a1", tags="a")
        topics.add(0, b"b1", tags="b")
        topics.add(0, b"none")
        c = await _door(topics)
        try:
            got = await _receive(c, tags=parse_tags("a"))
            assert [d.message.ref.body for _, d in got] == [b"a1"]
            assert c.ack("cg", "t", c.handle_of(*got[0]))
            await asyncio.sleep(0.3)
            assert topics.routes.meta.kv[offset_key("cg", "t", 0)] == b"3"
        finally:
            await c.close()

    _run(main())


def test_out_of_attempts_to_the_dead_letter_topic():
    async def main():
        topics = FakeTopics(2)
        topics.add(1, b"poison", UNIQ_KEY="MID1")
        topics.routes.meta.kv[metadata.group_key("cg")] = metadata.GroupPolicy(max_attempts=2).encode()
        c = await _door(topics)
        try:
            for attempt in (1, 2):
                got = await _receive(c)
                assert [d.attempt for _, d in got] == [attempt]
                assert c.change_invisible("cg", "t", c.handle_of(*got[0]), 0)
            assert await _receive(c, wait_ms=100) == []
            for _ in range(50):
                if topics.queues.get(("%DLQ%cg", 0)):
                    break
                await asyncio.sleep(0.05)
            [dead] = topics.queues[("%DLQ%cg", 0)]
            assert dead.body == b"poison" and topics.created == ["%DLQ%cg"]
            assert dead.properties["DLQ_ORIGIN_TOPIC"] == "t" and dead.properties["UNIQ_KEY"] == "MID1"
            await asyncio.sleep(0.3)
            assert topics.routes.meta.kv[offset_key("cg", "t", 1)] == b"1"
        finally:
            await c.close()

    _run(main())


def test_half_messages_wait_for_their_outcome_in_meta_and_are_checked_back(monkeypatch):
    from quorumlog.doors.rocketmq import consuming
    monkeypatch.setattr(consuming, "TRANSACTION_CHECK_AFTER_MS", 300)
    monkeypatch.setattr(consuming, "TRANSACTION_POLL_MS", 200)

    async def main():
        topics = FakeTopics(2)
        for body in (b"commit", b"rollback", b"unknown"):
            topics.add(0, body, TRAN_MSG="true")
        checked: list[int] = []
        c = await _door(topics, checked=checked)
        try:
            assert await _receive(c, wait_ms=200) == []
            meta = topics.routes.meta.kv
            meta[metadata.transaction_key("t", 0, 0)] = b"commit"
            meta[metadata.transaction_key("t", 0, 1)] = b"rollback"
            got = await _receive(c, wait_ms=2_000)
            assert [d.message.ref.body for _, d in got] == [b"commit"]
            await asyncio.sleep(0.8)
            assert 2 in checked and 0 not in checked and 1 not in checked
        finally:
            await c.close()

    _run(main())


@pytest.mark.parametrize("fifo", [False, True])
def test_fifo_groups_one_in_flight(fifo):
    async def main():
        topics = FakeTopics(2)
        for i in range(3):
            topics.add(0, b"x%d" % i, __SHARDINGKEY="g1")
        topics.routes.meta.kv[metadata.group_key("cg")] = metadata.GroupPolicy(fifo=fifo).encode()
        c = await _door(topics)
        try:
            got = await _receive(c)
            assert [d.message.ref.body for _, d in got] == ([b"x0"] if fifo else [b"x0", b"x1", b"x2"])
        finally:
            await c.close()

    _run(main())


def test_a_push_consumers_delivery_stays_invisible_while_its_client_lives_and_its_handle_stays_valid():
    async def main():
        topics = FakeTopics(2)
        topics.add(0, b"slow")
        topics.add(0, b"orphan")
        c = await _door(topics)
        try:
            got = await _receive(c, invisible_ms=300)
            assert [d.message.ref.body for _, d in got] == [b"slow", b"orphan"]
            for st, d in got:
                c.auto_renew(st, d, 300, "alive" if d.message.ref.body == b"slow" else "dead")
            c.client_seen_ms["dead"] = 0  # (its heartbeats stopped)
            again = await _receive(c, wait_ms=1_200, invisible_ms=10_000)
            assert [(d.message.ref.body, d.attempt) for _, d in again] == [(b"orphan", 2)]  # renewed: slow not
            c.client_seen_ms["alive"] = 2 ** 62
            assert c.ack("cg", "t", c.handle_of(*got[0]))  # the handle the client was given, renewed since
            assert not c.ack("cg", "t", c.handle_of(*got[1]))  # (delivered again: stale)
        finally:
            await c.close()

    _run(main())


def test_an_idle_queue_is_dropped_after_its_progress_is_stored(monkeypatch):
    from quorumlog.doors.rocketmq import consuming
    monkeypatch.setattr(consuming, "STATE_IDLE_MS", 100)

    async def main():
        topics = FakeTopics(2)
        topics.add(0, b"a")
        c = await _door(topics)
        try:
            got = await _receive(c)
            await asyncio.sleep(0.5)
            assert list(c.states) == [("cg", "t", 0)]  # in flight: kept; the other queue, idle: dropped
            assert c.ack("cg", "t", c.handle_of(*got[0]))
            await asyncio.sleep(0.5)
            assert c.states == {} and topics.routes.meta.kv[offset_key("cg", "t", 0)] == b"1"
            assert [d.message.ref.body for _, d in await _receive(c, wait_ms=100)] == []  # loaded again from 1
        finally:
            await c.close()

    _run(main())
