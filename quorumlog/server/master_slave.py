"""A member of a master/slave group (RocketMQ's HA, the seed `rocketmq-master-slave-sync.txt`) in the node runtime.

The node hosts it beside its Raft replicas and drives the sans-I/O HA machines of `quorumlog.ha` with real
stores, real fsyncs and the node's peer links (TLS and token included):

- the master appends client batches to its store, runs one HAConnection per slave (HAService) and the
  GroupTransferService: under `ack sync` (SYNC_MASTER) an append is answered once `min_in_sync_replicas`
  members, itself included, hold its end offset — and its own copy is fsynced when flush is sync —, else
  FLUSH_SLAVE_TIMEOUT after `slave_timeout_ms`, or at once SLAVE_NOT_AVAILABLE / IN_SYNC_REPLICAS_NOT_ENOUGH;
  under `ack async` (ASYNC_MASTER) after its own write. A timed-out batch stays in the log, as in RocketMQ,
  but a retry with the same producer sequence is answered with the first copy's indexes, never appended twice;
- a slave (HAClient) reports its max physical offset on connecting, after each fsync and every
  `ha_send_heartbeat_interval_ms`, and appends the master's frames as they are. Under sync flush it reports only
  what it fsynced, so an acknowledged byte is on the disks of `min_in_sync_replicas` members.

The confirm offset — the lowest offset held across the SyncStateSet, and fsynced here — is the group's commit
point: no reader, on the master or on a slave (`slave_read_enable`), sees beyond it.

The HA frames travel on the node's peer links (multiplexed with Raft groups, like every other group's traffic)
rather than on a port of their own; "connections" are sessions opened by a slave's `hello` report. The master is
the one the group definition names; the controller that elects another (ha/controller.py, state in `_meta`) is
not driven by the runtime yet.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from typing import Any

from ..codes import ResponseCode
from ..config import NodeConfig
from ..errors import QuorumLogError
from ..ha import GroupTransferService, HAClient, HAConnection, Reset, SlaveReport, Transfer
from ..ha.master import HAConfig
from ..ha.messages import Drop
from ..wire.client import AppendRequest, AppendResponse, ReadRequest, ReadResponse, StatusRequest, StatusResponse
from ..wire.messages import HaReport, HaTransfer
from .flush_thread import ThreadedGroupCommitter
from .ha_store import StoreHALog
from .metrics import GroupMetrics
from .reads import CommitNotifier, serve_read
from .replica import STATUS_DISK_BYTES_INTERVAL_MS, directory_bytes, now_ms, open_store

log = logging.getLogger(__name__)

MODE = "master-slave"


@dataclass(frozen=True, slots=True)
class MasterSlaveSettings:
    """A master/slave group's own settings (its definition's `master_slave` object), RocketMQ's names."""

    master: str
    ack: str = "sync"  # brokerRole SYNC_MASTER / ASYNC_MASTER
    min_in_sync_replicas: int = 2  # minInSyncReplicas (master included); 1 under ack async
    slave_timeout_ms: int = 3_000  # syncFlushTimeout's HA sibling: how long a SYNC_MASTER append waits
    ha_max_time_slave_not_catchup_ms: int = 15_000  # haMaxTimeSlaveNotCatchup
    ha_send_heartbeat_interval_ms: int = 5_000  # haSendHeartbeatInterval
    ha_housekeeping_interval_ms: int = 20_000  # haHousekeepingInterval
    ha_transfer_batch_bytes: int = 32 * 1024  # haTransferBatchSize
    slave_read_enable: bool = False  # slaveReadEnable

    @classmethod
    def from_definition(cls, d: dict, members: list[str]) -> "MasterSlaveSettings":
        ms = dict(d.get("master_slave") or {})
        unknown = set(ms) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown master_slave keys {sorted(unknown)}")
        ms.setdefault("master", members[0])
        s = cls(**ms)
        if s.master not in members:
            raise ValueError(f"master {s.master!r} is not a member ({members})")
        if s.ack not in ("sync", "async"):
            raise ValueError(f"ack must be sync or async, not {s.ack!r}")
        if not 1 <= s.min_in_sync_replicas <= len(members):
            raise ValueError(f"min_in_sync_replicas {s.min_in_sync_replicas} must be 1..{len(members)}")
        return s

    def ha_config(self) -> HAConfig:
        # A slave copies the master's whole retained log, not only its current segment (RocketMQ's default):
        # what the controller needs of a member it elects, and what a reader of a slave expects.
        return HAConfig(transfer_batch_bytes=self.ha_transfer_batch_bytes,
                        heartbeat_interval_ms=self.ha_send_heartbeat_interval_ms,
                        housekeeping_ms=self.ha_housekeeping_interval_ms, empty_slave_from_current_segment=False)


