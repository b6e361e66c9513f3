"""Garbage, connection storms, oversized entries and a full disk against real nodes."""

from __future__ import annotations

import asyncio
import json
import os
import random
import struct
import time
import urllib.request

import pytest

import quorumlog
from quorumlog.codes import ResponseCode
from quorumlog.errors import DiskFull, EntryTooLarge, UnknownGroup
from quorumlog.format.log_entry import decode_records
from quorumlog.transport import ClientConnection
from quorumlog.transport.handshake import Hello, Role as HelloRole, decode_hello_error, encode_hello
from quorumlog.transport.kinds import Kind
from quorumlog.wire.client import AppendRequest, ReadRequest

from quorumlog.soak.processes import Cluster, fill_to_last_byte

from .harness import History, check_logs, writer

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


def _report(name: str, **numbers) -> None:
    print(f"\nE2E {name} " + json.dumps(numbers, sort_keys=True))


def _metric(http_port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=5) as r:
        text = r.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def _garbage_connection(port: int, kind: int, rng: random.Random) -> str:
    """One misbehaving connection; returns how it ended ("closed" when the node hung up)."""
    try:
        reader, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5)
    except (OSError, asyncio.TimeoutError):
        return "refused"
    try:
        if kind == 0:
            w.write(rng.randbytes(rng.randint(1, 4096)))  # random bytes
        elif kind == 1:
            w.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")  # wrong protocol: a huge "length"
        elif kind == 2:
            w.write(struct.pack(">IB", 0xFFFFFFF0, 1))  # absurd length prefix
        elif kind == 3:
            w.write(struct.pack(">IB", 100, 1) + b"half")  # half a frame, then silence
        # kind 4: connect and never say anything (handshake timeout)
        await w.drain()
        data = await asyncio.wait_for(reader.read(1 << 16), 15)
        while data:
            data = await asyncio.wait_for(reader.read(1 << 16), 15)
        return "closed"
    except asyncio.TimeoutError:
        return "open"
    except OSError:
        return "closed"
    finally:
        w.close()


async def _peer_hello(port: int, group: str, node_id: str) -> ResponseCode:
    """Handshake as a peer; the node's answer code (SUCCESS for HELLO_OK)."""
    reader, w = await asyncio.open_connection("127.0.0.1", port)
    try:
        w.write(encode_hello(Hello(group, node_id, HelloRole.PEER)))
        head = await asyncio.wait_for(reader.readexactly(5), 5)
        length, kind = struct.unpack(">IB", head)
        payload = await asyncio.wait_for(reader.readexactly(length - 1), 5)
        if kind == Kind.HELLO_OK:
            return ResponseCode.SUCCESS
        assert kind == Kind.HELLO_ERROR
        return ResponseCode(decode_hello_error(memoryview(payload)).code)
    finally:
        w.close()


def test_garbage_and_a_connection_storm_leave_the_cluster_serving(tmp_path):
    async def main(cluster: Cluster):
        history = History()
        async with cluster.client() as admin:
            leader = await cluster.wait_leader(admin)
            node = cluster.nodes[leader]
            stop = asyncio.Event()
            clients = [cluster.client() for _ in range(2)]
            writers = [asyncio.create_task(writer(c, f"w{i}", history, stop)) for i, c in enumerate(clients)]
            while len(history.acked) < 50:
                await asyncio.sleep(0.01)
            rss_before = node.rss_bytes()
            rng = random.Random(7)
            t0 = time.monotonic()
            acked_before = len(history.acked)
            outcomes: dict[str, int] = {}
            for wave in range(3):  # 3 waves of 150 misbehaving connections, at the leader and a follower
                port = node.port if wave != 1 else next(n.port for n in cluster.nodes.values() if n.node_id != leader)
                results = await asyncio.gather(*(_garbage_connection(port, i % 5, rng) for i in range(150)))
                for r in results:
                    outcomes[r] = outcomes.get(r, 0) + 1
            storm_s = time.monotonic() - t0
            acked_during = len(history.acked) - acked_before
            stop.set()
            await asyncio.wait_for(asyncio.gather(*writers), 30)
            for c in clients:
                await c.close()
            rss_after = node.rss_bytes()
            assert all(n.alive for n in cluster.nodes.values())
            assert acked_during > 0, "no write succeeded during the storm"
            assert outcomes.get("open", 0) == 0, f"connections left open: {outcomes}"
            closes = _metric(node.http_port, "quorumlog_protocol_error_closes_total")
            assert closes > 0
            # a wrong group is refused by name, and so is a peer that is not a member
            try:
                await ClientConnection.open("127.0.0.1", node.port, group="other", client_name="x")
                raise AssertionError("wrong group accepted")
            except UnknownGroup:
                pass
            assert await _peer_hello(node.port, "default", "intruder") == ResponseCode.UNKNOWN_MEMBER
            assert await _peer_hello(node.port, "other", "n1") == ResponseCode.UNKNOWN_GROUP
            await cluster.wait_converged(admin)
            check_logs(history, await cluster.committed_logs(admin))
            _report("garbage_storm", connections=450, outcomes=outcomes, storm_s=round(storm_s, 2),
                    acked_during_storm=acked_during, rss_before_mb=round(rss_before / 2**20, 1),
                    rss_after_mb=round(rss_after / 2**20, 1), protocol_error_closes=closes)
            assert rss_after - rss_before < 200 * 2**20, "memory grew by more than 200 MiB"

    with Cluster(str(tmp_path), extra_args=("--handshake-timeout-ms", "1000")) as cluster:
        asyncio.run(main(cluster))


