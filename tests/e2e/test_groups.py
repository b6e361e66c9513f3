"""Many groups per node with real processes: 50 groups placed on 3 nodes (leaders spread by
preferred leaders) go quiet once idle; a node killed with kill -9 is noticed by node-level liveness, every
group is writable again within 5 s, and no acknowledged entry is lost; the node restarts and catches every
group up."""

from __future__ import annotations

import asyncio
import time

import pytest

from quorumlog.client import Client
from quorumlog.client.groups import GroupAdmin
from quorumlog.peers import parse_peers
from quorumlog.soak.processes import Cluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

GROUPS = 50
WRITABLE_WITHIN_S = 5.0


async def _settled(admin: GroupAdmin, names: list[str], timeout_s: float = 30.0) -> dict[str, str]:
    """Each group's leader once every group has one and it is the preferred one (leaders spread)."""
    deadline = time.monotonic() + timeout_s
    while True:
        placements = {p.group: p for p in await admin.list()}
        leaders = {g: placements[g].leader for g in names if g in placements}
        preferred = {g: placements[g].rows[0]["preferred_leader_id"] for g in names if g in placements}
        if len(leaders) == len(names) and leaders == preferred:
            return leaders
        assert time.monotonic() < deadline, f"leaders {leaders} never matched the preferred ones {preferred}"
        await asyncio.sleep(0.1)


async def _write_until_acked(client: Client, body: bytes, t0: float) -> tuple[float, int]:
    """Append body (the client retries: one client_id/seq, so at most one copy); seconds from t0 to its ack."""
    r = await client.append(body)
    return time.monotonic() - t0, r.index


def test_fifty_groups_on_three_nodes_survive_kill_9_of_a_node(tmp_path):
    cluster = Cluster(str(tmp_path), n=3)

    async def main() -> None:
        nodes = parse_peers(cluster.peers)
        names = [f"g{i:02d}" for i in range(GROUPS)]
        async with GroupAdmin(nodes, timeout_ms=20_000) as admin:
            deadline = time.monotonic() + 30
            while not all(isinstance(s, dict) for s in (await admin.cluster_status()).values()):
                assert time.monotonic() < deadline, "nodes never answered"
                await asyncio.sleep(0.1)
            for g in names:
                await admin.create(g, replicas=3, wait_leader=False)
            leaders = await _settled(admin, names)
        per_node = {n: sum(1 for leader in leaders.values() if leader == n) for n in nodes}
        assert max(per_node.values()) - min(per_node.values()) <= 1, per_node  # 17/17/16

        clients = {g: Client(cluster.peers, group=g, timeout_ms=15_000, request_timeout_ms=1_000) for g in names}
        try:
            before = await asyncio.gather(*(clients[g].append(b"before-" + g.encode()) for g in names))
            # idle, every group goes quiet (raft/quiescence.py): the kill must be noticed by node liveness
            async with GroupAdmin(nodes, timeout_ms=5_000) as admin:
                deadline = time.monotonic() + 10
                while True:
                    rows = [g for s in (await admin.cluster_status()).values() for g in s["groups"]]
                    if all(r["quiet"] for r in rows):
                        break
                    assert time.monotonic() < deadline, [r["group"] for r in rows if not r["quiet"]]
                    await asyncio.sleep(0.1)
            victim = "n0"
            led_by_victim = [g for g in names if leaders[g] == victim]
            cluster.nodes[victim].kill9()
            t0 = time.monotonic()
            results = await asyncio.gather(*(_write_until_acked(clients[g], b"after-" + g.encode(), t0)
                                             for g in names))
            worst_s = max(s for s, _ in results)
            worst_led = max(s for (s, _), g in zip(results, names) if g in led_by_victim)
            print(f"\nE2E groups {{\"groups\": {GROUPS}, \"led_by_killed\": {len(led_by_victim)}, "
                  f"\"worst_writable_again_s\": {worst_s:.3f}, \"worst_of_its_groups_s\": {worst_led:.3f}}}")
            assert worst_s <= WRITABLE_WITHIN_S, f"a group was not writable for {worst_s:.2f} s"

            # restarted, the node catches every group up: every member holds both entries, once
            cluster.nodes[victim].start()
            deadline = time.monotonic() + 30
            for g, first, (_, second) in zip(names, before, results):
                while True:
                    statuses = {s.id: s for s in await clients[g].status()}
                    if all(s.reachable and s.committed_index >= second for s in statuses.values()):
                        break
                    assert time.monotonic() < deadline, f"{g} never caught up: {statuses}"
                    await asyncio.sleep(0.05)
                for n in nodes:
                    entries = [e async for e in clients[g].read(0, node=n)]
                    bodies = [e.body for e in entries if e.body]
                    assert bodies == [b"before-" + g.encode(), b"after-" + g.encode()], (g, n, bodies)
                    assert entries[first.index].body == b"before-" + g.encode()
        finally:
            await asyncio.gather(*(c.close() for c in clients.values()))

    with cluster:
        try:
            asyncio.run(main())
        except BaseException:
            print(cluster.logs())
            raise
