"""Three real Nodes (real core, real transport, MemoryStore) in one process: the runtime's wiring end to end."""

import asyncio
import time

import quorumlog
from quorumlog.codes import ResponseCode
from quorumlog.config import load_config
from quorumlog.errors import EntryTooLarge
from quorumlog.local_ports import free_ports
from quorumlog.server.node import Node
from quorumlog.store import MemoryStore
from quorumlog.transport import ClientConnection
from quorumlog.wire.client import AppendRequest


async def _cluster(tmp_path, flush="sync"):
    ports = free_ports(3)
    peers = ",".join(f"n{i}=127.0.0.1:{p}" for i, p in enumerate(ports))
    nodes = []
    for i in range(3):
        cfg = load_config(flags={"node_id": f"n{i}", "peers": peers, "data_dir": str(tmp_path / f"n{i}"),
                                 "flush": flush, "max_entry_bytes": "100000"}, env={})
        node = Node(cfg, store=MemoryStore(max_entry_bytes=100_000))
        await node.start()
        nodes.append(node)
    return peers, nodes


async def _leader(nodes, timeout_s=10):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        leaders = [n for n in nodes if n.status()["role"] == "leader"]
        if len(leaders) == 1 and all(n.status()["leader_id"] == leaders[0].config.node_id for n in nodes):
            return leaders[0]
        await asyncio.sleep(0.02)
    raise AssertionError([n.status()["role"] for n in nodes])


def test_three_nodes_replicate_commit_and_serve_reads_everywhere(tmp_path):
    async def main():
        peers, nodes = await _cluster(tmp_path)
        try:
            leader = await _leader(nodes)
            async with quorumlog.Client(peers, timeout_ms=5_000) as client:
                results = await asyncio.gather(*(client.append(b"e%03d" % i) for i in range(200)))
                indexes = sorted(r.index for r in results)
                assert len(set(indexes)) == 200
                batch = await client.append_batch([b"x", b"y"])
                assert [r.index for r in batch] == [indexes[-1] + 1, indexes[-1] + 2]
                last = batch[-1].index
                try:
                    await client.append(b"z" * 100_001)
                    raise AssertionError("oversized entry accepted")
                except EntryTooLarge:
                    pass
                # every replica serves the committed log, in one order
                deadline = time.monotonic() + 5
                while min(n.status()["committed_index"] for n in nodes) < last:
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.01)
                for n in nodes:
                    entries = [e async for e in client.read(0, node=n.config.node_id)]
                    assert [e.index for e in entries] == list(range(last + 1))
                    bodies = [e.body for e in entries if e.body]  # empty: a new leader's no-op entry
                    assert set(bodies[:200]) == {b"e%03d" % i for i in range(200)} and bodies[200:] == [b"x", b"y"]
                    for r, body in zip(results, (b"e%03d" % i for i in range(200))):
                        assert entries[r.index].body == body
                # a follower answers appends with NOT_LEADER naming the leader
                follower = next(n for n in nodes if n is not leader)
                host, port = follower.config.address
                conn = await ClientConnection.open(host, port, group="default", client_name="t")
                resp = await conn.call(AppendRequest(1, (b"q",)), 5_000)
                assert resp.code == ResponseCode.NOT_LEADER and resp.leader_id == leader.config.node_id
                resp = await conn.call(AppendRequest(2, ()), 5_000)
                assert resp.code == ResponseCode.REQUEST_WITH_EMPTY_BODYS
                await conn.close()
                # fsyncs were shared: far fewer than appends
                assert leader.status()["fsyncs"] < 200
        finally:
            for n in nodes:
                await n.stop()
    asyncio.run(main())


