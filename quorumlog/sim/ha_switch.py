"""Master/slave groups with the controller in the deterministic simulator: switches.

    python -m quorumlog.sim.ha_switch --seeds 500 [--start S] [--seed S --trace] [--bug NAME]

Three members and the controller (quorumlog/ha/controller.py, min_in_sync_replicas 2). Every member heartbeats
the controller with what it holds durably, its process (`boot`) and, the master, its acked offset; the
controller's answers (the master, epoch, SyncStateSet and its version, a lease) come back late, and a deposed
controller's late answers still arrive. The master holds a lease and accepts SYNC_MASTER writes only under it;
slaves pull from the master they know (HAClient / HAConnection); the master counts itself only for what it
fsynced (GroupTransferService.master_held), and its fsyncs stall at times. What a member decides is the node
runtime's own code (quorumlog/ha/member.py, transfer.py): the handshake's cut and adopted epochs, its epoch
entry when elected, the SyncStateSet it proposes (sent to the controller with its base version, counted from
the moment it is proposed), the confirm offset over every set the controller may hold.

Faults, up to two members at once: kill -9 (a power cut: what it had not fsynced is lost, its epoch entry with
it; it comes back as a new process), SIGSTOP (a paused member keeps its sessions and its place in the set), or
isolation from everyone (the controller too); besides, the controller is replaced by a new one rebuilt from its
committed state (a new `_meta` leader), and hand switches (`ha elect --to`) to any member.

Checker: never two members writable at one instant; at every election the new master holds every byte
acknowledged so far, and so does the final master; after healing every member converges to the master's log
and a new write is acknowledged. Topics: a queue offset names one message on every member for the whole run
(never reused after a switch: RocketMQ #7689, #8539); a handshake never cuts a tail a member dispatched; after
healing, the master dispatched its whole log and every member's consume queues are a prefix of the master's
and exactly what its own log holds up to its dispatch point.

Planted bugs (installed here, by replacing the cores' functions for one run): `no_lease`, `no_truncate`,
`dispatch_unconfirmed`, and the old rules of the controller and the member: `keep_lagging_in_set` (a shrink
keeps a paused member that lacks acked bytes, and the controller elects any live member of the set),
`switch_to_lagging` (a hand switch to a member lacking acked bytes), `count_outside_set` (a shrink counts only
once the controller answers; a disconnected slave's report counts), `restart_unseen` (a master back from a
power cut is not seen as restarted).
"""

from __future__ import annotations

import random
import struct
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field

from ..codes import ResponseCode
from ..ha import GroupTransferService, HAClient, HAConnection, MemoryHALog
from ..ha.controller import HAController
from ..ha.epochs import EpochCache
from ..ha import member as ha_member
from ..ha.member import MasterTerm, adopt_epochs, begin_epoch, confirm_offset, handshake_cut
from ..ha.master import HAConfig
from ..ha.messages import Drop, SlaveReport
from .seed_cli import seed_main

PLANTED = ("no_lease", "no_truncate", "dispatch_unconfirmed", "keep_lagging_in_set", "switch_to_lagging",
           "count_outside_set", "restart_unseen")
MEMBERS = ("m0", "m1", "m2")
STEP_MS = 5
HEARTBEAT_MS = 50
ALTER_MS = 100  # how often a master may propose a new SyncStateSet
ALL_UNFLUSHED = -1  # (a power cut that loses every byte not fsynced)
# The fault orderings of the bug reports, each a script of (ms after its start, step), besides random faults:
ORDERINGS = {
    # an in-set slave paused, acks by the master and the other slave, that one cut off, the master killed
    "paused_cut_kill": ((0, "pause_slave"), (250, "isolate_other_slave"), (500, "kill_master")),
    # a slave's link throttled, then `ha elect --to` it
    "throttled_switch": ((0, "throttle_slave"), (800, "switch_to_throttled")),
    # the next master's fsyncs stall from its first write; a power cut takes its whole epoch; it is back at once
    "stalled_power_cut": ((0, "stall_next_master"), (0, "switch_to_slave"), (1_500, "power_cut_master")),
    # a shrink on its way to a slow controller while the removed slave's report could still count
    "shrink_race": ((0, "throttle_slave"), (0, "stall_master"), (0, "slow_controller"),
                    (100, "isolate_other_slave"), (450, "kill_master_keep")),
}
CONTROLLER_DELAYS_MS = (1, 2, 5, 10, 40, 120)  # a request's or an answer's way to or from the controller
QUEUES = 4
RECORD = struct.Struct(">HB")  # a message: payload length, queue id; then the payload


