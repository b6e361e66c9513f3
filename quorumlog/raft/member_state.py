"""MemberState: role, term, vote and known leader of one node (DLedger's MemberState).

The one place role transitions happen, so every transition keeps the same bookkeeping: a term change
clears the vote and the leader, and marks the hard state dirty so the next Ready persists it before any
message that depends on it goes out.
"""

from __future__ import annotations

import logging

from .types import HardState, Role

log = logging.getLogger(__name__)


class MemberState:
    __slots__ = ("node_id", "role", "term", "voted_for", "leader_id", "hard_state_dirty")

    def __init__(self, node_id: str, hard_state: HardState) -> None:
        self.node_id = node_id
        self.role = Role.FOLLOWER
        self.term = hard_state.term
        self.voted_for = hard_state.voted_for
        self.leader_id: str | None = None
        self.hard_state_dirty = False

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    def hard_state(self) -> HardState:
        return HardState(self.term, self.voted_for)

    def change_term(self, term: int) -> None:
        assert term > self.term, f"term must grow: {self.term} -> {term}"
        self.term = term
        self.voted_for = None
        self.leader_id = None
        self.hard_state_dirty = True

    def vote(self, candidate: str) -> None:
        self.voted_for = candidate
        self.hard_state_dirty = True

    def become_follower(self, term: int, leader_id: str | None) -> None:
        if term > self.term:
            self.change_term(term)
        assert term == self.term
        if self.role is not Role.FOLLOWER or leader_id != self.leader_id:
            log.info("become follower node=%s term=%d leader=%s", self.node_id, term, leader_id)
        self.role = Role.FOLLOWER
        self.leader_id = leader_id

    def become_candidate(self) -> None:
        assert self.role is not Role.LEADER
        self.change_term(self.term + 1)
        self.vote(self.node_id)
        self.role = Role.CANDIDATE
        log.info("become candidate node=%s term=%d", self.node_id, self.term)

    def become_leader(self) -> None:
        assert self.role is Role.CANDIDATE and self.voted_for == self.node_id
        self.role = Role.LEADER
        self.leader_id = self.node_id
        log.info("become leader node=%s term=%d", self.node_id, self.term)
