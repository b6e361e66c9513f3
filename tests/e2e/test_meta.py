"""The `_meta` group with real processes: a client that knows one node finds a group that node does
not host through `_meta`'s record; the key/value store answers linearizable reads and compare-and-set
through a kill -9 of its leader, a watch sees every change once and in order across the
failover; with snapshots and real retention, a member added after the log was deleted installs the leader's
snapshot and ends with the same state."""

from __future__ import annotations

import asyncio
import time

import pytest

from quorumlog.cli.common import Target
from quorumlog.cli.members import add_member
from quorumlog.client import Client
from quorumlog.client.groups import GroupAdmin
from quorumlog.errors import MetadataVersionConflict
from quorumlog.peers import format_address, parse_peers
from quorumlog.soak.processes import Cluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

RETENTION_ARGS = ("--max-entry-bytes", str(16 * 1024), "--file-reserved-hours", "0", "--retention-interval-ms", "100", "--snapshot-every", "50")
SEGMENT_BYTES = 64 * 1024


async def _create_meta(cluster: Cluster, segment_bytes: int | None = None) -> dict[str, dict]:
    nodes = parse_peers(cluster.peers)
    async with GroupAdmin(nodes, timeout_ms=20_000) as admin:
        deadline = time.monotonic() + 30
        while not all(isinstance(s, dict) for s in (await admin.cluster_status()).values()):
            assert time.monotonic() < deadline, "nodes never answered"
            await asyncio.sleep(0.1)
        await admin.create_meta(segment_bytes=segment_bytes)  # as `cluster up` does


async def _meta_rows(cluster: Cluster, nodes: list[str]) -> dict[str, dict]:
    peers = parse_peers(cluster.client_peers)
    async with GroupAdmin({n: peers[n] for n in nodes}, timeout_ms=5_000) as admin:
        statuses = await admin.cluster_status()
    return {n: next(g for g in s["groups"] if g["group"] == "_meta") for n, s in statuses.items()
            if isinstance(s, dict) and any(g["group"] == "_meta" for g in s["groups"])}


