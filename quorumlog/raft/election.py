"""DLedgerLeaderElector: pre-vote, votes, randomized election timeouts and check-quorum.

Differences from DLedger, on purpose:
- Timeouts: DLedger elects after 3 missed 2 s heartbeats (~6 s); we use a heartbeat of 100 ms and a
  randomized election timeout of 500–1000 ms (types.py), drawn from the caller's seeded rng only.
- Pre-vote (Raft thesis §9.6): a node first asks whether it *could* win term+1 without bumping any term, so
  a node that was partitioned away cannot disrupt a healthy leader when it rejoins. Voters refuse a pre-vote
  while they heard from a live leader within the minimum election timeout (their "lease"), unless the
  request is a leadership transfer.
- Check-quorum: a leader that has not heard from a majority within one election timeout steps down, and
  (as etcd does) voters then also ignore real vote requests during their lease.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..wire.messages import VoteRequest, VoteResponse, VoteResult
from .types import Role

if TYPE_CHECKING:
    from .core import RaftCore

log = logging.getLogger(__name__)


class LeaderElector:
    __slots__ = ("core", "election_deadline_ms", "election_timeout_ms", "leader_contact_ms", "pre_candidate",
                 "votes", "no_campaign_until_ms")

    def __init__(self, core: "RaftCore") -> None:
        self.core = core
        self.election_deadline_ms = 0
        self.leader_contact_ms = -(1 << 62)
        self.pre_candidate = False
        self.votes: set[str] = set()
        self.no_campaign_until_ms = -(1 << 62)
        self.reset_timer()

    def reset_timer(self) -> None:
        """Arm the election timer with a fresh random timeout (after a campaign, a vote or a role change)."""
        cfg = self.core.config
        self.election_timeout_ms = self.core.rng.randint(cfg.election_timeout_min_ms, cfg.election_timeout_max_ms)
        self.election_deadline_ms = self.core.now_ms + self.election_timeout_ms

    def in_lease(self) -> bool:
        """Heard from a live leader within the minimum election timeout (or is the leader)."""
        core = self.core
        if core.member.role is Role.LEADER:
            return True
        return (core.member.leader_id is not None
                and core.now_ms - self.leader_contact_ms < core.config.election_timeout_min_ms)

    def heard_from_leader(self) -> None:
        # Keep the timeout drawn when this leader was first seen: no rng draw per heartbeat or push.
        now = self.core.now_ms
        self.leader_contact_ms = now
        self.pre_candidate = False
        self.election_deadline_ms = now + self.election_timeout_ms

    # -- timers ------------------------------------------------------------------------------------
    def on_tick(self) -> None:
        core = self.core
        if core.member.role is Role.LEADER:
            self._check_quorum()
            return
        if core.now_ms < self.election_deadline_ms:
            return
        self.reset_timer()
        if core.now_ms < self.no_campaign_until_ms or not core.may_campaign:
            return  # a learner, a removed node, a joining node: no vote of its own to stand on
        if core.needs_snapshot:
            return  # no state to serve until a snapshot is installed: let a member that has it lead
        if core.config.pre_vote:
            self.start_pre_vote()
        else:
            self.campaign(leadership_transfer=False)

    def _check_quorum(self) -> None:
        core = self.core
        cfg = core.config
        if not cfg.check_quorum or core.now_ms - core.leader_since_ms < cfg.election_timeout_min_ms:
            return
        active = len(core.live_voters(core.membership.voters))
        if active < core.quorum:
            log.info("check-quorum: stepping down node=%s term=%d active=%d quorum=%d",
                     core.config.node_id, core.member.term, active, core.quorum)
            core.step_down(core.member.term, None)

    # -- campaigning -------------------------------------------------------------------------------
    def start_pre_vote(self) -> None:
        core = self.core
        member = core.member
        member.leader_id = None
        self.pre_candidate = True
        self.votes = {member.node_id} if core.is_voter else set()
        log.debug("pre-vote node=%s term=%d", member.node_id, member.term + 1)
        if len(self.votes) >= core.quorum:
            self.campaign(leadership_transfer=False)
            return
        last_index, last_term = core.log.end_index, core.log.end_term
        for peer in core.voting_others:
            core.send(VoteRequest(member.node_id, peer, member.term + 1, last_index, last_term, pre_vote=True))

    def campaign(self, leadership_transfer: bool) -> None:
        core = self.core
        member = core.member
        self.pre_candidate = False
        if member.role is Role.LEADER:
            return
        member.become_candidate()
        self.reset_timer()
        self.votes = {member.node_id} if core.is_voter else set()
        if len(self.votes) >= core.quorum:
            core.become_leader()
            return
        last_index, last_term = core.log.end_index, core.log.end_term
        for peer in core.voting_others:
            core.send(VoteRequest(member.node_id, peer, member.term, last_index, last_term,
                                  leadership_transfer=leadership_transfer))

    # -- voting ------------------------------------------------------------------------------------
    def _log_result(self, m: VoteRequest) -> VoteResult:
        core = self.core
        m_cfg = core.membership
        if m.frm in m_cfg.retired and m_cfg.index <= core.committed_index:
            # We know its removal is committed: the voters it left can elect among themselves (a retired node
            # campaigns only while its removal may not have committed: see RaftCore.may_campaign).
            return VoteResult.REJECT_UNEXPECTED_LEADER
        log_view = core.log
        my_term, my_index = log_view.end_term, log_view.end_index
        if m.last_term < my_term:
            return VoteResult.REJECT_EXPIRED_LEDGER_TERM
        if m.last_term == my_term and m.last_index < my_index:
            return VoteResult.REJECT_SMALL_LEDGER_END_INDEX
        return VoteResult.ACCEPT

    def on_pre_vote_request(self, m: VoteRequest) -> None:
        """Answer without touching our own term or vote."""
        core = self.core
        term = core.member.term
        if m.term <= term:
            result = VoteResult.REJECT_EXPIRED_VOTE_TERM
        elif self.in_lease() and not m.leadership_transfer:
            result = VoteResult.REJECT_ALREADY_HAS_LEADER
        else:
            result = self._log_result(m)
        granted = result is VoteResult.ACCEPT
        core.send(VoteResponse(core.config.node_id, m.frm, m.term if granted else term, result, pre_vote=True))

    @staticmethod
    def _voted_for_another(voted_for: str | None, candidate: str) -> bool:
        """One vote per term: a second candidate of the term is refused."""
        return voted_for not in (None, candidate)

    def on_vote_request(self, m: VoteRequest) -> None:
        """A real vote in our current term (term already raised to m.term by the caller)."""
        core = self.core
        member = core.member
        assert m.term == member.term
        if self._voted_for_another(member.voted_for, m.frm):
            result = VoteResult.REJECT_ALREADY_VOTED
        elif member.role is Role.LEADER:
            result = VoteResult.REJECT_ALREADY_HAS_LEADER
        else:
            result = self._log_result(m)
        if result is VoteResult.ACCEPT:
            member.vote(m.frm)  # persisted by the Ready's hard_state before this response is sent
            self.reset_timer()
        core.send(VoteResponse(core.config.node_id, m.frm, member.term, result))

    def on_vote_response(self, m: VoteResponse) -> None:
        core = self.core
        member = core.member
        if m.pre_vote:
            if self.pre_candidate and m.term == member.term + 1 and m.granted and m.frm in core.membership.voters:
                self.votes.add(m.frm)
                if len(self.votes) >= core.quorum:
                    self.campaign(leadership_transfer=False)
            return
        if member.role is Role.CANDIDATE and m.term == member.term and m.granted and m.frm in core.membership.voters:
            self.votes.add(m.frm)
            if len(self.votes) >= core.quorum:
                core.become_leader()
