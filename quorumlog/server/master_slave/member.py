"""A member of a master/slave group (RocketMQ's HA, the seed `rocketmq-master-slave-sync.txt`) in the node runtime.

The node hosts it beside its Raft replicas and drives the sans-I/O HA machines of `quorumlog.ha` with real
stores, real fsyncs and the node's peer links (TLS and token included):

- the master appends client batches to its store, runs one HAConnection per slave (HAService) and the
  GroupTransferService: under `ack sync` (SYNC_MASTER) an append is answered once `min_in_sync_replicas`
  members of the accepted SyncStateSet hold its end offset durably (the master by its own fsync when flush
  is sync, a slave by its report; any of them, as a Raft majority), else
  FLUSH_SLAVE_TIMEOUT after `slave_timeout_ms`, or at once SLAVE_NOT_AVAILABLE / IN_SYNC_REPLICAS_NOT_ENOUGH;
  under `ack async` (ASYNC_MASTER) after its own write. A timed-out batch stays in the log, as in RocketMQ,
  but a retry with the same producer sequence is answered with the first copy's indexes, never appended twice;
- a slave (HAClient) reports its max physical offset on connecting, after each fsync and every
  `ha_send_heartbeat_interval_ms`, and appends the master's frames as they are. Under sync flush it reports only
  what it fsynced, so an acknowledged byte is on the disks of `min_in_sync_replicas` members.

The confirm offset — the lowest offset held across the SyncStateSet (fsynced here when the master is alone in
it) — is the group's commit point: no reader, on the master or on a slave (`slave_read_enable`), sees beyond
it.

The master is the controller's (server/services/ha_controller.py, on the `_meta` leader): every member heartbeats it
every HEARTBEAT_MS and follows the committed {master, epoch, sync_state_set} it answers. A master takes writes
only within the lease its last answered heartbeat gave (send time + lease_ms), so a master cut off from the
controller stops before the controller elects another. On becoming master it appends its epoch entry
`<epoch, max offset>` (ha/epochs.py, `epochs.json` beside the log); a slave's session begins with a handshake —
hello, the master's epoch entries (HaEpochs), truncation to the consistent point, then its first report — so
a diverged tail (an old master's unreplicated writes) is cut before it pulls. The master grows and shrinks its
SyncStateSet through the controller and counts only the accepted set's acks.

The HA frames travel on the node's peer links (multiplexed with Raft groups, like every other group's traffic)
rather than on a port of their own; a "connection" is a session opened by a slave's hello.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from ...clock import monotonic_ms
from ...codes import ResponseCode
from ...config import Flush, NodeConfig
from ...errors import DiskError, DiskFull, QuorumLogError
from ...ha import GroupTransferService, HAClient, HAConnection, Reset, SlaveReport, Transfer, TransferDone
from ...ha.epochs import EpochCache, EpochEntry
from ...ha.member import MasterTerm, adopt_epochs, begin_epoch, confirm_offset, handshake_cut
from ...ha.master import Ack, HAConfig
from ...ha.messages import Drop
from ...store.files import is_enospc
from ...topic.dispatcher import TopicDispatcher
from ...wire.client import (
    AppendRequest, AppendResponse, ReadRequest, ReadResponse, StatusRequest, TopicRequest,
)
from ...wire.messages import HaEpochs, HaReport, HaTransfer, Message
from ..durable_file import write_json_durably
from ..flush_thread import ThreadedGroupCommitter
from ..group_files import STATUS_DISK_BYTES_INTERVAL_MS, directory_bytes, final_flush, open_store
from ..group_runtime import GroupRuntime
from ..host import GroupHost, Handler, Session, handlers_of, send_response
from ..metrics import GroupMetrics
from ..reads import CommitNotifier, serve_read
from ..repeated_log import RepeatedLog
from ..services.kv import KvService
from ..services.topics import TopicService
from ..state_machine_host import StateMachineHost
from .ha_store import StoreHALog

if TYPE_CHECKING:
    from ...store.file_store import FileStore

log = logging.getLogger(__name__)

MODE = "master-slave"
EPOCHS_FILE = "epochs.json"
HEARTBEAT_MS = 100  # to the controller (RocketMQ 5's controller heartbeat), which answers with the lease
HELLO_RETRY_MS = 200  # a hello not answered by the master's epochs within this long is sent again
HA_MAX_UNACKED_BYTES = 32 * 1024 * 1024
# A master that resigned and is still master after this long takes leases again. It covers a `_meta` leader
# change on the way (the full disk may be `_meta`'s leader's too): an election timeout, the new leader's first
# entry, then the master timeout it waits before electing anybody (2 s was too short: the soak's full-disk master
# took leases back before the switch and led on, unable to write).
HAND_OVER_WAIT_MS = 6_000
ALTER_SYNC_STATE_SET_MS = 500  # how often a master may propose a new SyncStateSet
MAX_HEARTBEAT_BACKOFF_MS = 4 * HEARTBEAT_MS  # after repeated unexpected failures (below the controller's lease)


def heartbeat_backoff_ms(failures: int) -> int:
    """The wait before the next controller heartbeat after `failures` unexpected errors in a row."""
    return min(HEARTBEAT_MS << min(failures, 8), MAX_HEARTBEAT_BACKOFF_MS)


@dataclass(frozen=True, slots=True)
class MasterSlaveSettings:
    """A master/slave group's own settings (its definition's `master_slave` object), RocketMQ's names."""

    master: str
    ack: Ack = Ack.SYNC  # brokerRole SYNC_MASTER / ASYNC_MASTER
    min_in_sync_replicas: int = 2  # minInSyncReplicas (master included); 1 under ack async
    slave_timeout_ms: int = 3_000  # syncFlushTimeout's HA sibling: how long a SYNC_MASTER append waits
    ha_max_time_slave_not_catchup_ms: int = 15_000  # haMaxTimeSlaveNotCatchup
    ha_send_heartbeat_interval_ms: int = 5_000  # haSendHeartbeatInterval
    ha_housekeeping_interval_ms: int = 20_000  # haHousekeepingInterval
    # haTransferBatchSize is 32 KiB; each frame costs a Python append, fsync round and report here: 1 MiB batches
    # moved at 52 MB/s with 32 KiB frames, 174 MB/s (a Raft group's rate) with 256 KiB (bench/peers.py)
    ha_transfer_batch_bytes: int = 256 * 1024
    slave_read_enable: bool = False  # slaveReadEnable
    # accessMessageInMemoryMaxRatio: a reader of the master further behind than this share of RAM is told to
    # read from a slave (its bytes are likely out of the page cache; the master's disk is the writers')
    access_message_in_memory_max_ratio: int = 40

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
        if s.ack not in tuple(Ack):
            raise ValueError(f"ack must be sync or async, not {s.ack!r}")
        object.__setattr__(s, "ack", Ack(s.ack))
        if not 1 <= s.min_in_sync_replicas <= len(members):
            raise ValueError(f"min_in_sync_replicas {s.min_in_sync_replicas} must be 1..{len(members)}")
        if not 0 <= s.access_message_in_memory_max_ratio <= 100:
            raise ValueError(f"access_message_in_memory_max_ratio {s.access_message_in_memory_max_ratio} must be "
                             f"0..100 (percent of RAM)")
        if not 0 < s.ha_send_heartbeat_interval_ms < s.ha_housekeeping_interval_ms:
            # (an idle slave reports only every heartbeat interval: a shorter housekeeping drops it each time)
            raise ValueError(f"ha_send_heartbeat_interval_ms {s.ha_send_heartbeat_interval_ms} must be > 0 and "
                             f"below ha_housekeeping_interval_ms {s.ha_housekeeping_interval_ms}")
        return s

    def ha_config(self) -> HAConfig:
        # A slave copies the master's whole retained log, not only its current segment (RocketMQ's default):
        # what the controller needs of a member it elects, and what a reader of a slave expects.
        return HAConfig(transfer_batch_bytes=self.ha_transfer_batch_bytes,
                        heartbeat_interval_ms=self.ha_send_heartbeat_interval_ms,
                        housekeeping_ms=self.ha_housekeeping_interval_ms, empty_slave_from_current_segment=False,
                        # bytes in flight beyond a slave's (fsynced) report: 4 MiB held 1 MiB batches to ~100 MB/s
                        max_unacked_bytes=HA_MAX_UNACKED_BYTES)


