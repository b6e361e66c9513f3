"""Master/slave groups (RocketMQ HA) with real node processes on loopback: SYNC_MASTER appends held by a slave,
slaves that converge byte for byte after kill -9, SIGSTOPped slaves failing appends with their codes, slave
reads bounded by the confirm offset, and a retry after FLUSH_SLAVE_TIMEOUT that is not a duplicate."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from quorumlog.client import Client
from quorumlog.transport import ClientConnection
from quorumlog.wire.client import AppendRequest, ReadRequest
from quorumlog.client.groups import GroupAdmin
from quorumlog.codes import ResponseCode
from quorumlog.errors import QuorumLogError
from quorumlog.peers import parse_peers
from quorumlog.soak.processes import Cluster

from .test_meta import _create_meta

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

GROUP = "ms"
QUORUMLOG = os.path.join(os.path.dirname(sys.executable), "quorumlog")


async def _ms_group(cluster: Cluster, nodes: list[str] | None = None, with_meta: bool = True,
                    segment_bytes: int | None = None, group: str = GROUP, state_machine: str | None = None,
                    **ms) -> str:
    """`_meta` (the controller's state, as `cluster up` makes it) and a master/slave group on three nodes;
    returns its master."""
    if with_meta:
        await _create_meta(cluster)
    async with GroupAdmin(parse_peers(cluster.peers), timeout_ms=20_000) as admin:
        p = await admin.create(group, replicas=3, nodes=nodes, mode="master-slave", master_slave=ms,
                               segment_bytes=segment_bytes, state_machine=state_machine)
    assert p.leader is not None
    return p.leader


async def _rows(cluster: Cluster, group: str = GROUP) -> dict[str, dict]:
    """Each answering node's status row of `group`."""
    async with GroupAdmin(parse_peers(cluster.peers), timeout_ms=5_000) as admin:
        statuses = await admin.cluster_status()
    return {n: g for n, s in statuses.items() if isinstance(s, dict) for g in s["groups"] if g["group"] == group}


async def _write_until(cluster: Cluster, prefix: str, acked: dict[bytes, int], stop: asyncio.Event,
                       errors: list[str] | None = None) -> None:
    """One writer: appends prefix0, prefix1, ... until `stop`, recording each acknowledged index (and, with
    `errors`, going on past failed appends)."""
    async with cluster.client(group=GROUP, timeout_ms=30_000) as c:
        i = 0
        while not stop.is_set():
            body = f"{prefix}{i}".encode()
            try:
                acked[body] = (await c.append(body)).index
            except QuorumLogError as e:
                if errors is None:
                    raise
                errors.append(e.code.name)
            i += 1


async def _log(cluster: Cluster) -> dict[bytes, int]:
    async with cluster.client(group=GROUP, timeout_ms=20_000) as c:
        return {e.body: e.index async for e in c.read(0)}


def _run(cluster: Cluster, main) -> None:
    """Start the cluster, run the async test body, stop the cluster whatever happened."""
    try:
        cluster.start()
        asyncio.run(main())
    finally:
        cluster.stop()


async def _none_lost(cluster: Cluster, acked: dict[bytes, int]) -> dict[bytes, int]:
    """The group's log (body -> index); asserts every acknowledged entry is in it at its index."""
    log = await _log(cluster)
    lost = {b: i for b, i in acked.items() if log.get(b) != i}
    assert not lost, f"{len(lost)} acknowledged entries lost or moved, e.g. {list(lost.items())[:3]}"
    return log


async def _converged(cluster: Cluster, timeout_s: float = 30.0) -> dict[str, dict]:
    deadline = time.monotonic() + timeout_s
    while True:
        rows = await _rows(cluster)
        ends = {n: (r["end_index"], r["max_offset"]) for n, r in rows.items()}
        if len(rows) == 3 and len(set(ends.values())) == 1:
            return rows
        assert time.monotonic() < deadline, f"members never converged: {ends}"
        await asyncio.sleep(0.1)


def test_sync_master_acks_what_a_slave_holds_and_a_killed_slave_converges(tmp_path):
    cluster = Cluster(str(tmp_path), n=3)

    async def main() -> None:
        master = await _ms_group(cluster, ack="sync", min_in_sync_replicas=2, slave_read_enable=True)
        rows = await _rows(cluster)
        assert rows[master]["role"] == "master" and {r["role"] for n, r in rows.items() if n != master} == {"slave"}
        async with cluster.client(group=GROUP, timeout_ms=20_000) as c:
            acked: list = []
            for i in range(200):
                acked += await c.append_batch([f"e{i}-{k}".encode() * 20 for k in range(5)])
            rows = await _converged(cluster)
            slave = next(n for n in rows if n != master)
            # kill -9 a slave under load; the master keeps acking with the other one in sync
            cluster.nodes[slave].kill9()
            for i in range(100):
                acked += await c.append_batch([f"k{i}".encode() * 100])
            cluster.nodes[slave].start()
            for i in range(100):
                acked += await c.append_batch([f"r{i}".encode() * 100])
            last = acked[-1].index
            assert [a.index for a in acked] == list(range(last + 1))
            rows = await _converged(cluster)
            assert rows[slave]["role"] == "slave" and rows[slave]["end_index"] == last
            # every acknowledged entry, read from the restarted slave (slave_read_enable), once the confirm
            # offset it heard from the master covers them
            deadline = time.monotonic() + 10
            while True:
                entries = [e async for e in c.read(0, last, node=slave)]
                if len(entries) == last + 1 or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.1)
            assert [e.index for e in entries] == list(range(last + 1))
            assert entries[0].body == b"e0-0" * 20 and entries[last].body == b"r99" * 100

    _run(cluster, main)


