"""With real processes: topics spread over topic groups, a producer, long-polling pulls, and queue
offsets that stay dense and unique through a kill -9 of a group's leader and a restart (consume queues rebuilt
from snapshot + log)."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections import defaultdict

import pytest

import quorumlog
from quorumlog.client.groups import GroupAdmin
from quorumlog.client.topics import queue_for
from quorumlog.errors import BadRequest, MetadataVersionConflict, TopicNotExist
from quorumlog.peers import parse_peers
from quorumlog.soak.processes import Cluster

from .test_meta import _create_meta

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


async def _topic_groups(cluster: Cluster, *groups: str) -> None:
    """`_meta` (as `cluster up` makes it) and topic groups on all three nodes."""
    await _create_meta(cluster)
    async with GroupAdmin(parse_peers(cluster.peers), timeout_ms=20_000) as admin:
        for g in groups:
            await admin.create(g, replicas=3, state_machine="topics")


def _consumer_kw(topic: str, session_timeout_ms: int, **kw) -> dict:
    """A consumer of group cg that notices rebalances and commits within a fraction of a second."""
    return dict(consumer_group="cg", topics=[topic], session_timeout_ms=session_timeout_ms, heartbeat_interval_ms=200,
                auto_commit_interval_ms=300, pull_timeout_ms=300, timeout_ms=20_000, **kw)


def _assert_in_order_never_skipping(delivered: dict[str, list]) -> None:
    """Per queue, each member saw offsets in order: after its first (wherever the group's commit was), the
    next one, or back to an earlier one (a re-delivery from a commit), never past a gap."""
    for ms in delivered.values():
        last: dict[int, int] = {}
        for m in ms:
            if m.queue_id in last:
                assert m.queue_offset <= last[m.queue_id] + 1, (m.queue_id, m.queue_offset, last)
            last[m.queue_id] = m.queue_offset


async def _drain(tc: quorumlog.TopicClient, topic: str, queues: int, upto: dict[int, int] | None = None):
    """Every message of every queue from offset 0, per queue, in order."""
    out: dict[int, list] = {}
    for q in range(queues):
        got, offset = [], 0
        while True:
            p = await tc.pull(topic, q, offset, max_messages=100)
            got.extend(p.messages)
            offset = p.next_offset
            if offset >= p.max_offset and (upto is None or offset >= upto.get(q, 0)):
                break
        out[q] = got
    return out


def test_topic_send_pull_long_poll_and_offsets_survive_a_leader_kill(tmp_path):
    cluster = Cluster(str(tmp_path), n=3)

    async def main() -> None:
        await _topic_groups(cluster, "t1", "t2")
        async with quorumlog.TopicAdmin(cluster.peers, timeout_ms=10_000) as admin:
            with pytest.raises(BadRequest):
                await admin.create("orders", queues=4, groups=["default"])  # not a topic group
            assert await admin.create("orders", queues=4) == ["t1", "t2", "t1", "t2"]
            with pytest.raises(MetadataVersionConflict):
                await admin.create("orders", queues=2)
            assert list(await admin.list()) == ["orders"]

        async with quorumlog.Producer(cluster.peers, timeout_ms=10_000) as p:
            with pytest.raises(TopicNotExist):
                await p.send("nope", b"x")
            sent = defaultdict(list)  # queue -> [(offset, body)]
            results = await asyncio.gather(*(p.send("orders", b"m%d" % i, key=f"k{i % 20}", tags="even" if i % 2 == 0
                                                    else "odd", properties={"i": str(i)}) for i in range(200)))
            for i, r in enumerate(results):
                assert r.queue_id == queue_for(f"k{i % 20}", 4)  # the same key, the same queue
                sent[r.queue_id].append((r.queue_offset, b"m%d" % i))
            for q, items in sent.items():
                assert sorted(o for o, _ in items) == list(range(len(items)))  # dense, unique per queue

            # sends of one loop turn to one queue share a request; a bad one fails alone
            mixed = await asyncio.gather(p.send("orders", b"ok1", key="k0"), p.send("orders", b"bad", key="x" * 2000),
                                         p.send("orders", b"ok2", key="k0"), return_exceptions=True)
            assert isinstance(mixed[1], BadRequest) and mixed[2].queue_offset == mixed[0].queue_offset + 1
            sent[mixed[0].queue_id] += [(mixed[0].queue_offset, b"ok1"), (mixed[2].queue_offset, b"ok2")]

            got = await _drain(p, "orders", 4)
            for q in range(4):
                assert [(m.queue_offset, m.body) for m in got[q]] == sorted(sent[q])
                assert all(m.topic == "orders" and m.properties["i"] == m.body[1:].decode() for m in got[q]
                           if m.body[1:].isdigit())
            # tags: filtered on the node by hash, exactly on the client
            q_even = queue_for("k0", 4)
            evens = (await p.pull("orders", q_even, 0, max_messages=1000, tags="even")).messages
            assert [m.body for m in evens] == [b for _, b in sorted(sent[q_even])
                                               if b[1:].isdigit() and int(b[1:]) % 2 == 0]

            # long polling: a pull past the end waits for the next message, then answers at once
            q0_end = len(sent[q_even])
            started = time.monotonic()
            poll = asyncio.ensure_future(p.pull("orders", q_even, q0_end, wait_ms=5_000))
            await asyncio.sleep(0.3)
            assert not poll.done()
            r = await p.send("orders", b"late", key="k0")
            pulled = await poll
            assert r.queue_offset == q0_end and [m.body for m in pulled.messages] == [b"late"]
            assert time.monotonic() - started < 3
            sent[q_even].append((r.queue_offset, b"late"))
            empty = await p.pull("orders", q_even, q0_end + 1, wait_ms=200)
            assert empty.messages == [] and empty.next_offset == q0_end + 1

            # kill -9 the leader of t1 under sends: offsets stay dense and unique, nothing acknowledged lost
            async with cluster.client(group="t1") as c1:
                leader = await cluster.wait_leader(c1, timeout_s=10)
            cluster.nodes[leader].kill9()
            more = await asyncio.gather(*(p.send("orders", b"after%d" % i, key=f"k{i % 20}") for i in range(60)))
            for i, r in enumerate(more):
                sent[r.queue_id].append((r.queue_offset, b"after%d" % i))
            cluster.nodes[leader].start()
            got = await _drain(p, "orders", 4)
            for q in range(4):
                offsets = [m.queue_offset for m in got[q]]
                assert offsets == list(range(len(offsets)))
                assert {o for o, _ in sent[q]} <= set(offsets)
                assert [m.body for m in got[q] if m.body.startswith(b"after")] == \
                    [b for _, b in sorted(sent[q]) if b.startswith(b"after")]

        # the restarted node rebuilt its consume queues: as t1's leader it serves the same offsets
        async with cluster.client(group="t1") as c1:
            deadline = time.monotonic() + 30
            while True:
                try:
                    assert await c1.transfer_leader(leader) == leader
                    break
                except quorumlog.QuorumLogError:
                    assert time.monotonic() < deadline, f"{leader} never took t1 back"
                    await asyncio.sleep(0.2)
        async with quorumlog.TopicAdmin(cluster.peers, timeout_ms=10_000) as admin:
            rows = await admin.describe("orders")
            assert [r["max_offset"] for r in rows] == [len(got[q]) for q in range(4)]
            await admin.delete("orders")
            assert await admin.list() == {}

    try:
        cluster.start()
        asyncio.run(main())
    finally:
        cluster.stop()


def test_a_consumer_group_shares_queues_survives_a_dead_member_and_refuses_a_stale_commit(tmp_path):
    """(member a iterates, member b polls lists of messages)"""
    cluster = Cluster(str(tmp_path), n=3)

    async def main() -> None:
        await _topic_groups(cluster, "t1")
        async with quorumlog.TopicAdmin(cluster.peers, timeout_ms=10_000) as admin:
            await admin.create("flights", queues=4)
        kw = _consumer_kw("flights", 1_500)
        delivered: dict[str, list] = defaultdict(list)

        async def consume(c: quorumlog.Consumer, name: str, stop: asyncio.Event) -> None:
            async for m in c:
                delivered[name].append(m)
                if stop.is_set():
                    return

        async def consume_by_poll(c: quorumlog.Consumer, name: str, stop: asyncio.Event) -> None:
            while not stop.is_set():  # (b takes its messages a list at a time: Consumer.poll)
                delivered[name] += await c.poll(max_messages=7)

        async with quorumlog.Producer(cluster.peers, timeout_ms=10_000) as p:
            bodies = [b"f%d" % i for i in range(120)]
            for i in range(0, 120, 10):
                await asyncio.gather(*(p.send("flights", b, key=f"carrier{j % 7}") for j, b in
                                       enumerate(bodies[i:i + 10], start=i)))
            a = quorumlog.Consumer(cluster.peers, member_id="a", **kw)
            b = quorumlog.Consumer(cluster.peers, member_id="b", **kw)
            await a.__aenter__()
            await b.__aenter__()
            stop_a, stop_b = asyncio.Event(), asyncio.Event()
            ta = asyncio.ensure_future(consume(a, "a", stop_a))
            tb = asyncio.ensure_future(consume_by_poll(b, "b", stop_b))
            deadline = time.monotonic() + 20
            while len({m.body for ms in delivered.values() for m in ms}) < 120:
                assert time.monotonic() < deadline, f"consumed {sum(map(len, delivered.values()))} of 120"
                await asyncio.sleep(0.05)
            # a learns of b's join at its next heartbeat and gives up half its queues, then b gets them: every
            # queue ends with exactly one owner
            deadline = time.monotonic() + 10
            while a.generation != b.generation or not (a.assignment and b.assignment):
                assert time.monotonic() < deadline, "the queues never moved"
                await asyncio.sleep(0.05)
            assert sorted(a.assignment + b.assignment) == [("flights", q) for q in range(4)]
            # b dies without leaving (no commit, no leave): its queues move after the session timeout
            tb.cancel()
            b._heartbeat.cancel()
            for _, t in b._pulls.values():
                t.cancel()
            stale_generation = b.generation
            more = [b"g%d" % i for i in range(40)]
            for x in more:
                await p.send("flights", x, key=f"carrier{int(x[1:]) % 7}")
            deadline = time.monotonic() + 20
            while not {m.body for m in delivered["a"]} >= set(more):
                assert time.monotonic() < deadline, "a never took over b's queues"
                await asyncio.sleep(0.05)
            assert sorted(a.assignment) == [("flights", q) for q in range(4)] and a.generation > stale_generation
            # b comes back with its old generation: its session expired, so its commit is refused
            b._consumed = {q: 999 for q in b.assignment}
            with pytest.raises(quorumlog.errors.UnknownMember):
                await b.commit()
            # a live member naming a generation the group has left behind: ILLEGAL_GENERATION
            with pytest.raises(quorumlog.errors.IllegalGeneration):
                await a._call("commit", {"generation": stale_generation, "offsets": {"flights/0": 999}})
            stop_a.set()
            await p.send("flights", b"last", key="carrier0")
            await asyncio.wait_for(ta, 10)
            await a.close()
            await b._tc.close()
        # nothing lost; committed offsets are a's (per-queue order is the kill -9 test's: here queues move
        # between members, and a queue that comes back restarts wherever the other member's commit was)
        seen = [m.body for ms in delivered.values() for m in ms]
        assert set(seen) >= set(bodies) | set(more)
        async with cluster.client(group="_meta") as meta:
            offsets = {kv.key: int(kv.value) for kv in await meta.kv_list("offsets/cg/")}
        async with quorumlog.TopicAdmin(cluster.peers, timeout_ms=10_000) as admin:
            ends = {f"offsets/cg/flights/{r['queue_id']}": r["max_offset"] for r in await admin.describe("flights")
                    if r["max_offset"]}
        assert offsets == ends  # a closed after delivering everything: its commit, never b's 999
        # the status page's data shows the topic and the group's lag (0: a committed everything)
        with urllib.request.urlopen(f"http://127.0.0.1:{cluster.nodes['n0'].http_port}/cluster", timeout=10) as r:
            doc = json.loads(r.read())
        assert [(t["topic"], t["messages"]) for t in doc["topics"]] == [("flights", sum(ends.values()))]
        assert [(g["group"], g["lag"], g["complete"]) for g in doc["consumer_groups"]] == [("cg", 0, True)]

    try:
        cluster.start()
        asyncio.run(main())
    finally:
        cluster.stop()


async def _kill_under_produce_and_consume(cluster: Cluster, topic: str, victim: str) -> dict[tuple[int, int], bytes]:
    """A producer and a 2-member consumer group on `topic` (4 queues): kill -9 of `victim` once 100 messages went
    through, 100 more with it dead, 100 more after its restart. Every acknowledged message delivered under its
    offset, no offset given to two sends, per-queue order, both members in one generation owning each queue
    once. Returns the acknowledged messages, (queue, offset) -> body."""
    kw = _consumer_kw(topic, 2_000)
    acked: dict[tuple[int, int], bytes] = {}
    delivered: dict[str, list] = defaultdict(list)
    stop = asyncio.Event()

    async def produce(p) -> None:
        i = 0
        while not stop.is_set():
            batch = [p.send(topic, b"e%05d" % j, key=f"k{j % 13}") for j in range(i, i + 8)]
            for j, r in zip(range(i, i + 8), await asyncio.gather(*batch, return_exceptions=True)):
                if not isinstance(r, BaseException):
                    assert (r.queue_id, r.queue_offset) not in acked, f"offset given twice: {r}"
                    acked[(r.queue_id, r.queue_offset)] = b"e%05d" % j
            i += 8
            await asyncio.sleep(0.01)

    async def consume(c, name: str) -> None:
        async for m in c:
            delivered[name].append(m)

    async with quorumlog.Producer(cluster.peers, timeout_ms=30_000) as p, \
            quorumlog.Consumer(cluster.peers, member_id="a", **kw) as a, \
            quorumlog.Consumer(cluster.peers, member_id="b", **kw) as b:
        tasks = [asyncio.ensure_future(produce(p)), asyncio.ensure_future(consume(a, "a")),
                 asyncio.ensure_future(consume(b, "b"))]

        async def progress(by: int) -> None:  # more acknowledged sends and more deliveries than now
            want_acked = len(acked) + by
            want_seen = sum(map(len, delivered.values())) + by
            deadline = time.monotonic() + 40
            while len(acked) < want_acked or sum(map(len, delivered.values())) < want_seen:
                assert time.monotonic() < deadline, f"stalled at {len(acked)} acknowledged"
                assert not tasks[0].done() or tasks[0].exception() is None, tasks[0].exception()
                await asyncio.sleep(0.02)

        await progress(100)
        cluster.nodes[victim].kill9()
        await progress(100)  # produced and consumed with it dead (another member took over)
        cluster.nodes[victim].start()
        await progress(100)
        stop.set()
        await tasks[0]
        deadline = time.monotonic() + 30
        while not set(acked) <= {(m.queue_id, m.queue_offset) for ms in delivered.values() for m in ms}:
            assert time.monotonic() < deadline, "acknowledged messages never delivered"
            await asyncio.sleep(0.1)
        for t in tasks[1:]:
            t.cancel()
        assert a.generation == b.generation and sorted(a.assignment + b.assignment) == \
            [(topic, q) for q in range(4)]
    assert len(acked) > 300
    got = {(m.queue_id, m.queue_offset): m.body for ms in delivered.values() for m in ms}
    assert all(got[k] == v for k, v in acked.items())  # every acknowledged message, under its offset
    _assert_in_order_never_skipping(delivered)
    return acked


def test_kill_9_of_a_topic_groups_leader_under_a_producer_and_two_consumers_loses_nothing(tmp_path):
    cluster = Cluster(str(tmp_path), n=3)

    async def main() -> None:
        await _topic_groups(cluster, "t1")
        async with quorumlog.TopicAdmin(cluster.peers, timeout_ms=10_000) as admin:
            await admin.create("events", queues=4)
        async with cluster.client(group="t1") as c1:
            leader = await cluster.wait_leader(c1, timeout_s=10)
        await _kill_under_produce_and_consume(cluster, "events", leader)

    try:
        cluster.start()
        asyncio.run(main())
    finally:
        cluster.stop()


def test_topic_retention_by_size_and_time_and_a_consumer_resets_to_the_earliest_kept(tmp_path):
    cluster = Cluster(str(tmp_path), n=3)

    async def main() -> None:
        await _topic_groups(cluster, "t1")
        async with quorumlog.TopicAdmin(cluster.peers, timeout_ms=10_000) as admin:
            await admin.create("small", queues=1, retention_bytes=5_000)
            await admin.create("brief", queues=1)
            async with quorumlog.Producer(cluster.peers, timeout_ms=10_000) as p:
                for i in range(100):
                    await p.send("small", b"s" * 100, key="k")
                lo, hi = await p.offsets("small", 0)
                assert hi == 100 and 50 < lo < 100  # ~5,000 bytes of ~130-byte messages kept
                with pytest.raises(quorumlog.errors.OffsetTooSmall):
                    await p.pull("small", 0, 0)
                # a consumer group with nothing committed that starts from the earliest: the earliest kept
                async with quorumlog.Consumer(cluster.peers, consumer_group="cg", topics=["small"],
                                              timeout_ms=10_000) as c:
                    first = await asyncio.wait_for(c.__anext__(), 30)  # (a new `_meta` leader waits 5 s first)
                    assert first.queue_offset == lo
                    # the rest as lists (Consumer.poll), in order, and committed as delivered
                    rest: list = []
                    while len(rest) < hi - lo - 1:
                        rest += await asyncio.wait_for(c.poll(max_messages=16), 10)
                    assert [m.queue_offset for m in rest] == list(range(lo + 1, hi))
                    await c.commit()
                    assert int((await c._meta.kv_get("offsets/cg/small/0"))[0]) == hi
                # time: messages older than retention_ms go once the log's clock passes them
                for i in range(10):
                    await p.send("brief", b"old%d" % i)
                await admin.alter("brief", retention_ms=1_000)
                await asyncio.sleep(2.5)
                await p.send("brief", b"new")  # the clock moves with the log
                await p.send("brief", b"newer")
                lo, hi = await p.offsets("brief", 0)
                assert (lo, hi) == (10, 12)
                assert [m.body for m in (await p.pull("brief", 0, lo)).messages] == [b"new", b"newer"]
            assert (await admin.get("brief"))["retention_ms"] == 1_000
            # a commit beyond a queue's end: the next member pulls OFFSET_TOO_BIG and resets to the end, so
            # the messages that fill the gap are delivered, not skipped
            async with quorumlog.Consumer(cluster.peers, consumer_group="bad", topics=["brief"], member_id="x",
                                          timeout_ms=10_000) as x:
                await x._call("commit", {"generation": x.generation, "offsets": {"brief/0": 500}})
                with pytest.raises(quorumlog.errors.OffsetTooBig):
                    await x._tc.pull("brief", 0, 500)
            async with quorumlog.Consumer(cluster.peers, consumer_group="bad", topics=["brief"],
                                          timeout_ms=10_000) as y, quorumlog.Producer(cluster.peers) as p:
                got = asyncio.ensure_future(y.__anext__())
                await asyncio.sleep(0.5)
                await p.send("brief", b"after the bad commit")
                m = await asyncio.wait_for(got, 10)
                assert (m.body, m.queue_offset) == (b"after the bad commit", 12)

    try:
        cluster.start()
        asyncio.run(main())
    finally:
        cluster.stop()


def test_a_rebalance_never_has_two_members_consume_one_queue(tmp_path):
    """Member a reads a backlog; b joins while a is mid-queue. The queues b gets move only once a gave them up
    (stopped pulling, committed what it delivered), so b starts where a stopped: no message reaches both."""
    cluster = Cluster(str(tmp_path), n=3)

    async def main() -> None:
        await _topic_groups(cluster, "t1")
        async with quorumlog.TopicAdmin(cluster.peers, timeout_ms=10_000) as admin:
            await admin.create("orders", queues=4)
        kw = _consumer_kw("orders", 10_000, max_messages=16)
        delivered: dict[str, list] = defaultdict(list)

        async def consume(c: quorumlog.Consumer, name: str) -> None:
            async for m in c:
                delivered[name].append(m)
                await asyncio.sleep(0.0005)  # (a consumer that does some work per message)

        async with quorumlog.Producer(cluster.peers, timeout_ms=10_000) as p:
            bodies = [b"o%d" % i for i in range(2_000)]
            for i in range(0, len(bodies), 100):
                await asyncio.gather(*(p.send("orders", b, key=f"k{j}") for j, b in
                                       enumerate(bodies[i:i + 100], start=i)))
            a = quorumlog.Consumer(cluster.peers, member_id="a", **kw)
            b = quorumlog.Consumer(cluster.peers, member_id="b", **kw)
            await a.__aenter__()
            ta = asyncio.ensure_future(consume(a, "a"))
            deadline = time.monotonic() + 20
            while len(delivered["a"]) < 200:
                assert time.monotonic() < deadline, "a consumed nothing"
                await asyncio.sleep(0.01)
            await b.__aenter__()
            tb = asyncio.ensure_future(consume(b, "b"))
            deadline = time.monotonic() + 60
            while len({m.body for ms in delivered.values() for m in ms}) < len(bodies):
                assert time.monotonic() < deadline, f"consumed {sum(map(len, delivered.values()))}"
                await asyncio.sleep(0.05)
            assert a.assignment and b.assignment and set(a.assignment).isdisjoint(b.assignment)
            ta.cancel()
            tb.cancel()
            await a.close()
            await b.close()
        by_a = {(m.queue_id, m.queue_offset) for m in delivered["a"]}
        both = sorted(by_a & {(m.queue_id, m.queue_offset) for m in delivered["b"]})
        assert not both, f"{len(both)} messages consumed by both members, first {both[:5]}"
        _assert_in_order_never_skipping(delivered)

    try:
        cluster.start()
        asyncio.run(main())
    finally:
        cluster.stop()
