"""MembershipChanger: the leader's side of a membership change (quorumlog/raft/membership.py says why single
server steps with learners, and which traps are guarded here).

A change is validated, written as one membership entry, and takes effect on every node as soon as its log holds
the entry; the request is answered once that entry commits. A leader that removed itself leads on without
counting itself until the removal commits, then hands over to its most caught-up voter and steps down.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..codes import ResponseCode
from ..format.log_entry import MEMBERSHIP_PRODUCER_ID
from ..wire.messages import TakeLeadershipRequest
from .membership import Change, Membership
from .types import ChangeMembership, ClientAppend, Completion, Role

if TYPE_CHECKING:
    from .core import RaftCore

log = logging.getLogger(__name__)


class MembershipChanger:
    __slots__ = ("core", "_promoting", "holding", "_held")

    def __init__(self, core: "RaftCore") -> None:
        self.core = core
        # A promotion waiting for its learner to hold every committed entry: (request, until when in ms, the
        # commit point when it came). While `holding`, client appends wait in `_held` (the final round below).
        self._promoting: tuple[ChangeMembership, int, int] | None = None
        self.holding = False
        self._held: list[ClientAppend] = []

    def start(self, e: ChangeMembership) -> None:
        core = self.core
        code, why = self._refusal(e)
        if (code is ResponseCode.LEARNER_NOT_CAUGHT_UP and self._promoting is None
                and e.node_id in core.live_voters({e.node_id})):
            # Under load a live learner trails the commit point by the batch in flight, and as a learner does
            # not vote, the commit point runs ahead of it for as long as writers write. Catch-up rounds (thesis
            # §4.2.1): first wait, for up to an election timeout, until it holds what was committed when the
            # request came; then the final round: hold new appends (as a leadership transfer does, but queued,
            # not refused) until the commit point stops and the learner holds it, again bounded by an election
            # timeout. The hold costs writers about one round trip and fsync of the learner.
            self._promoting = (e, core.now_ms + core.config.election_timeout_min_ms, core.committed_index)
            return
        self._answer_or_apply(e, code, why)

    @property
    def held(self) -> int:
        return len(self._held)

    def hold(self, e: ClientAppend) -> None:
        self._held.append(e)

    def after_leader_step(self) -> None:
        """Leader, after each step: move a waiting promotion on (catch-up round, final round, apply), or refuse
        it at its deadline."""
        if self._promoting is None:
            return
        core = self.core
        e, deadline, target = self._promoting
        code, why = self._refusal(e)
        if code is ResponseCode.LEARNER_NOT_CAUGHT_UP and core.now_ms < deadline:
            if not self.holding and self._holds(e.node_id, target):
                self.holding = True
                self._promoting = (e, core.now_ms + core.config.election_timeout_min_ms, target)
            return
        self._promoting = None
        self._answer_or_apply(e, code, why)
        self._release()

    def reset(self) -> None:
        """Leadership lost: a waiting promotion fails like every other waiting request (held appends too: the
        core refuses them as NOT_LEADER)."""
        if self._promoting is not None:
            e = self._promoting[0]
            self._promoting = None
            core = self.core
            core.complete(Completion(e.request_id, ResponseCode.TERM_CHANGED, leader_id=core.member.leader_id))
        self._release()

    def _release(self) -> None:
        self.holding = False
        held, self._held = self._held, []
        for e in held:
            self.core.on_client_append(e)

    def _answer_or_apply(self, e: ChangeMembership, code: ResponseCode | None, why: str) -> None:
        core = self.core
        if code is not None:
            log.info("membership change refused node=%s %s %s: %s %s", core.config.node_id, e.change, e.node_id,
                     code.name, why)
            core.complete(Completion(e.request_id, code, leader_id=core.member.leader_id, message=why))
            return
        new = core.membership.changed(Change(e.change), e.node_id, e.address)
        first, last = core.append_membership(new)
        log.info("membership change node=%s term=%d %s %s -> %s", core.config.node_id, core.member.term, e.change,
                 e.node_id, core.membership.describe())
        pa = core.pending.add(first, last, core.member.term, None)
        core.pending.wait(pa, e.request_id, core.now_ms + core.config.max_wait_ack_ms)

    def _refusal(self, e: ChangeMembership) -> tuple[ResponseCode | None, str]:
        core = self.core
        current: Membership = core.membership
        node = e.node_id
        try:
            change = Change(e.change)
        except ValueError:
            return ResponseCode.BAD_REQUEST, f"unknown change {e.change!r}"
        if core.member.role is not Role.LEADER:
            return ResponseCode.NOT_LEADER, ""
        if core.transfer.active:
            return ResponseCode.LEADER_TRANSFERRING, ""
        if current.index > core.committed_index:
            return ResponseCode.CONFIG_CHANGE_IN_PROGRESS, f"configuration at {current.index} not committed yet"
        if not self._own_term_committed():
            # Ongaro, raft-dev 2015: a leader that changes the configuration before committing an entry of its
            # term may build on a configuration that a previous leader's uncommitted change already replaced on
            # other nodes, and two configurations without a common majority follow. Make sure such an entry
            # exists (our no-op is written only when we inherited an uncommitted tail), and let the caller retry.
            core.ensure_own_term_entry()
            return ResponseCode.CONFIG_CHANGE_IN_PROGRESS, "no entry of this term committed yet"
        if change is Change.ADD_LEARNER:
            if node in current.members:
                return ResponseCode.MEMBER_EXISTS, f"{node} is already a member"
            if node in current.retired:
                return ResponseCode.MEMBER_EXISTS, f"{node} was removed before: node ids are never reused"
            return None, ""
        if node not in current.members:
            return ResponseCode.UNKNOWN_MEMBER, f"{node} is not a member"
        if change is Change.PROMOTE:
            if node not in current.learners:
                return ResponseCode.MEMBER_EXISTS, f"{node} is already a voter"
            if not self._caught_up(node):
                return ResponseCode.LEARNER_NOT_CAUGHT_UP, f"{node} does not hold every committed entry yet"
            voters = current.voters | {node}
        else:
            voters = current.voters - {node}
            if node in current.voters and not voters:
                return ResponseCode.LAST_VOTER, f"{node} is the last voter"
        if node in current.voters or change is Change.PROMOTE:
            new = Membership(frozenset(voters))
            live = core.live_voters(new.voters)
            if not new.is_quorum(live):
                return ResponseCode.NEW_QUORUM_NOT_ALIVE, (f"the new voters {sorted(voters)} need {new.quorum} "
                                                           f"live, only {sorted(live)} answered lately")
        return None, ""

    def _own_term_committed(self) -> bool:
        core = self.core
        ci = core.committed_index
        return ci >= core.log.begin_index and core.log.term_at(ci) == core.member.term

    def _caught_up(self, node: str) -> bool:
        """A learner may vote once it holds everything committed and answered within the election timeout: a
        voter that has to fetch the committed log first is a voter the new majority waits for."""
        return self._holds(node, self.core.committed_index)

    def _holds(self, node: str, index: int) -> bool:
        core = self.core
        d = core.dispatchers.get(node)
        # (its durable watermark: match_index also counts entries a TRUNCATE round matched but not yet synced)
        return d is not None and d.watermark >= index and node in core.live_voters({node})

    def after_commit(self) -> None:
        """Leader, once its commit point moved: if the configuration that removed us is committed, hand over to
        the most caught-up voter and step down (thesis §4.2.2)."""
        core = self.core
        current = core.membership
        me = core.config.node_id
        if me in current.voters or current.index > core.committed_index or core.member.role is not Role.LEADER:
            return
        successor = max(sorted(current.voters & core.dispatchers.keys()),
                        key=lambda p: core.dispatchers[p].match_index, default=None)
        log.info("removed from the group: stepping down node=%s term=%d successor=%s", me, core.member.term,
                 successor)
        if successor is not None:
            core.send(TakeLeadershipRequest(me, successor, core.member.term))
        core.step_down(core.member.term, None)
        core.member.leader_id = None


def membership_producer(version: int) -> tuple[int, int]:
    return (MEMBERSHIP_PRODUCER_ID, version)
