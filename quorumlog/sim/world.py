"""The simulated world: N nodes running the real RaftCore, a network, disks, clients and faults, one seed.

A run has two phases (TigerBeetle's VOPR): a fault phase, where anything may happen, then — after healing
every partition, restarting every node, calming the network and the disks — a liveness phase, which must
end within a bounded virtual time with one leader, every client answered and every node caught up.
The Checker runs after every step of every node; the first Violation ends the run.

Besides the clients' appends, a seed may run retention (each node deletes old committed entries, as the
server's retention task does, so logs begin above 0 and a node back from a long absence is reset to its
leader's begin index) and a reader (committed entries read from any node must be the committed log).
"""

from __future__ import annotations

import hashlib
import logging
import random
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

from ..codes import ResponseCode
from ..errors import IndexOutOfRange
from ..format.log_entry import decode_records
from ..raft.membership import Change
from ..raft.types import (ChangeMembership, ClientAppend, Completion, RaftConfig, Receive, Role, Tick,
                          TransferLeadership)
from ..wire.messages import Message
from .checker import Checker, Op, Violation
from .clients import SimClient
from .readers import LinearReader
from .faults import FaultInjector
from .liveness import NodeLiveness
from .network import Network
from .node import CoreFactory, SimNode
from .options import SimOptions, world_seed
from .planted_raft import planted
from .scheduler import Scheduler
from .trace import describe

LIVENESS_CHECK_EVERY_MS = 50
# A bound on work per seed (typical runs take 1k–30k steps): a message storm that never lets virtual time
# advance would otherwise spin forever.
MAX_STEPS_PER_SEED = 1_000_000


def real_core_factory() -> CoreFactory:
    from ..raft.core import RaftCore  # imported late: the simulator is importable without a core

    return RaftCore


@dataclass(slots=True)
class SimResult:
    seed: int
    options: SimOptions
    steps: int = 0
    virtual_ms: int = 0
    wall_s: float = 0.0
    violation: Violation | None = None
    trace_sha256: str = ""
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.violation is None

    def replay_command(self) -> str:
        cmd = f"python -m quorumlog.sim --seed {self.seed} --nodes {self.options.node_count} --trace"
        for bug in sorted(self.options.planted_bugs):
            cmd += f" --bug {bug}"
        return cmd


