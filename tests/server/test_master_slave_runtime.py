"""A master/slave group's master in the node runtime (server/master_slave/member.py), in process with a real store and
fsyncs, fed the messages a misbehaving or lagging slave sends: the RocketMQ bug reports the master must survive."""

from __future__ import annotations

import asyncio
from typing import Any

from quorumlog.codes import ResponseCode
from quorumlog.config import NodeConfig
from quorumlog.server.flush_thread import FsyncWorker
from quorumlog.server.master_slave.member import MasterSlaveReplica
from quorumlog.server.metrics import NodeMetrics
from quorumlog.clock import monotonic_ms as now_ms
from quorumlog.wire.client import AppendRequest, ReadRequest
from quorumlog.wire.messages import HaEpochs, HaReport, HaTransfer

PEERS = {"n0": ("127.0.0.1", 1), "n1": ("127.0.0.1", 2), "n2": ("127.0.0.1", 3)}


class _Host:
    """What the replica asks of its node: sends are kept, tasks run on the loop, the controller is absent."""

    def __init__(self) -> None:
        self.metrics = NodeMetrics("n0")
        self.fsync_worker = FsyncWorker()
        self.sent: list[Any] = []
        self.disk_full = False
        self.tasks: list[asyncio.Task] = []
        self.stopping_event = asyncio.Event()
        self.failed: str | None = None

    def spawn(self, coro: Any, name: str) -> None:
        if name.startswith("ha-heartbeat"):
            coro.close()  # (no controller here: the test hands the replica its views)
            return
        self.tasks.append(asyncio.ensure_future(coro))

    def send(self, group: str, msg: Any) -> None:
        self.sent.append(msg)

    def flush_transport(self) -> None:
        pass

    def fail_stop(self, reason: str) -> None:
        self.failed = reason


class _Session:
    def __init__(self) -> None:
        self.responses: list[Any] = []

    def send(self, response: Any) -> None:
        self.responses.append(response)


async def _master(tmp_path, file_reserved_hours: float = 72.0, sync_state_set: tuple = ("n0", "n1"),
                  **settings) -> tuple[MasterSlaveReplica, _Host]:
    host = _Host()
    cfg = NodeConfig(node_id="n0", peers=dict(PEERS), data_dir=str(tmp_path / "n0"), group="ms",
                     data_segment_size=1 << 20, index_segment_size=32 * 1024, max_entry_bytes=256 * 1024,
                     file_reserved_hours=file_reserved_hours)
    r = MasterSlaveReplica(host, cfg, {"master_slave": {"master": "n0", "min_in_sync_replicas": 2, **settings}})
    r.open()
    r.start()
    r.term.altered_at_ms = now_ms() + 3_600_000  # (no controller here: the set stays the view's, never proposed anew)
    r._on_view({"master": "n0", "epoch": 1, "sync_state_set": list(sync_state_set), "lease_ms": 60_000}, now_ms())
    assert r.is_master
    return r, host


async def _append(r: MasterSlaveReplica, body: bytes, request_id: int = 1) -> _Session:
    s = _Session()
    r.on_client_request(s, AppendRequest(request_id, (body,), 0, -1))
    await _until(lambda: s.responses)  # (after its fsync)
    return s