@dataclass(slots=True)
class _Append:
    session: Any
    request_id: int
    first: int
    last: int
    end_offset: int
    transferred: bool = False


class MasterSlaveReplica:
    mode = MODE
    state_machine = None
    sm = None

    def __init__(self, host: Any, config: NodeConfig, definition: dict) -> None:
        self.host = host
        self.config = config
        self.group = config.group
        self.settings = MasterSlaveSettings.from_definition(definition, sorted(config.peers))
        self.node_id = config.node_id
        self.is_master = self.node_id == self.settings.master
        self.epoch = 1
        self.members = frozenset(config.peers)
        self.links = {p: a for p, a in config.peers.items() if p != self.node_id}
        self.sync_flush = config.flush == "sync"
        self.metrics: GroupMetrics = host.metrics.group(config.group)
        self.notifier = CommitNotifier()
        self.store: Any = None
        self.log: StoreHALog | None = None
        self.committer: ThreadedGroupCommitter | None = None
        self.core = None  # (no Raft core)
        self.quiet = False
        self.stopping = False
        self.failed: str | None = None
        self._store_bytes_at_ms, self._store_bytes = -STATUS_DISK_BYTES_INTERVAL_MS, 0
        self._ha = self.settings.ha_config()
        # master
        self._connections: dict[str, HAConnection] = {}
        self._transfer = GroupTransferService(
            self.settings.min_in_sync_replicas if self.settings.ack == "sync" else 1,
            self.settings.slave_timeout_ms, self.settings.ha_max_time_slave_not_catchup_ms)
        self._pending: dict[int, _Append] = {}
        self._next_id = 1
        # slave
        self._client: HAClient | None = None
        self._master_confirm = -1

    # -- lifecycle -----------------------------------------------------------------------------------------
    def open(self) -> None:
        cfg = self.config
        os.makedirs(cfg.data_dir, exist_ok=True)
        self.store = open_store(cfg)
        self.log = StoreHALog(self.store, cfg.data_segment_size)
        self.notifier.advance(self.store.committed_index)
        log.info("master/slave member opening node=%s group=%s role=%s master=%s ack=%s begin=%d end=%d "
                 "max_offset=%d", self.node_id, self.group, self.role, self.settings.master, self.settings.ack,
                 self.store.begin_index, self.store.end_index, self.store.write_position)

    def start(self) -> None:
        self.committer = ThreadedGroupCommitter(
            self.store, sync=self.sync_flush, on_durable=self._on_durable, on_failed=self._store_failed,
            observe_fsync_s=self.metrics.fsync_seconds.observe, fsync_worker=self.host.fsync_worker)
        self.host.spawn(self.committer.run(), f"flusher-{self.group}")
        if not self.is_master:
            self._client = HAClient(self.log, self._ha, now_ms())

    @property
    def role(self) -> str:
        return "master" if self.is_master else "slave"

    def begin_stop(self) -> None:
        self.stopping = True
        self.notifier.wake_all()

    async def close(self) -> None:
        import asyncio
        if self.committer is not None:
            self.committer.close()
            if not self.failed:
                try:
                    async with self.committer.io_lock:
                        await asyncio.to_thread(self.store.flush)
                        await asyncio.to_thread(self.store.checkpoint)
                except Exception as e:  # noqa: BLE001 - a failing disk must not block shutdown
                    log.error("final flush/checkpoint failed group=%s: %s", self.group, e)
        for p in self._pending.values():
            self._answer(p, ResponseCode.TIMEOUT, "node shutting down")
        self._pending.clear()
        if self.store is not None:
            self.store.close()

    async def hand_over_leadership(self, timeout_s: float | None = None) -> str | None:
        return None  # a master hands over through the controller (`ha elect`), not on a graceful stop

    def peer_heard(self, node_id: str) -> None:
        pass

    def step(self, event: Any) -> None:
        pass  # (node-level events for Raft cores, e.g. PeerSilent: HA has its own housekeeping)

    def report_disk_full(self, reason: str) -> None:
        log.warning("disk full node=%s group=%s: %s", self.node_id, self.group, reason)

    def _store_failed(self, code: ResponseCode, reason: str) -> None:
        if code == ResponseCode.DISK_ERROR:
            self.failed = reason
            self.host.fail_stop(f"group {self.group}: {reason}")

    # -- the master ----------------------------------------------------------------------------------------
    def _on_report(self, m: HaReport, now: int) -> None:
        if not self.is_master or m.frm not in self.links:
            return
        conn = self._connections.get(m.frm)
        if m.hello or conn is None or conn.closed:
            conn = self._connections[m.frm] = HAConnection(m.frm, self.log, self._ha, now)
            self._transfer.on_slave_connected(m.frm)
            if not m.hello:
                return  # a report of a connection we dropped: the slave says hello again when it notices
        out = conn.on_report(SlaveReport(m.offset), now)
        if not conn.closed:
            self._transfer.on_slave_offset(m.frm, conn.slave_ack_offset, self.store.write_position, now)
        self._send_master(m.frm, out)
        self._pump(now)

    def _pump(self, now: int) -> None:
        """Frames to every slave, finished waits, the confirm offset."""
        for slave, conn in list(self._connections.items()):
            self._send_master(slave, conn.poll(now))
        for done in self._transfer.poll(now):
            p = self._pending.get(done.request_id)
            if p is None:
                continue
            if done.code == ResponseCode.SUCCESS:
                p.transferred = True
                self._finish_if_done(done.request_id)
            else:
                del self._pending[done.request_id]
                self._answer(p, done.code, f"{done.code.name}: end offset {done.end_offset} not held by "
                                           f"{self._transfer.min_in_sync_replicas} members")
        self._advance_commit(now)
        self.host.flush_transport()

    def _send_master(self, slave: str, out: list) -> None:
        confirm = self._confirm_offset(now_ms())
        for m in out:
            if isinstance(m, Transfer):
                self.host.send(self.group, HaTransfer(self.node_id, slave, self.epoch, m.offset, confirm, m.data))
            elif isinstance(m, Reset):
                self.host.send(self.group, HaTransfer(self.node_id, slave, self.epoch, m.offset, confirm,
                                                      reset=True))
            elif isinstance(m, Drop):
                log.warning("HA connection dropped node=%s group=%s slave=%s: %s", self.node_id, self.group, slave,
                            m.reason)
                self._transfer.on_slave_gone(slave)

    def _confirm_offset(self, now: int) -> int:
        end = self.store.write_position
        if self.sync_flush and self.committer is not None:
            end = min(end, self.store.position_after(self.committer.durable_index))
        return self._transfer.confirm_offset(end, now)

    def _advance_commit(self, now: int) -> None:
        if self.is_master:
            index = self.log.index_below(self._confirm_offset(now))
        else:
            durable = self.committer.durable_index if self.committer else self.store.end_index
            held = self.store.end_index if not self.sync_flush else durable
            try:
                index = min(held, self.log.index_below(self._master_confirm)) if self._master_confirm >= 0 else -1
            except ValueError:  # (the master's confirm offset lies beyond what we hold)
                index = held
        if index > self.store.committed_index:
            self.store.set_committed_index(index)
            self.notifier.advance(index)

    def _client_append(self, session: Any, request: AppendRequest) -> None:
        def refuse(code: ResponseCode, message: str) -> None:
            self.metrics.count_request(code.name)
            _send(session, AppendResponse(request.request_id, code, self.settings.master, message=message))

        if self.stopping:
            return refuse(ResponseCode.LEADER_NOT_READY, "node shutting down")
        if not self.is_master:
            return refuse(ResponseCode.NOT_LEADER, f"{self.node_id} is a slave of group {self.group}; the master "
                                                   f"is {self.settings.master}")
        if not request.bodies:
            return refuse(ResponseCode.REQUEST_WITH_EMPTY_BODYS, "empty batch")
        limit = self.config.max_entry_bytes
        for body in request.bodies:
            if len(body) > limit:
                return refuse(ResponseCode.ENTRY_TOO_LARGE, f"entry of {len(body)} bytes > max_entry_bytes {limit}")
        if self.host.disk_full:
            return refuse(ResponseCode.DISK_FULL, f"disk of {self.config.data_dir} is full")
        now = now_ms()
        producer = (request.client_id, request.seq) if request.client_id else None
        hit = self.store.find_producer_batch(*producer) if producer else None
        try:
            if hit is not None:  # a retry (after FLUSH_SLAVE_TIMEOUT, say): wait for the first copy, not a second
                first, last = hit.first_index, hit.last_index
            else:
                floor = self.store.producer_window_floor(request.client_id) if producer else None
                if floor is not None and request.seq < floor:
                    return refuse(ResponseCode.DUPLICATE_SEQUENCE_TOO_OLD, f"sequence {request.seq} < {floor}")
                first = self.store.end_index + 1
                last = self.store.append_batch(self.epoch, request.bodies, int(time.time() * 1000), producer)
                self.committer.written(last)
        except QuorumLogError as e:
            return refuse(e.code, str(e))
        rid = self._next_id
        self._next_id += 1
        p = self._pending[rid] = _Append(session, request.request_id, first, last,
                                         self.store.position_after(last))
        done = self._transfer.request(rid, p.end_offset, now)
        if done is not None:
            if done.code != ResponseCode.SUCCESS:
                del self._pending[rid]
                self._answer(p, done.code, f"{done.code.name}: {len(self._transfer.in_sync(now))} slaves in sync, "
                                           f"min_in_sync_replicas {self._transfer.min_in_sync_replicas}")
                self._pump(now)
                return
            p.transferred = True
        self._finish_if_done(rid)
        self._pump(now)

    def _finish_if_done(self, rid: int) -> None:
        p = self._pending[rid]
        durable = not self.sync_flush or self.committer.durable_index >= p.last
        if p.transferred and durable:
            del self._pending[rid]
            self._answer(p, ResponseCode.SUCCESS)

    def _answer(self, p: _Append, code: ResponseCode, message: str = "") -> None:
        self.metrics.count_request(code.name)
        if code == ResponseCode.SUCCESS:
            _send(p.session, AppendResponse(p.request_id, code, self.node_id, p.first, p.last, self.epoch))
        else:
            _send(p.session, AppendResponse(p.request_id, code, self.settings.master, message=message))

    def _on_durable(self, index: int) -> None:
        now = now_ms()
        if self.is_master:
            for rid in [r for r, p in self._pending.items() if p.last <= index]:
                self._finish_if_done(rid)
            self._pump(now)
        elif self._client is not None and self._client.connected and self.sync_flush:
            self._report(now)

    # -- the slave -----------------------------------------------------------------------------------------
    def _on_transfer(self, m: HaTransfer, now: int) -> None:
        c = self._client
        if c is None or m.frm != self.settings.master:
            return
        self._master_confirm = max(self._master_confirm, m.confirm_offset)
        if not c.connected:
            return
        before = self.store.end_index
        try:
            out = c.on_message(Reset(m.offset) if m.reset else Transfer(m.offset, m.data), now)
        except (QuorumLogError, ValueError) as e:  # bytes that do not fit here: a new session from a clean state
            log.warning("HA transfer refused node=%s group=%s offset=%d: %s", self.node_id, self.group, m.offset, e)
            c.on_disconnected()
            return
        if self.store.end_index != before:
            self.committer.written(self.store.end_index)
        for o in out:
            if isinstance(o, Drop):
                log.warning("HA session dropped node=%s group=%s: %s", self.node_id, self.group, o.reason)
            elif not self.sync_flush:
                self._send_report(o.offset, False)
            # (sync flush: the report waits for the fsync, _on_durable)
        self._advance_commit(now)

    def _report(self, now: int) -> None:
        self._client.last_report_ms = now
        self._send_report(self._reported_offset(), False)

    def _reported_offset(self) -> int:
        if self.sync_flush and self.committer is not None:
            return min(self.log.max_offset(), self.store.position_after(self.committer.durable_index))
        return self.log.max_offset()

    def _send_report(self, offset: int, hello: bool) -> None:
        self.host.send(self.group, HaReport(self.node_id, self.settings.master, self.epoch, offset, hello))
        self.host.flush_transport()

    def _slave_tick(self, now: int) -> None:
        c = self._client
        if c is None:
            return
        if not c.connected:
            # (Re)connect once everything written here is fsynced: the hello report then says exactly what
            # this member holds, and the master sends from there.
            if self.committer is None or self.committer.durable_index < self.store.end_index:
                return
            for o in c.on_connected(now):
                self._send_report(o.offset, True)
            return
        for o in c.poll(now):
            if isinstance(o, Drop):
                log.warning("HA session dropped node=%s group=%s: %s", self.node_id, self.group, o.reason)
            else:
                self._send_report(self._reported_offset(), False)
        self._advance_commit(now)

    # -- inputs from the node ------------------------------------------------------------------------------
    def on_peer_message(self, msg: Any) -> None:
        if self.stopping or self.failed:
            return
        now = now_ms()
        if isinstance(msg, HaReport):
            self._on_report(msg, now)
        elif isinstance(msg, HaTransfer):
            self._on_transfer(msg, now)
        # (Raft messages for a group that is not Raft: dropped)

    def tick(self, t_ms: int) -> None:
        if self.stopping or self.failed:
            return
        if self.is_master:
            self._pump(t_ms)
        else:
            self._slave_tick(t_ms)

    def on_client_request(self, session: Any, request: Any) -> Any:
        if isinstance(request, AppendRequest):
            self._client_append(session, request)
        elif isinstance(request, ReadRequest):
            return self._client_read(session, request)
        elif isinstance(request, StatusRequest):
            _send(session, StatusResponse(request.request_id, ResponseCode.SUCCESS,
                                          json.dumps(self.host.status(self)).encode()))
        else:
            _send(session, _refusal(request, ResponseCode.BAD_REQUEST,
                                    f"group {self.group} is a master/slave group: {type(request).__name__} is not "
                                    f"served here"))
        return None

    async def _client_read(self, session: Any, request: ReadRequest) -> None:
        if not self.is_master and not self.settings.slave_read_enable:
            _send(session, ReadResponse(request.request_id, ResponseCode.NOT_LEADER, self.store.begin_index,
                                        self.store.committed_index,
                                        message=f"slave_read_enable is off in group {self.group}: read from "
                                                f"the master {self.settings.master}"))
            return
        _send(session, await serve_read(self.store, request, self.notifier, self.host.stopping_event))

    # -- periodic work, status -------------------------------------------------------------------------------
    def checkpoint_due(self) -> bool:
        return False  # (the store checkpoints from its flushes; close() writes the last one)

    async def checkpoint(self) -> None:
        pass

    async def retention(self) -> None:
        pass  # (not yet: a master must keep what a lagging slave still needs, as RocketMQ does not)

    def status(self) -> dict[str, Any]:
        now = now_ms()
        doc = {
            "id": self.node_id, "group": self.group, "mode": MODE, "role": self.role, "term": self.epoch,
            "epoch": self.epoch, "leader_id": self.settings.master, "ack": self.settings.ack,
            "begin_index": self.store.begin_index, "end_index": self.store.end_index,
            "committed_index": self.store.committed_index,
            "durable_index": self.committer.durable_index if self.committer else -1,
            "max_offset": self.store.write_position, "voters": sorted(self.members), "learners": [],
            "watermarks": {}, "store_bytes": self.dir_bytes(),
        }
        if self.is_master:
            in_sync = self._transfer.in_sync(now)
            doc.update(confirm_offset=self._confirm_offset(now),
                       sync_state_set=self._transfer.sync_state_set(self.node_id, now),
                       min_in_sync_replicas=self._transfer.min_in_sync_replicas,
                       slaves={s: {"ack_offset": c.slave_ack_offset, "request_offset": c.slave_request_offset,
                                   "push2slave_max_offset": c.push2slave_max_offset, "in_sync": s in in_sync,
                                   "connected": not c.closed}
                               for s, c in self._connections.items()},
                       pending_requests=len(self._pending))
        else:
            doc.update(confirm_offset=self._master_confirm,
                       connected=bool(self._client and self._client.connected),
                       slave_read_enable=self.settings.slave_read_enable)
        return doc

    def dir_bytes(self) -> int:
        t = now_ms()
        if t - self._store_bytes_at_ms >= STATUS_DISK_BYTES_INTERVAL_MS:
            self._store_bytes_at_ms, self._store_bytes = t, directory_bytes(self.config.data_dir)
        return self._store_bytes

    def refresh_metrics(self) -> None:
        m = self.metrics
        m.set_role("leader" if self.is_master else "follower")
        m.term.set(self.epoch)
        m.end_index.set(self.store.end_index)
        m.committed_index.set(self.store.committed_index)


def _send(session: Any, response: Any) -> None:
    try:
        session.send(response)
    except Exception as e:  # noqa: BLE001 - the client went away; nothing to answer
        log.debug("could not answer a closed session: %s", e)


def _refusal(request: Any, code: ResponseCode, message: str) -> Any:
    from .node import _refusal as refusal
    return refusal(request, code, message)