def test_oversized_and_empty_appends_are_refused(tmp_path):
    async def main(cluster: Cluster):
        async with cluster.client() as client:
            leader = await cluster.wait_leader(client)
            limit = 1024 * 1024  # harness NODE_ARGS --max-entry-bytes
            ok = await client.append(b"x" * limit)
            with pytest.raises(EntryTooLarge):
                await client.append(b"x" * (limit + 1))
            conn = await ClientConnection.open("127.0.0.1", cluster.nodes[leader].port, group="default",
                                               client_name="raw")
            r = await conn.call(AppendRequest(1, ()), 5_000)
            assert r.code == ResponseCode.REQUEST_WITH_EMPTY_BODYS
            r = await conn.call(AppendRequest(2, (b"a", b"y" * (limit + 1))), 5_000)
            assert r.code == ResponseCode.ENTRY_TOO_LARGE
            r = await conn.call(ReadRequest(3, start=0), 5_000)
            assert r.code == ResponseCode.SUCCESS
            assert [e.body for e in decode_records(b"".join(r.records.chunks)) if e.body] == [b"x" * limit]
            await conn.close()
            after = await client.append(b"after")
            assert after.index == ok.index + 1  # nothing of the refused batches took an index
            await cluster.wait_converged(client)
            logs = await cluster.committed_logs(client)
            assert all([e.body for e in log if e.body] == [b"x" * limit, b"after"] for log in logs.values())

    with Cluster(str(tmp_path)) as cluster:
        asyncio.run(main(cluster))


@pytest.fixture
def small_disks(tmpfs):
    """Three 12 MiB tmpfs mounts (real ENOSPC), unmounted afterwards; skipped when mount is not allowed."""
    return {f"n{i}": tmpfs("12M") for i in range(3)}