async def _until(check, r: MasterSlaveReplica | None = None, timeout_s: float = 5.0) -> None:
    """Until check() holds (fsyncs finish on their thread, pumps on the loop), ticking the replica's clock."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "condition never held"
        if r is not None:
            r.tick(now_ms())
        await asyncio.sleep(0.005)


def _frames(host: _Host, kind: type) -> list:
    return [m for m in host.sent if isinstance(m, kind)]


async def _append_sent_to_n1(r: MasterSlaveReplica, host: _Host) -> tuple[_Session, list]:
    """Slave n1 connects (hello, its first report: it holds nothing); one append; the data frames sent to it."""
    r.on_peer_message(HaReport("n1", "n0", 1, 0, hello=True))
    r.on_peer_message(HaReport("n1", "n0", 1, 0))
    s = _Session()
    r.on_client_request(s, AppendRequest(1, (b"y" * 100,), 0, -1))
    await _until(lambda: any(m.data for m in _frames(host, HaTransfer)))
    return s, [m for m in _frames(host, HaTransfer) if m.data]


def test_a_report_beyond_the_masters_end_is_never_an_ack(tmp_path):
    """RocketMQ #1155/#3015: a slave claiming bytes the master never wrote must not complete a SYNC_MASTER
    append; the master drops that session, and the append fails with FLUSH_SLAVE_TIMEOUT."""
    async def main() -> None:
        r, host = await _master(tmp_path, slave_timeout_ms=300)
        r.on_peer_message(HaReport("n1", "n0", 1, 0, hello=True))
        assert _frames(host, HaEpochs)  # the handshake's answer
        r.on_peer_message(HaReport("n1", "n0", 1, 0))  # its first report: it holds nothing
        s = _Session()
        r.on_client_request(s, AppendRequest(1, (b"x" * 100,), 0, -1))
        r.on_peer_message(HaReport("n1", "n0", 1, 10_000_000))  # far beyond our end
        await _until(lambda: s.responses, r)  # (slave_timeout_ms, on the replica's ticks)
        assert [m.code for m in s.responses] == [ResponseCode.FLUSH_SLAVE_TIMEOUT]
        assert r._connections["n1"].closed and "beyond the master's end" in r._connections["n1"].closed
        assert r.status()["confirm_offset"] == 0  # nothing counted as held by n1
        await r.close()
    asyncio.run(main())


def test_an_honest_slave_completes_the_append_and_moves_the_confirm_offset(tmp_path):
    """The control case of the test above: a report of exactly the bytes sent completes the append."""
    async def main() -> None:
        r, host = await _master(tmp_path)
        s, sent = await _append_sent_to_n1(r, host)
        assert sent[0].offset == 0
        end = sent[-1].offset + len(sent[-1].data)
        r.on_peer_message(HaReport("n1", "n0", 1, end))
        await _until(lambda: s.responses)
        assert [m.code for m in s.responses] == [ResponseCode.SUCCESS]
        assert r.status()["confirm_offset"] == end == r.store.write_position
        await r.close()
    asyncio.run(main())


def test_an_idle_slave_learns_the_new_confirm_offset_on_the_next_tick_not_the_next_heartbeat(tmp_path):
    """The data frame carried the confirm offset before the slave's report moved it: the next tick sends the
    new one in a heartbeat frame at the slave's own end (any other offset would drop its session), once."""
    async def main() -> None:
        r, host = await _master(tmp_path)  # (heartbeat interval 5 s)
        s, data = await _append_sent_to_n1(r, host)
        end = data[-1].offset + len(data[-1].data)
        assert data[-1].confirm_offset < end
        r.on_peer_message(HaReport("n1", "n0", 1, end))
        await _until(lambda: s.responses and r.status()["confirm_offset"] == end)
        host.sent.clear()
        r.tick(now_ms())
        r.tick(now_ms())
        beats = _frames(host, HaTransfer)
        assert [(m.to, m.offset, m.confirm_offset, bytes(m.data)) for m in beats] == [("n1", end, end, b"")]
        await r.close()
    asyncio.run(main())


def test_a_slave_whose_offset_retention_deleted_is_reset_not_left_heartbeating(tmp_path):
    """RocketMQ #3388: a slave asking for bytes the master no longer holds is told where the master's log now
    begins (a reset), instead of an endless exchange of heartbeats."""
    async def main() -> None:
        r, host = await _master(tmp_path, min_in_sync_replicas=1)
        for i in range(40):  # several 1 MiB segments
            await _append(r, bytes([i]) * 100_000, request_id=i + 1)
        r.store.set_committed_index(r.store.end_index)
        removed = r.store.delete_expired(10**15, r.store.end_index)
        assert removed >= 1 and r.store.first_position() > 0
        r.on_peer_message(HaReport("n1", "n0", 1, 0, hello=True))
        r.on_peer_message(HaReport("n1", "n0", 1, 100))  # an offset that is gone
        resets = [m for m in _frames(host, HaTransfer) if m.reset]
        assert resets and resets[-1].offset == r.store.first_position()
        await r.close()
    asyncio.run(main())


def test_retention_keeps_what_a_connected_slave_still_needs(tmp_path):
    """Old segments go once committed, but never below the offset a connected slave holds — also one outside
    the SyncStateSet, which the commit point does not wait for."""
    async def main() -> None:
        r, host = await _master(tmp_path, file_reserved_hours=0.0, sync_state_set=("n0",), min_in_sync_replicas=1)
        r.on_peer_message(HaReport("n1", "n0", 1, 0, hello=True))
        r.on_peer_message(HaReport("n1", "n0", 1, 0))
        for i in range(40):  # several 1 MiB segments
            await _append(r, bytes([i]) * 100_000, request_id=i + 1)
        slave_at = r.store.position_after(15)  # the slave holds entries 0..15, in the second segment
        r.on_peer_message(HaReport("n1", "n0", 1, slave_at))
        await _until(lambda: r.store.committed_index == r.store.end_index)  # (n1 is not in the set)
        await r.retention()
        assert r.store.committed_index == r.store.end_index  # (n1 is not in the set: all is committed)
        assert 0 < r.store.first_position() <= slave_at  # the first segment went; n1's next byte stayed
        assert r.store.begin_index <= 16
        r.on_peer_message(HaReport("n1", "n0", 1, r.store.write_position))  # caught up
        await r.retention()
        assert r.store.first_position() > slave_at and r.store.begin_index > 16
        await r.close()
    asyncio.run(main())


