"""The runtime alone: a stand-in core (one-node leader) and transport, a real MemoryStore, real time."""

import asyncio
import json

import pytest

from quorumlog.codes import ResponseCode
from quorumlog.config import load_config
from quorumlog.raft.types import ClientAppend, Durable, Stored
from quorumlog.server.raft_group.hard_state import load_hard_state
from quorumlog.server.node import Node
from quorumlog.store import MemoryStore
from quorumlog.format.log_entry import decode_records
from quorumlog.wire.client import (
    AppendRequest, ReadRequest, StatusRequest, TransferLeaderRequest,
)

from .fakes import FakeSession, FakeTransport, SoloCore


def _config(tmp_path, **kw):
    flags = {"node_id": "n0", "peers": "n0=127.0.0.1:7001,n1=127.0.0.1:7002", "data_dir": str(tmp_path),
             "max_entry_bytes": "1000", **kw}
    return load_config(flags=flags, env={})


async def _until(pred, timeout_s=5.0):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not pred():
        assert loop.time() < deadline, "condition not reached"
        await asyncio.sleep(0.002)


async def _started(tmp_path, **kw):
    transport = FakeTransport()
    store = MemoryStore(max_entry_bytes=1000)
    node = Node(_config(tmp_path, **kw), store=store, core_factory=SoloCore, transport=transport)
    await node.start()
    return node, transport, store


@pytest.mark.parametrize("flush", ["sync", "async"])
def test_append_is_answered_after_durable_and_readable(tmp_path, flush):
    async def main():
        node, transport, store = await _started(tmp_path, flush=flush)
        core = node.default.core
        s = FakeSession()
        transport.on_client_request(s, AppendRequest(41, (b"a", b"b")))
        transport.on_client_request(s, AppendRequest(42, (b"c",)))
        await _until(lambda: len(s.responses) == 2)
        assert [(r.request_id, r.code, r.first_index, r.last_index) for r in s.responses] == [
            (41, ResponseCode.SUCCESS, 0, 1), (42, ResponseCode.SUCCESS, 2, 2)]
        # Stored came right after each write; Durable only after a flush in sync mode
        kinds = [type(e).__name__ for e in core.events if not type(e).__name__ == "Tick"]
        assert kinds[:2] == ["ClientAppend", "Stored"]
        assert store.durable_index == 2 or flush == "async"
        assert store.committed_index == 2
        transport.on_client_request(s, ReadRequest(43, start=0))
        await _until(lambda: len(s.responses) == 3)
        r = s.responses[-1]
        assert [e.body for e in decode_records(b"".join(r.records.chunks))] == [b"a", b"b", b"c"]
        await node.stop()
        assert transport.closed
    asyncio.run(main())


def test_hard_state_is_on_disk_before_messages_go_out(tmp_path):
    async def main():
        node, transport, _ = await _started(tmp_path)
        await _until(lambda: transport.sent)
        assert transport.sent == ["hello-peer"]
        assert load_hard_state(str(tmp_path)).term == 1 and load_hard_state(str(tmp_path)).voted_for == "n0"
        await node.stop()
    asyncio.run(main())


def test_bad_input_is_refused_before_the_core(tmp_path):
    async def main():
        node, transport, _ = await _started(tmp_path)
        s = FakeSession()
        transport.on_client_request(s, AppendRequest(1, ()))
        transport.on_client_request(s, AppendRequest(2, (b"x" * 1001,)))
        assert [r.code for r in s.responses] == [ResponseCode.REQUEST_WITH_EMPTY_BODYS, ResponseCode.ENTRY_TOO_LARGE]
        assert not any(isinstance(e, ClientAppend) for e in node.default.core.events)
        transport.on_client_request(s, AppendRequest(3, (b"x" * 1000,)))  # exactly the limit is fine
        await _until(lambda: len(s.responses) == 3)
        assert s.responses[-1].code == ResponseCode.SUCCESS
        await node.stop()
    asyncio.run(main())


