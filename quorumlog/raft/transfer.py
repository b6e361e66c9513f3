"""Leadership transfer (DLedger's LeadershipTransferRequest) and the preferred-leader option.

The leader stops taking appends (LEADER_TRANSFERRING), lets the transferee's dispatcher bring it up to our
end, then sends it TakeLeadershipRequest; the transferee campaigns at once with `leadership_transfer=True`
so voters ignore their leader lease. The request succeeds when we see the transferee lead a higher term and
fails (TAKE_LEADERSHIP_FAILED) after one maximum election timeout, or at once if the transferee lags more
than `max_leadership_transfer_wait_index` entries.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..codes import ResponseCode
from ..wire.messages import TakeLeadershipRequest
from .types import Completion, Role

if TYPE_CHECKING:
    from .core import RaftCore

log = logging.getLogger(__name__)

# A preferred leader that handed leadership to us gets it back only after this many election timeouts.
HAND_BACK_AFTER_TIMEOUTS = 20
# A preferred leader that refused leadership (it needs a snapshot) is asked again only after this many.
RETRY_REFUSED_AFTER_TIMEOUTS = 5


class LeadershipTransfer:
    __slots__ = ("core", "request_id", "to", "deadline_ms", "start_term", "take_sent", "preferred_retry_ms",
                 "handed_by", "handed_at_ms", "refused_at_ms")

    def __init__(self, core: "RaftCore") -> None:
        self.core = core
        self.to: str | None = None
        self.request_id: int | None = None
        self.deadline_ms = 0
        self.start_term = 0
        self.take_sent = False
        self.preferred_retry_ms = 0
        # The leader that handed us leadership, and when: a preferred leader that handed over on purpose (its
        # disk full or failing, an admin transfer, a shutdown) is not handed it straight back.
        self.handed_by: str | None = None
        self.handed_at_ms = 0
        self.refused_at_ms: dict[str, int] = {}  # peer -> when it last refused to take leadership

    def taken_from(self, leader_id: str) -> None:
        self.handed_by, self.handed_at_ms = leader_id, self.core.now_ms

    @property
    def active(self) -> bool:
        return self.to is not None

    def start(self, request_id: int | None, to: str) -> None:
        core = self.core
        cfg = core.config
        code = None
        if core.member.role is not Role.LEADER:
            code = ResponseCode.NOT_LEADER
        elif to not in core.membership.voters:
            code = ResponseCode.UNKNOWN_MEMBER
        elif to == cfg.node_id:
            code = ResponseCode.SUCCESS
        elif self.active:
            code = ResponseCode.LEADER_TRANSFERRING
        elif core.log_end - core.dispatchers[to].match_index > cfg.max_leadership_transfer_wait_index:
            code = ResponseCode.TAKE_LEADERSHIP_FAILED
        if code is not None:
            if request_id is not None:
                core.complete(Completion(request_id, code, leader_id=core.member.leader_id))
            return
        log.info("leadership transfer node=%s term=%d to=%s", cfg.node_id, core.member.term, to)
        self.request_id, self.to = request_id, to
        self.deadline_ms = core.now_ms + cfg.election_timeout_max_ms
        self.start_term = core.member.term
        self.take_sent = False

    def cancel(self) -> None:
        """The transferee is no longer a voter (its removal is in our log)."""
        self._finish(ResponseCode.TAKE_LEADERSHIP_FAILED)

    def _finish(self, code: ResponseCode) -> None:
        core = self.core
        if code is not ResponseCode.SUCCESS and self.request_id is None:
            # a preferred-leader attempt failed: do not retry at once
            self.preferred_retry_ms = core.now_ms + 2 * core.config.election_timeout_max_ms
        log.info("leadership transfer done node=%s to=%s code=%s", core.config.node_id, self.to, code.name)
        if self.request_id is not None:
            core.complete(Completion(self.request_id, code, leader_id=core.member.leader_id))
        self.request_id, self.to, self.take_sent = None, None, False

    def refused(self, peer: str) -> None:
        """The transferee said it will not take leadership (it needs a snapshot): fail now, not at the deadline."""
        self.refused_at_ms[peer] = self.core.now_ms
        if self.active and self.take_sent and peer == self.to:
            self._finish(ResponseCode.TAKE_LEADERSHIP_FAILED)

    def hand_over_for_snapshot(self) -> None:
        """We lead but our state machine needs a snapshot, which we would only ask ourselves for: hand over to
        the follower holding most of our log that has not just refused (it needs one too)."""
        core = self.core
        if self.active:
            return
        recent = core.now_ms - 2 * core.config.election_timeout_max_ms
        voters = [p for p in sorted(core.membership.voters & core.dispatchers.keys())
                  if self.refused_at_ms.get(p, recent - 1) < recent]
        if not voters:
            return
        best = max(voters, key=lambda p: core.dispatchers[p].match_index)
        if core.dispatchers[best].match_index >= core.committed_index:
            log.info("needs a snapshot: transferring leadership node=%s term=%d to=%s", core.config.node_id,
                     core.member.term, best)
            self.start(None, best)

    def observe_leader(self, term: int, leader_id: str) -> None:
        if self.active and term > self.start_term:
            self._finish(ResponseCode.SUCCESS if leader_id == self.to else ResponseCode.TAKE_LEADERSHIP_FAILED)

    def on_tick(self) -> None:
        core = self.core
        if self.active and core.now_ms >= self.deadline_ms:
            self._finish(ResponseCode.TAKE_LEADERSHIP_FAILED)
        elif core.member.role is Role.LEADER and not self.active:
            if core.needs_snapshot:
                self.hand_over_for_snapshot()
            else:
                self._maybe_prefer()

    def _maybe_prefer(self) -> None:
        core = self.core
        preferred = core.config.preferred_leader_id
        if (preferred is None or preferred == core.config.node_id or preferred not in core.membership.voters
                or core.now_ms < self.preferred_retry_ms):
            return
        if preferred == self.handed_by and core.now_ms < self.handed_at_ms + HAND_BACK_AFTER_TIMEOUTS * \
                core.config.election_timeout_max_ms:
            return
        refused = self.refused_at_ms.get(preferred)
        if refused is not None and core.now_ms < refused + RETRY_REFUSED_AFTER_TIMEOUTS * \
                core.config.election_timeout_max_ms:
            return  # it needed a snapshot a moment ago: do not hold appends to ask it again so soon
        if self._caught_up(preferred):
            self.start(None, preferred)

    def _caught_up(self, peer: str) -> bool:
        core = self.core
        end = core.log_end
        return core.end_index == end and core.dispatchers[peer].match_index >= end

    def pump(self) -> None:
        """Leader, after each step: hand over once the transferee holds our whole log."""
        if self.take_sent or not self.active or self.core.member.role is not Role.LEADER:
            return
        if self._caught_up(self.to):
            core = self.core
            self.take_sent = True
            core.send(TakeLeadershipRequest(core.config.node_id, self.to, core.member.term))