def test_sigstopped_slaves_fail_sync_appends_within_slave_timeout_and_a_retry_is_no_duplicate(tmp_path):
    """Five nodes: `_meta` (the controller) keeps its majority while both slaves of the group are stopped, so
    the master keeps its lease and the appends fail for want of slaves. (With the controller's majority gone
    too, the master stops taking writes within its lease: LEADER_NOT_READY.)"""
    cluster = Cluster(str(tmp_path), n=5)

    async def main() -> None:
        await _create_meta(cluster)
        async with GroupAdmin(parse_peers(cluster.peers), timeout_ms=20_000) as admin:
            meta_leader = (await admin.describe("_meta")).leader
        # the master on the `_meta` leader's node: stopping the slaves then costs the controller no election
        # (an election of `_meta` would outlast the master's lease: LEADER_NOT_READY, not the codes tested here)
        members = [meta_leader, *sorted(n for n in cluster.nodes if n != meta_leader)[:2]]
        master = await _ms_group(cluster, members, with_meta=False, ack="sync", min_in_sync_replicas=2,
                                 slave_timeout_ms=1_500, master=meta_leader)
        assert master == meta_leader
        slaves = [n for n in members if n != master]
        async with cluster.client(group=GROUP, timeout_ms=2_500) as c:
            for i in range(20):
                await c.append(f"before{i}".encode())
            for s in slaves:
                cluster.nodes[s].signal(signal.SIGSTOP)
            try:
                t0 = time.monotonic()
                with pytest.raises(QuorumLogError) as e:
                    await c.append(b"while-stopped")  # (retried with its sequence until the client's deadline)
                took = time.monotonic() - t0
                assert e.value.code in (ResponseCode.FLUSH_SLAVE_TIMEOUT, ResponseCode.SLAVE_NOT_AVAILABLE,
                                        ResponseCode.IN_SYNC_REPLICAS_NOT_ENOUGH), e.value
                assert took <= 1.5 + 1.0 + 0.5, took
            finally:
                for s in slaves:
                    cluster.nodes[s].signal(signal.SIGCONT)
            rows = await _converged(cluster)
            # the failed entry stays in the master's log once (as in RocketMQ), whatever the client's retries:
            # they carried its producer sequence and waited for the first copy
            assert rows[master]["end_index"] == 20
            r = await c.append(b"after")
            assert r.index == 21
            # (readers see it once the confirm offset passes it: every member of the set, the master's fsync too)
            deadline = time.monotonic() + 10
            while (await _rows(cluster))[master]["committed_index"] < 21:
                assert time.monotonic() < deadline, "the confirm offset never reached the acknowledged append"
                await asyncio.sleep(0.05)
            entries = [e async for e in c.read(0, 21)]
            assert [e.body for e in entries[19:]] == [b"before19", b"while-stopped", b"after"]

    _run(cluster, main)