class RecordHALog(MemoryHALog):
    """A member's log of messages: HA frames end at record ends, as the runtime's StoreHALog cuts them, so a slave
    never holds half a record (and a crash's torn record is dropped, as the store's recovery drops it)."""

    def read(self, offset: int, max_bytes: int) -> bytes:
        data = super().read(offset, max_bytes + RECORD.size + 256)  # (a message is at most 201 bytes)
        end = 0
        while end + RECORD.size <= len(data):
            nxt = end + RECORD.size + RECORD.unpack_from(data, end)[0]
            if nxt > len(data) or (end and nxt > max_bytes):
                break
            end = nxt
        return data[:end]

    def raw(self, offset: int, size: int) -> bytes:
        return super().read(offset, size)

    def record_end_below(self, start: int, offset: int) -> int:
        """The last record end ≤ offset, walking from `start` (a record start ≤ offset)."""
        at = start
        while at + RECORD.size <= offset:
            nxt = at + RECORD.size + RECORD.unpack(self.raw(at, RECORD.size))[0]
            if nxt > offset:
                break
            at = nxt
        return at


class Violation(Exception):
    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind


@dataclass
class Member:
    name: str
    log: "RecordHALog" = field(default_factory=lambda: RecordHALog(segment_bytes=2_048))
    epochs: EpochCache = field(default_factory=EpochCache)
    alive: bool = True
    isolated: bool = False
    known_master: str | None = None
    known_epoch: int = 0
    term: MasterTerm | None = None  # what it decides from the controller's answers (the runtime's own core)
    last_heartbeat: int = -HEARTBEAT_MS
    boot: int = 0  # its process: a new one at every restart
    paused_until: int = 0  # SIGSTOP: it does nothing before then, and keeps its sessions
    flushed: int = 0  # what it fsynced: a power cut keeps it (a slave fsyncs before it reports)
    fsync_stalled_until: int = 0
    throttled_until: int = 0  # its HA link is slow until then
    gts: GroupTransferService | None = None  # while it is master
    acked_offset: int = 0  # while it is master: the end of its last acknowledged append
    reported: int = 0  # the highest offset it reported as a slave: flushed, so a crash never takes it back
    conns: dict = field(default_factory=dict)  # master side: slave -> HAConnection
    client: HAClient | None = None  # slave side
    upstream: str | None = None  # the master it pulls from
    to_master: list = field(default_factory=list)
    to_slave: list = field(default_factory=list)  # (deliver at, frame, the master's confirm offset it carries)
    # topics
    commit: int = 0  # its commit point (bytes): a master's confirm offset, a slave's min(reported, master's)
    master_confirm: int = -1  # a slave's: the latest confirm offset its master's frames carried (-1: none yet)
    dispatched: int = 0  # the end of the last record dispatched
    durable: int = 0  # what it confirmed as master (flush sync: it fsyncs before it counts its own bytes)
    queues: dict = field(default_factory=lambda: {q: [] for q in range(QUEUES)})  # queue -> payloads

    @property
    def reachable(self) -> bool:
        return self.alive and not self.isolated