class World:
    def __init__(self, options: SimOptions, core_factory: CoreFactory | None = None,
                 trace: Callable[[str], None] | None = None) -> None:
        self.options = options
        self.rng = random.Random(world_seed(options.seed))
        self.scheduler = Scheduler()
        self.trace_sink = trace
        self.steps = 0
        self.phase = "faults"
        self.finished = False
        self.network = Network(self.rng, self.scheduler, options, trace and self._trace_raw)
        self.node_ids = [f"n{i}" for i in range(options.node_count)]
        factory = core_factory or real_core_factory()
        self._factory = factory
        preferred = self.rng.choice(self.node_ids) if self.rng.random() < 0.2 else None
        self._config = dict(peers=tuple(self.node_ids), preferred_leader_id=preferred,
                            election_timeout_min_ms=options.election_timeout_min_ms,
                            election_timeout_max_ms=options.election_timeout_max_ms,
                            max_push_batch_bytes=options.max_push_batch_bytes,
                            max_pending_pushes=options.max_pending_pushes,
                            max_wait_ack_ms=options.max_wait_ack_ms,
                            quiesce=options.quiesce,
                            check_quorum=options.check_quorum)
        self.nodes: dict[str, SimNode] = {}
        for node_id in self.node_ids:
            self.nodes[node_id] = SimNode(self, node_id, RaftConfig(node_id=node_id, **self._config), factory)
        self.checker = Checker(self.nodes)
        self.membership_requests: dict[int, tuple[str, str, int]] = {}  # request id -> (change, node id, tries)
        self.membership_done: dict[str, int] = {}  # committed changes by kind ("remove_leader": a leader removed itself)
        self.clients = [SimClient(self, i, i < options.idempotent_clients, options)
                        for i in range(options.client_count)]
        self.faults = FaultInjector(self)
        self.liveness = NodeLiveness(self) if options.quiesce else None
        self._next_request_id = 0
        self.request_owner: dict[int, tuple[SimClient, Op]] = {}
        self.request_target: dict[int, str] = {}
        self.read_requests: dict[int, LinearReader] = {}
        self.reader = LinearReader(self, options.linear_read_every_ms) if options.linear_read_every_ms else None
        self.transfer_requests: dict[int, str] = {}
        self.healed_at_ms = -1
        self.stable_leader_ms = -1
        self.liveness_deadline_ms = options.fault_phase_ms + options.liveness_timeout_ms
        if trace:
            self._trace_raw(f"seed {options.seed}: {options.describe()} preferred_leader={preferred}")

    # -- tracing -----------------------------------------------------------------------------------
    def _trace_raw(self, line: str) -> None:
        assert self.trace_sink is not None
        self.trace_sink(f"[{self.scheduler.now_ms:>7}] {line}")

    def trace_line(self, make: Callable[[], str]) -> None:
        """Lazy: the line is only formatted when someone listens."""
        if self.trace_sink:
            self._trace_raw(make())

    # -- the run -----------------------------------------------------------------------------------
    def run(self) -> None:
        """Run to the end of the liveness phase; raises Violation on the first broken invariant. The options'
        planted bugs are in the core for the length of the run (sim/planted_raft.py)."""
        with planted(self.options.planted_bugs):
            self._run()

    def _run(self) -> None:
        for node_id in self.node_ids:
            self.scheduler.after(self.rng.randrange(self.options.tick_ms), self._tick, node_id)
            if self.liveness is not None:
                self.liveness.start(node_id)
        for client in self.clients:
            client.start()
        self.faults.start()
        if self.options.retention_every_ms:
            self.scheduler.after(self.options.retention_every_ms, self._retention)
        if self.options.read_every_ms:
            self.scheduler.after(self.options.read_every_ms, self._read)
        if self.reader is not None:
            self.reader.start()
        self.scheduler.at(self.options.fault_phase_ms, self._heal)
        while not self.finished:
            handler, args = self.scheduler.pop()
            if self.scheduler.now_ms > self.liveness_deadline_ms:
                raise Violation("liveness", self._liveness_report())
            if self.steps > MAX_STEPS_PER_SEED:
                raise Violation("livelock", f"{self.steps} steps by {self.scheduler.now_ms} ms virtual time")
            handler(*args)
        self.checker.audit()

    def _tick(self, node_id: str) -> None:
        node = self.nodes[node_id]
        if node.alive:
            node.step(Tick(self.scheduler.now_ms))
            if self.liveness is not None and node.alive:
                self.liveness.check(node_id)
        self.scheduler.after(self.options.tick_ms, self._tick, node_id)

    def deliver_message(self, message: Message) -> None:
        node = self.nodes[message.to]
        if not node.alive:
            return
        self.trace_line(lambda: describe(message))
        if self.liveness is not None:
            self.liveness.heard_from(message.to, message.frm)
        node.step(Receive(message))

    def new_request_id(self, client: SimClient, op: Op) -> int:
        self._next_request_id += 1
        self.request_owner[self._next_request_id] = (client, op)
        return self._next_request_id

    def new_read_id(self, reader: LinearReader) -> int:
        self._next_request_id += 1
        self.read_requests[self._next_request_id] = reader
        return self._next_request_id

    def deliver_client_request(self, payload: tuple[str, ClientAppend]) -> None:
        target, event = payload
        self.request_target[event.request_id] = target
        node = self.nodes[target]
        if node.alive:
            self.trace_line(lambda: f"{target} <- append req={event.request_id}")
            node.step(event)
        else:
            self.trace_line(lambda: f"{target} is down: append req={event.request_id} lost")

    def on_completion(self, node: SimNode, completion: Completion) -> None:
        rid = completion.request_id
        if rid in self.membership_requests:
            change, target, tries = self.membership_requests[rid]
            code = completion.code
            self.trace_line(lambda: f"{node.node_id} membership req={rid} {change} {target}: {code.name}")
            if code == ResponseCode.SUCCESS:
                kind = "remove_leader" if change == Change.REMOVE.value and target == node.node_id else change
                self.membership_done[kind] = self.membership_done.get(kind, 0) + 1
            promote_next = (change == Change.ADD_LEARNER.value and code == ResponseCode.SUCCESS
                            or change == Change.PROMOTE.value and tries < 5 and code in (
                                ResponseCode.LEARNER_NOT_CAUGHT_UP, ResponseCode.CONFIG_CHANGE_IN_PROGRESS))
            if promote_next and self.rng.random() < 0.8:
                self.scheduler.after(self.rng.randint(50, 400), self.change_membership, Change.PROMOTE, target,
                                     tries + 1)
            return
        if rid in self.transfer_requests:
            self.trace_line(lambda: f"{node.node_id} transfer req={rid} to {self.transfer_requests[rid]}: "
                                    f"{completion.code.name}")
            return
        if rid in self.read_requests:
            self.read_requests.pop(rid).on_completion(node.node_id, completion)
            return
        owner = self.request_owner.get(rid)
        if owner is None:
            raise Violation("contract", f"{node.node_id} completes unknown request {rid}")
        client, op = owner
        self.checker.on_completion(node.node_id, completion, op)
        self.network.send_client(completion, client.on_completion)

    # -- faults the injector asks for --------------------------------------------------------------
    def crash(self, node: SimNode) -> None:
        keep = self.rng.randint(0, self.options.keep_unflushed_max)
        self.trace_line(lambda: f"FAULT crash {node.node_id} (end={node.store.end_index} "
                                f"durable={node.store.durable_index} keep_unflushed={keep})")
        node.crash(keep)
        self.checker.on_crash(node)

    def restart(self, node: SimNode) -> None:
        self.trace_line(lambda: f"FAULT restart {node.node_id} (end={node.store.end_index} "
                                f"term={node.hard_state.term} voted_for={node.hard_state.voted_for})")
        node.restart()
        if self.liveness is not None:
            self.liveness.restarted(node.node_id)

    def fail_stop(self, node: SimNode, reason: str) -> None:
        """A node that saw EIO exits once its core handled it (server/node.py); restarted after a while."""
        self.trace_line(lambda: f"{node.node_id} fail-stops: {reason}")
        self.crash(node)
        self.faults.restart_later(node.node_id, node.incarnation)

    # -- retention and reads -----------------------------------------------------------------------
    def _retention(self) -> None:
        """Each live node deletes committed, durable entries below what it may (the server's _retention:
        its commit point; a leader also every follower's watermark), keeping a random few (segments)."""
        for node_id in self.node_ids:
            node = self.nodes[node_id]
            if not node.alive:
                continue
            st, store = node.core.status(), node.store
            safe = min(st.committed_index, store.durable_index, store.committed_index)
            if st.role == Role.LEADER and st.watermarks:
                safe = min(safe, *st.watermarks.values())
            below = min(safe - self.rng.randint(0, self.options.retention_keep_max), store.end_index)
            if below > store.begin_index:
                self.trace_line(lambda: f"{node_id} retention deletes below {below}")
                store.delete_before(below)
        self.scheduler.after(self.options.retention_every_ms, self._retention)

    def _read(self) -> None:
        """Read a random range of one live node's committed entries: they must be the committed log's."""
        live = [n for n in self.node_ids if self.nodes[n].alive]
        if live:
            node = self.nodes[self.rng.choice(live)]
            store = node.store
            last = store.committed_index
            if last >= store.begin_index:
                start = self.rng.randint(store.begin_index, last)
                try:
                    records = store.read(start, self.rng.choice((1, 200, 1 << 16)), last)
                except IndexOutOfRange as exc:
                    raise Violation("read", f"{node.node_id} cannot read committed {start}..{last}: {exc}") from exc
                if records.first_index != start or not start <= records.last_index <= last:
                    raise Violation("read", f"{node.node_id} read of {start}..{last} returned "
                                            f"{records.first_index}..{records.last_index}")
                entries = decode_records(b"".join(bytes(c) for c in records.chunks))
                self.checker.on_read(node.node_id, start, records.last_index, entries)
        self.scheduler.after(self.options.read_every_ms, self._read)

    def leader(self) -> SimNode | None:
        """The live leader of the highest term, if any."""
        best = None
        for node_id in self.node_ids:
            node = self.nodes[node_id]
            if node.alive and node.core.role == Role.LEADER and (best is None or node.core.term > best.core.term):
                best = node
        return best

    def transfer_leadership(self) -> None:
        leader = self.leader()
        if leader is None:
            return
        to = self.rng.choice(sorted(leader.core.membership.voters - {leader.node_id}) or [leader.node_id])
        self._next_request_id += 1
        rid = self._next_request_id
        self.transfer_requests[rid] = to
        self.trace_line(lambda: f"FAULT transfer leadership {leader.node_id} -> {to} req={rid}")
        leader.step(TransferLeadership(rid, to))

    def change_membership(self, change: Change | None = None, target: str | None = None, tries: int = 0) -> None:
        """Ask the leader for one change: promote a learner, remove a member (the leader itself sometimes), or
        add a fresh node as a learner. Refusals (one in flight, not caught up, ...) are part of the test. As
        `member add` does, an added learner is promoted once it caught up (retried a few times)."""
        leader = self.leader()
        if leader is None or self.phase != "faults":
            return
        m, rng = leader.core.membership, self.rng
        if change is None:
            created = len(self.node_ids) - self.options.node_count
            roll = rng.random()
            if m.learners and roll < 0.6:
                change, target = Change.PROMOTE, rng.choice(sorted(m.learners))
            elif created < self.options.max_new_nodes and len(m.voters) < 5 and (roll < 0.45 or m.learners and
                                                                                 roll < 0.8):
                change, target = Change.ADD_LEARNER, self._new_node()
            elif len(m.members) > 1:
                change = Change.REMOVE
                target = leader.node_id if rng.random() < self.options.leader_victim_ratio / 2 else \
                    rng.choice(sorted(m.members))
            else:
                return
        self._next_request_id += 1
        rid = self._next_request_id
        self.membership_requests[rid] = (change.value, target, tries)
        self.trace_line(lambda: f"FAULT membership {leader.node_id}: {change.value} {target} req={rid}")
        leader.step(ChangeMembership(rid, change.value, target))
        if tries == 0 and rng.random() < 0.25:
            # the leader dies with the change barely written: the next leader may not hold it (raft/membership.py)
            self.scheduler.after(rng.randint(0, 10), self._crash_if_alive, leader.node_id)

    def _crash_if_alive(self, node_id: str) -> None:
        node = self.nodes[node_id]
        if node.alive and self.phase == "faults":
            self.crash(node)
            self.faults.restart_later(node_id, node.incarnation)

    def _new_node(self) -> str:
        """A fresh node (an id never used before) that joins: no configuration until the log gives it one."""
        node_id = f"n{len(self.node_ids)}"
        self.node_ids.append(node_id)
        config = RaftConfig(node_id=node_id, join=True, **self._config)
        self.nodes[node_id] = SimNode(self, node_id, config, self._factory)
        self.scheduler.after(self.rng.randrange(self.options.tick_ms), self._tick, node_id)
        if self.liveness is not None:
            self.liveness.start(node_id)
        self.trace_line(lambda: f"new node {node_id}")
        return node_id

    def members(self, leader: SimNode) -> list[SimNode]:
        """The nodes of `leader`'s configuration (voters and learners): removed and never-added nodes are out."""
        return [self.nodes[n] for n in sorted(leader.core.membership.members | {leader.node_id})]

    # -- liveness ----------------------------------------------------------------------------------
    def _heal(self) -> None:
        self.phase = "liveness"
        self.healed_at_ms = self.scheduler.now_ms
        self.trace_line(lambda: "HEAL: network healed and calm, disks fast, every node up")
        self.network.heal()
        self.network.calm()
        for node_id in self.node_ids:
            node = self.nodes[node_id]
            node.disk.slow = False
            node.store.full = node.store.fail_next_write = False
            if not node.alive:
                self.restart(node)
        for client in self.clients:
            client.heal(self.scheduler.now_ms)
        self.scheduler.after(LIVENESS_CHECK_EVERY_MS, self._check_liveness)

    def _stable_leader(self) -> SimNode | None:
        leader = self.leader()
        if leader is None:
            return None
        term = leader.core.term
        for node in self.members(leader):
            if node is not leader and (node.core.term != term or node.core.leader_id != leader.node_id):
                return None
        return leader

    def _converged(self, leader: SimNode) -> bool:
        ls = leader.store
        if ls.committed_index != ls.end_index or ls.committed_index != self.checker.committed_index:
            return False
        members = self.members(leader)
        for node in members:
            s = node.store
            if s.end_index != ls.end_index or s.committed_index != ls.committed_index:
                return False
            if node.core.membership != leader.core.membership:
                return False  # every member ends agreeing on one configuration
        return ls.end_index < 0 or all(n.store.chain_crc_at(ls.end_index) == ls.chain_crc_at(ls.end_index)
                                       for n in members)

    def _check_liveness(self) -> None:
        leader = self._stable_leader()
        if leader is not None and self.stable_leader_ms < 0:
            self.stable_leader_ms = self.scheduler.now_ms
        if leader is not None and all(c.settled for c in self.clients) and self._converged(leader):
            self._check_status()
            self.finished = True
            self.trace_line(lambda: f"LIVE: leader {leader.node_id} term {leader.core.term}, clients answered, "
                                    f"all nodes at end={leader.store.end_index} "
                                    f"committed={leader.store.committed_index}")
            return
        self.scheduler.after(LIVENESS_CHECK_EVERY_MS, self._check_liveness)

    def _check_status(self) -> None:
        """At rest, each core's status() agrees with its store and its own properties."""
        for node_id in self.node_ids:
            node = self.nodes[node_id]
            st, core, store = node.core.status(), node.core, node.store
            seen = (st.node_id, st.role, st.term, st.leader_id, st.end_index, st.committed_index)
            want = (node_id, core.role, core.term, core.leader_id, store.end_index, store.committed_index)
            if seen != want:
                raise Violation("status", f"{node_id} status() says {seen}, core and store say {want}")

    def _liveness_report(self) -> str:
        parts = [f"not live {self.options.liveness_timeout_ms} ms after healing;"]
        for node_id in self.node_ids:
            n = self.nodes[node_id]
            parts.append(f"{node_id}:{n.core.role.value} t={n.core.term} leader={n.core.leader_id} "
                         f"end={n.store.end_index} commit={n.store.committed_index} durable={n.store.durable_index}")
        for c in self.clients:
            if not c.settled:
                parts.append(f"{c.name}: open={c.ops_open} done={c.done}")
        return " ".join(parts)

    def stats(self) -> dict[str, Any]:
        return {
            "virtual_ms": self.scheduler.now_ms,
            "steps": self.steps,
            "terms_with_leader": len(self.checker.leader_of_term),
            "committed": self.checker.committed_index + 1,
            "acked_batches": self.checker.acked_batches,
            "messages": self.network.sent,
            "dropped": self.network.dropped,
            "crashes": sum(n.crashes for n in self.nodes.values()),
            "faults": dict(self.faults.counts),
            "stable_leader_after_heal_ms": (self.stable_leader_ms - self.healed_at_ms
                                            if self.stable_leader_ms >= 0 else -1),
            "configurations": len(self.checker.committed_configs),
            "membership_changes": dict(sorted(self.membership_done.items())),
        }


