"""Master/slave groups against the faults RocketMQ's users reported, with real node processes on loopback: a
report beyond the master's end (#1155/#3015), a slave whose offset retention deleted (#3388), a master that
restarts behind its slave (#2706), a diverged tail after a switch whose truncation a crash tears, a
half-open HA session, and slaves killed under a writer. (#6316, an old master writable beside the new one, is in test_master_slave.py.)"""

from __future__ import annotations

import asyncio
import inspect
import os
import shutil
import signal
import time

import pytest

from quorumlog.client import Client
from quorumlog.client.groups import GroupAdmin
from quorumlog.codes import ResponseCode
from quorumlog.failpoints import EXIT_CODE
from quorumlog.peers import parse_peers
from quorumlog.soak.processes import Cluster
from quorumlog.transport import ClientConnection
from quorumlog.transport.handshake import NODE_LINK
from quorumlog.transport.peer_links import PeerLinks
from quorumlog.wire.client import AppendRequest
from quorumlog.wire.messages import HaReport

from .test_master_slave import GROUP, _converged, _ms_group, _none_lost, _rows, _run, _write_until
from .test_meta import _create_meta

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


async def _until(what: str, check, timeout_s: float = 20.0, every_s: float = 0.1):
    """Poll `check` (a function, plain or async) until it returns something true; that value."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        assert time.monotonic() < deadline, f"never: {what}"
        await asyncio.sleep(every_s)


async def _appended(cluster: Cluster, bodies: list[bytes]) -> dict[bytes, int]:
    """Append each body to the group, one after another; body -> its index."""
    acked: dict[bytes, int] = {}
    async with cluster.client(group=GROUP, timeout_ms=20_000) as c:
        for body in bodies:
            acked[body] = (await c.append(body)).index
    return acked


async def _on_meta_leader(cluster: Cluster, **ms) -> tuple[str, list[str]]:
    """Five nodes: `_meta` on all, the group's master on the `_meta` leader and two slaves — stopping the slaves
    then costs the controller no election. Returns (master, slaves)."""
    await _create_meta(cluster)
    async with GroupAdmin(parse_peers(cluster.peers), timeout_ms=20_000) as admin:
        meta_leader = (await admin.describe("_meta")).leader
    members = [meta_leader, *sorted(n for n in cluster.nodes if n != meta_leader)[:2]]
    master = await _ms_group(cluster, members, with_meta=False, master=meta_leader, **ms)
    assert master == meta_leader
    return master, members[1:]


def _group_dir(cluster: Cluster, node: str) -> str:
    return os.path.join(cluster.nodes[node].data_dir, "groups", GROUP)


def test_a_report_beyond_the_masters_end_is_never_counted_as_acknowledged(tmp_path):
    """RocketMQ #1155/#3015: a slave reporting more than the master holds. A peer (the test, speaking the peer
    protocol as a member whose process is stopped) reports an offset far beyond the master's end while an append
    waits for its slaves: the master drops that HA session and the append is not acknowledged. (Stopped, not
    killed: a killed slave's session ends with its link, and the append would be refused without waiting.)"""
    cluster = Cluster(str(tmp_path), n=5)

    async def main() -> None:
        master, slaves = await _on_meta_leader(cluster, ack="sync", min_in_sync_replicas=2, slave_timeout_ms=1_500)
        async with cluster.client(group=GROUP, timeout_ms=20_000) as c:
            for i in range(10):
                await c.append(f"before{i}".encode())
        epoch = (await _rows(cluster))[master]["epoch"]
        for s in slaves:
            cluster.nodes[s].signal(signal.SIGSTOP)
        liar = slaves[0]
        host, port = parse_peers(cluster.peers)[master]
        conn = await ClientConnection.open(host, port, group=GROUP, client_name="direct", timeout_ms=5_000)
        links = PeerLinks(group=NODE_LINK, node_id=liar, peers={master: (host, port)})
        try:
            waiting = asyncio.ensure_future(conn.call(AppendRequest(1, (b"never-held",), 0, 0), 5_000))
            links.send(HaReport(liar, master, epoch, 0, hello=True), GROUP)  # (one link: they arrive in order)
            links.send(HaReport(liar, master, epoch, 1 << 40), GROUP)
            links.flush()
            resp = await waiting
            assert resp.code in (ResponseCode.FLUSH_SLAVE_TIMEOUT, ResponseCode.SLAVE_NOT_AVAILABLE,
                                 ResponseCode.IN_SYNC_REPLICAS_NOT_ENOUGH), resp
            await asyncio.to_thread(cluster.nodes[master].wait_log, "beyond the master's end")
            row = (await _rows_of(cluster, [master, *(n for n in cluster.nodes if n not in slaves)]))[master]
            assert row["slaves"][liar]["connected"] is False and row["slaves"][liar]["ack_offset"] < 1 << 40, row
            assert row["confirm_offset"] <= row["max_offset"]
        finally:
            await links.close()
            await conn.close()
            for s in slaves:
                cluster.nodes[s].kill9()
        for s in slaves:
            cluster.nodes[s].start()
        async with cluster.client(group=GROUP, timeout_ms=30_000) as c:
            r = await c.append(b"after")
        rows = await _converged(cluster)
        assert rows[master]["end_index"] == r.index == 11  # (the refused entry stays in the log, as in RocketMQ)

    _run(cluster, main)


def test_a_slave_whose_offset_retention_deleted_resyncs_from_the_masters_first_byte(tmp_path):
    """RocketMQ #3388: a slave away while the master's retention deleted the segments it would need next must
    not heartbeat forever at an offset the master cannot serve: it restarts at the master's first byte."""
    cluster = Cluster(str(tmp_path), n=3, extra_args=("--max-entry-bytes", "16384", "--file-reserved-hours", "0",
                                                      "--retention-interval-ms", "200"))

    async def main() -> None:
        master = await _ms_group(cluster, segment_bytes=64 * 1024, ack="sync", min_in_sync_replicas=2,
                                 slave_read_enable=True,
                                 ha_housekeeping_interval_ms=1_000, ha_send_heartbeat_interval_ms=200,
                                 ha_max_time_slave_not_catchup_ms=1_000)
        away = sorted(n for n in cluster.nodes if n != master)[0]
        async with cluster.client(group=GROUP, timeout_ms=30_000) as c:
            for i in range(20):
                await c.append_batch([f"a{i}-{k}-".encode() * 50 for k in range(10)])
            rows = await _converged(cluster)
            away_end = rows[away]["end_index"]
            cluster.nodes[away].kill9()
            i = 0

            async def deleted_past_away() -> bool:
                nonlocal i
                for _ in range(20):
                    await c.append_batch([f"b{i}-{k}-".encode() * 50 for k in range(10)])
                    i += 1
                return (await _rows(cluster))[master]["begin_index"] > away_end + 1

            await _until("the master's retention deleted what the stopped slave needs next", deleted_past_away, 60)
            cluster.nodes[away].start()
            last = (await c.append(b"last")).index
            rows = await _converged(cluster)
            assert rows[away]["end_index"] == last
            assert rows[away]["begin_index"] > away_end + 1, rows[away]  # restarted past the gap, not below it
            begin = rows[away]["begin_index"]
            on_away = await _until("the slave's confirm offset covers the last entry",
                                   lambda: _entries(c, begin, last, away), 10)
            on_master = [(e.index, e.body) async for e in c.read(begin, last)]
            assert on_away == on_master

    _run(cluster, main)


async def _entries(c, first: int, last: int, node: str):
    entries = [(e.index, e.body) async for e in c.read(first, last, node=node)]
    return entries if entries and entries[-1][0] == last else None


def test_a_master_that_restarts_behind_its_slave_is_not_master_again_and_loses_nothing(tmp_path):
    """RocketMQ #2706: a master back from a crash that took its unflushed tail (its store as a crash image from
    before its last acknowledged writes) must not lead its slaves, or they would truncate what they hold to it.
    The controller elects the slave holding the most; the old master pulls what it lost."""
    cluster = Cluster(str(tmp_path), n=3)

    async def main() -> None:
        master = await _ms_group(cluster, ack="sync", min_in_sync_replicas=2)
        image = str(tmp_path / "crash-image")
        async with cluster.client(group=GROUP, timeout_ms=20_000) as c:
            acked = {f"early{i}".encode(): (await c.append(f"early{i}".encode())).index for i in range(50)}
            # the master's group directory as a machine crash now would leave it: taken while it is stopped
            # (no write in flight), well within its lease
            cluster.nodes[master].signal(signal.SIGSTOP)
            try:
                shutil.copytree(_group_dir(cluster, master), image)
            finally:
                cluster.nodes[master].signal(signal.SIGCONT)
            for i in range(200):
                acked[f"late{i}".encode()] = (await c.append(f"late{i}".encode())).index
            rows = await _converged(cluster)
        cluster.nodes[master].kill9()
        shutil.rmtree(_group_dir(cluster, master))
        shutil.copytree(image, _group_dir(cluster, master))
        cluster.nodes[master].start()
        rows = await _until("another master", lambda: _other_master(cluster, master), 30)
        # (the restarted one may still call itself master of epoch 1 for a moment: without a lease, no writes)
        new = next(n for n, r in rows.items() if r["role"] == "master" and n != master)
        assert rows[new]["epoch"] >= 2
        async with cluster.client(group=GROUP, timeout_ms=30_000) as c:
            acked[b"after"] = (await c.append(b"after")).index
        rows = await _converged(cluster)
        assert rows[master]["role"] == "slave" and rows[master]["end_index"] == acked[b"after"]
        await _none_lost(cluster, acked)

    _run(cluster, main)


async def _other_master(cluster: Cluster, old: str) -> dict[str, dict] | None:
    rows = await _rows(cluster)
    ok = len(rows) == 3 and any(r["role"] == "master" and n != old for n, r in rows.items())
    return rows if ok else None


def test_a_diverged_tail_is_cut_after_a_switch_even_when_a_crash_tears_the_cut(tmp_path):
    """An old master holds a tail nobody else has (appends that timed out while both slaves were stopped: they
    stay in the master's log, as in RocketMQ). It is killed, a slave becomes master and writes over those
    offsets; when the old master returns as a slave it must cut that tail to the consistent point of the epoch
    entries. Its first cut is torn by a crash (the data zeroed and synced, the index not yet); the restarted
    process recovers, cuts again and converges, and no acknowledged entry is lost."""
    cluster = Cluster(str(tmp_path), n=5)

    async def main() -> None:
        master, slaves = await _on_meta_leader(cluster, ack="sync", min_in_sync_replicas=2, slave_timeout_ms=1_000)
        acked = await _appended(cluster, [f"before{i}".encode() * 40 for i in range(30)])
        await _converged_members(cluster, [master, *slaves])
        # the slaves stop: their HA sessions live on at the master (their sockets stay open), so appends are
        # written there and time out; then the master dies, and the slaves after it (kill -9 of a stopped process:
        # the master's frames in its socket buffer never reach its log, as they would if it went on). The master
        # dies first: once it saw their links close it would shrink its SyncStateSet to itself, and rightly no
        # slave could be elected after it (CI, 1 run: the shrink committed in the moment between the kills)
        for s in slaves:
            cluster.nodes[s].signal(signal.SIGSTOP)
        host, port = parse_peers(cluster.peers)[master]
        conn = await ClientConnection.open(host, port, group=GROUP, client_name="direct", timeout_ms=5_000)
        try:
            for k in range(3):  # (each stays in the old master's log only)
                resp = await conn.call(AppendRequest(k + 1, (f"diverged{k}".encode() * 100,), 0, 0), 5_000)
                assert resp.code == ResponseCode.FLUSH_SLAVE_TIMEOUT, resp
        finally:
            await conn.close()
            cluster.nodes[master].kill9()
            for s in slaves:
                cluster.nodes[s].kill9()
        for s in slaves:
            cluster.nodes[s].start()
        peers = ",".join(p for p in cluster.peers.split(",") if not p.startswith(f"{master}="))
        async with GroupAdmin(parse_peers(peers), timeout_ms=5_000) as admin:
            async def new_master():
                statuses = await admin.cluster_status()
                return next((n for n, s in statuses.items() if isinstance(s, dict) for g in s["groups"]
                             if g["group"] == GROUP and g["role"] == "master" and g["epoch"] >= 2), None)
            new = await _until("a slave elected master", new_master, 30)
        async with Client(peers, group=GROUP, timeout_ms=30_000) as c:
            for i in range(30):  # over the offsets the old master's tail took
                body = f"new{i}".encode() * 7
                acked[body] = (await c.append(body)).index
        # back as a slave, its first cut dies half-way
        node = cluster.nodes[master]
        node.env = dict(node.env, QUORUMLOG_FAILPOINTS="store.truncate.after_data")
        node.start()
        assert node.proc.wait(60) == EXIT_CODE
        node.wait_log("failpoint store.truncate.after_data")
        node.env = {k: v for k, v in node.env.items() if k != "QUORUMLOG_FAILPOINTS"}
        node.start()
        rows = await _converged_members(cluster, [master, *slaves])
        assert rows[master]["role"] == "slave" and rows[new]["role"] == "master"
        node.wait_log("truncating the diverged tail")
        log = await _none_lost(cluster, acked)
        assert not any(b.startswith(b"diverged") for b in log), "the old master's tail came back"
        assert sorted(log.values()) == list(range(len(log)))

    _run(cluster, main)


async def _converged_members(cluster: Cluster, members: list[str], timeout_s: float = 30.0) -> dict[str, dict]:
    async def same():
        async with GroupAdmin({n: parse_peers(cluster.peers)[n] for n in members}, timeout_ms=5_000) as admin:
            statuses = await admin.cluster_status()
        rows = {n: g for n, s in statuses.items() if isinstance(s, dict) for g in s["groups"] if g["group"] == GROUP}
        ends = {(r["end_index"], r["max_offset"]) for r in rows.values()}
        return rows if len(rows) == len(members) and len(ends) == 1 else None
    return await _until(f"{members} converged", same, timeout_s)


def test_a_half_open_ha_session_is_dropped_and_the_slave_comes_back(tmp_path):
    """A slave whose process stops without closing anything (SIGSTOP: its sockets stay open, it says nothing):
    the master drops its HA session after `ha_housekeeping_interval_ms`, shrinks the SyncStateSet and keeps
    acknowledging with the other slave; continued, the slave opens a new session, catches up and is back in
    the set."""
    cluster = Cluster(str(tmp_path), n=3)

    async def main() -> None:
        master = await _ms_group(cluster, ack="sync", min_in_sync_replicas=2, ha_housekeeping_interval_ms=1_000,
                                 ha_send_heartbeat_interval_ms=200, ha_max_time_slave_not_catchup_ms=1_000)
        async with GroupAdmin(parse_peers(cluster.peers), timeout_ms=20_000) as admin:
            meta_leader = (await admin.describe("_meta")).leader
        # (not the `_meta` leader: its election would take the master's lease for a while)
        stopped = next(n for n in sorted(cluster.nodes) if n not in (master, meta_leader))
        acked: dict[bytes, int] = {}
        stop = asyncio.Event()
        w = asyncio.ensure_future(_write_until(cluster, "h", acked, stop))
        try:
            await _until("writes", lambda: len(acked) > 20)
            await _until("the slave in the sync state set", lambda: _back(cluster, master, stopped))
            cluster.nodes[stopped].signal(signal.SIGSTOP)
            t0 = time.monotonic()

            async def dropped():
                row = (await _rows_of(cluster, [master, *(n for n in cluster.nodes if n != stopped)]))[master]
                gone = row["slaves"][stopped]["connected"] is False
                return row if gone and stopped not in row["sync_state_set"] else None

            await _until("the master dropped the silent slave", dropped, 15)
            took = time.monotonic() - t0
            assert took < 1.0 + 5.0, took
            cluster.nodes[master].wait_log(f"slave {stopped} silent for")
            n = len(acked)
            await _until("writes acknowledged without the stopped slave", lambda: len(acked) > n + 50)
        finally:
            cluster.nodes[stopped].signal(signal.SIGCONT)
        await _until("the slave back in the sync state set",
                     lambda: _back(cluster, master, stopped), 20)
        stop.set()
        await w
        await _converged(cluster)
        await _none_lost(cluster, acked)

    _run(cluster, main)


async def _rows_of(cluster: Cluster, nodes: list[str]) -> dict[str, dict]:
    peers = parse_peers(cluster.peers)
    async with GroupAdmin({n: peers[n] for n in nodes}, timeout_ms=5_000) as admin:
        statuses = await admin.cluster_status()
    return {n: g for n, s in statuses.items() if isinstance(s, dict) for g in s["groups"] if g["group"] == GROUP}


async def _back(cluster: Cluster, master: str, slave: str) -> bool:
    row = (await _rows(cluster))[master]
    return row["slaves"].get(slave, {}).get("connected") is True and slave in row["sync_state_set"]


def test_killed_slaves_end_their_sessions_at_once_and_appends_are_refused_not_timed_out(tmp_path):
    """kill -9 of both slaves: their links to the master end with their processes, and so do their HA sessions,
    as RocketMQ's HAConnection ends with its socket. An append is then refused at once (SLAVE_NOT_AVAILABLE)
    instead of waiting `slave_timeout_ms` for FLUSH_SLAVE_TIMEOUT, as it did until `ha_housekeeping_interval_ms`
    (20 s) of silence. Restarted, the slaves open new sessions and appends are acknowledged again."""
    cluster = Cluster(str(tmp_path), n=5)

    async def main() -> None:
        master, slaves = await _on_meta_leader(cluster, ack="sync", min_in_sync_replicas=2, slave_timeout_ms=3_000)
        acked = await _appended(cluster, [f"before{i}".encode() for i in range(10)])
        for s in slaves:
            cluster.nodes[s].kill9()
        for s in slaves:
            cluster.nodes[master].wait_log(f"a link with slave {s} broke")
        host, port = parse_peers(cluster.peers)[master]
        conn = await ClientConnection.open(host, port, group=GROUP, client_name="direct", timeout_ms=5_000)
        try:
            t0 = time.monotonic()
            resp = await conn.call(AppendRequest(1, (b"no-slave",), 0, 0), 5_000)
            took = time.monotonic() - t0
        finally:
            await conn.close()
        assert resp.code == ResponseCode.SLAVE_NOT_AVAILABLE, resp
        assert took < 1.0, took  # (slave_timeout_ms is 3 s)
        row = (await _rows_of(cluster, [master, *(n for n in cluster.nodes if n not in slaves)]))[master]
        assert all(row["slaves"][s]["connected"] is False for s in slaves), row
        for s in slaves:
            cluster.nodes[s].start()
        async with cluster.client(group=GROUP, timeout_ms=30_000) as c:
            acked[b"after"] = (await c.append(b"after")).index
        await _converged(cluster)
        log = await _none_lost(cluster, acked)
        assert b"no-slave" not in log  # (refused before it was written)

    _run(cluster, main)