class HASwitchSim:
    def __init__(self, seed: int, bugs: frozenset[str] = frozenset(), trace=None) -> None:
        self.rng = random.Random(seed)
        self.bugs = bugs
        self.trace = trace
        self.now = 0
        self.cfg = HAConfig(transfer_batch_bytes=512, heartbeat_interval_ms=100, housekeeping_ms=600,
                            max_unacked_bytes=4_096, empty_slave_from_current_segment=False)
        self.m = {n: Member(n, term=MasterTerm(n, alter_interval_ms=ALTER_MS)) for n in MEMBERS}
        self.ctl = HAController(list(MEMBERS), master_timeout_ms=400, lease_ms=250, min_in_sync_replicas=2)
        self.to_ctl: list[tuple] = []  # (arrives at, member, kind, body)
        self.slow_controller_until = 0
        self.healed = False  # the faults are over: the liveness phase
        self.stall_next_master = False  # the next member to become master has its fsyncs stalled at once
        self.script: list[tuple[int, str]] = []  # (at ms, step) of one of ORDERINGS
        self.quiet = (0, 0)
        self.from_ctl: list[tuple] = []  # (arrives at, member, its boot, kind, answer)
        self.acked: list[tuple[int, bytes]] = []  # (start offset, bytes) of every acknowledged write
        self.acked_end = 0
        self.pending: dict[int, tuple[str, int, bytes]] = {}  # rid -> (master, start, data)
        self.next_rid = 0
        self.last: tuple[int, ResponseCode] | None = None
        self.elections = 0
        self.faults_until = 0
        self.restart_at: dict[str, int] = {}
        self.offsets: dict[tuple[int, int], bytes] = {}  # (queue, offset) -> payload, as first dispatched anywhere

    def log(self, text: str) -> None:
        if self.trace:
            self.trace(f"{self.now:7d} {text}")

    # -- roles: the controller, its late answers -----------------------------------------------------------
    def _runs(self, x: Member) -> bool:
        return x.alive and self.now >= x.paused_until

    def _durable(self, x: Member) -> int:
        return min(x.log.max_offset(), max(x.flushed, x.reported))

    def _ctl_delay(self) -> int:
        slow = self.rng.randint(100, 300) if self.now < self.slow_controller_until else 0
        return self.now + self.rng.choice(CONTROLLER_DELAYS_MS) + slow

    def _become(self, x: Member, master: str, epoch: int) -> None:
        """The controller's answer names a new master or epoch."""
        x.known_master, x.known_epoch = master, epoch
        self._disconnect(x)
        x.gts, x.acked_offset, x.master_confirm = None, 0, -1
        if master == x.name:
            if self.stall_next_master:
                self.stall_next_master = False
                x.fsync_stalled_until = self.now + 1_500
            begin_epoch(x.epochs, epoch, x.log.max_offset())
            x.gts = GroupTransferService(2, slave_timeout_ms=500, not_catchup_ms=800)
            x.gts.accepted = frozenset({x.name})
            x.gts.master_held = x.flushed
            self.log(f"{x.name} is master, epoch {epoch}, from offset {x.log.max_offset()}")

    def _heartbeat(self, x: Member) -> None:
        if not (x.reachable and self._runs(x)) or self.now - x.last_heartbeat < HEARTBEAT_MS:
            return
        x.last_heartbeat = self.now
        master = x.gts is not None and x.known_master == x.name
        self.to_ctl.append((self._ctl_delay(), x.name, "heartbeat", dict(
            epoch=x.epochs.last_epoch, max_offset=self._durable(x), boot=f"{x.name}.{x.boot}",
            acked_offset=max(x.acked_offset, x.commit) if master else 0, sent=self.now, process=x.boot)))

    def _propose(self, x: Member) -> None:
        """A master grows or shrinks its set (the runtime's _maybe_alter_sync_state_set)."""
        got = x.term.proposal(self.now, x.gts, x.acked_offset, x.commit) if x.gts is not None else None
        if got is None:
            return
        want, base = got
        self.to_ctl.append((self._ctl_delay(), x.name, "alter", dict(epoch=x.known_epoch, members=want, base=base,
                                                                     process=x.boot)))

    def _controller_step(self) -> None:
        """Requests reaching the controller now; its answers (late) to the members."""
        due = [r for r in self.to_ctl if r[0] <= self.now]
        self.to_ctl = [r for r in self.to_ctl if r[0] > self.now]
        for _, name, kind, b in due:
            x = self.m[name]
            if not x.reachable:
                if kind == "alter":
                    x.term.alter_answered(self.now)  # (lost on its way: the call times out, the proposal stays pending)
                continue
            if kind == "heartbeat":
                lease = self.ctl.on_heartbeat(name, self.now, b["epoch"], b["max_offset"], boot=b["boot"],
                                              acked_offset=b["acked_offset"])
                view = (self.ctl.master, self.ctl.epoch, self.ctl.sync_state_set, self.ctl.sync_state_set_epoch,
                        lease is not None, b["sent"])
            else:
                ok = self.ctl.alter_sync_state_set(name, b["epoch"], b["members"], b["base"])
                view = (ok, b["epoch"], self.ctl.sync_state_set, self.ctl.sync_state_set_epoch)
            # (the answer goes to the process that asked: one that died since never reads it)
            self.from_ctl.append((self._ctl_delay(), name, b["process"], kind, view))
        due = [r for r in self.from_ctl if r[0] <= self.now]
        self.from_ctl = [r for r in self.from_ctl if r[0] > self.now]
        for at, name, boot, kind, view in due:
            x = self.m[name]
            if not x.alive or x.boot != boot:
                continue  # (for the process that died)
            if self.now < x.paused_until:
                self.from_ctl.append((x.paused_until, name, boot, kind, view))  # (read once it runs again)
                continue
            if kind == "heartbeat":
                if x.reachable:
                    self._on_view(x, view)
            else:
                self._on_altered(x, view if x.reachable else None)

    def _on_view(self, x: Member, view: tuple) -> None:
        master, epoch, sset, version, leased, sent = view
        had_lease = x.term.holds_lease(self.now)
        changed = x.term.on_view(master, epoch, sent, self.ctl.lease_ms if leased else None)
        if changed:
            self._become(x, master, epoch)
        if x.gts is not None and x.known_master == x.name:
            x.gts.set_committed(frozenset(sset) | {x.name}, version)
            if x.term.holds_lease(self.now) and (changed or not had_lease):  # (it may write and serve from now)
                self._check_holds_acked(x, f"{x.name} leased as master (epoch {epoch})")

    def _on_altered(self, x: Member, answer: tuple | None) -> None:
        x.term.alter_answered(self.now)
        if answer is None:
            return  # (no answer: the proposal stays pending, sent again)
        ok, epoch, sset, version = answer
        if ok and x.gts is not None and x.known_master == x.name and x.known_epoch == epoch:
            x.gts.set_committed(frozenset(sset) | {x.name}, version)

    def _replace_controller(self) -> None:
        """A new `_meta` leader: a controller rebuilt from the committed state (master, epoch, set, its version,
        the master's boot); what it heard, the leases it gave and a switch asked of it are gone. Requests on
        their way to the old one are lost; its answers on their way still arrive."""
        old = self.ctl
        c = HAController(list(MEMBERS), master_timeout_ms=old.master_timeout_ms, lease_ms=old.lease_ms,
                         min_in_sync_replicas=old.min_in_sync_replicas)
        c.master, c.epoch, c.sync_state_set = old.master, old.epoch, old.sync_state_set
        c.sync_state_set_epoch, c.master_boot = old.sync_state_set_epoch, old.master_boot
        c.lease_end_ms = self.now + c.master_timeout_ms  # (the old one may have given a lease just now)
        self.ctl = c
        for _, name, kind, _ in self.to_ctl:
            if kind == "alter":
                self.m[name].term.alter_answered(self.now)
        self.to_ctl = []
        self.log("the controller is replaced")

    def _writable(self, x: Member) -> bool:
        return self._runs(x) and x.gts is not None and x.known_master == x.name and (
            "no_lease" in self.bugs or x.term.holds_lease(self.now))

    # -- connections -----------------------------------------------------------------------------------
    def _disconnect(self, s: Member) -> None:
        if s.upstream is not None:
            up = self.m[s.upstream]
            up.conns.pop(s.name, None)
            if up.gts is not None:
                up.gts.on_slave_gone(s.name)
        s.upstream, s.client, s.to_master, s.to_slave = None, None, [], []

    def _connect(self, s: Member) -> None:
        up = self.m[s.known_master]  # type: ignore[index]
        # a master serves its slaves only under the controller's lease: a master that restarted after a crash
        # gets none (the controller elects again), so no slave truncates to the tail it lost
        if s.known_master == s.name or not (s.reachable and up.reachable and up.gts is not None
                                            and self._runs(s) and self._runs(up)
                                            and up.known_epoch == s.known_epoch and up.term.holds_lease(self.now)):
            return
        # the handshake (the runtime's hello / HaEpochs): cut to the consistent point, adopt the master's epochs
        cp = handshake_cut(s.epochs, s.log.max_offset(), up.epochs, up.log.max_offset())
        if "no_truncate" in self.bugs:  # PLANTED BUG: keep a diverged tail, pull after it
            cp = min(s.log.max_offset(), up.log.max_offset())
        if cp < s.log.max_offset():
            self.log(f"{s.name} truncates {s.log.max_offset()} -> {cp} (epochs {s.epochs.entries})")
        if cp < min(s.dispatched, s.log.max_offset()):
            raise Violation("dispatched_truncated", f"{s.name} dispatched up to {s.dispatched}, the handshake with "
                                                    f"{up.name} cuts its log at {cp}")
        s.log.truncate(cp)
        s.epochs.truncate(cp)
        s.reported = min(s.reported, cp)
        adopt_epochs(s.epochs, up.epochs)
        if s.log.max_offset() < up.log.min_offset():
            s.log.reset(up.log.min_offset())
        s.upstream = up.name
        s.client = HAClient(s.log, self.cfg, self.now)
        up.conns[s.name] = HAConnection(s.name, up.log, self.cfg, self.now)
        up.gts.on_slave_connected(s.name)
        self._to_master(s, s.client.on_connected(self.now))

    def _to_master(self, s: Member, msgs: list) -> None:
        for msg in msgs:
            if isinstance(msg, Drop):
                return self._disconnect(s)
            s.reported = max(s.reported, msg.offset)  # (flushed before it is reported)
            s.flushed = max(s.flushed, msg.offset)
            s.to_master.append((self.now + self._link_delay(s), msg))

    def _to_slave(self, s: Member, msgs: list) -> None:
        confirm = self.m[s.upstream].commit if s.upstream else -1  # (every frame carries it, as HaTransfer does)
        for msg in msgs:
            if isinstance(msg, Drop):
                return self._disconnect(s)
            s.to_slave.append((self.now + self._link_delay(s), msg, confirm))

    def _link_delay(self, s: Member) -> int:
        """A frame's way on a slave's link: a few ms, or hundreds while its link is throttled."""
        return self.rng.choice((1, 2, 5, 10)) + (self.rng.randint(300, 600) if self.now < s.throttled_until else 0)

    def _move(self, s: Member) -> None:
        up = self.m[s.upstream] if s.upstream else None
        if up is None or not (s.reachable and up.reachable) or up.known_epoch != s.known_epoch:
            return self._disconnect(s)
        conn = up.conns.get(s.name)
        if conn is None:
            return self._disconnect(s)
        up_runs, s_runs = self._runs(up), self._runs(s)  # (a paused side reads and writes nothing)
        while up_runs and s.upstream and s.to_master and s.to_master[0][0] <= self.now:
            _, msg = s.to_master.pop(0)
            assert isinstance(msg, SlaveReport)
            out = conn.on_report(msg, self.now)
            if conn.slave_ack_offset >= 0 and up.gts is not None:
                up.gts.on_slave_offset(s.name, conn.slave_ack_offset, up.log.max_offset(), self.now, conn.skipped_to)
            self._to_slave(s, out)
        while s_runs and s.upstream and s.to_slave and s.to_slave[0][0] <= self.now:
            _, msg, confirm = s.to_slave.pop(0)
            s.master_confirm = max(s.master_confirm, confirm)
            self._to_master(s, s.client.on_message(msg, self.now))  # type: ignore[union-attr]
        if s.upstream and up_runs:
            self._to_slave(s, conn.poll(self.now))
        if s.upstream and s_runs:
            self._to_master(s, s.client.poll(self.now))  # type: ignore[union-attr]

    # -- the run ---------------------------------------------------------------------------------------
    def _write(self) -> None:
        writers = [x for x in self.m.values() if self._writable(x)]
        if len(writers) > 1:
            raise Violation("two_writable_masters", f"{[(x.name, x.known_epoch) for x in writers]}")
        if not writers:
            return
        x = writers[0]
        payload = struct.pack(">Q", self.next_rid + 1) + bytes(self.rng.getrandbits(8)
                                                               for _ in range(self.rng.randint(0, 190)))
        data = RECORD.pack(len(payload), self.rng.randrange(QUEUES)) + payload
        start = x.log.max_offset()
        x.log.append(start, data)
        self.next_rid += 1
        self.pending[self.next_rid] = (x.name, start, data)
        done = x.gts.request(self.next_rid, x.log.max_offset(), self.now, start)  # type: ignore[union-attr]
        if done is not None:
            self._done(done)

    def _done(self, d) -> None:
        master, start, data = self.pending.pop(d.request_id)
        self.last = (d.request_id, d.code)
        if d.code == ResponseCode.SUCCESS:
            holders = [y.name for y in self.m.values() if self._durable(y) >= start + len(data)
                       and y.log.min_offset() <= start and y.log.raw(start, len(data)) == data]
            if len(holders) < 2:
                raise Violation("acked_not_held", f"write {start}..{start + len(data)} acknowledged by {master}, "
                                                  f"held durably by {holders} only")
            self.acked.append((start, data))
            self.acked_end = max(self.acked_end, start + len(data))
            self.m[master].acked_offset = max(self.m[master].acked_offset, start + len(data))

    # -- topics --------------------------------------------------------------------------------------------
    def _advance_commit(self, x: Member) -> None:
        """The runtime's _advance_commit, in bytes: it only grows (a new master starts from its own)."""
        if not x.alive:
            return
        if x.gts is not None and x.known_master == x.name:
            point = confirm_offset(min(x.log.max_offset(), x.flushed), x.gts.possibly_accepted, x.name,
                                   {n: sl.offset for n, sl in x.gts.slaves.items()}, x.commit)
        else:
            point = min(x.reported, x.master_confirm)  # (flush sync: what it holds durably)
        if "dispatch_unconfirmed" in self.bugs:  # PLANTED BUG: dispatch what was written, confirmed or not
            point = x.log.max_offset()
        x.commit = max(x.commit, min(point, x.log.max_offset()))
        if x.gts is not None:
            x.durable = max(x.durable, x.commit)

    def _dispatch(self, x: Member) -> None:
        """Whole records below the commit point, in log order, into their queues (the next offset of each)."""
        while x.dispatched + RECORD.size <= x.commit:
            size, queue = RECORD.unpack(x.log.raw(x.dispatched, RECORD.size))
            if queue >= QUEUES:
                raise Violation("bad_record", f"{x.name} reads queue {queue} at {x.dispatched}: not a record start")
            end = x.dispatched + RECORD.size + size
            if end > x.commit:
                return
            payload = x.log.raw(x.dispatched + RECORD.size, size)
            offset = len(x.queues[queue])
            x.queues[queue].append(payload)
            first = self.offsets.setdefault((queue, offset), payload)
            if first != payload:
                raise Violation("queue_offset_reused", f"{x.name} dispatched message {payload[:8].hex()} at queue "
                                                       f"{queue} offset {offset}, which named {first[:8].hex()}")
            x.dispatched = end

    def _check_dispatched(self, master: Member) -> None:
        """After healing: the master dispatched its whole log; every member's queues are a prefix of the
        master's, and exactly what its own log holds up to its dispatch point."""
        if master.dispatched != master.log.max_offset():
            raise Violation("not_dispatched", f"master {master.name} dispatched {master.dispatched} of "
                                              f"{master.log.max_offset()} 10 s after healing")
        for x in self.m.values():
            queues: dict[int, list] = {q: [] for q in range(QUEUES)}
            at = 0
            while at < x.dispatched:
                size, queue = RECORD.unpack(x.log.raw(at, RECORD.size))
                queues[queue].append(x.log.raw(at + RECORD.size, size))
                at += RECORD.size + size
            if queues != x.queues or any(master.queues[q][:len(x.queues[q])] != x.queues[q] for q in queues):
                raise Violation("queues_differ", f"{x.name}'s consume queues are not its log's, or not a prefix "
                                                 f"of the master's")

    def _check_holds_acked(self, x: Member, when: str) -> None:
        for start, data in self.acked:
            if x.log.max_offset() < start + len(data) or x.log.raw(start, len(data)) != data:
                raise Violation("acked_lost", f"{when}: {x.name} lacks the acknowledged bytes {start}.."
                                              f"{start + len(data)} (holds up to {x.log.max_offset()})")

    def _plan(self, name: str, at: int) -> None:
        self.script = sorted((at + dt, step) for dt, step in ORDERINGS[name])
        # (no random fault around it: the ordering is what the bug report saw)
        self.quiet = (at - 1_000, self.script[-1][0] + 2_000)
        self.ordering, self.scripted = name, {}

    def _scripted_step(self) -> None:
        while self.script and self.script[0][0] <= self.now:
            _, step = self.script.pop(0)
            master = self.m.get(self.ctl.master or "")
            slaves = [n for n in MEMBERS if master is None or n != master.name]
            if step in ("pause_slave", "throttle_slave"):
                self.scripted["slave"] = self.rng.choice(slaves)
            slave = self.m[self.scripted.get("slave", slaves[0])]
            other = self.m[next((n for n in slaves if n != slave.name), slaves[0])]
            self.log(f"ordering {self.ordering}: {step}")
            if step == "pause_slave" and slave.name not in self.restart_at:
                slave.paused_until = self.now + 1_200
                self.restart_at[slave.name] = slave.paused_until
            elif step == "throttle_slave":
                slave.throttled_until = self.now + 2_500
            elif step == "isolate_other_slave" and other.name not in self.restart_at:
                other.isolated = True
                self.restart_at[other.name] = self.now + 1_500
            elif step in ("kill_master", "kill_master_keep", "power_cut_master") and master is not None \
                    and master.name not in self.restart_at and master.alive:
                hold = self.rng.randint(50, 300) if step == "power_cut_master" else 1_500
                lost = {"kill_master_keep": 0, "power_cut_master": ALL_UNFLUSHED}.get(step)
                self._kill(master, hold, lost)
            elif step == "switch_to_throttled" and master is not None and master.name != slave.name:
                self.log(f"ha elect --to {slave.name}")
                self.ctl.request_switch(slave.name)
            elif step == "switch_to_slave" and master is not None and self.ctl.switching_to is None:
                self.log(f"ha elect --to {slave.name}")
                self.ctl.request_switch(slave.name)
            elif step == "stall_next_master":
                self.stall_next_master = True
            elif step == "stall_master" and master is not None:
                master.fsync_stalled_until = max(master.fsync_stalled_until, self.now + 300)
            elif step == "slow_controller":
                self.slow_controller_until = self.now + 1_000

    def _fault(self) -> None:
        master = self.ctl.master
        free = [n for n in MEMBERS if n not in self.restart_at]  # (a second fault hits another member)
        x = self.m[master if master in free and self.rng.random() < 0.6 else self.rng.choice(free)]
        hold = self.rng.randint(200, 2_000)
        kind = self.rng.random()
        if kind < 0.45 and x.alive:
            self._kill(x, hold)
        elif kind < 0.7 and x.alive:
            x.paused_until = self.now + hold  # SIGSTOP: it keeps its sessions and its place in the set
            self.restart_at[x.name] = self.now + hold
            self.log(f"pause {x.name} for {hold} ms")
        else:
            x.isolated = True
            self.restart_at[x.name] = self.now + hold
            self.log(f"isolate {x.name} for {hold} ms")
        self.faults_until = max(self.faults_until, self.now + hold)

    def _kill(self, x: Member, hold: int, lost: int | None = None) -> None:
        """kill -9, a power cut: what it had not fsynced may be lost (a slave fsyncs before it reports, a master
        counts itself only for what it fsynced), its epoch entries with the bytes they begin in."""
        x.alive = False
        unflushed = x.log.max_offset() - self._durable(x)
        if lost is None:
            lost = self.rng.choice((0, unflushed, self.rng.randint(0, 2_048)))
        elif lost == ALL_UNFLUSHED:
            lost = unflushed
        keep = max(x.log.min_offset(), x.log.max_offset() - lost, self._durable(x))
        # (a slave dispatches only what it flushed, kept above; a master confirms only what it fsynced too)
        keep = max(keep, min(x.durable, x.log.max_offset()))
        if keep < x.dispatched:
            raise Violation("dispatched_lost", f"{x.name} dispatched up to {x.dispatched}, a crash keeps {keep}")
        keep = x.log.record_end_below(x.dispatched, keep)  # (a torn record: dropped at restart)
        x.commit = min(x.commit, keep)
        lost = x.log.max_offset() - keep
        if lost:
            x.log.truncate(keep)
            x.epochs.truncate(keep)
            self.log(f"{x.name} loses its last {lost} bytes: holds up to {keep}")
        x.flushed, x.reported = min(x.flushed, keep), min(x.reported, keep)
        for s in self.m.values():
            if s.upstream == x.name or s is x:
                self._disconnect(s)
        x.gts, x.conns, x.known_epoch, x.known_master = None, {}, 0, None
        x.term = MasterTerm(x.name, alter_interval_ms=ALTER_MS)  # (a new process knows nothing of it)
        x.paused_until, x.fsync_stalled_until = 0, 0
        self.restart_at[x.name] = self.now + hold
        self.log(f"kill -9 {x.name} for {hold} ms")

    def _heal(self, force: bool = False) -> None:
        for name, at in list(self.restart_at.items()):
            if force or self.now >= at:
                x = self.m[name]
                if not x.alive:
                    x.boot += 1
                    self.log(f"{name} restarts")
                x.alive, x.isolated, x.paused_until = True, False, 0
                del self.restart_at[name]
        if force:
            self.healed = True
            self.script, self.stall_next_master, self.slow_controller_until = [], False, 0
            for x in self.m.values():
                x.fsync_stalled_until = x.throttled_until = 0

    def _fsync(self, x: Member) -> None:
        """A master's fsyncs finish now and then, and stall at times (a slow disk)."""
        if x.gts is None or not self._runs(x):
            return
        if self.rng.random() < 0.002 and not self.healed:
            x.fsync_stalled_until = max(x.fsync_stalled_until, self.now + self.rng.randint(100, 800))
        if self.now >= x.fsync_stalled_until and self.rng.random() < 0.5:
            x.flushed = x.log.max_offset()
        x.gts.master_held = x.flushed

    def _step(self) -> None:
        self.now += STEP_MS
        self._heal()
        for x in self.m.values():
            self._heartbeat(x)
        self._controller_step()
        e = self.ctl.tick(self.now)
        if e is not None:
            self.elections += 1
            self.log(f"controller elects {e.master}, epoch {e.epoch}")
            self._check_holds_acked(self.m[e.master], f"election of {e.master} (epoch {e.epoch})")
        for x in self.m.values():
            if x.reachable and x.known_master and x.known_master != x.name and x.upstream is None:
                self._connect(x)
            if x.upstream:
                self._move(x)
            self._fsync(x)
            if x.gts is not None and self._runs(x):
                for d in x.gts.poll(self.now):
                    self._done(d)
                if x.reachable:
                    self._propose(x)
            if self._runs(x):
                self._advance_commit(x)
                self._dispatch(x)

    def _switch_by_hand(self) -> None:
        if self.ctl.master is not None and self.ctl.switching_to is None:
            to = self.rng.choice([n for n in MEMBERS if n != self.ctl.master])
            self.log(f"ha elect --to {to}")
            self.ctl.request_switch(to)

    def run(self, steps: int = 3_000) -> None:
        if self.rng.random() < 0.8:  # (one of the reported orderings, beside the random faults)
            self._plan(self.rng.choice(sorted(ORDERINGS)), self.rng.randint(500, max(600, steps * STEP_MS - 2_000)))
        for _ in range(steps):
            if self.rng.random() < 0.3:
                self._write()
            quiet = self.quiet[0] <= self.now <= self.quiet[1]
            if self.rng.random() < 0.003 and len(self.restart_at) < 2 and not quiet:  # up to two down at once
                self._fault()
            self._scripted_step()
            if self.rng.random() < 0.0008 and not quiet:
                self._switch_by_hand()
            if self.rng.random() < 0.0006 and not quiet:
                self._replace_controller()
            self._step()
        self._heal(force=True)
        for _ in range(2_000):  # 10 s healed
            self._step()
            master = self.m.get(self.ctl.master or "")
            if master is not None and master.gts is not None and all(
                    x.log.max_offset() == master.log.max_offset() for x in self.m.values()) and not self.pending:
                break
        master = self.m[self.ctl.master]  # type: ignore[index]
        self._check_holds_acked(master, "the end")
        for x in self.m.values():
            if x.log.max_offset() != master.log.max_offset() or \
                    x.log.raw(x.log.min_offset(), x.log.max_offset()) != \
                    master.log.raw(x.log.min_offset(), x.log.max_offset() - x.log.min_offset()):
                raise Violation("not_converged", f"{x.name} ({x.log.max_offset()}) differs from master "
                                                 f"{master.name} ({master.log.max_offset()}) 10 s after healing")
        for _ in range(200):  # back in the SyncStateSet, then a write is acknowledged
            self._step()
        self._write()
        for _ in range(400):
            if not self.pending:
                break
            self._step()
        if self.last is None or self.last[0] != self.next_rid or self.last[1] != ResponseCode.SUCCESS:
            raise Violation("liveness", f"the write after healing ended {self.last}")
        for _ in range(100):  # (the slaves' reports of it, then the confirm offset)
            self._step()
        self._check_dispatched(self.m[self.ctl.master])  # type: ignore[index]


