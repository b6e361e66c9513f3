"""Safety checks, run after every step of the simulated world.

Raft's own (Figure 3 of the paper): election safety (at most one leader per term), log matching (one
(index, term) names one entry and the same prefix, which the chain CRC lets us compare in O(1)), leader
completeness (a new leader holds every committed entry), state-machine safety (every node's committed
prefix is the one global committed log, and a committed entry is never truncated). Plus durability: a
committed entry is durable on a majority. And the clients': every acknowledged batch is in the committed
log, once, where the ack says, in real-time order; no entry appears that no client sent. And three protocol
rules that the invariants above only notice once they cause damage, checked where they happen: a node
grants one vote per term and persists it before sending it; a leader advances its commit point only to an
entry of its own term (§5.4.2); a leader writes a configuration only once an entry of its term is committed.
And the contract's: a request refused with DISK_FULL or DISK_ERROR was not
written and never commits (one that may have been written is answered "outcome unknown"); a read of a
node's committed entries returns the committed log.

Retention deletes committed entries below a node's begin index: checks of an entry a node no longer holds
skip that node (it is not a holder for durability).

Membership changes (raft/membership.py) add their own: the committed configurations form a chain of single
steps (each one change from the one before, so consecutive ones share a majority); a new leader is a voter of
its own configuration, which is the last committed one or one step past it, and shares a majority with it
(two leaders elected by disjoint majorities is what the 2015 single-server bug produced); a learner is promoted
only while it holds the committed log; "a majority" is one of the deciding configuration's voters.

A Violation is raised, never asserted: the simulator reports it with the seed that reproduces it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..codes import ResponseCode
from ..raft.membership import Change, Membership, is_membership_body, majorities_overlap
from ..raft.types import Completion, Role
from ..wire.messages import VoteResponse

if TYPE_CHECKING:
    from .node import SimNode


NOOP_BODY = b""  # a new leader's no-op entry (Raft §8); clients never send an empty body
# Final refusals: the request was not written, so it must never commit (docs/interfaces.md).
REFUSED_BEFORE_WRITE = frozenset({ResponseCode.DISK_FULL, ResponseCode.DISK_ERROR})


def chain_at(store, index: int) -> int | None:
    """The chain CRC of entry `index` on this store, None if it does not hold it (retention, reset, end)."""
    return store.chain_crc_at(index) if store.begin_index <= index <= store.end_index else None


class Violation(Exception):
    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail

    def __reduce__(self):  # results cross process pools (--jobs)
        return (Violation, (self.kind, self.detail))


@dataclass(slots=True)
class Op:
    """One client batch: its bodies are unique in the whole run, so an entry names the op it came from."""

    client: str
    op_no: int
    bodies: tuple[bytes, ...]
    seq: int  # idempotent sequence number, -1 if not idempotent
    first_sent_ms: int = -1
    floor_index: int = -1  # highest acknowledged index when the op was first sent: it must land above
    first_index: int | None = None  # where its first entry landed in the committed log
    acked: bool = False
    refused: bool = False  # answered DISK_FULL / DISK_ERROR (plain clients only: they never resend bodies)
    request_ids: list[int] = field(default_factory=list)


class Checker:
    def __init__(self, nodes: dict[str, "SimNode"]) -> None:
        self.nodes = nodes
        # committed configurations in log order; the first is the bootstrap one (every starting node votes)
        self.committed_configs: list[Membership] = [Membership(frozenset(nodes))]
        self.last_deciding_config = self.committed_configs[0]  # the configuration of the last leader to commit
        self.leader_of_term: dict[int, str] = {}
        self.votes: dict[tuple[str, int], str] = {}  # (voter, term) -> candidate
        self.entry_chain: dict[tuple[int, int], int] = {}  # (index, term) -> chain CRC, for log matching
        self.committed_chain: list[int] = []  # the global committed log, by index
        self.committed_term: list[int] = []
        self.committed_body: list[bytes] = []
        self.body_index: dict[bytes, int] = {}
        self.sent: dict[bytes, tuple[Op, int]] = {}
        self.max_acked_index = -1
        self.acked_batches = 0
        self.noops = 0
        self.role_seen: dict[str, tuple[Role, int]] = {}
        self._acks: list[tuple[str, Completion, Op]] = []

    @property
    def committed_index(self) -> int:
        return len(self.committed_chain) - 1

    # -- clients -----------------------------------------------------------------------------------
    def register_op(self, op: Op, now_ms: int) -> None:
        op.first_sent_ms = now_ms
        op.floor_index = self.max_acked_index
        for k, body in enumerate(op.bodies):
            assert body not in self.sent, f"body sent twice by the simulator: {body!r}"
            self.sent[body] = (op, k)

    def on_completion(self, node_id: str, completion: Completion, op: Op) -> None:
        if completion.code == ResponseCode.SUCCESS:
            self._acks.append((node_id, completion, op))
        elif completion.code in REFUSED_BEFORE_WRITE and op.seq == -1:
            op.refused = True
            if op.first_index is not None:
                raise Violation("refused_but_committed", f"{node_id} refused {op.client}#{op.op_no} with "
                                                         f"{completion.code.name}, committed at {op.first_index}")

    def on_read(self, node_id: str, start: int, last: int, entries) -> None:
        """A read of `node_id`'s committed entries start..last (no-ops left out by the decoder)."""
        if last > self.committed_index:
            raise Violation("read", f"read of {node_id} returned up to {last}, the committed log ends at "
                                    f"{self.committed_index}")
        want = [i for i in range(start, last + 1)
                if self.committed_body[i] != NOOP_BODY and not is_membership_body(self.committed_body[i])]
        got = [e.index for e in entries]
        if got != want:
            raise Violation("read", f"read of {node_id} {start}..{last} returned indexes {got}, the committed "
                                    f"log has entries at {want}")
        for e in entries:
            if e.body != self.committed_body[e.index] or e.term != self.committed_term[e.index]:
                raise Violation("read", f"read of {node_id} returned {e.body!r} term {e.term} at {e.index}, the "
                                        f"committed log has {self.committed_body[e.index]!r} term "
                                        f"{self.committed_term[e.index]}")

    # -- node actions ------------------------------------------------------------------------------
    def on_append(self, node: "SimNode", first: int, last: int) -> None:
        store = node.store
        for index in range(first, last + 1):
            key = (index, store.term_at(index))
            chain = store.chain_crc_at(index)
            known = self.entry_chain.setdefault(key, chain)
            if known != chain:
                raise Violation("log_matching", f"{node.node_id} holds entry index={index} term={key[1]} "
                                                f"with chain {chain:#x}, another node's has {known:#x}")

    def on_truncate(self, node: "SimNode", after_index: int) -> None:
        store = node.store
        if after_index < store.committed_index:
            raise Violation("committed_truncated", f"{node.node_id} truncates after {after_index} below its own "
                                                   f"committed_index {store.committed_index}")
        first_dropped = after_index + 1
        if first_dropped <= min(store.end_index, self.committed_index):
            if store.chain_crc_at(first_dropped) == self.committed_chain[first_dropped]:
                raise Violation("committed_truncated", f"{node.node_id} truncates after {after_index}, dropping "
                                                       f"committed entry {first_dropped} (global committed "
                                                       f"{self.committed_index})")

    def on_vote_granted(self, node: "SimNode", m: VoteResponse) -> None:
        """One vote per node per term, and persisted (the Ready's hard_state) before the grant is sent."""
        hs = node.hard_state
        if hs.term != m.term or hs.voted_for != m.to:
            raise Violation("vote_not_persisted", f"{node.node_id} grants {m.to} its vote in term {m.term} but "
                                                  f"its HardState says term {hs.term} voted_for {hs.voted_for}")
        holder = self.votes.setdefault((node.node_id, m.term), m.to)
        if holder != m.to:
            raise Violation("double_vote", f"{node.node_id} votes for {holder} and for {m.to} in term {m.term}")

    def on_commit(self, node: "SimNode") -> None:
        """The node's committed_index advanced."""
        store = node.store
        ci = store.committed_index
        gc = self.committed_index
        core = node.core
        if core.role == Role.LEADER and store.term_at(ci) != core.term:
            # Raft §5.4.2: a leader commits by counting replicas only entries of its own term.
            raise Violation("commit_rule", f"leader {node.node_id} of term {core.term} commits {ci}, an entry of "
                                           f"term {store.term_at(ci)}, by counting replicas")
        if ci <= gc:
            if ci >= store.begin_index and store.chain_crc_at(ci) != self.committed_chain[ci]:
                raise Violation("state_machine_safety", f"{node.node_id} committed entry {ci} "
                                                        f"term={store.term_at(ci)} differs from the committed log's "
                                                        f"term={self.committed_term[ci]}")
            return
        if gc < store.begin_index - 1:
            raise Violation("state_machine_safety", f"{node.node_id} commits {ci} with a log beginning at "
                                                    f"{store.begin_index}, above the committed log's end {gc} + 1")
        if gc >= store.begin_index and store.chain_crc_at(gc) != self.committed_chain[gc]:
            raise Violation("state_machine_safety", f"{node.node_id} commits {ci} on a prefix that differs from the "
                                                    f"committed log at {gc}")
        for index in range(gc + 1, ci + 1):
            self._extend(index, store.term_at(index), store.chain_crc_at(index), store.get(index).body)
        if core.role == Role.LEADER:
            self.last_deciding_config = core.membership
            self._check_majority_durable(ci, node.node_id, [core.membership])
        else:
            self._check_majority_durable(ci, node.node_id, self._deciding_configs())

    def _deciding_configs(self) -> list[Membership]:
        """Configurations whose majority may have decided the commit point: the last committed one, the one the
        last leader to commit used, and the one a live leader of the highest term uses (a change is in force on
        append, before it commits)."""
        configs = [self.committed_configs[-1], self.last_deciding_config]
        leaders = [n for n in self.nodes.values() if n.alive and n.core.role == Role.LEADER]
        if leaders:
            configs.append(max(leaders, key=lambda n: n.core.term).core.membership)
        return configs

    def _check_majority_durable(self, index: int, by: str, configs: list[Membership]) -> None:
        chain = self.committed_chain[index]
        holders = {n.node_id for n in self.nodes.values()
                   if n.store.durable_index >= index and chain_at(n.store, index) == chain}
        if not any(m.is_quorum(holders) for m in configs):
            want = " or ".join(sorted(",".join(sorted(m.voters)) for m in configs))
            raise Violation("commit_without_quorum", f"{by} committed {index} but only {sorted(holders) or 'no node'} "
                                                     f"hold it durably (a majority of {want})")

    def _extend(self, index: int, term: int, chain: int, body: bytes) -> None:
        assert index == len(self.committed_chain)
        self.committed_chain.append(chain)
        self.committed_term.append(term)
        self.committed_body.append(body)
        if body == NOOP_BODY:
            self.noops += 1
            return
        if is_membership_body(body):
            self._committed_config(Membership.decode(body, index))
            return
        if body in self.body_index:
            raise Violation("duplicate", f"body {body!r} committed at {self.body_index[body]} and again at {index}")
        self.body_index[body] = index
        hit = self.sent.get(body)
        if hit is None:
            raise Violation("phantom_entry", f"committed entry {index} body {body!r} was sent by no client")
        op, k = hit
        if op.refused:
            raise Violation("refused_but_committed", f"{op.client}#{op.op_no} was refused (DISK_FULL/DISK_ERROR) "
                                                     f"and commits at {index}")
        if k == 0:
            op.first_index = index
        elif op.first_index is None or index != op.first_index + k:
            raise Violation("batch_split", f"entry {k} of {op.client}#{op.op_no} at {index}, its first entry at "
                                           f"{op.first_index}")
        if index <= op.floor_index:
            raise Violation("real_time_order", f"{op.client}#{op.op_no} first sent at {op.first_sent_ms} ms landed "
                                               f"at {index}, but index {op.floor_index} was acknowledged before")

    # -- membership --------------------------------------------------------------------------------
    def _committed_config(self, new: Membership) -> None:
        prev = self.committed_configs[-1]
        if not _one_step(prev, new):
            raise Violation("membership_chain", f"committed configuration {new.describe()} is not one change from "
                                                f"the one committed before it, {prev.describe()}")
        self.committed_configs.append(new)

    def on_membership_proposed(self, node: "SimNode", body: bytes, index: int) -> None:
        """A leader writes a configuration: only once an entry of its own term is committed (the guard against
        the 2015 single-server bug, checked where it applies, as the commit rule is), and a learner it promotes
        holds the committed log right now."""
        new = Membership.decode(body, index)
        old = self.committed_configs[-1]
        committed = node.store.committed_index
        term = node.core.term
        if committed < node.store.begin_index or node.store.term_at(committed) != term:
            raise Violation("change_rule", f"leader {node.node_id} of term {term} writes {new.describe()} before "
                                           f"an entry of its term is committed (committed {committed})")
        for nid in sorted(new.voters - old.voters):
            store = self.nodes[nid].store
            if store.durable_index < committed or chain_at(store, committed) not in (None, self.committed_chain[committed]
                                                                                     if committed >= 0 else None):
                raise Violation("promotion_lagging", f"{node.node_id} promotes {nid} in {new.describe()} while it holds "
                                                     f"up to {store.durable_index} durably, committed is {committed}")

    def _check_leader_config(self, node: "SimNode", term: int) -> None:
        m: Membership = node.core.membership
        committed = self.committed_configs[-1]
        # A node its configuration removed may lead while it does not know the removal committed (it may hold the
        # longest log; raft/core.py may_campaign): it commits the removal and steps down.
        retired_unaware = node.node_id in m.retired and (m.version == committed.version + 1 or (
            m == committed and node.core.committed_index < m.index))
        if node.node_id not in m.voters and not retired_unaware:
            raise Violation("membership_leader", f"{node.node_id} leads term {term} but is no voter of its "
                                                 f"configuration {m.describe()}, nor removed by it uncommitted")
        if m.version < committed.version or not (m == committed or _one_step(committed, m)):
            raise Violation("membership_leader", f"{node.node_id} leads term {term} with {m.describe()}, neither the "
                                                 f"committed {committed.describe()} nor one change past it")
        if not majorities_overlap(m.voters, committed.voters):
            raise Violation("disjoint_majorities", f"{node.node_id} leads term {term} with {m.describe()}, whose "
                                                   f"majorities can miss those of {committed.describe()}")

    # -- after every step --------------------------------------------------------------------------
    def after_node_step(self, node: "SimNode") -> None:
        core = node.core
        role, term = core.role, core.term
        if role == Role.LEADER:
            holder = self.leader_of_term.setdefault(term, node.node_id)
            if holder != node.node_id:
                raise Violation("election_safety", f"{holder} and {node.node_id} both leaders of term {term}")
            if self.role_seen.get(node.node_id) != (role, term):
                self._check_leader_completeness(node, term)
                self._check_leader_config(node, term)
        self.role_seen[node.node_id] = (role, term)
        if self._acks:
            acks, self._acks = self._acks, []
            for node_id, completion, op in acks:
                self._check_ack(node_id, completion, op)

    def _check_leader_completeness(self, node: "SimNode", term: int) -> None:
        gc = self.committed_index
        store = node.store
        if gc < store.begin_index:
            return  # its log begins after the committed log's end (reset to a leader's begin index)
        if store.end_index < gc or store.chain_crc_at(gc) != self.committed_chain[gc]:
            held = "nothing" if store.end_index < gc else f"term {store.term_at(gc)}"
            raise Violation("leader_completeness", f"{node.node_id} leads term {term} but holds {held} at committed "
                                                   f"index {gc} (term {self.committed_term[gc]})")

    def _check_ack(self, node_id: str, c: Completion, op: Op) -> None:
        where = f"{node_id} acked {op.client}#{op.op_no} as {c.first_index}..{c.last_index} term {c.term}"
        if c.last_index - c.first_index + 1 != len(op.bodies) or c.first_index < 0:
            raise Violation("ack_mismatch", f"{where} but the batch has {len(op.bodies)} entries")
        if c.last_index > self.committed_index:
            raise Violation("ack_before_commit", f"{where} but the committed log ends at {self.committed_index}")
        for k, body in enumerate(op.bodies):
            index = c.first_index + k
            # term -1: a retry of a batch retention deleted since (core: its term is no longer known)
            if self.committed_body[index] != body or c.term not in (-1, self.committed_term[index]):
                raise Violation("ack_mismatch", f"{where} but entry {index} is {self.committed_body[index]!r} of "
                                                f"term {self.committed_term[index]}")
        op.acked = True
        self.acked_batches += 1
        self.max_acked_index = max(self.max_acked_index, c.last_index)

    def on_crash(self, node: "SimNode") -> None:
        """A crash may cost a node its unflushed tail, committed or not (a leader commits on its followers'
        durable copies while its own flush is still running); the committed log must stay durable on a
        majority all the same."""
        if self.committed_index >= 0:
            self._check_majority_durable(self.committed_index, f"crash of {node.node_id}:", self._deciding_configs())

    def on_restart(self, node: "SimNode") -> None:
        """After a crash the store keeps its durable prefix; its checkpointed commit point must still match."""
        store = node.store
        ci = store.committed_index
        chain = chain_at(store, ci)
        if ci > self.committed_index or chain is not None and chain != self.committed_chain[ci]:
            raise Violation("state_machine_safety", f"{node.node_id} restarts with committed_index {ci} not in "
                                                    f"the committed log")
        self.role_seen.pop(node.node_id, None)

    def audit(self) -> None:
        """Every node's committed prefix is the global one (run at the end; cheap enough to run often)."""
        for node in self.nodes.values():
            store = node.store
            assert store.durable_index <= store.end_index
            ci = store.committed_index
            chain = chain_at(store, ci)
            if ci > self.committed_index or chain is not None and chain != self.committed_chain[ci]:
                raise Violation("state_machine_safety", f"{node.node_id} committed prefix up to {ci} is not the "
                                                        f"committed log")


def _one_step(prev: Membership, new: Membership) -> bool:
    """`new` is `prev` after exactly one change (raft/membership.Change)."""
    if new.version != prev.version + 1:
        return False
    target = (new.voters, new.learners, new.retired, new.version)
    return any((m.voters, m.learners, m.retired, m.version) == target
               for m in (prev.changed(change, nid) for change in Change for nid in (new.members | prev.members)))
