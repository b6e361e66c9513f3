"""The soak: 3 real node processes behind per-link fault proxies, concurrent writers, a seeded fault
schedule, and the checker at the end.

One cycle: apply a fault, hold it, heal it (restart what was killed, SIGCONT what was stopped), then wait
until writes are acknowledged again. Unavailability of a cycle = the longest stretch, from the fault's start
to the cycle's end, in which no writer got an ok. After the last cycle the writers stop, the cluster
converges, every node's committed log is read, and checker.check() judges the history.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import quorumlog
from quorumlog.client import Client

from quorumlog.codes import ResponseCode
from quorumlog.errors import QuorumLogError
from quorumlog.client.types import WRITABLE_ROLES
from quorumlog.peers import parse_peers
from quorumlog.wire.client import AppendRequest

from . import checker
from .checker import FAILED, OK, UNKNOWN, Op
from . import faildisk, netns
from .loop_lag import LoopLagTally
from .nemesis import LinkProxy, Net
from ..local_ports import free_ports
from .processes import Cluster, fill_to_last_byte

log = logging.getLogger(__name__)

DISK_BYTES = 128 * 1024 * 1024

BASE_KINDS = ("partition_minority", "isolate_leader", "one_way_leader_out", "kill9_node", "kill9_majority",
              "pause_leader", "restart_all", "torn_tail", "delay", "slow_leader", "reset_connections",
              "failing_disk_leader", "packet_loss", "reorder_duplicate")
# disk_full needs root for its tmpfs mounts: in FAULT_KINDS (and so in CI's short soak) when we are root,
# else opt-in only (and refused without root).
ROOT_KINDS = ("disk_full",)
# Membership changes under load (opt-in with --kinds): replace a kill -9'd follower by a fresh node (remove it,
# add the next spare as a learner, promote it once caught up), and remove the leader while clients write (it
# hands over), then add a spare in its place. Spares never existed before (ids are never reused); their links
# are direct, not through the fault proxies, so later network faults cut only the original nodes' links.
MEMBERSHIP_KINDS = ("replace_follower", "remove_leader")
IS_ROOT = os.geteuid() == 0
FAULT_KINDS = BASE_KINDS + (ROOT_KINDS if IS_ROOT else ())
EXTRA_KINDS = (() if IS_ROOT else ROOT_KINDS) + MEMBERSHIP_KINDS
# The orderings that lost acknowledged appends of master/slave groups (docs/ha.md): an in-set slave stopped,
# the other slave's links cut while it lives, then the master killed (the controller must elect nobody lacking
# an acknowledged byte); and a switch by hand under load (to a member that may lag: it waits or is given up).
MASTER_SLAVE_ORDERINGS = ("pause_slave_cut_kill_master", "hand_switch")
ALL_KINDS = BASE_KINDS + ROOT_KINDS + MEMBERSHIP_KINDS + MASTER_SLAVE_ORDERINGS
# A master/slave group (--mode master-slave) is created with the nodes' direct addresses: the per-link TCP
# proxies do not sit on its links, so only the kinds that act on processes, disks and network namespaces
# reach it (partitions need netns, i.e. root).
MASTER_SLAVE_KINDS = ("kill9_node", "kill9_majority", "pause_leader", "restart_all", "torn_tail",
                      "failing_disk_leader", "partition_minority", "isolate_leader") + ROOT_KINDS \
    + MASTER_SLAVE_ORDERINGS
MASTER_SLAVE_GROUP = "ms"
# disk_full fills the target's disk to the last byte, in either mode: a Raft member must still persist its
# votes (server/raft_group/hard_state.py), and a full master/slave member's `_meta` follower must still let the
# controller commit the hand-over (server/group_commit.py: its flush backoff ends when the disk has room again).
SLOTS = ("n0", "n1", "n2")  # a schedule names slots; a slot's node changes when a membership cycle replaces it
LEADER_KINDS = ("isolate_leader", "one_way_leader_out", "pause_leader", "slow_leader", "disk_full",
                "failing_disk_leader") + MASTER_SLAVE_ORDERINGS

# Answers that guarantee the attempt appended nothing: refused before the request reached the log.
# (DISK_FULL and DISK_ERROR are not: a leader fails its pending requests with them, and those entries may
# already be replicated and get committed by the next leader; TERM_CHANGED and TIMEOUT likewise.)
DEFINITE_REFUSALS = frozenset({
    ResponseCode.NOT_LEADER, ResponseCode.LEADER_TRANSFERRING, ResponseCode.LEADER_PENDING_FULL,
    ResponseCode.ENTRY_TOO_LARGE, ResponseCode.REQUEST_WITH_EMPTY_BODYS, ResponseCode.LEADER_NOT_READY,
    # a master/slave master decides these before it writes (FLUSH_SLAVE_TIMEOUT is not: the entry stays)
    ResponseCode.SLAVE_NOT_AVAILABLE, ResponseCode.IN_SYNC_REPLICAS_NOT_ENOUGH,
})
NOT_SENT = "not_sent"


def outcome_of_failed_append(attempts: list) -> str:
    """FAILED when no attempt can have appended anything (none was sent, or every one was refused with a
    definite code), else UNKNOWN (a timeout or a lost connection after the send, or an ambiguous code).
    The client retries an append (same client_id/seq) and raises only the last error, so every attempt counts."""
    if all(a == NOT_SENT or a in DEFINITE_REFUSALS for a in attempts):
        return FAILED
    return UNKNOWN


def _record_attempts(client: Client, attempts: list) -> None:
    """Wrap the client's connection pool so each append attempt's fate lands in `attempts`: NOT_SENT (no
    connection), the response's code, or the exception that ended it (outcome unknown)."""
    pool = client._pool
    get, call = pool.get, pool.call

    async def recording_call(node_id: str, request: Any, timeout_ms: float) -> Any:
        if not isinstance(request, AppendRequest):
            return await call(node_id, request, timeout_ms)
        try:
            await get(node_id, timeout_ms)  # the pool keeps it: call() below reuses this connection
        except BaseException:
            attempts.append(NOT_SENT)
            raise
        try:
            resp = await call(node_id, request, timeout_ms)
        except BaseException as e:
            attempts.append(type(e).__name__)
            raise
        attempts.append(resp.code)
        return resp

    pool.call = recording_call