def test_a_stopping_leader_hands_leadership_over_first(tmp_path):
    async def main():
        peers, nodes = await _cluster(tmp_path)
        try:
            leader = await _leader(nodes)
            async with quorumlog.Client(peers, timeout_ms=5_000) as client:
                await asyncio.gather(*(client.append(b"h%d" % i) for i in range(50)))
                t0 = time.monotonic()
                new = await leader.hand_over_leadership()
                took_s = time.monotonic() - t0
                assert new is not None and new != leader.config.node_id
                await leader.stop()
                rest = [n for n in nodes if n is not leader]
                assert (await _leader(rest)).config.node_id == new
                r = await client.append(b"after")
                assert took_s < leader.config.election_timeout_min_ms / 1000  # no election timeout was waited
                entries = [e async for e in client.read(0, node=new)]
                assert entries[r.index].body == b"after"
        finally:
            for n in nodes:
                await n.stop()
    asyncio.run(main())


def test_a_leader_whose_disk_guard_finds_it_full_hands_over(tmp_path, monkeypatch):
    """A full leader refuses appends before they reach the core, so no write tells the core: the node's
    disk guard does, and the core hands leadership to a follower that can still store entries."""
    import shutil

    from quorumlog.server import node as node_module

    async def main():
        peers, nodes = await _cluster(tmp_path)
        try:
            leader = await _leader(nodes)
            async with quorumlog.Client(peers, timeout_ms=5_000) as client:
                await asyncio.gather(*(client.append(b"f%d" % i) for i in range(20)))
                real = shutil.disk_usage
                full_dir = leader.config.data_dir

                def usage(path):
                    u = real(path)
                    return u._replace(used=u.total) if str(path) == str(full_dir) else u
                monkeypatch.setattr(node_module.shutil, "disk_usage", usage)
                leader._check_disk()  # the guard's periodic check, run now: the core starts a transfer
                rest = [n for n in nodes if n is not leader]
                new = await _leader(rest)
                deadline = time.monotonic() + 5
                while leader.status()["leader_id"] != new.config.node_id and time.monotonic() < deadline:
                    await asyncio.sleep(0.01)  # the old leader hears of the new term
                assert leader.status()["role"] != "leader" and leader.status()["leader_id"] == new.config.node_id
                r = await client.append(b"after")  # acknowledged by the new leader
                entries = [e async for e in client.read(0, node=new.config.node_id)]
                assert entries[r.index].body == b"after"
        finally:
            for n in nodes:
                await n.stop()
    asyncio.run(main())


def test_a_linearizable_read_needs_a_quorum_that_a_plain_read_does_not(tmp_path):
    """read(linearizable=True): the leader confirms with a quorum (ReadIndex) before it answers, so a leader cut
    off from its followers (deposed without knowing it) refuses instead of serving what may be stale; a follower
    refuses with NOT_LEADER. A plain read is served from what the node has, quorum or not."""
    from quorumlog.wire.client import ReadRequest

    async def main():
        peers, nodes = await _cluster(tmp_path)
        try:
            leader = await _leader(nodes)
            async with quorumlog.Client(peers, timeout_ms=5_000) as client:
                last = (await client.append_batch([b"a", b"b", b"c"]))[-1].index
                got = [e.body async for e in client.read(0, linearizable=True)]
                assert got[-3:] == [b"a", b"b", b"c"]
            follower = next(n for n in nodes if n is not leader)
            host, port = follower.config.address
            conn = await ClientConnection.open(host, port, group="default", client_name="t")
            resp = await conn.call(ReadRequest(1, 0, linearizable=True), 5_000)
            assert resp.code == ResponseCode.NOT_LEADER
            await conn.close()
            for n in nodes:
                if n is not leader:
                    await n.stop()
            host, port = leader.config.address
            conn = await ClientConnection.open(host, port, group="default", client_name="t")
            plain = await conn.call(ReadRequest(2, 0), 5_000)
            assert plain.code == ResponseCode.SUCCESS and plain.records.last_index == last
            alone = await conn.call(ReadRequest(3, 0, linearizable=True), 15_000)
            assert alone.code != ResponseCode.SUCCESS and alone.records is None
            await conn.close()
        finally:
            for n in nodes:
                await n.stop()
    asyncio.run(main())