def test_kv_is_linearizable_through_a_kill_9_of_its_leader_and_watch_misses_nothing(tmp_path):
    cluster = Cluster(str(tmp_path), n=3)

    async def main() -> None:
        await _create_meta(cluster)
        nodes = parse_peers(cluster.peers)
        async with GroupAdmin(nodes, timeout_ms=20_000) as admin:
            await admin.create("elsewhere", nodes=["n1", "n2"])  # recorded in _meta as groups/elsewhere
        # a client that knows only n0, which does not host the group, finds its members through _meta
        async with Client(f"n0={format_address(nodes['n0'])}", group="elsewhere", timeout_ms=15_000) as c:
            assert (await c.append(b"found")).index >= 0
            assert set(c.peers) == {"n0", "n1", "n2"}
        async with Client(cluster.peers, timeout_ms=15_000, request_timeout_ms=1_000) as client:
            assert await client.kv_put("w/0", b"v0", expected_version=0) == 1
            with pytest.raises(MetadataVersionConflict) as conflict:
                await client.kv_put("w/0", b"again", expected_version=0)
            assert conflict.value.current_version == 1 and not conflict.value.outcome_unknown  # (nothing written)
            # an idempotence key a new client reuses: the retry is applied once and answers the first version
            assert await client.kv_put("idem/k", b"x", client_id=4242, seq=0) == 1
            async with Client(cluster.peers, timeout_ms=15_000) as other:
                assert await other.kv_put("idem/k", b"x", client_id=4242, seq=0) == 1
                assert (await other.kv_get("idem/k"))[1] == 1
                assert await other.kv_put("idem/k", b"y", client_id=4242, seq=1) == 2
            seen = []

            async def watch() -> None:
                async for change in client.kv_watch("w/", revision=-1):
                    seen.append(change)
                    if change.key == "w/end":
                        return

            watcher = asyncio.ensure_future(watch())
            for i in range(1, 20):
                assert await client.kv_put(f"w/{i}", b"v%d" % i) == 1
            leader = next(n for n, row in (await _meta_rows(cluster, list(cluster.nodes))).items()
                          if row["role"] == "leader")
            cluster.nodes[leader].kill9()
            t0 = time.monotonic()
            version = await client.kv_put("w/0", b"after", expected_version=1)  # CAS on the new leader
            failover_s = time.monotonic() - t0
            assert version == 2 and await client.kv_get("w/0") == (b"after", 2)  # read-your-write, linearizable
            for i in range(20, 40):
                await client.kv_put(f"w/{i}", b"v%d" % i)
            await client.kv_delete("w/3")
            await client.kv_put("w/end", b"")
            await asyncio.wait_for(watcher, 20)
            listed = await client.kv_list("w/")
            print(f"\nE2E meta {{\"failover_s\": {failover_s:.3f}, \"changes_watched\": {len(seen)}}}")
        revisions = [c.revision for c in seen]
        assert revisions == sorted(set(revisions)), "a change seen twice or out of order"
        assert [c.key for c in seen if c.value is not None] == (["w/0"] + [f"w/{i}" for i in range(1, 20)] + ["w/0"]
                                                                + [f"w/{i}" for i in range(20, 40)] + ["w/end"])
        assert [c.key for c in seen if c.value is None] == ["w/3"]
        assert {e.key for e in listed} == {f"w/{i}" for i in range(40) if i != 3} | {"w/end"}
        cluster.nodes[leader].start()
        deadline = time.monotonic() + 30
        while True:  # the killed node replays its log into the same state
            rows = await _meta_rows(cluster, list(cluster.nodes))
            sm = {n: (r["state_machine"]["applied_index"], r["state_machine"]["keys"]) for n, r in rows.items()}
            if len(sm) == 3 and len(set(sm.values())) == 1:
                break
            assert time.monotonic() < deadline, sm
            await asyncio.sleep(0.2)

    try:
        cluster.start()
        asyncio.run(main())
    finally:
        cluster.stop()


def test_a_member_added_after_retention_installs_the_leaders_snapshot(tmp_path):
    cluster = Cluster(str(tmp_path), n=3, spares=1, extra_args=RETENTION_ARGS)

    async def main() -> None:
        await _create_meta(cluster, segment_bytes=SEGMENT_BYTES)
        async with Client(cluster.peers, timeout_ms=15_000) as client:
            for i in range(400):  # ~400 KB over 64 KiB segments, overwriting 100 keys
                await client.kv_put(f"k/{i % 100:03d}", b"%d:" % i + b"." * 1000)
            originals = list(cluster.nodes)
            deadline = time.monotonic() + 30
            while True:  # snapshots taken, and retention deleted the log below them
                rows = await _meta_rows(cluster, originals)
                if all(r["begin_index"] > 0 and r["begin_index"] <= r["state_machine"]["snapshot_index"] + 1
                       for r in rows.values()) and len(rows) == 3:
                    break
                assert time.monotonic() < deadline, rows
                await asyncio.sleep(0.2)
            new = cluster.add_node()
            target = Target(parse_peers(cluster.client_peers), "_meta")
            async with GroupAdmin(target.peers, timeout_ms=2_000) as admin:
                deadline = time.monotonic() + 30
                while not isinstance((await admin.cluster_status([new.node_id]))[new.node_id], dict):
                    assert time.monotonic() < deadline, "the new node never answered"
                    await asyncio.sleep(0.1)
            await add_member(target, new.node_id, f"127.0.0.1:{new.port}", 30)
            await client.kv_put("k/last", b"after the new member")
            deadline = time.monotonic() + 30
            while True:  # (every node's bookie registers itself as bookies/ID, the new one's too)
                bookies = len(await client.kv_list("bookies/"))  # (before the rows: they then include all four)
                rows = await _meta_rows(cluster, list(cluster.nodes))
                sm = {n: (r["state_machine"]["applied_index"], r["state_machine"]["keys"]) for n, r in rows.items()}
                if len(sm) == 4 and len(set(sm.values())) == 1 and bookies == 4:
                    break
                assert time.monotonic() < deadline, (sm, bookies)
                await asyncio.sleep(0.2)
            assert rows[new.node_id]["state_machine"]["snapshots_installed"] >= 1
            assert rows[new.node_id]["begin_index"] > 0  # it never had the deleted log
            assert sm[new.node_id][1] == 100 + 1 + 3 + 4  # k/000..099, k/last, nodes/ and bookies/ records
            assert (await client.kv_get("k/099"))[0].startswith(b"399:")
        assert "installed a snapshot" in new.log_text()

    try:
        cluster.start()
        asyncio.run(main())
    finally:
        cluster.stop()