@dataclass
class CycleRecord:
    cycle: int
    kind: str
    targets: list[str]
    hold_s: float
    t_fault: float = 0.0
    t_heal: float = 0.0
    t_end: float = 0.0
    recovered: bool = False
    unavailable_s: float = 0.0
    hold_unavailable_s: float = 0.0  # the longest no-ack stretch from the fault's start to its heal
    note: str = ""
    target_led_after_fault: bool = False  # disk faults: the failed leader still led a second after the fault
    acks_during_hold: int = 0


@dataclass
class SoakResult:
    seed: int
    cycles: list[CycleRecord]
    history: list[Op]
    violations: list[checker.Violation]
    logs: dict[str, list[tuple[int, bytes]]]
    mechanism: str
    duration_s: float
    report_dir: str | None = None
    errors: dict[str, int] = field(default_factory=dict)

    @property
    def not_recovered(self) -> list[CycleRecord]:
        return [c for c in self.cycles if not c.recovered]

    @property
    def failed_leader_kept_leading(self) -> list[CycleRecord]:
        """Disk-fault cycles whose leader, unable to store, still led a second after the fault."""
        return [c for c in self.cycles if c.target_led_after_fault]

    @property
    def passed(self) -> bool:
        return not (self.violations or self.not_recovered or self.failed_leader_kept_leading)

    skipped_kinds: dict[str, str] = field(default_factory=dict)
    loop_lag: dict[str, Any] = field(default_factory=dict)  # the nodes' event-loop lag (loop_lag.py)

    def figures(self) -> dict[str, Any]:
        per_kind: dict[str, list[float]] = {}
        per_kind_hold: dict[str, list[float]] = {}
        for c in self.cycles:
            per_kind.setdefault(c.kind, []).append(c.unavailable_s)
            per_kind_hold.setdefault(c.kind, []).append(c.hold_unavailable_s)
        return {
            "seed": self.seed, "cycles": len(self.cycles), "mechanism": self.mechanism,
            "duration_s": round(self.duration_s, 1), "ops": checker.summarize(self.history),
            "client_errors": self.errors, "violations": [str(v) for v in self.violations],
            "skipped_kinds": self.skipped_kinds,
            "not_recovered": [f"{c.cycle}:{c.kind}" for c in self.not_recovered],
            "failed_leader_kept_leading": [f"{c.cycle}:{c.kind}" for c in self.failed_leader_kept_leading],
            "disk_fault_cycles": [{"cycle": c.cycle, "kind": c.kind, "target": c.targets[0],
                                   "acks_during_hold": c.acks_during_hold, "unavailable_s": c.unavailable_s,
                                   "note": c.note} for c in self.cycles
                                  if c.kind in ("failing_disk_leader", "disk_full")],
            "membership_cycles": [{"cycle": c.cycle, "kind": c.kind, "note": c.note, "unavailable_s": c.unavailable_s}
                                  for c in self.cycles if c.kind in MEMBERSHIP_KINDS],
            "committed_entries": max((len(v) for v in self.logs.values()), default=0),
            "mechanisms": {k: sorted({c.note for c in self.cycles if c.kind == k}) for k in
                           ("packet_loss", "reorder_duplicate") if any(c.kind == k for c in self.cycles)},
            "unavailability_s": {k: {"cycles": len(v), "max": round(max(v), 3), "median": round(statistics.median(v), 3)}
                                 for k, v in sorted(per_kind.items())},
            # the same over the fault's hold only (without the heal: restarts, reconnections)
            "unavailability_during_fault_s": {k: {"max": round(max(v), 3), "median": round(statistics.median(v), 3)}
                                              for k, v in sorted(per_kind_hold.items())},
            "loop_lag": self.loop_lag,
        }


