"""EntryDispatcher: the leader's push loop towards one follower (DLedger's EntryDispatcher).

States: COMPARE (find the last index where the follower agrees with us) → TRUNCATE (make it drop what
follows) → APPEND (a window of byte-bounded pushes) ⇄ COMMIT (nothing to push: just the commit index).

- COMPARE walks back fast: to the follower's end if it is shorter, else to before the whole run of the
  mismatching entry's term (terms never decrease along a log, so binary search finds it).
- APPEND keeps at most `max_pending_pushes` pushes in flight; a push unanswered for `max_push_timeout_ms`
  is sent again. A follower lagging more than `peer_push_throttle_point` bytes gets at most
  `peer_push_quota` bytes per second (DLedger's quota, so one repair does not starve the others).
- `watermark` is the follower's acknowledged *durable* index in this term (what the QuorumAckChecker
  counts); `match_index` is what we know it holds (used to decide when a transfer may start).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..codes import ResponseCode
from ..wire.messages import PushRequest, PushResponse, PushType

if TYPE_CHECKING:
    from .core import RaftCore

log = logging.getLogger(__name__)

_APPEND = PushType.APPEND
_SUCCESS = ResponseCode.SUCCESS


class EntryDispatcher:
    __slots__ = ("core", "peer", "state", "compare_index", "next_index", "match_index", "watermark",
                 "pending", "in_flight_ms", "sent_commit", "quota_second", "quota_bytes", "compare_answered")

    def __init__(self, core: "RaftCore", peer: str) -> None:
        self.core = core
        self.peer = peer
        self.match_index = -1
        self.watermark = -1
        self.pending: dict[int, list] = {}  # first_index -> [last_index, sent_ms, PushRequest]
        self.in_flight_ms: int | None = None  # a COMPARE/TRUNCATE push awaiting its answer
        self.sent_commit = -2
        self.quota_second = -1
        self.quota_bytes = 0
        self.next_index = 0
        self.compare_index = -1
        self.compare_answered = False
        self.state = PushType.COMPARE
        if "skip_compare" in core.config.planted_bugs:
            # PLANTED BUG skip_compare (test-only): assume the follower already matches our whole log.
            self._enter_append(core.log.end_index + 1)
        else:
            self._enter_compare(core.log.end_index)

    # -- state changes -----------------------------------------------------------------------------
    def _enter_compare(self, index: int) -> None:
        log_view = self.core.log
        self.state = PushType.COMPARE
        self.compare_index = max(min(index, log_view.end_index), log_view.begin_index - 1)
        self.pending.clear()
        self.in_flight_ms = None

    def _enter_append(self, next_index: int) -> None:
        self.state = _APPEND
        self.next_index = next_index
        self.pending.clear()
        self.in_flight_ms = None

    # -- sending -----------------------------------------------------------------------------------
    def _prev_term(self, index: int) -> int:
        log_view = self.core.log
        return log_view.term_at(index) if index >= log_view.begin_index else -1

    def pump(self) -> None:
        """Send whatever the state and window allow; called after every leader step."""
        core = self.core
        if self.state is _APPEND:
            log_view = core.log
            end = log_view.end_index
            sent = False
            cfg = core.config
            if self.next_index <= end and len(self.pending) < cfg.max_pending_pushes:
                node, term, committed = cfg.node_id, core.member.term, core.committed_index
                while self.next_index <= end and len(self.pending) < cfg.max_pending_pushes:
                    if self._throttled(end):
                        break
                    first = self.next_index
                    records = log_view.read(first, cfg.max_push_batch_bytes, end)
                    last = records.last_index
                    assert records.first_index == first and last >= first
                    msg = PushRequest(node, self.peer, term, _APPEND, committed, first - 1, self._prev_term(first - 1),
                                      first, last, records)
                    self.pending[first] = [last, core.now_ms, msg]
                    self.next_index = last + 1
                    self.quota_bytes += records.size_bytes
                    core.send(msg)
                    sent = True
                if sent:
                    self.sent_commit = committed
            if not sent and core.committed_index > self.sent_commit:
                self.sent_commit = core.committed_index
                core.send(PushRequest(cfg.node_id, self.peer, core.member.term, PushType.COMMIT, self.sent_commit))
        elif self.in_flight_ms is None:
            core = self.core
            index = self.compare_index
            self.in_flight_ms = core.now_ms
            self.sent_commit = core.committed_index
            core.send(PushRequest(core.config.node_id, self.peer, core.member.term, self.state, core.committed_index,
                                  prev_index=index, prev_term=self._prev_term(index)))

    def _throttled(self, end: int) -> bool:
        """DLedger's checkQuotaAndWait: only a follower lagging beyond the throttle point is limited."""
        cfg = self.core.config
        if self.core.log.bytes_between(self.next_index, end) <= cfg.peer_push_throttle_point:
            return False
        second = self.core.now_ms // 1000
        if second != self.quota_second:
            self.quota_second, self.quota_bytes = second, 0
        return self.quota_bytes >= cfg.peer_push_quota

    # -- receiving ---------------------------------------------------------------------------------
    def on_response(self, m: PushResponse) -> bool:
        """Handle a follower's answer; returns True if the watermark moved."""
        t = m.push_type
        if t is _APPEND or t == PushType.APPEND:
            if self.state is not _APPEND:
                return False  # a late answer to a push of an earlier round
            code = m.code
            if code == _SUCCESS:
                moved = m.index > self.watermark
                if moved:
                    self.watermark = m.index
                if m.index > self.match_index:
                    self.match_index = m.index
                pending = self.pending
                if pending:
                    for first in [f for f, p in pending.items() if p[0] <= m.index]:
                        del pending[first]
                return moved
            if code == ResponseCode.REPEATED_PUSH:
                return False  # the follower holds that push already, waiting for an earlier one
            log.debug("push rejected peer=%s code=%s index=%d end=%d", self.peer, code, m.index, m.end_index)
            self._enter_compare(min(self.core.log.end_index, m.end_index))
            return False
        if t == PushType.COMPARE:
            if self.state is not PushType.COMPARE or m.index != self.compare_index or self.in_flight_ms is None:
                return False
            self.in_flight_ms = None
            self.compare_answered = True
            if m.code == _SUCCESS:
                if m.end_index == self.compare_index:
                    self.match_index = max(self.match_index, self.compare_index)
                    self._enter_append(self.compare_index + 1)
                else:
                    self.state = PushType.TRUNCATE
            else:
                self._walk_back(m)
            return False
        if t == PushType.TRUNCATE:
            if self.state is not PushType.TRUNCATE or m.index != self.compare_index or self.in_flight_ms is None:
                return False
            if m.code == _SUCCESS:
                self.match_index = max(self.match_index, m.end_index)
                self._enter_append(m.end_index + 1)
            else:
                self._enter_compare(min(self.core.log.end_index, m.end_index))
        return False

    def _walk_back(self, m: PushResponse) -> None:
        c = self.compare_index
        if m.end_index < c:
            c = m.end_index
        else:
            c = self._before_term_run(c)
        self._enter_compare(c)

    def _before_term_run(self, index: int) -> int:
        """Largest j < index whose term is lower than term_at(index) (begin_index - 1 if none)."""
        log_view = self.core.log
        lo = log_view.begin_index - 1
        if index <= log_view.begin_index:
            return lo
        term = log_view.term_at(index)
        hi = index - 1  # invariant: answer in [lo, hi]; term_at(lo) < term (or lo is before the log)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if log_view.term_at(mid) < term:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def on_heartbeat_response(self) -> None:
        """The follower is reachable: a COMPARE/TRUNCATE lost while it was not is sent again now."""
        core = self.core
        if (self.state is not _APPEND and self.in_flight_ms is not None
                and core.now_ms - self.in_flight_ms >= core.config.heartbeat_interval_ms):
            self._compare_timed_out()

    def _compare_timed_out(self) -> None:
        self.in_flight_ms = None  # the next pump sends it again
        if self.state is PushType.COMPARE and not self.compare_answered:
            # never heard back: probe at our end as it is now (we may have grown meanwhile)
            self.compare_index = self.core.log.end_index

    def on_tick(self, now_ms: int) -> None:
        timeout = self.core.config.max_push_timeout_ms
        if self.state is _APPEND:
            for p in self.pending.values():
                if now_ms - p[1] >= timeout:
                    log.debug("push timeout peer=%s first=%d last=%d: resend", self.peer, p[2].first_index, p[0])
                    p[1] = now_ms
                    self.core.send(p[2])
        elif self.in_flight_ms is not None and now_ms - self.in_flight_ms >= timeout:
            self._compare_timed_out()