def test_settings_refuse_what_cannot_work():
    from quorumlog.server.master_slave.member import MasterSlaveSettings
    members = ["n0", "n1", "n2"]
    s = MasterSlaveSettings.from_definition({"master_slave": {"ha_send_heartbeat_interval_ms": 200,
                                                              "ha_housekeeping_interval_ms": 1_000}}, members)
    assert (s.master, s.ack, s.ha_housekeeping_interval_ms) == ("n0", "sync", 1_000)
    for bad, why in [({"master": "n9"}, "not a member"), ({"ack": "maybe"}, "ack must be"),
                     ({"min_in_sync_replicas": 4}, "must be 1..3"), ({"colour": 1}, "unknown master_slave keys"),
                     ({"ha_housekeeping_interval_ms": 1_000}, "below ha_housekeeping_interval_ms")]:
        try:
            MasterSlaveSettings.from_definition({"master_slave": bad}, members)
        except ValueError as e:
            assert why in str(e), (bad, e)
        else:
            raise AssertionError(f"{bad} accepted")


def test_two_slaves_holding_an_append_complete_it_before_the_masters_own_fsync(tmp_path):
    """SYNC_MASTER with min_in_sync_replicas 2 of {n0, n1, n2}: like a Raft group's majority, any two members
    holding the append durably complete it — here both slaves, while the master's fsync has not run; one slave
    alone does not. The confirm offset (what readers see) waits for the master's fsync too."""
    async def main() -> None:
        r, host = await _master(tmp_path, sync_state_set=("n0", "n1", "n2"))
        for n in ("n1", "n2"):
            r.on_peer_message(HaReport(n, "n0", 1, 0, hello=True))
            r.on_peer_message(HaReport(n, "n0", 1, 0))
        r.committer.written = lambda end_index: None  # (the master's fsync never starts)
        s = _Session()
        r.on_client_request(s, AppendRequest(1, (b"z" * 100,), 0, -1))
        await _until(lambda: any(m.data for m in _frames(host, HaTransfer)), r)
        end = r.store.write_position
        assert r.committer.durable_index < r.store.end_index
        r.on_peer_message(HaReport("n1", "n0", 1, end))
        r.tick(now_ms())  # (the pump that would complete it, driven here rather than waited for)
        assert s.responses == [], "one slave and an unsynced master are not two members holding it"
        r.on_peer_message(HaReport("n2", "n0", 1, end))
        await _until(lambda: s.responses, r)
        assert [m.code for m in s.responses] == [ResponseCode.SUCCESS]
        # Readers do not see it before the master's own fsync: both slaves may die while the master loses power,
        # and the controller would elect it again without the append (a topic would hand its offset out again).
        assert r.status()["confirm_offset"] < end and r.store.committed_index < r.store.end_index
        await r.close()
    asyncio.run(main())


def test_a_lost_link_ends_the_slaves_session_and_the_next_append_is_refused_at_once(tmp_path):
    """node.py's peer_gone: the master drops that slave's session now (as RocketMQ's HAConnection ends with its
    socket), so an append is refused with SLAVE_NOT_AVAILABLE instead of waiting for FLUSH_SLAVE_TIMEOUT."""
    async def main():
        r, host = await _master(tmp_path, slave_timeout_ms=60_000)
        s, _ = await _append_sent_to_n1(r, host)
        r.peer_gone("n2")  # (not a slave in session: nothing changes)
        assert not r._connections["n1"].closed
        r.peer_gone("n1")
        assert r._connections["n1"].closed
        refused = _Session()
        r.on_client_request(refused, AppendRequest(2, (b"z",), 0, -1))
        await _until(lambda: refused.responses)
        assert refused.responses[0].code == ResponseCode.SLAVE_NOT_AVAILABLE
        r.on_peer_message(HaReport("n1", "n0", 1, 0, hello=True))  # it links again: a new session
        assert not r._connections["n1"].closed
        await r.close()
    asyncio.run(main())


