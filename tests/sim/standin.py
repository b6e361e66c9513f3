"""A deliberately tiny stand-in core for testing the simulator harness itself, not Raft.

n0 is leader of term 1 forever; followers store what it pushes and answer with their durable index; the
leader commits the quorum's durable index and acks. No elections, so it is only correct without crashes
(a crashed leader could lose committed entries it had not flushed and then overwrite them). Planted bugs
here ("ack_on_write", "no_prev_check") prove the checker catches what it claims to.
"""

from __future__ import annotations

import random

from quorumlog.codes import ResponseCode
from quorumlog.raft.membership import Membership
from quorumlog.raft.types import (AppendBatch, AppendRecords, ClientAppend, ClientRead, Completion, Durable, HardState,
                                  NodeStatus, RaftConfig, Ready, Receive, Role, Stored, Tick,
                                  TransferLeadership)
from quorumlog.wire.messages import PushRequest, PushResponse, PushType

LEADER = "n0"
TERM = 1


class StandInCore:
    bugs: frozenset[str] = frozenset()  # the stand-in's own planted bugs: a subclass sets them (planting())

    def __init__(self, config: RaftConfig, log, hard_state: HardState, rng: random.Random, now_ms: int) -> None:
        self.config = config
        self.log = log
        self.rng = rng
        self.now_ms = now_ms
        self.node_id = config.node_id
        self.next_index = {p: 0 for p in config.peers if p != self.node_id}
        self.match = {p: -1 for p in config.peers}
        self.pending: list[tuple[int, int, int]] = []  # (request_id, first, last)
        self.last_push_ms = -1_000
        self.committed = log.committed_index
        self.membership = Membership(frozenset(config.peers))  # fixed: the stand-in never changes it

    role = property(lambda self: Role.LEADER if self.node_id == LEADER else Role.FOLLOWER)
    term = property(lambda self: TERM)
    leader_id = property(lambda self: LEADER)
    committed_index = property(lambda self: self.committed)

    def step(self, event) -> Ready:
        if isinstance(event, Tick):
            self.now_ms = event.now_ms
            if self.node_id == LEADER and self.now_ms - self.last_push_ms >= 50:
                self.last_push_ms = self.now_ms
                return Ready(messages=tuple(self._push(p) for p in self.next_index))
            return Ready()
        if isinstance(event, ClientAppend):
            if self.node_id != LEADER:
                return Ready(completions=(Completion(event.request_id, ResponseCode.NOT_LEADER, leader_id=LEADER),))
            first = self.log.end_index + 1
            self.pending.append((event.request_id, first, first + len(event.bodies) - 1))
            action = AppendBatch(first, TERM, tuple(event.bodies), self.now_ms)
            if "ack_on_write" in self.bugs:
                done = Completion(event.request_id, ResponseCode.SUCCESS, first, first + len(event.bodies) - 1, TERM)
                self.pending.pop()
                return Ready(appends=(action,), completions=(done,))
            return Ready(appends=(action,))
        if isinstance(event, Stored):
            return Ready()
        if isinstance(event, Durable):
            if self.node_id == LEADER:
                self.match[LEADER] = event.index
                return self._advance()
            return Ready(messages=(PushResponse(self.node_id, LEADER, TERM, PushType.APPEND, ResponseCode.SUCCESS,
                                                self.log.durable_index, self.log.end_index),))
        if isinstance(event, (TransferLeadership, ClientRead)):
            return Ready(completions=(Completion(event.request_id, ResponseCode.UNSUPPORTED),))
        assert isinstance(event, Receive)
        m = event.message
        if isinstance(m, PushRequest):
            return self._on_push(m)
        assert isinstance(m, PushResponse)
        self.match[m.frm] = max(self.match[m.frm], m.index)
        self.next_index[m.frm] = m.end_index + 1
        return self._advance()

    def _push(self, peer: str) -> PushRequest:
        start = min(self.next_index[peer], self.log.end_index + 1)
        prev_term = self.log.term_at(start - 1) if start > 0 else -1
        if start > self.log.end_index:
            return PushRequest(LEADER, peer, TERM, PushType.COMMIT, self.committed, start - 1, prev_term)
        records = self.log.read(start, 64 * 1024)
        return PushRequest(LEADER, peer, TERM, PushType.APPEND, self.committed, start - 1, prev_term,
                           records.first_index, records.last_index, records)

    def _on_push(self, m: PushRequest) -> Ready:
        end = self.log.end_index
        commit = None
        if min(m.committed_index, self.log.durable_index) > self.committed:
            self.committed = commit = min(m.committed_index, self.log.durable_index)
        if m.push_type == PushType.APPEND and (m.prev_index == end or "no_prev_check" in self.bugs) \
                and m.last_index > end:
            skip = max(0, end - m.first_index + 1)
            data = b"".join(m.records.chunks)
            if skip:
                from quorumlog.format import log_entry
                sizes = [h.total_size for h, _ in log_entry.iter_records(data)]
                data = data[sum(sizes[:skip]):]
            first = m.first_index + skip
            return Ready(appends=(AppendRecords(first, m.last_index, data),), committed_index=commit)
        resp = PushResponse(self.node_id, LEADER, TERM, m.push_type, ResponseCode.SUCCESS, self.log.durable_index,
                            self.log.end_index)
        return Ready(messages=(resp,), committed_index=commit)

    def _advance(self) -> Ready:
        acked = sorted(self.match.values(), reverse=True)
        quorum = acked[len(acked) // 2]
        if quorum <= self.committed:
            return Ready()
        self.committed = quorum
        done = tuple(Completion(rid, ResponseCode.SUCCESS, f, l, TERM) for rid, f, l in self.pending if l <= quorum)
        self.pending = [p for p in self.pending if p[2] > quorum]
        return Ready(completions=done, committed_index=quorum)

    def status(self) -> NodeStatus:
        return NodeStatus(self.node_id, self.role, TERM, LEADER, self.log.begin_index, self.log.end_index,
                          self.committed)


def planting(*bugs: str) -> type[StandInCore]:
    """A stand-in core with `bugs` planted (ack_on_write, no_prev_check), as a core factory for World."""
    return type("BuggyStandIn", (StandInCore,), {"bugs": frozenset(bugs)})