def test_a_batch_that_no_push_frame_could_carry_is_refused(tmp_path):
    """1,000,000 x 16 B (a 20 MB request) was accepted and stored, but its push (72 MB) was over
    the 64 MiB frame cap, so it could never replicate. A batch whose stored records exceed what one push frame
    carries is refused up front with ENTRY_TOO_LARGE; one that fits is taken."""
    async def main():
        node, transport, _ = await _started(tmp_path, max_frame_bytes=str(2 << 20), max_push_batch_bytes=str(1 << 20))
        s = FakeSession()
        per_entry = 16 + 56  # body + record header
        fits = (node.default.max_batch_stored_bytes - 20) // per_entry
        transport.on_client_request(s, AppendRequest(1, (b"y" * 16,) * (fits + 1)))
        assert [r.code for r in s.responses] == [ResponseCode.ENTRY_TOO_LARGE]
        assert "split it" in s.responses[0].message
        assert not any(isinstance(e, ClientAppend) for e in node.default.core.events)
        transport.on_client_request(s, AppendRequest(2, (b"y" * 16,) * fits))
        await _until(lambda: len(s.responses) == 2)
        assert s.responses[-1].code == ResponseCode.SUCCESS
        await node.stop()
    asyncio.run(main())


def test_disk_full_refuses_appends_but_reads_work(tmp_path):
    async def main():
        node, transport, _ = await _started(tmp_path)
        s = FakeSession()
        transport.on_client_request(s, AppendRequest(1, (b"a",)))
        await _until(lambda: len(s.responses) == 1)
        node.disk_full = True  # as the disk guard would set it
        transport.on_client_request(s, AppendRequest(2, (b"b",)))
        assert s.responses[-1].code == ResponseCode.DISK_FULL
        transport.on_client_request(s, ReadRequest(3, start=0))
        await _until(lambda: len(s.responses) == 3)
        assert s.responses[-1].code == ResponseCode.SUCCESS and s.responses[-1].records.count == 1
        await node.stop()
    asyncio.run(main())


def test_disk_guard_uses_the_ratio(tmp_path):
    async def main():
        node, transport, _ = await _started(tmp_path, disk_full_ratio="0.0001")
        node._check_disk()
        s = FakeSession()
        transport.on_client_request(s, AppendRequest(1, (b"a",)))
        assert s.responses[-1].code == ResponseCode.DISK_FULL
        assert node.status()["disk"]["full"] is True
        await node.stop()
    asyncio.run(main())


def test_store_write_failure_becomes_store_failed(tmp_path):
    async def main():
        node, transport, store = await _started(tmp_path)

        def full(*a, **k):
            from quorumlog.errors import DiskFull
            raise DiskFull("ENOSPC")
        store.append_batch = full
        s = FakeSession()
        transport.on_client_request(s, AppendRequest(1, (b"a",)))
        await _until(lambda: s.responses)
        assert s.responses[0].code == ResponseCode.DISK_FULL
        assert not any(isinstance(e, (Stored, Durable)) for e in node.default.core.events)
        await node.stop()
    asyncio.run(main())


def test_status_transfer_and_long_poll_follow(tmp_path):
    async def main():
        node, transport, _ = await _started(tmp_path)
        s = FakeSession()
        transport.on_client_request(s, StatusRequest(1))
        doc = json.loads(s.responses[0].status_json)
        assert doc["id"] == "n0" and doc["role"] == "leader" and doc["flush"] == "sync"
        for key in ("term", "leader_id", "begin_index", "end_index", "committed_index", "watermarks",
                    "disk", "pending_requests"):
            assert key in doc
        transport.on_client_request(s, TransferLeaderRequest(2, "n1"))
        transport.on_client_request(s, TransferLeaderRequest(3, "zz"))
        assert [r.code for r in s.responses[1:]] == [ResponseCode.SUCCESS, ResponseCode.UNKNOWN_MEMBER]
        follower = FakeSession()
        transport.on_client_request(follower, ReadRequest(4, start=0, wait_ms=10_000))
        await asyncio.sleep(0.05)
        assert not follower.responses
        transport.on_client_request(s, AppendRequest(5, (b"new",)))
        await _until(lambda: follower.responses)
        assert follower.responses[0].records.first_index == 0
        await node.stop()
    asyncio.run(main())