def test_a_reader_far_behind_is_sent_to_a_slave_and_reads_on_from_it_while_the_master_is_stopped(tmp_path):
    """suggest_slave (RocketMQ's suggestPullingFromSlave): a reader further behind the master's end than
    access_message_in_memory_max_ratio of RAM (0% here: any reader behind) is told to read from an in-sync
    slave, and the client's next reads go there — so it reads to the end with the master SIGSTOPped. A reader
    at the end, or of a group without slave_read_enable, is not told."""
    cluster = Cluster(str(tmp_path), n=3)

    async def main() -> None:
        master = await _ms_group(cluster, ack="sync", min_in_sync_replicas=2, slave_read_enable=True,
                                 access_message_in_memory_max_ratio=0)
        slaves = sorted(n for n in cluster.nodes if n != master)
        async with cluster.client(group=GROUP, timeout_ms=20_000) as c:
            for i in range(0, 200, 20):
                await c.append_batch([b"e%03d" % j for j in range(i, i + 20)])
            rows = await _converged(cluster)
            deadline = time.monotonic() + 10
            while min(r["committed_index"] for r in (await _rows(cluster)).values()) < 199:
                assert time.monotonic() < deadline, "slaves never learned the confirm offset"
                await asyncio.sleep(0.05)
            host, port = parse_peers(cluster.peers)[master]
            conn = await ClientConnection.open(host, port, group=GROUP, client_name="far-reader")
            try:
                far = await conn.call(ReadRequest(conn.next_request_id(), 0, -1, 64, 0), 5_000)
                near = await conn.call(ReadRequest(conn.next_request_id(), 199, -1, 64, 0), 5_000)
            finally:
                await conn.close()
            assert far.code == ResponseCode.SUCCESS and far.suggest_slave in slaves
            assert near.code == ResponseCode.SUCCESS and near.suggest_slave is None  # (nothing behind it)
            it = c.read(0, 199, max_bytes=64).__aiter__()  # (a few entries per read)
            got = [(await it.__anext__()).body]
            assert c.suggested_slave in slaves
            cluster.nodes[master].signal(signal.SIGSTOP)
            try:
                got += [e.body async for e in it]  # from the slave alone
            finally:
                cluster.nodes[master].signal(signal.SIGCONT)
            assert got == [b"e%03d" % j for j in range(200)]
            assert rows[master]["role"] == "master"

    _run(cluster, main)


def test_a_slave_refuses_writes_and_reads_unless_slave_read_enable(tmp_path):
    cluster = Cluster(str(tmp_path), n=3)

    async def main() -> None:
        master = await _ms_group(cluster, ack="async", min_in_sync_replicas=1)
        slave = next(n for n in cluster.nodes if n != master)
        async with cluster.client(group=GROUP, timeout_ms=20_000) as c:
            r = await c.append(b"x")
            assert (r.index, r.term) == (0, 1)
            await _converged(cluster)
            with pytest.raises(QuorumLogError) as e:
                [e async for e in c.read(0, 0, node=slave)]
            assert e.value.code == ResponseCode.NOT_LEADER and "slave_read_enable" in str(e.value)

    _run(cluster, main)


def test_kill_9_of_the_master_under_four_sync_writers_loses_nothing_and_it_returns_as_a_slave(tmp_path):
    """The controller elects a slave of the SyncStateSet once the master's lease ran out; every acknowledged
    entry is in the new master's log; the old master comes back as a slave, cuts what it alone held and
    converges."""
    cluster = Cluster(str(tmp_path), n=3)

    async def main() -> None:
        master = await _ms_group(cluster, ack="sync", min_in_sync_replicas=2)
        acked: dict[bytes, int] = {}
        stop = asyncio.Event()
        errors: list[str] = []
        writers = [asyncio.ensure_future(_write_until(cluster, f"w{w}-", acked, stop, errors)) for w in range(4)]
        await asyncio.sleep(1.5)
        before = len(acked)
        assert before > 50, before
        cluster.nodes[master].kill9()
        killed_at = time.monotonic()
        while len(acked) < before + 100:  # the new master takes writes
            assert time.monotonic() - killed_at < 30, f"no writes after the kill ({len(acked) - before})"
            await asyncio.sleep(0.05)
        cluster.nodes[master].start()
        await asyncio.sleep(1.0)
        stop.set()
        await asyncio.gather(*writers)
        rows = await _converged(cluster)
        new_master = next(n for n, r in rows.items() if r["role"] == "master")
        assert new_master != master and rows[master]["role"] == "slave"
        assert rows[new_master]["epoch"] >= 2
        await _none_lost(cluster, acked)

    _run(cluster, main)