def test_a_slave_that_cannot_write_its_epochs_stays_out_of_session_without_raising(tmp_path, monkeypatch):
    """A full slave's epochs write at a session's start raised out of on_peer_message, into the transport,
    which closed the link every group shares. Now the session just does not begin; it does once space returns."""
    import quorumlog.server.master_slave.member as ms

    async def main():
        host = _Host()
        cfg = NodeConfig(node_id="n1", peers=dict(PEERS), data_dir=str(tmp_path / "n1"), group="ms",
                         data_segment_size=1 << 20, index_segment_size=32 * 1024, max_entry_bytes=256 * 1024)
        r = ms.MasterSlaveReplica(host, cfg, {"master_slave": {"master": "n0", "min_in_sync_replicas": 2}})
        r.open()
        r.start()
        r._on_view({"master": "n0", "epoch": 1, "sync_state_set": ["n0", "n1"], "lease_ms": 60_000}, now_ms())
        assert not r.is_master
        real = ms.write_json_durably

        def full(path, doc):
            raise OSError(28, "No space left on device")
        monkeypatch.setattr(ms, "write_json_durably", full)
        epochs = HaEpochs("n0", "n1", 1, 0, ((1, 0),))
        r.on_peer_message(epochs)  # (raised before)
        assert not r._client.connected and not any(isinstance(m, HaReport) and not m.hello for m in host.sent)
        monkeypatch.setattr(ms, "write_json_durably", real)
        r.on_peer_message(epochs)
        assert r._client.connected and any(isinstance(m, HaReport) and not m.hello for m in host.sent)
        await r.close()
    asyncio.run(main())


def test_the_node_checkpoint_can_release_a_master_slave_groups_read_pages(tmp_path):
    """Node._checkpoint asks every group to release its read pages; a master/slave group had no such method, so
    the checkpoint raised on every node hosting one and the bookie journal's checkpoint never ran."""
    async def main():
        r, _ = await _master(tmp_path)
        r.release_read_pages()  # (AttributeError before)
        await r.close()
    asyncio.run(main())


class _FlakyController:
    """The controller calls of a node: the first heartbeat raises what uvloop raises on a transport the peer
    already closed; every later one answers that this member is master with a lease."""

    def __init__(self) -> None:
        self.calls = 0

    async def ha_controller(self, op: str, body: dict, timeout_ms: float = 0) -> dict:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("unable to perform operation on <TCPTransport closed=True>; the handler is closed")
        return {"master": "n0", "epoch": 1, "sync_state_set": ["n0"], "lease_ms": 60_000}


def test_the_controller_heartbeat_loop_outlives_an_unexpected_error(tmp_path):
    """A RuntimeError out of the controller call ended the heartbeat task for good: the member never took a
    lease again (0 writes for as long as the fault lasted, two members claiming master). Now it backs off and
    asks again."""
    async def main():
        host = _Host()
        host.calls = _FlakyController()
        cfg = NodeConfig(node_id="n0", peers=dict(PEERS), data_dir=str(tmp_path / "n0"), group="ms",
                         data_segment_size=1 << 20, index_segment_size=32 * 1024, max_entry_bytes=256 * 1024)
        r = MasterSlaveReplica(host, cfg, {"master_slave": {"master": "n0", "min_in_sync_replicas": 1}})
        r.open()
        r.start()
        beat = asyncio.ensure_future(r._heartbeats())
        await _until(lambda: r.term.holds_lease(now_ms()) or beat.done())
        assert not beat.done() and host.calls.calls >= 2
        r.begin_stop()
        await asyncio.wait_for(beat, 5)
        await r.close()
    asyncio.run(main())


def test_a_master_without_a_lease_opens_no_session(tmp_path):
    """Found by the switch simulator: a master back from a power cut, shorter, named master of its old epoch by a
    view from before its restart, answered a slave's hello with its epochs, and the slave cut acknowledged bytes
    to follow it. Without a lease, a master opens no session; with one, it does."""
    async def main():
        r, host = await _master(tmp_path)
        r.term.drop_lease()
        r.on_peer_message(HaReport("n1", "n0", 1, 0, hello=True))
        assert not _frames(host, HaEpochs) and "n1" not in r._connections
        r.term.lease_until_ms = now_ms() + 60_000
        r.on_peer_message(HaReport("n1", "n0", 1, 0, hello=True))
        assert _frames(host, HaEpochs) and "n1" in r._connections
        await r.close()
    asyncio.run(main())


def test_a_linearizable_read_is_served_by_the_master_only_under_the_controllers_lease(tmp_path):
    """The lease is what makes a master the only one: with it a linearizable read is answered with everything
    acknowledged; once it lapsed (another master may be elected meanwhile) the read is refused with NOT_LEADER,
    while a plain read still is served."""
    async def main() -> None:
        r, host = await _master(tmp_path, min_in_sync_replicas=1, sync_state_set=("n0",))
        assert (await _append(r, b"acked")).responses[0].code == ResponseCode.SUCCESS

        async def read(linearizable: bool):
            s = _Session()
            await r.on_client_request(s, ReadRequest(2, 0, linearizable=linearizable))
            return s.responses[0]

        answered = await read(True)
        assert answered.code == ResponseCode.SUCCESS and answered.records is not None
        r.term.drop_lease()
        refused = await read(True)
        assert refused.code == ResponseCode.NOT_LEADER and "lease" in refused.message
        assert (await read(False)).code == ResponseCode.SUCCESS
        await r.close()
    asyncio.run(main())
