"""Linearizable reads without a log write: ReadIndex (Raft thesis §6.4, etcd raft's ReadOnlySafe).

A read arriving at the leader is given the commit index of that moment as its read index; it is answered
once a majority of voters acknowledged a heartbeat sent after it arrived (then no other leader can have
committed anything newer at that time: that majority was still in our term). The runtime answers it from its
state machine once it has applied the read index. Two guards:

- A new leader first commits an entry of its own term (the no-op): before that, its commit index may be
  behind what the previous leader committed and acknowledged. Reads wait for that commit.
- Confirmation is by round, not by time: every heartbeat carries `read_seq`, the number of the latest read
  round, and the answer echoes it; a read of round s is confirmed once a quorum (us included) echoed ≥ s.
  An answer to a heartbeat sent before the read carries a lower number and confirms nothing for it.

At most one round is in flight: reads arriving while one is share the next, sent when it is answered (or
with the next regular heartbeat, which carries the latest round too), so a read load costs one heartbeat
per member per round trip, not one per read. No lease: a leader's clock is never trusted here.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from ..codes import ResponseCode
from .types import Completion, Role

if TYPE_CHECKING:
    from .core import RaftCore


class _Read:
    __slots__ = ("seq", "request_id", "index", "deadline_ms")

    def __init__(self, seq: int, request_id: int, index: int, deadline_ms: int) -> None:
        self.seq, self.request_id, self.index, self.deadline_ms = seq, request_id, index, deadline_ms


class ReadIndex:
    __slots__ = ("core", "seq", "_sent", "_confirmed", "_acked", "_waiting", "_blocked", "_round_due")

    def __init__(self, core: "RaftCore") -> None:
        self.core = core
        self.seq = 0  # the latest round; carried by every heartbeat we send as leader
        self._sent = 0  # the latest round sent
        self._confirmed = 0  # the latest round a quorum echoed
        self._acked: dict[str, int] = {}  # voter -> the highest round it echoed in this term
        self._waiting: deque[_Read] = deque()  # rounds in increasing order
        self._blocked: list[tuple[int, int]] = []  # (request_id, deadline): waiting for an own-term commit
        self._round_due = False

    def __len__(self) -> int:
        return len(self._waiting) + len(self._blocked)

    def start(self, request_id: int) -> None:
        core = self.core
        if core.member.role is not Role.LEADER:
            core.complete(Completion(request_id, ResponseCode.NOT_LEADER, leader_id=core.member.leader_id))
            return
        deadline = core.now_ms + core.config.max_wait_ack_ms
        if not self._own_term_committed():
            core.ensure_own_term_entry()
            self._blocked.append((request_id, deadline))
            return
        self._begin(request_id, deadline)

    def _begin(self, request_id: int, deadline_ms: int) -> None:
        core = self.core
        if self._alone():  # we alone are the quorum
            core.complete(Completion(request_id, ResponseCode.SUCCESS, core.committed_index, core.committed_index,
                                     core.member.term))
            return
        if not self._round_due:
            self.seq += 1
            self._round_due = True
        self._waiting.append(_Read(self.seq, request_id, core.committed_index, deadline_ms))

    def after_leader_step(self) -> None:
        """Leader, after each step: release reads waiting for an own-term commit, send a due round."""
        core = self.core
        if self._blocked and self._own_term_committed():
            blocked, self._blocked = self._blocked, []
            for request_id, deadline in blocked:
                self._begin(request_id, deadline)
        if self._round_due and self._sent <= self._confirmed:
            core.send_heartbeats()

    def round_to_send(self) -> int:
        """The round a heartbeat sent now carries (the latest: it confirms every read that arrived before)."""
        self._sent = self.seq
        self._round_due = False
        return self.seq

    def _alone(self) -> bool:
        return not self.core.voting_others

    def _own_term_committed(self) -> bool:
        core = self.core
        return (core.committed_index >= core.log.begin_index
                and core.log.term_at(core.committed_index) == core.member.term)

    def on_heartbeat_response(self, frm: str, read_seq: int) -> None:
        if read_seq <= self._acked.get(frm, 0) or frm not in self.core.membership.voters:
            return
        self._acked[frm] = read_seq
        self._confirm()

    def _confirm(self) -> None:
        core = self.core
        if not self._waiting:
            return
        need = core.quorum - (1 if core.is_voter else 0)
        if need <= 0:
            confirmed = self.seq
        else:
            rounds = sorted((self._acked.get(p, 0) for p in core.voting_others), reverse=True)
            confirmed = rounds[need - 1] if len(rounds) >= need else 0
        self._confirmed = max(self._confirmed, confirmed)
        waiting = self._waiting
        term = core.member.term
        while waiting and waiting[0].seq <= confirmed:
            r = waiting.popleft()
            core.complete(Completion(r.request_id, ResponseCode.SUCCESS, r.index, r.index, term))

    def expire(self, now_ms: int) -> None:
        waiting = self._waiting
        while waiting and waiting[0].deadline_ms <= now_ms:  # (every read waits the same time: arrival order)
            self._fail(waiting.popleft().request_id, ResponseCode.WAIT_QUORUM_ACK_TIMEOUT)
        kept = []
        for request_id, deadline in self._blocked:
            if deadline <= now_ms:
                self._fail(request_id, ResponseCode.WAIT_QUORUM_ACK_TIMEOUT)
            else:
                kept.append((request_id, deadline))
        self._blocked = kept

    def reset(self, code: ResponseCode = ResponseCode.TERM_CHANGED) -> None:
        """A role or term change: every waiting read fails (the caller may retry on the new leader)."""
        for r in self._waiting:
            self._fail(r.request_id, code)
        for request_id, _ in self._blocked:
            self._fail(request_id, code)
        self._waiting.clear()
        self._blocked = []
        self._acked.clear()
        self._round_due = False
        self._sent = self._confirmed = self.seq

    def _fail(self, request_id: int, code: ResponseCode) -> None:
        self.core.complete(Completion(request_id, code, leader_id=self.core.member.leader_id))