def test_http_status_and_metrics(tmp_path):
    async def main():
        node, transport, _ = await _started(tmp_path, http_port="0")
        from quorumlog.server.http import HttpServer
        node._http = HttpServer({"/status": node._http_status, "/metrics": node._http_metrics})
        await node._http.start("127.0.0.1", 0)
        s = FakeSession()
        transport.on_client_request(s, AppendRequest(1, (b"abc", b"de")))
        await _until(lambda: s.responses)

        async def get(path):
            r, w = await asyncio.open_connection("127.0.0.1", node._http.port)
            w.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
            data = await asyncio.wait_for(r.read(), 5)
            w.close()
            head, _, body = data.partition(b"\r\n\r\n")
            return head.split(b"\r\n")[0], body

        line, body = await get("/status")
        assert line == b"HTTP/1.1 200 OK" and json.loads(body)["end_index"] == 1
        line, body = await get("/metrics")
        text = body.decode()
        assert 'quorumlog_appends_total{group="default",node="n0"} 2.0' in text
        assert 'quorumlog_append_bytes_total{group="default",node="n0"} 5.0' in text
        assert 'quorumlog_role{group="default",node="n0",role="leader"} 1.0' in text
        assert "quorumlog_fsync_seconds_bucket" in text and "quorumlog_commit_latency_seconds_count" in text
        assert 'quorumlog_peer_lag_entries{group="default",node="n0",peer="n1"}' in text
        line, _ = await get("/nope")
        assert line.startswith(b"HTTP/1.1 404")
        await node.stop()
    asyncio.run(main())


def test_stop_flushes_and_checkpoints(tmp_path):
    async def main():
        node, transport, store = await _started(tmp_path, flush="async")
        s = FakeSession()
        transport.on_client_request(s, AppendRequest(1, (b"a",)))
        await _until(lambda: s.responses)
        await node.stop()
        await node.stop()  # idempotent
        assert store.durable_index == 0 and store._checkpoint_committed == 0
    asyncio.run(main())


def test_retention_uses_the_lowest_watermark_on_a_leader(tmp_path):
    async def main():
        node, transport, store = await _started(tmp_path)
        calls = []
        store.delete_expired = lambda now_ms, safe: calls.append((now_ms, safe)) or 0
        from quorumlog.raft.types import NodeStatus, Role
        node.default.core.status = lambda: NodeStatus("n0", Role.LEADER, 1, "n0", 0, 10, 9, {"n0": 10, "n1": 4})
        await node._retention()
        node.default.core.status = lambda: NodeStatus("n0", Role.FOLLOWER, 1, "n1", 0, 10, 9, {})
        await node._retention()
        assert [safe for _, safe in calls] == [4, 9]
        assert all(now_ms > 1_600_000_000_000 for now_ms, _ in calls)  # wall-clock ms, like segment mtimes
        await node.stop()
    asyncio.run(main())


def test_a_hard_state_that_cannot_be_persisted_stops_the_node_before_sending(tmp_path, monkeypatch):
    async def main():
        import quorumlog.server.raft_group.replica as node_module

        def broken(data_dir, hs):
            raise OSError(28, "No space left on device")
        monkeypatch.setattr(node_module, "save_hard_state", broken)
        node, transport, _ = await _started(tmp_path)
        await asyncio.wait_for(node.fatal.wait(), 5)
        assert "No space left" in node.failed
        assert transport.sent == []  # the message that depended on the vote never left
        await node.stop()
    asyncio.run(main())


def test_an_exception_from_the_core_fail_stops_the_node(tmp_path, monkeypatch):
    """A core that raised may be half-stepped: the node stops instead of stepping it again."""
    async def main():
        node, transport, store = await _started(tmp_path)
        core = node.default.core
        real_step = core.step

        def step(event):
            if isinstance(event, ClientAppend):
                raise RuntimeError("planted core bug")
            return real_step(event)
        monkeypatch.setattr(core, "step", step)
        s = FakeSession()
        transport.on_client_request(s, AppendRequest(41, (b"a",)))
        await asyncio.wait_for(node.fatal.wait(), 5)
        assert "planted core bug" in node.failed
        seen = len(core.events)
        transport.on_client_request(s, AppendRequest(42, (b"b",)))
        await asyncio.sleep(0)
        assert len(core.events) == seen and store.end_index == -1  # never stepped again, nothing written
        await node.stop()
    asyncio.run(main())