def schedule(seed: int, cycles: int, kinds: tuple[str, ...] = FAULT_KINDS) -> list[CycleRecord]:
    """The seeded fault schedule: every kind once (shuffled) first, then random kinds; targets for the
    non-leader faults and hold times come from the seed too (leader faults pick the leader of the moment)."""
    rng = random.Random(seed)
    first = list(kinds)
    rng.shuffle(first)
    out = []
    for i in range(cycles):
        kind = first[i] if i < len(first) else rng.choice(kinds)
        targets = sorted(rng.sample(list(SLOTS), 2 if kind == "kill9_majority" else 1))
        out.append(CycleRecord(i, kind, targets, round(rng.uniform(1.0, 2.5), 2)))
    return out


_TLS_ENV = ("QUORUMLOG_TLS_CA", "QUORUMLOG_TOKEN")


def _restore_env(saved: dict[str, str | None]) -> None:
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _tls_node_args(base_dir: str, ids: list[str]) -> dict[str, tuple[str, ...]]:
    """A CA and node certificates under base_dir/tls, a token in this process's environment (the nodes and the
    writers inherit both), and each node's --tls-* arguments."""
    from ..transport.certs import make_ca, make_node_cert, node_tls_settings
    from ..transport.tls import TLS_CA_ENV

    directory = os.path.join(base_dir, "tls")
    ca, _ = make_ca(directory)
    os.environ[TLS_CA_ENV] = ca
    os.environ.setdefault("QUORUMLOG_TOKEN", "soak-" + os.urandom(12).hex())
    args = {}
    for nid in ids:
        make_node_cert(directory, nid, ["127.0.0.1"])  # (clients and peers check its id, not its address)
        args[nid] = tuple(x for k, v in node_tls_settings(directory, nid) for x in ("--" + k.replace("_", "-"), v))
    return args


def _tear_tail(data_dir: str, rng: random.Random) -> str:
    """Write garbage right after the last non-zero byte of the newest data segment (a torn, half-written
    record, as a crash mid-write leaves it). Segments are preallocated with zeros."""
    from quorumlog.store.segments import list_segments
    segs = list_segments(os.path.join(data_dir, "store", "data"))
    if not segs:
        return "no data segment"
    _, path = segs[-1]
    with open(path, "r+b") as f:
        data = f.read()
        end = len(data.rstrip(b"\0"))
        garbage = bytes(rng.randrange(1, 256) for _ in range(rng.randrange(1, 64)))
        f.seek(end)
        f.write(garbage)
    return f"{len(garbage)} garbage bytes at {os.path.basename(path)}+{end}"


FILLER = "soak-filler"