def run_seed(seed: int, bugs: frozenset[str] = frozenset(), trace=None, steps: int = 3_000) -> Violation | None:
    with _planted(bugs):
        try:
            HASwitchSim(seed, bugs, trace).run(steps)
        except Violation as v:
            return v
    return None


# -- planted bugs: the old rules, put in place of the cores' for one run ------------------------------------
def _old_sync_state_set_proposal(master_id, accepted, in_sync, offsets, acked_offset, confirmed):
    """Kept every member of the set still "in sync" (a paused one is, for not_catchup_ms), whatever it held."""
    bar = max(acked_offset, confirmed)
    want = {master_id} | {s for s in in_sync if s in accepted or offsets.get(s, -1) >= bar}
    return None if want == set(accepted) else frozenset(want)


def _propose_on_answer(self, members):
    """Counted a new set only once the controller's answer came back."""
    self._proposed_base = self.accepted_version
    return self._proposed_base


def _counted_disconnected_too(self):
    return [s for n, s in self.slaves.items() if self.accepted is None or n in self.accepted]


_real_on_heartbeat = HAController.on_heartbeat


def _restart_seen_only_with_its_epoch(self, member, now_ms, last_epoch, max_offset, restarted=False, *, boot=None,
                                      acked_offset=0):
    """A restart counted only when the member's epoch entry survived (its epoch ≥ the controller's)."""
    boots = self.__dict__.setdefault("_planted_boots", {})
    restarted = boots.get(member, boot) != boot and last_epoch >= self.epoch
    boots[member] = boot
    return _real_on_heartbeat(self, member, now_ms, last_epoch, max_offset, restarted, boot=None,
                              acked_offset=acked_offset)


@contextmanager
def _planted(bugs: frozenset[str]):
    undo: list[tuple[object, str, object]] = []

    def put(owner: object, name: str, value: object) -> None:
        undo.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    if "keep_lagging_in_set" in bugs:
        put(ha_member, "sync_state_set_proposal", _old_sync_state_set_proposal)
        put(HAController, "_meets_every_ack_quorum", lambda self, clean, now_ms, to: True)
        put(HAController, "_holds_acked", lambda self, max_offset, best=0: True)
    if "switch_to_lagging" in bugs:
        put(HAController, "_holds_acked", lambda self, max_offset, best=0: True)
    if "count_outside_set" in bugs:
        put(GroupTransferService, "propose", _propose_on_answer)
        put(GroupTransferService, "_counted", _counted_disconnected_too)
    if "restart_unseen" in bugs:
        put(HAController, "on_heartbeat", _restart_seen_only_with_its_epoch)
    try:
        yield
    finally:
        for owner, name, value in reversed(undo):
            setattr(owner, name, value)


def main(argv: list[str] | None = None) -> int:
    return seed_main("quorumlog.sim.ha_switch", __doc__, run_seed, PLANTED, "ha_switch", argv)


if __name__ == "__main__":
    sys.exit(main())