def test_a_group_failing_a_peer_message_does_not_reach_the_link_every_group_shares(tmp_path, monkeypatch, caplog):
    """An exception out of one replica's on_peer_message went up into the transport, which closed the peer
    connection (uvloop silently, for an OSError): a full master/slave slave failing its epochs write cut its
    link — `_meta`'s messages with it — at every hello. The node logs it and the link stays."""
    from quorumlog.wire.messages import HeartbeatRequest

    async def main():
        node, transport, _ = await _started(tmp_path)

        def full(msg):
            raise OSError(28, "No space left on device")
        monkeypatch.setattr(node.default, "on_peer_message", full)
        transport.on_peer_message(HeartbeatRequest("n1", "n0", 1, 1))  # (raised before)
        assert "peer message failed" in caplog.text and "No space left" in caplog.text
        await node.stop()
    asyncio.run(main())


def test_loop_lag_records_a_stall_injected_on_the_loop(tmp_path):
    """A blocking call on the loop (here a 300 ms sleep, as a throttled write() would be) shows in /metrics as a
    lag sample in the 0.5 s bucket and as the max, and in the node's status as max and p99.9."""
    import time as _time

    async def main():
        node, _, _ = await _started(tmp_path)
        await _until(lambda: node.loop_lag.lag.samples >= 3)
        assert node.loop_lag.lag.max_ms < 200
        _time.sleep(0.3)  # the stall: nothing else runs on this loop meanwhile
        # (it began somewhere in the sleeper's 20 ms interval: the sleeper oversleeps by 280-300 ms)
        await _until(lambda: node.loop_lag.lag.max_ms >= 280)
        _, body = node._http_metrics()
        text = body.decode()
        max_s = float(text.split('quorumlog_event_loop_lag_max_seconds{node="n0"} ')[1].split()[0])
        assert 0.28 <= max_s < 0.5
        assert 'quorumlog_event_loop_lag_seconds_bucket{le="0.2",node="n0"}' in text
        below, upto = (float(text.split(f'quorumlog_event_loop_lag_seconds_bucket{{le="{le}",node="n0"}} ')[1]
                             .split()[0]) for le in ("0.2", "0.5"))
        assert upto - below == 1.0  # exactly the one stall
        lag = node.status()["loop_lag"]
        assert lag["max_ms"] >= 280 and lag["p999_ms"] >= 280 and lag["paused"] == 0
        await node.stop()
    asyncio.run(main())


def test_status_counts_the_group_directory_off_the_loop(tmp_path, monkeypatch):
    """The status's store_bytes walks the group's directory and stats every file: on a cold inode cache each stat
    waits for the disk, so the walk must not run on the loop thread (it stalled every group of a node)."""
    import threading

    from quorumlog.server import group_files as replica_module

    walked_on = []
    real = replica_module.directory_bytes

    def recording(path):
        walked_on.append(threading.get_ident())
        return real(path)

    monkeypatch.setattr(replica_module, "directory_bytes", recording)

    async def main():
        node, _, _ = await _started(tmp_path)
        loop_thread = threading.get_ident()
        node.status()
        await _until(lambda: walked_on)
        assert loop_thread not in walked_on
        await _until(lambda: node.status()["disk"]["store_bytes"] > 0)  # the count arrives for the next status
        await node.stop()
    asyncio.run(main())


def test_node_status_carries_what_the_composition_root_adds_and_survives_a_failing_part(tmp_path):
    """The runtime adds its front doors' status to node_status; a part whose status raises shows its error
    there, and the node's status still answers."""
    async def main():
        node, _, _ = await _started(tmp_path)
        try:
            node.status_sources["doors"] = lambda: [{"kind": "kafka", "read_ahead": {"started": 2, "taken": 1}}]
            node.status_sources["broken"] = lambda: 1 / 0
            doc = node.node_status()
            assert doc["doors"] == [{"kind": "kafka", "read_ahead": {"started": 2, "taken": 1}}]
            assert doc["broken"] == {"error": "ZeroDivisionError: division by zero"}
            assert doc["id"] == node.config.node_id and doc["groups"]
            json.dumps(doc)
        finally:
            await node.stop()
    asyncio.run(main())