class Soak:
    def __init__(self, base_dir: str, seed: int, cycles: int, *, writers: int = 4,
                 kinds: tuple[str, ...] = FAULT_KINDS, recover_timeout_s: float = 20.0,
                 network: str = "auto", tls: bool = False, mode: str = "raft") -> None:
        os.makedirs(base_dir, exist_ok=True)
        if mode not in ("raft", "master-slave"):
            raise ValueError(f"mode {mode!r}: raft or master-slave")
        self.mode = mode
        # the group the writers use: the nodes' own Raft group, or a master/slave group created on them
        self.group = MASTER_SLAVE_GROUP if mode == "master-slave" else "default"
        if mode == "master-slave":
            if kinds == FAULT_KINDS:  # (the default: every kind, the master/slave orderings too)
                kinds = kinds + MASTER_SLAVE_ORDERINGS
            dropped = [k for k in kinds if k not in MASTER_SLAVE_KINDS]
            kinds = tuple(k for k in kinds if k in MASTER_SLAVE_KINDS)
            if not (network == "netns" or (network == "auto" and netns.available())):
                dropped += [k for k in kinds if k in ("partition_minority", "isolate_leader")]
                kinds = tuple(k for k in kinds if k not in ("partition_minority", "isolate_leader"))
            if dropped:
                log.warning("master-slave soak: kinds %s do not reach the group's direct links; left out", dropped)
        self.base_dir = base_dir
        self.seed = seed
        self.rng = random.Random(seed * 7919 + 1)
        unknown = set(kinds) - set(ALL_KINDS)
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}; known: {', '.join(ALL_KINDS)}")
        if "disk_full" in kinds and not IS_ROOT:
            raise ValueError("fault kind disk_full needs root (tmpfs mounts)")
        self.skipped_kinds: dict[str, str] = {}
        shim = None
        if "failing_disk_leader" in kinds:
            try:
                shim = faildisk.build()
            except faildisk.NoCompiler as e:
                # never silent: the figures and the log say which kind did not run and why
                self.skipped_kinds["failing_disk_leader"] = str(e)
                log.warning("fault kind failing_disk_leader skipped: %s", e)
                kinds = tuple(k for k in kinds if k != "failing_disk_leader")
        self.plan = schedule(seed, cycles, kinds)
        self.writers = writers
        self.recover_timeout_s = recover_timeout_s
        spares = sum(1 for c in self.plan if c.kind in MEMBERSHIP_KINDS)
        all_ids = [f"n{i}" for i in range(3 + spares)]  # the members and the spares that will replace them
        # disk_full: every node's data dir is a small tmpfs that a filler file really fills (ENOSPC)
        self.disks = {nid: os.path.join(base_dir, f"disk-{nid}") for nid in all_ids} if "disk_full" in kinds else {}
        self._mounted: list[str] = []
        # tls: every node on mutual TLS with a token, as an operator runs it; the faults act on TLS connections
        self.tls = tls
        self._saved_env = {k: os.environ.get(k) for k in _TLS_ENV}  # put back when the run ends
        self.cluster = Cluster(base_dir, n=3, data_dirs=dict(self.disks), spares=spares,
                               node_args=_tls_node_args(base_dir, all_ids) if tls else {})
        self.members = list(self.cluster.nodes)  # in slot order: a replacement takes its predecessor's slot
        self.original = list(self.members)
        # failing_disk_leader: every node runs with the failing-disk shim; touching its trigger file makes
        # every write and fsync under its data dir return EIO
        self.disk_triggers: dict[str, str] = {}
        self._shim = shim
        if shim is not None:
            for node in self.cluster.nodes.values():
                self._arm_failing_disk(node)
        self.net = Net(seed)
        if network == "auto":
            network = "netns" if netns.available() else "proxy"
        assert network in ("proxy", "netns"), network
        self.links = netns.NetnsLinks(all_ids, os.getpid() + seed) if network == "netns" else None
        self.mechanism = ("network namespaces + veth link down (partitions), asyncio per-link TCP proxy (one-way "
                          "cut, delay, rate, resets)" if self.links else "asyncio per-link TCP proxy (no namespaces)")
        if tls:
            self.mechanism += "; nodes on mutual TLS with a token"
        if mode == "master-slave":
            self.mechanism += (f"; writers on master/slave group {MASTER_SLAVE_GROUP} (SYNC_MASTER, min_in_sync_replicas "
                               f"2 of 3, controller in _meta)")
        host = self.links.host if self.links else {m: "127.0.0.1" for m in all_ids}
        proxy_host = self.links.bridge_host if self.links else "127.0.0.1"
        real = {nid: node.port for nid, node in self.cluster.nodes.items()}
        self.cluster.peers = ",".join(f"{m}={host[m]}:{real[m]}" for m in self.members)  # clients go direct
        # spares get their namespace, tmpfs and failing-disk shim like the others; links to them are direct (a
        # configuration names one address per member), so partitions reach them through namespaces only
        self.host = host
        self.direct = {m: f"{host[m]}:{real[m]}" for m in self.members}
        for i in range(3, 3 + spares):
            self.direct[f"n{i}"] = f"{host[f'n{i}']}:{self.cluster.spare_port(i)}"
        self.client_peers = ",".join(f"{m}={a}" for m, a in self.direct.items())
        ports = iter(free_ports(len(real) * (len(real) - 1)))
        for src in self.members:
            parts = []
            for dst in self.members:
                if dst == src:
                    parts.append(f"{dst}={host[dst]}:{real[dst]}")
                else:
                    p = next(ports)
                    self.net.add(LinkProxy(src, dst, p, real[dst], self.net.state, listen_host=proxy_host,
                                           target_host=host[dst]))
                    parts.append(f"{dst}={proxy_host}:{p}")
            node = self.cluster.nodes[src]
            node.argv[node.argv.index("--peers") + 1] = ",".join(parts)
            if self.links:
                node.argv = [*self.links.exec_prefix(src), *node.argv, "--bind-host", host[src]]
        self.history: list[Op] = []
        self.errors: dict[str, int] = {}
        self.ok_times: list[float] = []
        self._stopped: set[str] = set()
        self.loop_lag = LoopLagTally()

    # -- workload ------------------------------------------------------------------------------------
    async def _writer(self, name: str, stop: asyncio.Event) -> None:
        client = Client(self.client_peers, timeout_ms=4_000, group=self.group)
        attempts: list = []
        _record_attempts(client, attempts)
        i = 0
        try:
            while not stop.is_set():
                value = f"{name}-{i:07d}".encode()
                i += 1
                attempts.clear()
                t0 = time.monotonic()
                try:
                    r = await asyncio.wait_for(client.append(value), 6.0)
                except (quorumlog.QuorumLogError, asyncio.TimeoutError, OSError) as e:
                    t1 = time.monotonic()
                    code = getattr(getattr(e, "code", None), "name", type(e).__name__)
                    outcome = outcome_of_failed_append(attempts)
                    key = f"{code}:{outcome}"
                    self.errors[key] = self.errors.get(key, 0) + 1
                    self.history.append(Op(name, value, t0, t1, outcome))
                    await asyncio.sleep(0.02)
                    continue
                t1 = time.monotonic()
                self.history.append(Op(name, value, t0, t1, OK, r.index))
                self.ok_times.append(t1)
        finally:
            await client.close()

    # -- faults --------------------------------------------------------------------------------------
    async def _leader(self, admin: Client) -> str | None:
        try:
            return await self.cluster.wait_leader(admin, timeout_s=10.0)
        except AssertionError:
            return None

    def _restart(self, nid: str) -> None:
        node = self.cluster.nodes[nid]
        if not node.alive:
            node.start()

    async def _cycle(self, c: CycleRecord, admin: Client) -> None:
        nodes = self.cluster.nodes
        c.targets = [self.members[SLOTS.index(x)] if x in SLOTS else x for x in c.targets]
        leader = await self._leader(admin) if c.kind in LEADER_KINDS + MEMBERSHIP_KINDS else None
        if leader is not None and c.kind in LEADER_KINDS:
            c.targets = [leader]
        t = c.targets
        spare = next((x for x in t if x not in self.original), None)
        if spare is not None and (c.kind in ("one_way_leader_out", "slow_leader") or (
                not self.links and c.kind in ("partition_minority", "isolate_leader"))):
            # links to a spare are direct (not proxied): a proxy fault on it would act on nothing
            c.note = f"skipped: {spare} is a spare (links not proxied)"
            c.t_fault = c.t_heal = c.t_end = time.monotonic()
            c.recovered = True
            return
        others = lambda x: [m for m in self.members if m != x]  # noqa: E731
        c.t_fault = time.monotonic()
        if c.kind in ("partition_minority", "isolate_leader"):
            if self.links:
                self.links.isolate(t)  # real packet loss: the veth is down
            else:
                self.net.isolate(t, self.members)
        elif c.kind == "one_way_leader_out":
            self.net.cut([(t[0], o) for o in others(t[0])])
        elif c.kind in ("kill9_node", "kill9_majority"):
            for nid in t:
                nodes[nid].kill9()
        elif c.kind == "pause_leader":
            nodes[t[0]].signal(signal.SIGSTOP)
            self._stopped.add(t[0])
        elif c.kind == "restart_all":
            c.targets = list(self.members)
            for nid in self.members:
                nodes[nid].kill9()
        elif c.kind == "torn_tail":
            nodes[t[0]].kill9()
            c.note = _tear_tail(nodes[t[0]].data_dir, self.rng)
        elif c.kind == "delay":
            self.net.delay(self.rng.choice((20, 50, 100)))
        elif c.kind == "slow_leader":
            self.net.slow([(t[0], o) for o in others(t[0])], 64 * 1024)
        elif c.kind == "reset_connections":
            pass  # resets happen during the hold below
        elif c.kind == "disk_full":
            c.note = fill_to_last_byte(os.path.join(self.disks[t[0]], FILLER))
        elif c.kind == "failing_disk_leader":
            open(self.disk_triggers[t[0]], "w").close()
        elif c.kind == "packet_loss":
            c.targets = list(self.members)
            if self.links and self.links.packet_faults():
                c.note = self.links.loss(self.rng.choice((5, 10, 20)))
            else:
                self.net.loss(0.05, 0.005)
                c.note = "proxy, TCP-level: per chunk 5% stall of one RTO, 0.5% connection reset"
        elif c.kind in MEMBERSHIP_KINDS:
            await self._change_members(c, admin, leader)
        elif c.kind == "pause_slave_cut_kill_master":
            await self._pause_slave_cut_kill_master(c, t[0])
        elif c.kind == "hand_switch":
            await self._hand_switch(c, admin, t[0])
        elif c.kind == "reorder_duplicate":
            c.targets = list(self.members)
            if self.links and self.links.packet_faults() == "netem":
                c.note = self.links.loss(0, duplicate_percent=5, reorder_percent=25)
            else:
                jitter_ms = self.rng.choice((20, 50))
                self.net.jitter(jitter_ms)
                c.note = f"proxy, TCP-level: 0..{jitter_ms} ms jitter per chunk (no netem here)"
        else:
            raise ValueError(c.kind)
        log.info("cycle %d: %s %s %s", c.cycle, c.kind, c.targets, c.note)
        if c.kind in MEMBERSHIP_KINDS:
            pass  # the change itself was the fault
        elif c.kind == "reset_connections":
            end = time.monotonic() + c.hold_s
            while time.monotonic() < end:
                self.net.reset()
                await asyncio.sleep(0.2)
        elif c.kind in ("failing_disk_leader", "disk_full"):
            await self._hold_watching_target(c, admin)
        else:
            await asyncio.sleep(c.hold_s)
        # heal
        c.t_heal = time.monotonic()
        self.net.heal()
        for d in self.disks.values():
            try:
                os.unlink(os.path.join(d, FILLER))
            except FileNotFoundError:
                pass
        if self.links:
            self.links.heal()
            self.links.heal_packets()
        for nid in list(self._stopped):
            nodes[nid].signal(signal.SIGCONT)
            self._stopped.discard(nid)
        for nid, trigger in self.disk_triggers.items():
            if os.path.exists(trigger):
                os.unlink(trigger)
                # its store refuses writes until a restart (EIO is final), if it has not fail-stopped already
                exited = not nodes[nid].alive
                nodes[nid].kill9()
                c.note += f"{nid} {'had exited (fail-stop)' if exited else 'restarted'}; "
        for nid in self.members:
            self._restart(nid)
        # recovered = a write acknowledged after the heal, and some more
        acks_at_heal = sum(1 for x in self.ok_times if x > c.t_heal)
        deadline = time.monotonic() + self.recover_timeout_s
        while time.monotonic() < deadline:
            after = sum(1 for x in self.ok_times[-200:] if x > c.t_heal)
            if after >= acks_at_heal + 5:
                c.recovered = True
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
        c.t_end = time.monotonic()
        acks = [x for x in self.ok_times if c.t_fault <= x <= c.t_end]
        edges = [c.t_fault, *acks, c.t_end]
        c.unavailable_s = round(max(b - a for a, b in zip(edges, edges[1:])), 3)
        held = [c.t_fault, *(x for x in acks if x <= c.t_heal), c.t_heal]
        c.hold_unavailable_s = round(max(b - a for a, b in zip(held, held[1:])), 3)

    async def _pause_slave_cut_kill_master(self, c: CycleRecord, master: str) -> None:
        """One slave SIGSTOPped (it stays in the SyncStateSet until the controller hears it is gone), writes go
        on acknowledged by the master and the other slave, that slave's links are cut (it lives), then the
        master is killed: the controller must not elect the stopped slave, which lacks those writes."""
        nodes = self.cluster.nodes
        paused, cut = self.rng.sample([m for m in self.members if m != master], 2)
        nodes[paused].signal(signal.SIGSTOP)
        self._stopped.add(paused)
        await asyncio.sleep(0.5)  # (acknowledged appends the paused slave does not hold)
        if self.links:
            self.links.isolate([cut])
        else:
            c.note += "no netns: the second slave's links are not cut; "
        await asyncio.sleep(0.3)
        nodes[master].kill9()
        c.targets = [paused, cut, master]

    async def _hand_switch(self, c: CycleRecord, admin: Client, master: str) -> None:
        """`ha elect --to` a random other member under load: it becomes master once it holds every acknowledged
        byte, or the switch is given up; either way nothing acknowledged is lost."""
        from quorumlog.client import ha

        to = self.rng.choice([m for m in self.members if m != master])
        c.targets = [to]
        try:
            state = await ha.elect(admin.peers, self.group, to=to, wait_s=c.hold_s + 5)
            c.note += f"elected {state.get('master')} (epoch {state.get('epoch')}); "
        except (QuorumLogError, OSError, asyncio.TimeoutError) as e:
            c.note += f"elect {to}: {getattr(e, 'code', type(e).__name__)!s}: {e}; "

    async def _change_members(self, c: CycleRecord, admin: Client, leader: str | None) -> None:
        """replace_follower: kill -9 a follower, remove it, add a fresh node in its slot. remove_leader: remove
        the leader under load (it hands over and steps down), stop it, add a fresh node in its slot."""
        if c.kind == "replace_follower":
            followers = [m for m in self.members if m != leader]
            old = c.targets[0] if c.targets[0] in followers else self.rng.choice(followers)
            self.cluster.nodes[old].kill9()
        else:
            if leader is None:
                c.note = "no leader to remove"
                return
            old = leader
        deadline = time.monotonic() + 30
        await self._member_change(admin, "remove", old, deadline)
        if c.kind == "remove_leader":
            await self.cluster.wait_leader(admin, timeout_s=15, exclude=(old,))
            self.cluster.nodes[old].terminate()
        new = self._start_spare()
        self.members[self.members.index(old)] = new
        await self._member_change(admin, "add_learner", new, deadline, self.direct[new])
        await self._member_change(admin, "promote", new, deadline)
        c.targets = [old, new]
        c.note = f"{old} removed, {new} added"

    async def _member_change(self, admin: Client, change: str, node_id: str, deadline: float,
                             address: str = "") -> None:
        """One change, retried through elections, a change still in flight and a learner catching up; an
        answer that it is done already (our own earlier attempt went through) counts as done."""
        while True:
            try:
                await admin.change_member(change, node_id, address)
                return
            except quorumlog.QuorumLogError as e:
                name = e.code.name
                if name == "MEMBER_EXISTS" and change != "remove":
                    return
                if name == "UNKNOWN_MEMBER" and change == "remove":
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{change} {node_id}: {e!r}") from e
                await asyncio.sleep(0.1)

    def _start_spare(self) -> str:
        """The next spare: a fresh node that knows the current members (directly) and waits to be added."""
        i = len(self.cluster.nodes)
        nid = f"n{i}"
        peers = ",".join(f"{m}={self.direct[m]}" for m in [*self.members, nid])
        node = self.cluster.spare_node(i, peers, "--join", "true", "--bind-host", self.host[nid])
        if self.links:
            node.argv = [*self.links.exec_prefix(nid), *node.argv]
        if self._shim is not None:
            self._arm_failing_disk(node)
        node.start()
        return nid

    def _arm_failing_disk(self, node) -> None:
        self.disk_triggers[node.node_id] = os.path.join(self.base_dir, f"failing-disk-{node.node_id}")
        # a copy: the Cluster gives every node the same env dict
        node.env = {**node.env, **faildisk.failing_disk_env(node.data_dir, self.disk_triggers[node.node_id],
                                                            self._shim)}

    def _configuration_check(self, statuses: dict) -> list[checker.Violation]:
        """The group ends with one configuration that every member agrees on, naming exactly the members."""
        seen = {m: tuple(sorted(statuses[m].raw.get("voters", []))) for m in self.members}
        if len(set(seen.values())) != 1 or set(next(iter(seen.values()))) != set(self.members):
            return [checker.Violation("configuration", f"members {self.members} disagree: {seen}")]
        return []

    async def _hold_watching_target(self, c: CycleRecord, admin: Client) -> None:
        """Hold a disk fault on the leader while watching it: after a grace of one second it must not lead
        (it cannot store anything: it hands over), and some other member must lead and acknowledge writes."""
        target = c.targets[0]
        end = c.t_fault + c.hold_s
        grace_s = 1.0
        while time.monotonic() < end:
            await asyncio.sleep(0.1)
            if time.monotonic() - c.t_fault < grace_s:
                continue
            try:
                st = await self.cluster.statuses(admin)
            except quorumlog.QuorumLogError:
                continue
            s = st.get(target)
            # (a master/slave master leads only under a lease: one that resigned keeps its role, not its lease,
            # until the controller's next view)
            if s is not None and s.role in WRITABLE_ROLES and s.raw.get("lease_ms_left", 1) > 0:
                c.target_led_after_fault = True
        c.acks_during_hold = sum(1 for x in self.ok_times if c.t_fault <= x <= end)

    # -- whole run -----------------------------------------------------------------------------------
    async def _run(self) -> tuple[dict[str, list[tuple[int, bytes]]], list[checker.Violation]]:
        for d in self.disks.values():
            os.makedirs(d, exist_ok=True)
            subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", d], check=True, timeout=10)
            self._mounted.append(d)
        if self.links:
            self.links.setup()
        await self.net.start()
        self.cluster.start()
        stop = asyncio.Event()
        tasks: list[asyncio.Task] = []
        try:
            if self.mode == "master-slave":
                await self._create_master_slave_group()
            async with Client(self.client_peers, timeout_ms=10_000, group=self.group) as admin:
                await self.cluster.wait_leader(admin, timeout_s=30)
                tasks = [asyncio.create_task(self._writer(f"w{i}", stop)) for i in range(self.writers)]
                await asyncio.sleep(0.5)
                for c in self.plan:
                    await self._read_loop_lag(admin)  # (before the fault: a kill -9 loses what came after)
                    await self._cycle(c, admin)
                await self._read_loop_lag(admin)
                stop.set()
                await asyncio.wait_for(asyncio.gather(*tasks), 30)
                dead = [nid for nid in self.members if not self.cluster.nodes[nid].alive]
                if dead:  # a node that did not survive its restart (e.g. refused its torn tail)
                    raise RuntimeError(f"nodes {dead} exited after healing:\n{self.cluster.logs()}")
                members = tuple(self.members)
                statuses = await self.cluster.wait_converged(admin, timeout_s=60, members=members)
                self.loop_lag.record(statuses)  # (every member up again: the last cycle's restarts included)
                config_violations = self._configuration_check(statuses)
                logs = {nid: [(e.index, e.body) for e in entries]
                        for nid, entries in (await self.cluster.committed_logs(admin, members)).items()}
        finally:
            stop.set()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.net.close()
        return logs, config_violations + checker.check(self.history, logs)

    async def _read_loop_lag(self, admin: Client) -> None:
        try:
            self.loop_lag.record(await self.cluster.statuses(admin))
        except (QuorumLogError, OSError, asyncio.TimeoutError) as e:
            log.warning("loop lag not read: %s", e)

    async def _create_master_slave_group(self) -> None:
        """`_meta` (the controller's state) and the group, SYNC_MASTER with 2 of 3 in sync, slaves readable."""
        from quorumlog.client.groups import GroupAdmin
        async with Client(self.client_peers, timeout_ms=10_000) as c:
            await self.cluster.wait_leader(c, timeout_s=30)
        nodes = {m: a for m, a in parse_peers(self.client_peers).items() if m in self.members}
        async with GroupAdmin(nodes, timeout_ms=30_000) as admin:
            await admin.wait_answering(30)  # (the leader of two: the third may still be starting)
            await admin.create_meta()
            await admin.create(MASTER_SLAVE_GROUP, nodes=list(self.members), mode="master-slave",
                               master_slave={"min_in_sync_replicas": 2, "slave_read_enable": True})

    def run(self, report_root: str | None = None) -> SoakResult:
        t0 = time.monotonic()
        logs: dict[str, list[tuple[int, bytes]]] = {}
        violations: list[checker.Violation] = []
        crash: BaseException | None = None
        try:
            logs, violations = asyncio.run(self._run())
        except BaseException as e:  # noqa: BLE001 — a run that crashed still writes its report
            crash = e
        finally:
            self.cluster.stop()
            _restore_env(self._saved_env)
            if self.links:
                self.links.teardown()
            for d in self._mounted:
                if subprocess.run(["umount", d], timeout=30, capture_output=True).returncode != 0:
                    # still busy (a node's mount namespace from `ip netns exec`, a straggler): detach it lazily
                    subprocess.run(["umount", "-l", d], timeout=30)
        result = SoakResult(self.seed, self.plan, self.history, violations, logs,
                            self.mechanism, time.monotonic() - t0, errors=self.errors,
                            skipped_kinds=self.skipped_kinds, loop_lag=self.loop_lag.figures())
        if crash is not None or not result.passed:
            result.report_dir = self.write_report(report_root or self.base_dir, result, crash)
        if crash is not None:
            raise RuntimeError(f"soak seed {self.seed} crashed; report in {result.report_dir}") from crash
        return result

    def write_report(self, root: str, result: SoakResult, crash: BaseException | None) -> str:
        props = sorted({v.property for v in result.violations}) or (
            ["crash"] if crash else ["not_recovered"] if result.not_recovered else ["failed_leader_kept_leading"])
        d = os.path.join(root, f"soak-report-seed{self.seed}-{'-'.join(props)}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "violations.txt"), "w") as f:
            f.write("\n".join(str(v) for v in result.violations) + "\n")
            if crash is not None:
                f.write(f"crash: {crash!r}\n")
        with open(os.path.join(d, "history.jsonl"), "w") as f:
            for op in result.history:
                f.write(json.dumps({**asdict(op), "value": op.value.decode(errors="replace")}) + "\n")
        with open(os.path.join(d, "schedule.json"), "w") as f:
            json.dump({"seed": self.seed, "cycles": [asdict(c) for c in result.cycles],
                       "net_events": self.net.events}, f, indent=1)
        for nid, entries in result.logs.items():
            with open(os.path.join(d, f"{nid}.committed.jsonl"), "w") as f:
                for index, body in entries:
                    f.write(json.dumps([index, body.decode(errors="replace")]) + "\n")
        for nid, node in self.cluster.nodes.items():
            if os.path.exists(node.log_path):
                shutil.copy(node.log_path, os.path.join(d, f"{nid}.node.log"))
        with open(os.path.join(d, "figures.json"), "w") as f:
            json.dump(result.figures(), f, indent=1)
        return d


def run_soak(seed: int, cycles: int, *, base_dir: str | None = None, report_root: str | None = None,
             **kw: Any) -> SoakResult:
    own = base_dir is None
    base_dir = base_dir or tempfile.mkdtemp(prefix=f"soak-{seed}-")
    try:
        return Soak(base_dir, seed, cycles, **kw).run(report_root or (tempfile.gettempdir() if own else base_dir))
    finally:
        if own:
            shutil.rmtree(base_dir, ignore_errors=True)