def test_ha_elect_switches_by_hand_under_writes_and_loses_nothing(tmp_path):
    cluster = Cluster(str(tmp_path), n=3)

    async def main() -> None:
        master = await _ms_group(cluster, ack="sync", min_in_sync_replicas=2)
        to = sorted(n for n in cluster.nodes if n != master)[0]
        acked: dict[bytes, int] = {}
        stop = asyncio.Event()
        w = asyncio.ensure_future(_write_until(cluster, "x", acked, stop))
        await asyncio.sleep(0.5)
        out = await asyncio.to_thread(subprocess.run, [QUORUMLOG, "ha", "elect", "--peers", cluster.peers, "--group",
                                                       GROUP, "--to", to, "--json"],
                                      capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        state = json.loads(out.stdout)
        assert state["master"] == to and state["epoch"] == 2
        n = len(acked)
        deadline = time.monotonic() + 20
        while len(acked) < n + 50:
            assert time.monotonic() < deadline, "no writes after the switch"
            await asyncio.sleep(0.05)
        stop.set()
        await w
        rows = await _converged(cluster)
        assert rows[to]["role"] == "master" and rows[master]["role"] == "slave"
        log = await _log(cluster)
        assert all(log.get(b) == i for b, i in acked.items())

    _run(cluster, main)


@pytest.mark.parametrize("ack", ["sync", "async"])
def test_a_master_stopped_past_its_lease_never_writes_beside_the_new_one(tmp_path, ack):
    """RocketMQ #6316: an old master back after the controller elected another must not take a write. Here it
    is SIGSTOPped past the master timeout; once continued, it refuses appends sent straight to it (its lease
    ran out while it was stopped) until it follows the new master. Under ack async only the lease stops it (no
    slave ack is awaited); under ack sync nothing acknowledged is lost either."""
    cluster = Cluster(str(tmp_path), n=3)

    async def main() -> None:
        old = await _ms_group(cluster, ack=ack, min_in_sync_replicas=2 if ack == "sync" else 1)
        acked: dict[bytes, int] = {}
        stop = asyncio.Event()
        w = asyncio.ensure_future(_write_until(cluster, "y", acked, stop))
        await asyncio.sleep(0.5)
        host, port = parse_peers(cluster.peers)[old]
        conn = await ClientConnection.open(host, port, group=GROUP, client_name="direct", timeout_ms=5_000)
        cluster.nodes[old].signal(signal.SIGSTOP)
        try:
            deadline = time.monotonic() + 15
            while True:  # another master, taking writes
                rows = await _rows(cluster)
                new = next((n for n, r in rows.items() if n != old and r["role"] == "master"), None)
                if new is not None and rows[new]["epoch"] >= 2:
                    break
                assert time.monotonic() < deadline, rows
                await asyncio.sleep(0.1)
            # an append already waiting in its socket when it wakes: it is read before the controller's answer
            # to its first heartbeat can tell it that it is no longer master
            first = asyncio.ensure_future(conn.call(AppendRequest(1, (b"to-old-first",), 0, 0), 5_000))
            await asyncio.sleep(0.1)
        finally:
            cluster.nodes[old].signal(signal.SIGCONT)
        resp = await first
        await conn.close()
        assert resp.code in (ResponseCode.LEADER_NOT_READY, ResponseCode.NOT_LEADER), \
            f"the old master {old} answered {resp} beside {new}"
        only_old = ",".join(p for p in cluster.peers.split(",") if p.startswith(f"{old}="))
        refusals = 0
        async with Client(only_old, group=GROUP, timeout_ms=300, request_timeout_ms=300, max_retries=0) as direct:
            for i in range(20):
                try:
                    r = await direct.append(f"to-old-{i}".encode())
                except QuorumLogError as e:
                    assert e.code in (ResponseCode.LEADER_NOT_READY, ResponseCode.NOT_LEADER,
                                      ResponseCode.TIMEOUT), e
                    refusals += 1
                else:
                    raise AssertionError(f"the old master {old} acknowledged {r} beside {new}")
                await asyncio.sleep(0.02)
        assert refusals == 20
        stop.set()
        await w
        rows = await _converged(cluster)
        assert rows[old]["role"] == "slave" and rows[new]["role"] == "master"
        log = await _log(cluster)
        if ack == "sync":  # (async: what the stopped master acknowledged alone may be gone, as in RocketMQ)
            assert all(log.get(b) == i for b, i in acked.items())
        assert not any(b.startswith(b"to-old-") for b in log)

    _run(cluster, main)
