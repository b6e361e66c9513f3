"""Topics on a master/slave group (RocketMQ's HA) with real node processes on loopback: queue offsets
assigned at the confirm offset, the same on every member, dense and never reused through a kill -9 of the master
under a producer and two consumers (RocketMQ #7689 and #8539 are what happens when a new master reuses them);
slaves serve pulls only with slave_read_enable; a commit beyond a queue's end is OFFSET_TOO_BIG on the master."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest

import quorumlog
from quorumlog.codes import ResponseCode
from quorumlog.errors import OffsetTooSmall, QuorumLogError
from quorumlog.soak.processes import Cluster
from quorumlog.topic.message import decode_pulled

from .test_master_slave import _ms_group, _rows, _run
from .test_topics import _kill_under_produce_and_consume

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

GROUP = "mst"


async def _ms_topic_group(cluster: Cluster, segment_bytes: int | None = None, **ms) -> str:
    """`_meta` and a master/slave topic group on the three nodes; returns its master."""
    return await _ms_group(cluster, segment_bytes=segment_bytes, group=GROUP, state_machine="topics", **ms)


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
        rows = await _rows(cluster, GROUP)
        assert {r["state_machine"]["kind"] for r in rows.values()} == {"topics"}
        async with quorumlog.TopicAdmin(cluster.peers, timeout_ms=10_000) as admin:
            assert await admin.topic_groups() == [GROUP]
            await admin.create("orders", queues=4)
        acked = await _kill_under_produce_and_consume(cluster, "orders", master)

        # Every member (the old master back as a slave) dispatched the same queues: offsets dense from 0,
        # each naming the same message everywhere, every acknowledged one among them.
        deadline = time.monotonic() + 30
        while len(rows := await _rows(cluster, GROUP)) < 3:  # (the old master's process may still be opening)
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

    _run(cluster, main)


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

    _run(cluster, main)


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
            rows = await _rows(cluster, GROUP)
            away_end = rows[away]["end_index"]
            cluster.nodes[away].kill9()
            await send("while", 3_000)  # ~3 MB: dozens of 64 KiB segments for retention to delete
            deadline = time.monotonic() + 30
            while (await _rows(cluster, GROUP))[master]["begin_index"] <= away_end + 1:
                assert time.monotonic() < deadline, "the master's retention never passed the stopped slave's end"
                await asyncio.sleep(0.1)
            cluster.nodes[away].start()
            deadline = time.monotonic() + 60
            while True:
                rows = await _rows(cluster, GROUP)
                sm = rows.get(away, {}).get("state_machine", {})
                if sm.get("snapshots_installed", 0) >= 1 and \
                        sm.get("applied_index") == rows[master]["state_machine"]["applied_index"]:
                    break
                assert time.monotonic() < deadline, f"the slave never installed the master's queues: {sm}"
                await asyncio.sleep(0.2)
            await send("after", 100)
        async with quorumlog.TopicClient(cluster.peers, timeout_ms=20_000) as tc:
            async def tails_of(q: int) -> tuple[dict, int, int]:
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
                return tails, start, hi

            for q in range(2):
                deadline = time.monotonic() + 30
                while True:
                    try:
                        tails, start, hi = await tails_of(q)
                        break
                    except OffsetTooSmall:  # retention (every 100 ms here) passed `start` meanwhile: look again
                        assert time.monotonic() < deadline, "retention kept passing the common tail"
                assert tails[away] == tails[master] and [o for o, _ in tails[master]] == list(range(start, hi))
        assert "reset" in cluster.nodes[away].log_text().lower()

    _run(cluster, main)


def test_a_consumer_far_behind_is_sent_to_a_slave_and_pulls_on_from_it_while_the_master_is_stopped(tmp_path):
    """suggest_slave on topic pulls (RocketMQ's suggestPullingFromSlave is a consumer's): a pull leaving its
    reader more than access_message_in_memory_max_ratio of RAM behind (0% here) names an in-sync slave, and the
    queue's next pulls go there — to the end with the master SIGSTOPped."""
    cluster = Cluster(str(tmp_path), n=3)

    async def main() -> None:
        master = await _ms_topic_group(cluster, ack="sync", min_in_sync_replicas=2, slave_read_enable=True,
                                       access_message_in_memory_max_ratio=0)
        async with quorumlog.TopicAdmin(cluster.peers, timeout_ms=10_000) as admin:
            await admin.create("clicks", queues=1)
        async with quorumlog.Producer(cluster.peers, timeout_ms=20_000) as p:
            await p.send_batch("clicks", 0, [(b"c%03d" % i, "", "", None) for i in range(100)])
        deadline = time.monotonic() + 10  # (every member dispatched all 100: the slaves heard the confirm offset)
        while min(r["state_machine"]["messages"] for r in (await _rows(cluster, GROUP)).values()) < 100:
            assert time.monotonic() < deadline, await _rows(cluster, GROUP)
            await asyncio.sleep(0.05)
        async with quorumlog.TopicClient(cluster.peers, timeout_ms=20_000) as tc:
            first = await tc.pull("clicks", 0, 0, max_messages=10)
            slave = tc.suggested_slaves[("clicks", 0)]
            assert slave != master and [m.body for m in first.messages] == [b"c%03d" % i for i in range(10)]
            cluster.nodes[master].signal(signal.SIGSTOP)
            try:
                got, offset = [m.body for m in first.messages], first.next_offset
                while offset < 100:  # from the slave alone
                    p = await tc.pull("clicks", 0, offset, max_messages=10)
                    got += [m.body for m in p.messages]
                    offset = p.next_offset
            finally:
                cluster.nodes[master].signal(signal.SIGCONT)
            assert got == [b"c%03d" % i for i in range(100)]
            end = await tc.pull("clicks", 0, 100)  # the slave has no more: the next pull goes to the master again
            assert end.messages == [] and ("clicks", 0) not in tc.suggested_slaves

    _run(cluster, main)