def test_a_preferred_leader_that_needs_a_snapshot_installs_it_before_it_leads(tmp_path):
    """`_meta`'s preferred leader P is killed; the others write on and the follower F deletes its log below
    P's end (its retention keeps only what its snapshot covers). Then the leader is killed and P comes back:
    F leads, resets P, and P needs a snapshot. Handed leadership then (it is the preferred leader, its log
    caught up), it would ask itself for that snapshot forever and `_meta` would answer no write: it refuses
    leadership until it installed F's snapshot, then takes it."""
    cluster = Cluster(str(tmp_path), n=3, extra_args=RETENTION_ARGS)

    async def main() -> None:
        await _create_meta(cluster, segment_bytes=SEGMENT_BYTES)
        rows = await _meta_rows(cluster, list(cluster.nodes))
        preferred = next(r["preferred_leader_id"] for r in rows.values() if r["preferred_leader_id"])
        others = [n for n in cluster.nodes if n != preferred]
        async with Client(cluster.peers, timeout_ms=15_000) as client:
            await client.kv_put("k/first", b"before")
            deadline = time.monotonic() + 20
            while (await _meta_rows(cluster, [preferred]))[preferred]["role"] != "leader":
                assert time.monotonic() < deadline, "the preferred leader never led"
                await asyncio.sleep(0.1)
            p_end = (await _meta_rows(cluster, [preferred]))[preferred]["end_index"]
            cluster.nodes[preferred].kill9()
        async with Client(cluster.peers_without(preferred), timeout_ms=15_000) as client:
            for i in range(400):
                await client.kv_put(f"k/{i % 100:03d}", b"%d:" % i + b"." * 1000)
            deadline = time.monotonic() + 30
            while True:
                rows = await _meta_rows(cluster, others)
                leader = next((n for n, r in rows.items() if r["role"] == "leader"), None)
                follower = next((n for n in others if n != leader), None)
                if leader and rows[follower]["begin_index"] > p_end + 1:
                    break
                assert time.monotonic() < deadline, ("the follower's retention never passed P's end", p_end, rows)
                await client.kv_put("k/tick", b"x")
                await asyncio.sleep(0.2)
        cluster.nodes[leader].kill9()
        cluster.nodes[preferred].start()
        async with Client(cluster.peers_without(leader), timeout_ms=15_000, request_timeout_ms=3_000) as client:
            deadline = time.monotonic() + 40
            i = 0
            while True:  # every write is answered while P installs its snapshot and then takes leadership
                i += 1
                await client.kv_put("k/after", b"%d" % i)
                rows = await _meta_rows(cluster, [preferred, follower])
                p = rows.get(preferred)
                if p and p["role"] == "leader" and p["state_machine"]["snapshots_installed"] >= 1:
                    break
                assert time.monotonic() < deadline, (preferred, {n: (r["role"], r["begin_index"], r["end_index"],
                                                                     r["state_machine"]) for n, r in rows.items()})
                await asyncio.sleep(0.2)
            await client.kv_put("k/last", b"led by the preferred leader")
            assert (await client.kv_get("k/099"))[0].startswith(b"399:")
        assert "installed a snapshot" in cluster.nodes[preferred].log_text()  # (it was reset)

    try:
        cluster.start()
        asyncio.run(main())
    finally:
        cluster.stop()