def run_seed(seed: int, node_count: int | None = None, planted_bugs: frozenset[str] = frozenset(),
             core_factory: CoreFactory | None = None, trace: Callable[[str], None] | None = None,
             hash_trace: bool = False) -> SimResult:
    """Run one seed to its end or its first violation. With hash_trace, the result carries the trace's SHA-256."""
    options = SimOptions.from_seed(seed, node_count, planted_bugs)
    result = SimResult(seed, options)
    digest = hashlib.sha256() if hash_trace else None
    sink = trace
    if digest is not None:
        def sink(line: str) -> None:
            digest.update(line.encode())
            digest.update(b"\n")
            if trace:
                trace(line)
    started = time.perf_counter()
    world = None
    try:
        world = World(options, core_factory, sink)
        world.run()
    except Violation as v:
        result.violation = v
    except Exception as exc:  # the core's or the store's own assertions: a bug the seed reproduces
        tb = traceback.format_exc(limit=-4)
        result.violation = Violation("exception", f"{type(exc).__name__}: {exc}\n{tb}")
    result.wall_s = time.perf_counter() - started
    if world is not None:
        result.steps = world.steps
        result.virtual_ms = world.scheduler.now_ms
        result.stats = world.stats()
        if sink is not None:
            if result.violation is not None:
                world.trace_line(lambda: f"VIOLATION {result.violation}")
            world.trace_line(lambda: f"END {result.stats}")
    if digest is not None:
        result.trace_sha256 = digest.hexdigest()
    return result


def quiet_logging() -> None:
    """For the CLI and its workers: the trace says what happened, in order; the core's own warnings (store
    failures, resets) would only drown the summary."""
    logging.getLogger("quorumlog").setLevel(logging.CRITICAL)


def run_seed_star(args: tuple[int, int | None, frozenset[str]]) -> SimResult:
    """run_seed(seed, node_count, planted_bugs) for a process pool (must live in an importable module)."""
    return run_seed(*args)
