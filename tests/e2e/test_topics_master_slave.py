"""Topics on a master/slave group (issue 16 on RocketMQ's HA) with real node processes on loopback: queue offsets
assigned at the confirm offset, the same on every member, dense and never reused through a kill -9 of the master
under a producer and two consumers (RocketMQ #7689 and #8539 are what happens when a new master reuses them);
slaves serve pulls only with slave_read_enable; a commit beyond a queue's end is OFFSET_TOO_BIG on the master."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict

import pytest

import quorumlog
from quorumlog.client.groups import GroupAdmin
from quorumlog.codes import ResponseCode
from quorumlog.errors import QuorumLogError
from quorumlog.peers import parse_peers
from quorumlog.soak.processes import Cluster
from quorumlog.topic.message import decode_pulled

from .test_meta import _create_meta
from .test_topics import _assert_in_order_never_skipping, _consumer_kw

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

GROUP = "mst"


async def _ms_topic_group(cluster: Cluster, segment_bytes: int | None = None, **ms) -> str:
    """`_meta` and a master/slave topic group on the three nodes; returns its master."""
    await _create_meta(cluster)
    async with GroupAdmin(parse_peers(cluster.peers), timeout_ms=20_000) as admin:
        p = await admin.create(GROUP, replicas=3, mode="master-slave", state_machine="topics", master_slave=ms,
                               segment_bytes=segment_bytes)
    assert p.leader is not None
    return p.leader


async def _rows(cluster: Cluster) -> dict[str, dict]:
    async with GroupAdmin(parse_peers(cluster.peers), timeout_ms=5_000) as admin:
        statuses = await admin.cluster_status()
    return {n: g for n, s in statuses.items() if isinstance(s, dict) for g in s["groups"] if g["group"] == GROUP}


async def _queue_from(tc: quorumlog.TopicClient, node: str, topic: str, queue: int) -> list[tuple[int, bytes]]:
    """(offset, body) of every message of one queue as `node` itself dispatched it."""
    out: list[tuple[int, bytes]] = []
    offset = 0
    while True:
        resp = await tc.pull_raw(topic, queue, offset, max_messages=500, node=node)
        out.extend((m.queue_offset, m.body) for m in decode_pulled(resp.messages, quorumlog.TopicMessage))
        if resp.next_offset >= resp.max_offset:
            return out
        offset = resp.next_offset


def test_kill_9_of_the_master_under_a_producer_and_two_consumers_keeps_offsets_dense_and_alike(tmp_path):
    cluster = Cluster(str(tmp_path), n=3)

    async def main() -> None:
        master = await _ms_topic_group(cluster, ack="sync", min_in_sync_replicas=2, slave_read_enable=True)
        rows = await _rows(cluster)
        assert {r["state_machine"]["kind"] for r in rows.values()} == {"topics"}
        async with quorumlog.TopicAdmin(cluster.peers, timeout_ms=10_000) as admin:
            assert await admin.topic_groups() == [GROUP]
            await admin.create("orders", queues=4)
        kw = _consumer_kw("orders", 2_000)
        acked: dict[tuple[int, int], bytes] = {}
        delivered: dict[str, list] = defaultdict(list)
        stop = asyncio.Event()

        async def produce(p) -> None:
            i = 0
            while not stop.is_set():
                batch = [p.send("orders", b"o%05d" % j, key=f"k{j % 11}") for j in range(i, i + 8)]
                for j, r in zip(range(i, i + 8), await asyncio.gather(*batch, return_exceptions=True)):
                    if not isinstance(r, BaseException):
                        assert (r.queue_id, r.queue_offset) not in acked, f"offset given twice: {r}"
                        acked[(r.queue_id, r.queue_offset)] = b"o%05d" % j
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
            cluster.nodes[master].kill9()
            await progress(100)  # produced and consumed with the master dead (the controller elected a slave)
            cluster.nodes[master].start()
            await progress(100)
            stop.set()
            await tasks[0]
            deadline = time.monotonic() + 30
            while not set(acked) <= {(m.queue_id, m.queue_offset) for ms in delivered.values() for m in ms}:
                assert time.monotonic() < deadline, "acknowledged messages never delivered"
                await asyncio.sleep(0.1)
            for t in tasks[1:]:
                t.cancel()
        assert len(acked) > 300
        got = {(m.queue_id, m.queue_offset): m.body for ms in delivered.values() for m in ms}
        assert all(got[k] == v for k, v in acked.items())  # every acknowledged message, under its offset
        _assert_in_order_never_skipping(delivered)

        # Every member (the old master back as a slave) dispatched the same queues: offsets dense from 0,
        # each naming the same message everywhere, every acknowledged one among them.
        deadline = time.monotonic() + 30
        while len(rows := await _rows(cluster)) < 3:  # (the old master's process may still be opening)
            assert time.monotonic() < deadline, f"members answering: {sorted(rows)}"
            await asyncio.sleep(0.1)
        new_master = next(n for n, r in rows.items() if r["role"] == "master")
        assert new_master != master and rows[master]["role"] == "slave"
        async with quorumlog.TopicClient(cluster.peers, timeout_ms=20_000) as tc:
            for q in range(4):
                lo, hi = await tc.offsets("orders", q)
                views = {}
                deadline = time.monotonic() + 30
                for node in sorted(rows):
                    while True:
                        view = await _queue_from(tc, node, "orders", q)
                        if len(view) >= hi or time.monotonic() > deadline:
                            break
                        await asyncio.sleep(0.1)  # (a slave dispatches up to the confirm offset it last heard)
                    views[node] = view[:hi]
                assert [o for o, _ in views[new_master]] == list(range(lo, hi))
                assert all(v == views[new_master] for v in views.values()), f"queue {q} differs among members"
                mine = dict(views[new_master])
                assert all(mine[o] == body for (qq, o), body in acked.items() if qq == q)

    try:
        cluster.start()
        asyncio.run(main())
    finally:
        cluster.stop()


def test_a_slave_pulls_only_with_slave_read_enable_and_a_commit_beyond_the_end_is_offset_too_big(tmp_path):
    cluster = Cluster(str(tmp_path), n=3)

    async def main() -> None:
        master = await _ms_topic_group(cluster, ack="async", min_in_sync_replicas=1)
        async with quorumlog.TopicAdmin(cluster.peers, timeout_ms=10_000) as admin:
            await admin.create("logs", queues=2)
        async with quorumlog.Producer(cluster.peers, timeout_ms=20_000) as p:
            sent = [await p.send("logs", b"m%d" % i, key="one") for i in range(20)]
        q = sent[0].queue_id
        # ASYNC_MASTER: the send still waits for its queue offsets, assigned at the confirm offset — dense.
        assert [r.queue_offset for r in sent] == list(range(20)) and {r.queue_id for r in sent} == {q}
        async with quorumlog.TopicClient(cluster.peers, timeout_ms=20_000) as tc:
            slave = next(n for n in sorted(cluster.nodes) if n != master)
            with pytest.raises(QuorumLogError) as e:
                await tc.pull_raw("logs", q, 0, node=slave)
            assert e.value.code == ResponseCode.NOT_LEADER and "slave_read_enable" in str(e.value)
            pulled = await tc.pull("logs", q, 0, max_messages=100)  # (the client follows to the master)
            assert [m.body for m in pulled.messages] == [b"m%d" % i for i in range(20)]
            with pytest.raises(QuorumLogError) as e:
                await tc.pull("logs", q, 25)
            assert e.value.code == ResponseCode.OFFSET_TOO_BIG
            empty = await tc.pull("logs", q, 20, wait_ms=200)  # (the end itself: a long poll that times out)
            assert empty.messages == [] and empty.next_offset == 20

    try:
        cluster.start()
        asyncio.run(main())
    finally:
        cluster.stop()


RETENTION_ARGS = ("--max-entry-bytes", str(16 * 1024), "--data-segment-size", str(64 * 1024),
                  "--index-segment-size", str(64 * 1024), "--file-reserved-hours", "0",
                  "--retention-interval-ms", "100", "--snapshot-every", "200")


def test_a_slave_back_after_retention_passed_its_end_installs_the_masters_consume_queues(tmp_path):
    """A slave down while the master's retention deletes past its end is Reset to the master's first byte
    (RocketMQ #3388); its log no longer holds what it must dispatch next, so it installs the master's snapshot
    of the consume queues and dispatches on from there: the same queues, offsets and messages as the master."""
    cluster = Cluster(str(tmp_path), n=3, extra_args=RETENTION_ARGS)

    async def main() -> None:
        # (a dead slave holds the confirm offset, and so the sends, until it leaves the set: 1 s here)
        master = await _ms_topic_group(cluster, 64 * 1024, ack="sync", min_in_sync_replicas=2,
                                       slave_read_enable=True, ha_max_time_slave_not_catchup_ms=1_000,
                                       ha_send_heartbeat_interval_ms=200, ha_housekeeping_interval_ms=2_000)
        away = next(n for n in sorted(cluster.nodes) if n != master)
        async with quorumlog.TopicAdmin(cluster.peers, timeout_ms=10_000) as admin:
            await admin.create("big", queues=2)
        async with quorumlog.Producer(cluster.peers, timeout_ms=30_000) as p:
            async def send(prefix: str, n: int) -> None:
                for i in range(0, n, 50):
                    await asyncio.gather(*(p.send("big", b"%s-%05d-" % (prefix.encode(), j) + b"." * 1000,
                                                  key=f"k{j}") for j in range(i, i + 50)))

            await send("before", 300)
            rows = await _rows(cluster)
            away_end = rows[away]["end_index"]
            cluster.nodes[away].kill9()
            await send("while", 3_000)  # ~3 MB: dozens of 64 KiB segments for retention to delete
            deadline = time.monotonic() + 30
            while (await _rows(cluster))[master]["begin_index"] <= away_end + 1:
                assert time.monotonic() < deadline, "the master's retention never passed the stopped slave's end"
                await asyncio.sleep(0.1)
            cluster.nodes[away].start()
            deadline = time.monotonic() + 60
            while True:
                rows = await _rows(cluster)
                sm = rows.get(away, {}).get("state_machine", {})
                if sm.get("snapshots_installed", 0) >= 1 and \
                        sm.get("applied_index") == rows[master]["state_machine"]["applied_index"]:
                    break
                assert time.monotonic() < deadline, f"the slave never installed the master's queues: {sm}"
                await asyncio.sleep(0.2)
            await send("after", 100)
        async with quorumlog.TopicClient(cluster.peers, timeout_ms=20_000) as tc:
            for q in range(2):
                lo, hi = await tc.offsets("big", q)
                assert hi > 1_000 and lo > 0  # (retention deleted the oldest messages)
                # (each member's retention keeps about its current segment: compare what both still hold)
                start = max([lo] + [(await tc.pull_raw("big", q, hi - 1, node=n)).min_offset for n in (master, away)])
                assert hi - start >= 5, (start, hi)
                tails = {}
                for node in (master, away):
                    deadline = time.monotonic() + 20
                    while True:
                        resp = await tc.pull_raw("big", q, start, max_messages=hi - start, node=node)
                        got = [(m.queue_offset, m.body) for m in decode_pulled(resp.messages, quorumlog.TopicMessage)]
                        if len(got) == hi - start or time.monotonic() > deadline:
                            break
                        await asyncio.sleep(0.1)  # (the slave dispatches up to the confirm offset it heard)
                    tails[node] = got
                assert tails[away] == tails[master] and [o for o, _ in tails[master]] == list(range(start, hi))
        assert "reset" in cluster.nodes[away].log_text().lower()

    try:
        cluster.start()
        asyncio.run(main())
    finally:
        cluster.stop()