@dataclass(slots=True)
class _Append:
    """An append waiting for the SyncStateSet's acks; `answer` answers its client."""

    answer: Answer
    first: int
    last: int
    end_offset: int
    term: int  # the epoch its entries were stored in (a retry's: the first copy's)


# How an append is answered: (code, message, the append stored, or None if it was refused before)
Answer = Callable[[ResponseCode, str, "_Append | None"], None]


class MasterSlaveReplica(GroupRuntime):
    """One master/slave group's member on this node (a HostedGroup, host.py)."""

    def __init__(self, host: GroupHost, config: NodeConfig, definition: dict) -> None:
        self.host = host
        self.config = config
        self.group = config.group
        self._not_taken_log = RepeatedLog(log)
        # A topic group's dispatcher (topics on master/slave groups): applied up to the confirm offset, as
        # RocketMQ 5's ReputMessageService dispatches up to it in controller mode; snapshots and snapshot
        # installs as a Raft group's (services/kv.py), from the master.
        self.state_machine = definition.get("state_machine")
        if self.state_machine not in (None, "topics"):
            raise ValueError(f"a master/slave group runs no {self.state_machine!r} state machine (only topics)")
        self.sm: StateMachineHost | None = None  # once open()
        self.kv = KvService(self)  # (applies and snapshots the dispatcher; serves its snapshot to slaves)
        self.topics = TopicService(self)
        self.settings = MasterSlaveSettings.from_definition(definition, sorted(config.peers))
        self.node_id = config.node_id
        # Who is master, in which epoch, and this member's lease: the controller's word, as ha/member.py's
        # MasterTerm decides from its answers. Until its first answer this member follows the configured master
        # and takes no writes.
        self.term = MasterTerm(self.node_id, self.settings.master, alter_interval_ms=ALTER_SYNC_STATE_SET_MS)
        self.members = frozenset(config.peers)
        self.links = {p: a for p, a in config.peers.items() if p != self.node_id}
        self.sync_flush = config.flush is Flush.SYNC
        self.metrics: GroupMetrics = host.metrics.group(config.group)
        self.notifier = CommitNotifier()
        self.store: FileStore = None  # type: ignore[assignment]  (from open() on)
        self.log: StoreHALog | None = None
        self.epochs = EpochCache()
        self.committer: ThreadedGroupCommitter | None = None
        self.quiet = False
        self.stopping = False
        self.failed: str | None = None
        self._store_bytes_at_ms, self._store_bytes = -STATUS_DISK_BYTES_INTERVAL_MS, 0
        self._ha = self.settings.ha_config()
        self._in_memory_bytes = (os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
                                 * self.settings.access_message_in_memory_max_ratio // 100)
        self.boot = os.urandom(8).hex()  # this process, for the controller: a master with a new one restarted
        # master
        self._connections: dict[str, HAConnection] = {}
        self._transfer = self._new_transfer()
        self._pending: dict[int, _Append] = {}
        self._next_id = 1
        self._acked_offset = 0  # the end offset of the last append answered SUCCESS
        self._confirmed = 0  # the confirm offset: only grows within an epoch
        self._handing_over = False
        self._pump_scheduled = False
        self._confirm_sent: dict[str, int] = {}  # slave -> the confirm offset its last frame carried
        # slave
        self._client: HAClient | None = None
        self._hello_at: int | None = None  # a hello waits for the master's epochs
        self._master_confirm = -1
        self._view_sync_state_set: frozenset[str] = frozenset()  # the controller's, as its last answer said
        self.handlers: dict[type, Handler] = {AppendRequest: self._client_append, ReadRequest: self._client_read,
                                              StatusRequest: self._status, **handlers_of(self.kv, self.topics)}

    def _new_transfer(self) -> GroupTransferService:
        s = self.settings
        t = GroupTransferService(s.min_in_sync_replicas if s.ack is Ack.SYNC else 1, s.slave_timeout_ms,
                                 s.ha_max_time_slave_not_catchup_ms)
        t.accepted = frozenset({self.node_id})
        if self.sync_flush:  # (the master counts for what it fsynced; flush async: for what it wrote)
            t.master_held = self.store.position_after(self.committer.durable_index) if self.committer else 0
        return t

    # -- lifecycle -----------------------------------------------------------------------------------------
    def open(self) -> None:
        cfg = self.config
        os.makedirs(cfg.data_dir, exist_ok=True)
        self.store = open_store(cfg)
        self.log = StoreHALog(self.store, cfg.data_segment_size)
        try:
            with open(os.path.join(cfg.data_dir, EPOCHS_FILE)) as f:
                self.epochs = EpochCache([EpochEntry(e, o) for e, o in json.load(f)])
        except FileNotFoundError:
            pass
        self.epochs.truncate(self.store.write_position + 1)  # (entries of bytes a crash took back)
        self.notifier.advance(self.store.committed_index)
        if self.state_machine is not None:
            self.sm = StateMachineHost(cfg.data_dir, self.store, snapshot_every=cfg.snapshot_every,
                                       machine_type=TopicDispatcher, suffix="topics")
            self.sm.on_commit(self.store.committed_index)  # replay what the newest snapshot does not hold
        log.info("master/slave member opening node=%s group=%s configured_master=%s ack=%s begin=%d end=%d "
                 "max_offset=%d last_epoch=%d", self.node_id, self.group, self.settings.master, self.settings.ack,
                 self.store.begin_index, self.store.end_index, self.store.write_position, self.epochs.last_epoch)

    def _save_epochs(self) -> None:
        write_json_durably(os.path.join(self.config.data_dir, EPOCHS_FILE),
                           [[e.epoch, e.start_offset] for e in self.epochs.entries])

    def start(self) -> None:
        self.committer = ThreadedGroupCommitter(
            self.store, sync=self.sync_flush, on_durable=self._on_durable, on_failed=self._store_failed,
            observe_fsync_s=self.metrics.fsync_seconds.observe, fsync_worker=self.host.fsync_worker)
        self.host.spawn(self.committer.run(), f"flusher-{self.group}")
        self.host.spawn(self._heartbeats(), f"ha-heartbeat-{self.group}")

    @property
    def master_id(self) -> str:
        return self.term.master_id  # type: ignore[return-value]

    @property
    def epoch(self) -> int:
        return self.term.epoch

    @property
    def is_master(self) -> bool:
        return self.term.is_master

    @property
    def role(self) -> str:
        return "master" if self.is_master else "slave"

    async def close(self) -> None:
        if self.store is None:
            return  # (never opened)
        self.topics.close()
        self.kv.close()
        if self.committer is not None:
            self.committer.close()
            if not self.failed:
                await final_flush(self.store, self.committer, self.group)
        self._fail_pending(ResponseCode.TIMEOUT, "node shutting down")
        if self.store is not None:
            self.store.close()

    async def hand_over_leadership(self, timeout_s: float | None = None) -> str | None:
        return None  # a master hands over through the controller (`ha elect`), not on a graceful stop

    def peer_heard(self, node_id: str) -> None:
        pass

    def report_disk_ok(self) -> None:
        # (a full master's hand-over ends with the controller's view, not a hold of its own; its flusher's
        # backoff ends now)
        if self.committer is not None:
            self.committer.disk_has_room()

    def peer_gone(self, node_id: str) -> None:
        """A link between node_id and this node broke, either way (its process died, or the connection did):
        frames in flight on it are gone. A master ends that slave's HA session now, as RocketMQ's HAConnection
        ends with its socket: appends then get SLAVE_NOT_AVAILABLE or IN_SYNC_REPLICAS_NOT_ENOUGH at once (and
        the SyncStateSet shrinks) rather than FLUSH_SLAVE_TIMEOUT each until `ha_housekeeping_interval_ms` of
        silence. A slave whose master it was says hello again at its next tick (queued until the link is back),
        as RocketMQ's HAClient reconnects: either side seeing the break restarts the session. A stopped
        process keeps its connections open: housekeeping still covers that."""
        if self.stopping or self.failed:
            return
        if self.is_master:
            conn = self._connections.get(node_id)
            if conn is not None and not conn.closed:
                self._send_master(node_id, conn.lost(f"a link with slave {node_id} broke"))
                self._complete(monotonic_ms())
        elif self._client is not None and self._client.connected and node_id == self.master_id:
            log.warning("HA session dropped node=%s group=%s: a link with master %s broke", self.node_id,
                        self.group, node_id)
            self._client.on_disconnected()

    def peer_silent(self, node_id: str) -> None:
        pass  # (HA has its own housekeeping: a silent slave's session ends after ha_housekeeping_interval_ms)

    def on_snapshot_needed(self, needed: bool) -> None:
        pass  # (only a Raft member's leadership waits for a snapshot)

    def report_disk_full(self, reason: str) -> None:
        """A master that cannot store hands over, as a Raft leader does: it stops writing (drops its lease, fails
        what waits) and asks the controller to elect the most caught-up other member of its SyncStateSet now."""
        if not self.is_master or self._handing_over:
            return
        t = self._transfer
        others = [n for n in t.accepted if n != self.node_id and n in t.slaves]
        if not others:
            log.warning("disk full node=%s group=%s: no other member of the sync state set to hand over to (%s)",
                        self.node_id, self.group, reason)
            return
        to = max(others, key=lambda n: (t.slaves[n].offset, n))
        log.warning("disk full node=%s group=%s: handing the master over to %s (%s)", self.node_id, self.group, to,
                    reason)
        self._handing_over = True
        self.term.drop_lease()
        self._fail_pending(ResponseCode.TERM_CHANGED, f"{self.node_id} hands the master over to {to}: disk full")
        self.host.spawn(self._hand_over(to, self.epoch), f"ha-hand-over-{self.group}")

    async def _hand_over(self, to: str, epoch: int) -> None:
        # Asked again until the controller answers (its `_meta` leader may be on this full disk too, handing its
        # own leadership over right now). No lease meanwhile: the controller's next view makes this member a
        # slave. If it has not after HAND_OVER_WAIT_MS (`to` was not electable), it takes leases again; the next
        # disk check asks again if the disk is still full.
        # (Asked again even once taken: a new `_meta` leader's controller knows nothing of the request.)
        deadline = monotonic_ms() + HAND_OVER_WAIT_MS
        while monotonic_ms() < deadline and self.is_master and self.epoch == epoch and not self.stopping:
            try:
                await self.host.calls.ha_controller("resign", {"group": self.group, "master": self.node_id,
                                                               "epoch": epoch, "to": to})
            except Exception as e:  # noqa: BLE001 - asked again below, or at the next disk check
                log.info("hand-over to %s not taken yet node=%s group=%s: %s", to, self.node_id, self.group, e)
            await asyncio.sleep(2 * HEARTBEAT_MS / 1000)
        if self.is_master and self.epoch == epoch:
            log.warning("hand-over to %s did not happen node=%s group=%s", to, self.node_id, self.group)
            self._handing_over = False

    def _write_failed(self, e: QuorumLogError) -> None:
        """A write the store refused: EIO is final (fail-stop, as a Raft replica's); a full disk hands over."""
        if e.code == ResponseCode.DISK_ERROR:
            self._store_failed(e.code, str(e))
        elif e.code == ResponseCode.DISK_FULL:
            self.report_disk_full(str(e))

    def _store_failed(self, code: ResponseCode, reason: str) -> None:
        if code == ResponseCode.DISK_ERROR:
            self.failed = reason
            self.host.fail_stop(f"group {self.group}: {reason}")

    # -- the controller ------------------------------------------------------------------------------------
    async def _heartbeats(self) -> None:
        """Every HEARTBEAT_MS to the controller, for the life of the member: the lease, the master and the
        SyncStateSet all come from here, so this loop never ends on an error — it logs, backs off and asks again
        (a member whose loop died once claimed master for good with no lease, and its group took no write)."""
        failures = 0
        while not self.stopping and not self.failed:
            sent = monotonic_ms()
            try:
                view = await self.host.calls.ha_controller("heartbeat", self._heartbeat_body(),
                                                           timeout_ms=2 * HEARTBEAT_MS)
                failures = 0
                if not self.stopping:
                    self._on_view(view, sent)
            except (QuorumLogError, OSError, EOFError, asyncio.TimeoutError, ValueError, KeyError) as e:
                log.debug("controller heartbeat failed node=%s group=%s: %s", self.node_id, self.group, e)
            except Exception:  # noqa: BLE001 - a supervision loop: anything else is logged, then asked again
                failures += 1
                log.exception("controller heartbeat raised node=%s group=%s failures=%d", self.node_id, self.group,
                              failures)
            await asyncio.sleep(heartbeat_backoff_ms(failures) / 1000)

    def _heartbeat_body(self) -> dict:
        """What the controller decides by: this process (`boot`: a master whose process changed restarted, even if
        a power cut took its epoch entry), what it holds durably (what a power cut keeps), and for the master
        the end of everything it acknowledged or let readers see."""
        acked = max(self._acked_offset, self._confirmed) if self.is_master else 0
        return {"group": self.group, "member": self.node_id, "members": sorted(self.members),
                "master": self.settings.master, "epoch": self.epochs.last_epoch, "max_offset": self._durable_offset(),
                "boot": self.boot, "acked_offset": acked,
                "min_in_sync_replicas": self._transfer.min_in_sync_replicas}

    def _durable_offset(self) -> int:
        if self.sync_flush and self.committer is not None:
            return min(self.store.write_position, self.store.position_after(self.committer.durable_index))
        return self.store.write_position

    def _on_view(self, view: dict, sent_ms: int) -> None:
        master, epoch = view["master"], int(view["epoch"])
        if epoch < self.epoch or master is None:
            return
        self._view_sync_state_set = frozenset(view.get("sync_state_set") or ())
        lease = int(view["lease_ms"]) if "lease_ms" in view and not self._handing_over else None
        if self.term.on_view(master, epoch, sent_ms, lease):
            self._become(master, epoch)
        if self.is_master:
            self._transfer.set_committed(frozenset(view["sync_state_set"]) | {self.node_id},
                                         int(view.get("sync_state_set_epoch", 0)))
            if lease is not None:
                self._pump(monotonic_ms())

    def _become(self, master: str, epoch: int) -> None:
        log.warning("master/slave group %s: %s is master in epoch %d (this node %s was %s in epoch %d)",
                    self.group, master, epoch, self.node_id, self.role, self.epoch)
        self._fail_pending(ResponseCode.TERM_CHANGED, f"master changed to {master} (epoch {epoch})")
        self._handing_over = False
        self._connections = {}
        self._confirm_sent = {}
        self._transfer = self._new_transfer()
        self._acked_offset = 0
        self._confirmed = self.store.position_after(self.store.committed_index)
        if self.is_master:
            if begin_epoch(self.epochs, epoch, self.store.write_position):
                self._save_epochs()
            self._client = None
        else:
            self._client = HAClient(self.log, self._ha, monotonic_ms())
            self._hello_at = None
            self._master_confirm = -1

    def _fail_pending(self, code: ResponseCode, message: str) -> None:
        pending, self._pending = self._pending, {}
        for p in pending.values():
            self._answer(p, code, message)

    def _maybe_alter_sync_state_set(self, now_ms: int) -> None:
        """Grow the SyncStateSet by slaves in sync holding every acknowledged and every confirmed byte; shrink it
        by those out of sync. The controller's answer, once committed, is the set whose acks count."""
        got = self.term.proposal(now_ms, self._transfer, self._acked_offset, self._confirm_offset())
        if got is None:
            return
        want, base = got  # (a shrink counts from now on, not once the controller answers)
        self.host.spawn(self._alter(want, self.epoch, base), f"ha-alter-{self.group}")

    async def _alter(self, members: frozenset, epoch: int, base: int) -> None:
        try:
            view = await self.host.calls.ha_controller("alter_sync_state_set", {
                "group": self.group, "master": self.node_id, "epoch": epoch, "members": sorted(members),
                "sync_state_set_epoch": base})
            if self.is_master and self.epoch == epoch and int(view.get("epoch", epoch)) == epoch:
                self._transfer.set_committed(frozenset(view["sync_state_set"]) | {self.node_id},
                                             int(view.get("sync_state_set_epoch", 0)))
                log.info("master/slave group %s: sync state set %s (epoch %d)", self.group,
                         sorted(self._transfer.accepted), epoch)
        except Exception as e:  # noqa: BLE001 - proposed again on a later tick
            log.info("alter sync state set failed node=%s group=%s: %s", self.node_id, self.group, e)
        finally:
            self.term.alter_answered(monotonic_ms())

    # -- the master ----------------------------------------------------------------------------------------
    def _on_report(self, m: HaReport, now_ms: int) -> None:
        if not self.is_master or m.frm not in self.links or m.epoch != self.epoch:
            return
        conn = self._connections.get(m.frm)
        if m.hello or conn is None or conn.closed:
            if not self.term.holds_lease(now_ms):
                # (no session without a lease: a master back from a power cut, shorter, that a view from before
                # its restart names master of its old epoch, would have its slaves cut acknowledged bytes to it;
                # the controller gives it no lease and elects again. The slave says hello again.)
                return
            # A new session: the slave learns our epochs, truncates to the consistent point, then reports.
            self._connections[m.frm] = HAConnection(m.frm, self.log, self._ha, now_ms)
            self._transfer.on_slave_connected(m.frm)
            entries = tuple((e.epoch, e.start_offset) for e in self.epochs.entries)
            self.host.send(self.group, HaEpochs(self.node_id, m.frm, self.epoch, self.store.write_position, entries))
            self.host.flush_transport()
            return
        out = conn.on_report(SlaveReport(m.offset), now_ms)
        if not conn.closed:
            self._transfer.on_slave_offset(m.frm, conn.slave_ack_offset, self.store.write_position, now_ms,
                                           conn.skipped_to)
            self._complete(now_ms)
        self._send_master(m.frm, out)
        self._schedule_pump()

    def _schedule_pump(self) -> None:
        """One pump after this loop turn's appends, reports and fsyncs: the frames of many appends go together."""
        if not self._pump_scheduled:
            self._pump_scheduled = True
            asyncio.get_running_loop().call_soon(self._scheduled_pump)

    def _scheduled_pump(self) -> None:
        self._pump_scheduled = False
        if not self.stopping and not self.failed:
            self._pump(monotonic_ms())

    def _pump(self, now_ms: int) -> None:
        """Frames to every slave, finished waits, the confirm offset, the SyncStateSet."""
        if not self.is_master:
            return
        for slave, conn in list(self._connections.items()):
            self._send_master(slave, conn.poll(now_ms))
        if not self._complete(now_ms):
            self._advance_commit(now_ms)
        self._maybe_alter_sync_state_set(now_ms)
        self.host.flush_transport()

    def _complete(self, now_ms: int) -> bool:
        """Answer the appends GroupTransferService finished (the commit point moved first, as a Raft leader's)
        and write the answers; called on each report and fsync too, so they go out then, not a loop turn later
        with the next pump (under load that turn is a good part of an append's wait). False if none finished."""
        finished = self._transfer.poll(now_ms)
        if finished:
            self._advance_commit(now_ms)
            for done in finished:
                self._done(done)
            self.host.flush_transport()
        return bool(finished)

    def _send_master(self, slave: str, out: list) -> None:
        confirm = self._confirm_offset()
        if out:
            self._confirm_sent[slave] = confirm
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

    def _announce_confirm(self, now_ms: int) -> None:
        """A heartbeat frame to each caught-up slave whose last frame carried an older confirm offset: an idle
        group's slaves learn it within a tick, not at the next heartbeat (5 s), so what a slave's readers see
        (slave_read_enable, a topic's consumers reading from any member) follows the master's."""
        confirm = self._confirm_offset()
        for slave, conn in list(self._connections.items()):
            if self._confirm_sent.get(slave, -1) < confirm:
                self._send_master(slave, conn.heartbeat_if_caught_up(now_ms))

    def _confirm_offset(self) -> int:
        """What every member of the accepted SyncStateSet holds (fsynced here under sync flush). A member that
        has not reported since its session began holds at least what was confirmed before: it never goes back."""
        end = self.store.write_position
        if self.sync_flush and self.committer is not None:
            # Only what it fsynced, with slaves in the set too: they may die while this master loses power, and
            # the controller then elects it again (the set's only live member) without the tail it lost — a
            # reader must never have seen that, nor a topic's dispatcher handed out its queue offsets (found by
            # the switch simulator). (Its acks need not wait for its fsync: two slaves holding it suffice.)
            end = min(end, self.store.position_after(self.committer.durable_index))
        self._confirmed = confirm_offset(end, self._transfer.possibly_accepted, self.node_id,
                                         {n: sl.offset for n, sl in self._transfer.slaves.items()}, self._confirmed)
        return self._confirmed

    def _advance_commit(self, now_ms: int) -> None:
        if self.is_master:
            index = self.log.index_below(self._confirm_offset())
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
            if self.sm is not None:
                self.kv.on_commit(index)

    def _client_append(self, session: Session, request: AppendRequest) -> None:
        def answer(code: ResponseCode, message: str, p: _Append | None) -> None:
            if code == ResponseCode.SUCCESS and p is not None:
                # (each entry's physical offset, RocketMQ's wroteOffset: only a raw append's answer carries them)
                offsets = tuple(self.store.position_after(i - 1) for i in range(p.first, p.last + 1))
                send_response(session, AppendResponse(request.request_id, code, self.node_id, p.first, p.last,
                                                      self.epoch, offsets=offsets))
            else:
                send_response(session, AppendResponse(request.request_id, code, self.master_id, message=message))

        self._append(request, answer)

    def append_messages(self, session: Session, request: TopicRequest) -> None:
        """A topic send's batch (checked by services/topics.py), stored like an append; the answer goes to
        TopicService.sent, which waits until the dispatcher applied it: until the confirm offset passed it,
        under ack async too (a queue offset is assigned there, never at write time: RocketMQ #7689, #8539)."""
        def answer(code: ResponseCode, message: str, p: _Append | None) -> None:
            if p is None:
                self.topics.sent(session, request.request_id, code, 0, 0, None, self.master_id, message)
            else:
                self.topics.sent(session, request.request_id, code, p.first, p.last, p.term,
                                 self.node_id if code == ResponseCode.SUCCESS else self.master_id, message)

        self._append(request, answer)

    def _append(self, request: AppendRequest | TopicRequest, answer: Answer) -> None:
        """Store a client batch and wait for the SyncStateSet's acks; `answer` answers its client."""
        def refuse(code: ResponseCode, message: str) -> None:
            self.metrics.count_request(code.name)
            answer(code, message, None)

        if self.stopping:
            return refuse(ResponseCode.LEADER_NOT_READY, "node shutting down")
        if not self.is_master:
            return refuse(ResponseCode.NOT_LEADER, f"{self.node_id} is a slave of group {self.group}; the master "
                                                   f"is {self.master_id}")
        now_ms = monotonic_ms()
        if not self.term.holds_lease(now_ms):
            return refuse(ResponseCode.LEADER_NOT_READY, f"{self.node_id} holds no lease from the controller: "
                                                         f"it takes no writes (epoch {self.epoch})")
        if not request.bodies:
            return refuse(ResponseCode.REQUEST_WITH_EMPTY_BODYS, "empty batch")
        limit = self.config.max_entry_bytes
        for body in request.bodies:
            if len(body) > limit:
                return refuse(ResponseCode.ENTRY_TOO_LARGE, f"entry of {len(body)} bytes > max_entry_bytes {limit}")
        if self.host.disk_full:
            return refuse(ResponseCode.DISK_FULL, f"disk of {self.config.data_dir} is full")
        if len(self._pending) >= self.config.max_pending_requests:  # (as a Raft leader's: DLedger's maxPendingRequests)
            return refuse(ResponseCode.LEADER_PENDING_FULL, f"{len(self._pending)} appends wait for their slaves")
        code = self._transfer.refusal(now_ms)
        if code is not None:  # (nothing written: RocketMQ checks before it writes too)
            return refuse(code, f"{code.name}: sync state set {sorted(self._transfer.accepted)}, connected slaves "
                                f"{sorted(n for n, s in self._transfer.slaves.items() if s.connected)}, "
                                f"min_in_sync_replicas {self._transfer.min_in_sync_replicas}")
        producer = (request.client_id, request.seq) if request.client_id else None
        hit = self.store.find_producer_batch(*producer) if producer else None
        try:
            if hit is not None:  # a retry (after FLUSH_SLAVE_TIMEOUT, say): wait for the first copy, not a second
                first, last = hit.first_index, hit.last_index
                term = self.store.term_at(last)
            else:
                floor = self.store.producer_window_floor(request.client_id) if producer else None
                if floor is not None and request.seq < floor:
                    return refuse(ResponseCode.DUPLICATE_SEQUENCE_TOO_OLD, f"sequence {request.seq} < {floor}")
                first = self.store.end_index + 1
                last = self.store.append_batch(self.epoch, request.bodies, int(time.time() * 1000), producer)
                term = self.epoch
                self.committer.written(last)
        except QuorumLogError as e:
            self._write_failed(e)
            return refuse(e.code, str(e))
        rid = self._next_id
        self._next_id += 1
        p = self._pending[rid] = _Append(answer, first, last, self.store.position_after(last), term)
        # (where its bytes start: a slave whose copy began past it does not count for it; 0 if retention took it.
        # position_of, not position_after(first - 1): an append that opens a segment starts past the blank
        # before it, at the very offset a slave Reset to that segment starts from)
        start = self.store.position_of(first) if first >= self.store.begin_index else 0
        done = self._transfer.request(rid, p.end_offset, now_ms, start)
        if done is not None:
            self._done(done)
        self._schedule_pump()

    def _done(self, done: TransferDone) -> None:
        """GroupTransferService's verdict on a waiting append: `min_in_sync_replicas` members of the accepted
        SyncStateSet hold it durably (the master once its fsync covers it, a slave by its report), or not."""
        p = self._pending.pop(done.request_id, None)
        if p is None:
            return
        if done.code == ResponseCode.SUCCESS:
            self._acked_offset = max(self._acked_offset, p.end_offset)
            self._answer(p, ResponseCode.SUCCESS)
        else:
            self._answer(p, done.code, f"{done.code.name}: end offset {done.end_offset} not held by "
                                       f"{self._transfer.min_in_sync_replicas} members of the sync state set "
                                       f"{sorted(self._transfer.accepted)}")

    def _answer(self, p: _Append, code: ResponseCode, message: str = "") -> None:
        self.metrics.count_request(code.name)
        p.answer(code, message, p)

    def _on_durable(self, index: int) -> None:
        now_ms = monotonic_ms()
        if self.is_master:
            if self.sync_flush:
                self._transfer.master_held = self.store.position_after(index)
                self._complete(now_ms)
            self._schedule_pump()
        elif self._client is not None and self._client.connected and self.sync_flush:
            self._report(now_ms)

    # -- the slave -----------------------------------------------------------------------------------------
    def _on_epochs(self, m: HaEpochs, now_ms: int) -> None:
        """The master's answer to our hello: cut what diverged, adopt its epochs, report where we are."""
        c = self._client
        if c is None or m.frm != self.master_id or m.epoch != self.epoch:
            return
        master = EpochCache([EpochEntry(e, o) for e, o in m.entries])
        mine = self.store.write_position
        point = handshake_cut(self.epochs, mine, master, m.max_offset)
        if point < mine:
            try:
                index = self.store.index_at_position(point)
            except ValueError:
                index = None
            if index is None or index - 1 < self.store.committed_index:
                log.error("master/slave group %s: cannot truncate to the consistent point %d (entry %s) below "
                          "the committed entry %d: an unclean election? this member stays out of sync",
                          self.group, point, index, self.store.committed_index)
                return
            log.warning("master/slave group %s: truncating the diverged tail from offset %d (entry %d) to follow "
                        "%s in epoch %d", self.group, point, index, self.master_id, self.epoch)
            self.store.truncate_after(index - 1)
            self.committer.truncated(index - 1)
            self.epochs.truncate(point)
        adopt_epochs(self.epochs, master)  # (the master's epochs after the cut: the bytes we are to pull)
        self._save_epochs()
        self._hello_at = None
        c.on_disconnected()
        c.on_connected(now_ms)
        self._send_report(self._reported_offset(), False)

    def _on_transfer(self, m: HaTransfer, now_ms: int) -> None:
        c = self._client
        if c is None or m.frm != self.master_id or m.epoch != self.epoch:
            return
        self._master_confirm = max(self._master_confirm, m.confirm_offset)
        if not c.connected:
            return
        before = self.store.end_index
        try:
            out = c.on_message(Reset(m.offset) if m.reset else Transfer(m.offset, m.data), now_ms)
        except (QuorumLogError, ValueError) as e:  # bytes that do not fit here: a new session from a clean state
            log.warning("HA transfer refused node=%s group=%s offset=%d: %s", self.node_id, self.group, m.offset, e)
            c.on_disconnected()
            if isinstance(e, QuorumLogError):
                self._write_failed(e)
            return
        if self.store.end_index != before:
            self.committer.written(self.store.end_index)
        for o in out:
            if isinstance(o, Drop):
                log.warning("HA session dropped node=%s group=%s: %s", self.node_id, self.group, o.reason)
            elif not self.sync_flush:
                self._send_report(o.offset, False)
            # (sync flush: the report waits for the fsync, _on_durable)
        self._advance_commit(now_ms)

    def _report(self, now_ms: int) -> None:
        self._client.last_report_ms = now_ms
        self._send_report(self._reported_offset(), False)

    def _reported_offset(self) -> int:
        if self.sync_flush and self.committer is not None:
            return min(self.log.max_offset(), self.store.position_after(self.committer.durable_index))
        return self.log.max_offset()

    def _send_report(self, offset: int, hello: bool) -> None:
        self.host.send(self.group, HaReport(self.node_id, self.master_id, self.epoch, offset, hello))
        self.host.flush_transport()

    def _slave_tick(self, now_ms: int) -> None:
        c = self._client
        if c is None:
            return
        if not c.connected:
            # (Re)connect once everything written here is fsynced: after the handshake the first report then
            # says exactly what this member holds, and the master sends from there.
            if self.committer is None or self.committer.durable_index < self.store.end_index:
                return
            if self._hello_at is None or now_ms - self._hello_at >= HELLO_RETRY_MS:
                self._hello_at = now_ms
                self._send_report(self.store.write_position, True)
            return
        for o in c.poll(now_ms):
            if isinstance(o, Drop):
                log.warning("HA session dropped node=%s group=%s: %s", self.node_id, self.group, o.reason)
            else:
                self._send_report(self._reported_offset(), False)
        self._advance_commit(now_ms)

    # -- inputs from the node ------------------------------------------------------------------------------
    def on_peer_message(self, msg: Message) -> None:
        if self.stopping or self.failed:
            return
        now_ms = monotonic_ms()
        try:
            if isinstance(msg, HaReport):
                self._on_report(msg, now_ms)
            elif isinstance(msg, HaTransfer):
                self._on_transfer(msg, now_ms)
            elif isinstance(msg, HaEpochs):
                self._on_epochs(msg, now_ms)
            # (Raft messages for a group that is not Raft: dropped)
        except OSError as e:
            # A durable write of this member's own (its epochs, at a session's start) failed. The session does
            # not begin (a slave says hello again later); a full disk waits or hands over, EIO is final.
            self._not_taken_log.log(type(msg), logging.WARNING, "HA message not taken node=%s group=%s from=%s: %s",
                                    self.node_id, self.group, msg.frm, e)  # (a full slave: at every hello)
            self._write_failed((DiskFull if is_enospc(e) else DiskError)(f"{type(msg).__name__}: {e.strerror}"))

    def tick(self, now_ms: int) -> None:
        if self.stopping or self.failed:
            return
        if self.is_master:
            self._pump(now_ms)
            self._announce_confirm(now_ms)
            self.host.flush_transport()
        else:
            self._slave_tick(now_ms)

    @property
    def leader_id(self) -> str:
        return self.master_id

    def leads(self) -> bool:
        return self.is_master

    def read_refusal(self) -> str | None:
        if self.is_master or self.settings.slave_read_enable:
            return None
        return f"slave_read_enable is off in group {self.group}: read from the master {self.master_id}"

    def holds_everything_committed(self) -> bool:
        """Master, its confirm offset past its epoch's start (what it held when elected from the SyncStateSet,
        which covers everything ever confirmed), all of it dispatched."""
        store = self.store
        return (self.is_master and bool(self.epochs.entries)
                and store.position_after(store.committed_index) >= self.epochs.entries[-1].start_offset
                and (self.sm is None or self.sm.applied_index >= store.committed_index))

    async def _client_read(self, session: Session, request: ReadRequest) -> None:
        refusal = self.read_refusal()
        if refusal is None and request.linearizable and not self.term.holds_lease(monotonic_ms()):
            # (the controller's lease is what makes this master the only one: without it, another may be elected)
            refusal = f"a linearizable read is served by the master under the controller's lease ({self.node_id} " \
                      f"holds none)"
        if refusal is not None:
            send_response(session, ReadResponse(request.request_id, ResponseCode.NOT_LEADER, self.store.begin_index,
                                        self.store.committed_index, message=refusal))
            return
        response = await serve_read(self.store, request, self.notifier, self.host.stopping_event)
        slave = self.suggested_slave(response.records.last_index) if response.records is not None else None
        if slave is not None:
            response = dataclasses.replace(response, suggest_slave=slave)
        send_response(session, response)

    def suggested_slave(self, read_to: int) -> str | None:
        """RocketMQ's suggestPullingFromSlave: with slave_read_enable, a reader (a read or a topic pull) still more
        than access_message_in_memory_max_ratio of RAM behind the master's end after this read (of entries up to
        `read_to`) reads from a slave, the in-sync one holding the most (the clients follow)."""
        if not (self.is_master and self.settings.slave_read_enable) or \
                self.store.write_position - self.store.position_after(read_to) <= self._in_memory_bytes:
            return None
        in_sync = self._transfer.in_sync(monotonic_ms())
        held = [(c.slave_ack_offset, s) for s, c in self._connections.items() if not c.closed and s in in_sync]
        return max(held)[1] if held else None

    # -- periodic work, status -------------------------------------------------------------------------------
    async def checkpoint(self) -> None:
        pass  # (the store checkpoints from its flushes; close() writes the last one)

    async def retention(self) -> None:
        """Delete old segments (file_reserved_hours, as a Raft group's) below the commit point and, on the master,
        below what every connected slave holds: a lagging slave keeps its place. (A slave away longer than that
        is Reset to the master's first byte when it comes back, RocketMQ #3388.)"""
        if self.failed or self.committer is None or self.stopping:
            return
        safe = self.store.committed_index
        if self.sm is not None:
            safe = self.sm.retention_limit(safe)  # a slave that needs what was deleted gets the snapshot
        try:
            if self.is_master:
                for st in self._transfer.slaves.values():
                    if st.connected and st.offset >= 0:
                        safe = min(safe, self.log.index_below(st.offset))
        except ValueError:
            return  # (an offset between records: a report of another epoch's layout; next round)
        async with self.committer.io_lock:
            removed = await asyncio.to_thread(self.store.delete_expired, int(time.time() * 1000), safe)
        if removed:
            log.info("retention node=%s group=%s safe_index=%d segments_removed=%d begin=%d", self.node_id,
                     self.group, safe, removed, self.store.begin_index)

    def status(self) -> dict[str, Any]:
        now_ms = monotonic_ms()
        doc = {
            "id": self.node_id, "group": self.group, "mode": MODE, "role": self.role, "term": self.epoch,
            "epoch": self.epoch, "leader_id": self.master_id, "ack": self.settings.ack,
            "begin_index": self.store.begin_index, "end_index": self.store.end_index,
            "committed_index": self.store.committed_index,
            "durable_index": self.committer.durable_index if self.committer else -1,
            "max_offset": self.store.write_position, "voters": sorted(self.members), "learners": [],
            "watermarks": {}, "store_bytes": self.dir_bytes(),
            "epochs": [[e.epoch, e.start_offset] for e in self.epochs.entries],
            # in the SyncStateSet (the master: the accepted one; a slave: as the controller last answered)
            "in_sync": self.node_id in (self._transfer.accepted if self.is_master else self._view_sync_state_set),
            **({"state_machine": self.kv.status()} if self.sm is not None else {}),
        }
        if self.is_master:
            in_sync = self._transfer.in_sync(now_ms)
            doc.update(confirm_offset=self._confirm_offset(), sync_state_set=sorted(self._transfer.accepted),
                       lease_ms_left=max(0, self.term.lease_until_ms - now_ms),
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
        t = monotonic_ms()
        if t - self._store_bytes_at_ms >= STATUS_DISK_BYTES_INTERVAL_MS:
            self._store_bytes_at_ms, self._store_bytes = t, directory_bytes(self.config.data_dir)
        return self._store_bytes

    def refresh_metrics(self) -> None:
        m = self.metrics
        m.set_role("leader" if self.is_master else "follower")
        m.term.set(self.epoch)
        m.end_index.set(self.store.end_index)
        m.committed_index.set(self.store.committed_index)