def test_full_disk_refuses_appends_with_disk_full_while_reads_work(tmp_path, small_disks):
    async def main(cluster: Cluster):
        history = History()
        body = b"f" * 64 * 1024
        async with cluster.client(timeout_ms=5_000) as client:
            await cluster.wait_leader(client)
            codes: dict[str, int] = {}
            disk_full_at = None
            for i in range(400):  # 400 × 64 KiB = 25 MiB > 12 MiB
                b = b"%06d" % i + body
                try:
                    r = await client.append(b)
                    history.acked[b] = r.index
                except quorumlog.QuorumLogError as e:
                    codes[e.code.name] = codes.get(e.code.name, 0) + 1
                    if isinstance(e, DiskFull):
                        disk_full_at = i
                        break
            assert disk_full_at is not None, f"never DISK_FULL: {codes}"
            # the nodes stay up, and every replica still serves its committed log
            assert all(n.alive for n in cluster.nodes.values())
            # A full-disk leader hands leadership to a caught-up follower (raft core, 33f7573): the next append
            # is refused with DISK_FULL, or acknowledged by a new leader that still had room; either way
            # nothing acknowledged may be lost (checked below).
            handed_over = False
            try:
                r = await client.append(b"still-full")
            except DiskFull:
                pass
            else:
                history.acked[b"still-full"] = r.index
                handed_over = True  # the full node may never hold it: its committed log may stay shorter
            # a node may hold an uncommitted tail its peers had no room for: compare committed logs only.
            # Every node up and in a settled role (a full-disk leader's hand-over passes through candidate).
            deadline = time.monotonic() + 15
            while True:
                st = await cluster.statuses(client)
                if (handed_over or len({s.committed_index for s in st.values()}) == 1) \
                        and all(s.role in ("leader", "follower") for s in st.values()):
                    break
                assert time.monotonic() < deadline, {k: (v.role, v.committed_index) for k, v in st.items()}
                await asyncio.sleep(0.05)
            logs = await cluster.committed_logs(client)
            ref = check_logs(history, logs, must_be_equal=not handed_over)
            status = {nid: s for nid, s in st.items()}
            _report("disk_full", acked=len(history.acked), disk_full_after_entries=disk_full_at,
                    log_len=len(ref), other_codes=codes,
                    free_bytes=[os.statvfs(d).f_bavail * os.statvfs(d).f_frsize for d in small_disks.values()])
            assert all(s.role in ("leader", "follower") for s in status.values())

    args = ("--data-segment-size", str(2 * 1024 * 1024), "--index-segment-size", str(64 * 1024),
            "--max-entry-bytes", str(256 * 1024))
    with Cluster(str(tmp_path), extra_args=args, data_dirs=small_disks) as cluster:
        asyncio.run(main(cluster))


def test_a_member_whose_disk_is_full_to_the_last_byte_still_votes_and_catches_up_once_space_returns(tmp_path, tmpfs):
    """n2's data dir on a tmpfs filled to the last byte; the leader (not n2) killed. The survivor needs n2's vote: n2 must persist a term and vote with no free block (it fail-stopped there when a
    save was write-tmp-and-rename). Appends wait (n2 cannot store them) until the filler goes; then every
    acknowledged entry is on both."""
    disk = tmpfs("12M")

    async def main(cluster: Cluster):
        history = History()
        async with cluster.client(timeout_ms=3_000) as client:
            leader = await cluster.wait_leader(client)
            if leader == "n2":  # (a full leader would hand over at its next append: a path of its own)
                await client.transfer_leader("n0")
                leader = await cluster.wait_leader(client, exclude=("n2",))
            for i in range(20):
                b = b"before-%d" % i
                history.acked[b] = (await client.append(b)).index
            before = (await cluster.statuses(client))["n2"].term
            filler = os.path.join(disk, "filler")
            fill_to_last_byte(filler)
            cluster.nodes[leader].kill9()
            survivor = next(n for n in ("n0", "n1") if n != leader)
            # a new leader (the survivor: n2 cannot win while it fails to append) needs n2's vote
            deadline = time.monotonic() + 20
            while True:
                st = await cluster.statuses(client)
                if st[survivor].role == "leader" and st["n2"].term == st[survivor].term > before:
                    break
                assert cluster.nodes["n2"].alive, cluster.nodes["n2"].log_text()[-3000:]
                assert time.monotonic() < deadline, cluster.describe(st)
                await asyncio.sleep(0.05)
            assert cluster.nodes["n2"].alive
            os.unlink(filler)
            deadline = time.monotonic() + 30
            while True:
                try:
                    r = await client.append(b"after")
                    history.acked[b"after"] = r.index
                    break
                except quorumlog.QuorumLogError:
                    assert time.monotonic() < deadline, cluster.describe(await cluster.statuses(client))
                    await asyncio.sleep(0.1)
            await cluster.wait_converged(client, members=(survivor, "n2"))
            check_logs(history, await cluster.committed_logs(client, members=(survivor, "n2")))
            _report("full_member_votes", term_before=before, term_after=st[survivor].term)

    args = ("--data-segment-size", str(2 * 1024 * 1024), "--index-segment-size", str(64 * 1024))
    with Cluster(str(tmp_path), extra_args=args, data_dirs={"n2": disk}) as cluster:
        asyncio.run(main(cluster))
