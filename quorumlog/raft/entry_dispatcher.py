"""EntryDispatcher: the leader's push loop towards one follower (DLedger's EntryDispatcher).

States: COMPARE (find the last index where the follower agrees with us) → TRUNCATE (send our entries from
there; the follower replaces only what conflicts) → APPEND (a window of byte-bounded pushes) ⇄ COMMIT
(nothing to push: just the commit index).

- COMPARE looks for the highest index where the follower agrees with us, so little is sent again. Matching
  indexes form a prefix (Raft's log matching), so this is a search between `match_lo` (agrees; at least the
  follower's durable watermark) and `match_hi` (differs): first guesses are the follower's end and the start
  of the mismatching entry's term run, then bisection; O(log n) round trips for a follower far behind.
  The result is only a hint (pushes still in flight may extend the follower meanwhile): safety comes from the
  follower, which never drops an entry that agrees with ours.
- APPEND pushes end at batch boundaries (a batch larger than `max_push_batch_bytes` goes whole in one push)
  and keeps at most `max_pending_pushes` pushes in flight; when the oldest push stays unanswered for
  `max_push_timeout_ms` the dispatcher goes back to COMPARE (one small request) and resumes from what the
  follower really holds. A follower lagging more than `peer_push_throttle_point` bytes gets at most
  `peer_push_quota` bytes per second (DLedger's quota, so one repair does not starve the others); a learner
  gets `learner_push_quota` (default 0: none, so `member add` finishes at the speed of disk and network).
- A follower whose disk is full answers DISK_FULL once its write failed: it dropped what it was writing and
  will answer none of those pushes. The dispatcher then goes back to COMPARE after `heartbeat_interval_ms`
  (not after `max_push_timeout_ms`, so a follower whose disk has room again is caught up at once) and keeps one
  push in flight until one is acknowledged (a full disk is not sent a whole window at every probe).
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
                 "pending", "in_flight_ms", "sent_commit", "quota_second", "quota_bytes", "compare_answered",
                 "match_lo", "match_hi", "truncate_last", "resetting", "unacked_since_ms", "hold_until_ms",
                 "probing")

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
        self.match_lo = -1
        self.match_hi = 0
        self.truncate_last = -1
        self.resetting = False  # the TRUNCATE under way resets the follower's log to our begin index
        self.unacked_since_ms: int | None = None
        self.hold_until_ms = -(1 << 62)  # no COMPARE/TRUNCATE before this (a full follower: see above)
        self.probing = False  # one push in flight until the follower acknowledges one (a full follower)
        self.state = PushType.COMPARE
        self._first_push()

    def _first_push(self) -> None:
        """A new leader knows nothing of the follower's log: it compares from its own end first."""
        self._enter_compare(self.core.log_end)

    # -- state changes -----------------------------------------------------------------------------
    def _enter_compare(self, index: int) -> None:
        log_view = self.core.log
        self.state = PushType.COMPARE
        self.resetting = False
        # Before our log agrees trivially; so does what it acknowledged as durable in this term.
        self.match_lo = max(log_view.begin_index - 1, self.watermark)
        end = self.core.log_end
        self.match_hi = end + 1  # beyond our log: nothing of the follower's there is ours
        self.compare_index = max(min(index, end), self.match_lo)
        self.pending.clear()
        self.in_flight_ms = None
        self.unacked_since_ms = None

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
        begin = core.log.begin_index
        if (self.next_index if self.state is _APPEND else self.compare_index + 1) < begin:
            # Retention deleted what this follower needs next (or the index a COMPARE/TRUNCATE round had
            # settled on): start over from what it holds now.
            self._enter_compare(core.log_end)
        if self.state is _APPEND:
            end = core.log_end
            sent = False
            cfg = core.config
            window = 1 if self.probing else cfg.max_pending_pushes
            if self.next_index <= end and len(self.pending) < window:
                node, term, committed = cfg.node_id, core.member.term, core.committed_index
                while self.next_index <= end and len(self.pending) < window:
                    if self._throttled(end):
                        break
                    first = self.next_index
                    records = self._read(first, end)
                    last = records.last_index
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
        elif self.in_flight_ms is None and core.now_ms >= self.hold_until_ms:
            index = self.compare_index
            self.in_flight_ms = core.now_ms
            self.sent_commit = core.committed_index
            if self.state is PushType.TRUNCATE:
                # DLedger's TRUNCATE carries our entries from index + 1: the follower replaces what conflicts
                records = self._read(index + 1, core.log_end)
                self.truncate_last = records.last_index
                # A reset follower can no longer learn the producer table from the batches below our begin.
                producers = core.log.producer_state() if self.resetting else None
                core.send(PushRequest(core.config.node_id, self.peer, core.member.term, PushType.TRUNCATE,
                                      core.committed_index, index, self._prev_term(index), index + 1,
                                      records.last_index, records, producers))
            else:
                core.send(PushRequest(core.config.node_id, self.peer, core.member.term, PushType.COMPARE,
                                      core.committed_index, prev_index=index, prev_term=self._prev_term(index)))

    def _read(self, first: int, end: int):
        """Records first.. for one push: at most max_push_batch_bytes, but never splitting a batch."""
        core = self.core
        log_view = core.log
        records = log_view.read(first, core.config.max_push_batch_bytes, end)
        last = records.last_index
        if last < end and last > core.committed_index:
            # a follower holding half of a batch could later, as leader, commit that half (and an idempotent
            # retry would then write it again)
            boundary = core.batch_end_at_or_after(last)
            if boundary != last:
                records = log_view.read(first, log_view.bytes_between(first, boundary), boundary)
                last = records.last_index
                assert last == boundary, (last, boundary)
        assert records.first_index == first and last >= first
        return records

    def _throttled(self, end: int) -> bool:
        """DLedger's checkQuotaAndWait: only a follower lagging beyond the throttle point is limited."""
        cfg = self.core.config
        if self.core.log.bytes_between(self.next_index, end) <= cfg.peer_push_throttle_point:
            return False
        # A learner is being caught up on purpose (`member add` waits for it): its own quota, 0 = none.
        quota = cfg.learner_push_quota if self.peer in self.core.membership.learners else cfg.peer_push_quota
        if not quota:
            return False
        second = self.core.now_ms // 1000
        if second != self.quota_second:
            self.quota_second, self.quota_bytes = second, 0
        return self.quota_bytes >= quota

    # -- receiving ---------------------------------------------------------------------------------
    def on_response(self, m: PushResponse) -> bool:
        """Handle a follower's answer; returns True if the watermark moved."""
        t = m.push_type
        if t is _APPEND or t == PushType.APPEND:
            code = m.code
            if code == _SUCCESS:
                # A durable, matching watermark of this term: true whatever state we are in now (it may
                # overtake the answer to the COMPARE that preceded it).
                moved = m.index > self.watermark
                if moved:
                    self.watermark = m.index
                    self.probing = False
                if m.index > self.match_index:
                    self.match_index = m.index
                pending = self.pending
                if pending and self.state is _APPEND:
                    for first in [f for f, p in pending.items() if p[0] <= m.index]:
                        del pending[first]
                return moved
            if code == ResponseCode.DISK_FULL:
                # In any state: the follower's write failed and it dropped what it held of ours beyond its
                # end, so no answer to our pushes (or TRUNCATE) in flight will come. Probe again shortly.
                log.debug("push refused, disk full peer=%s end=%d: compare", self.peer, m.end_index)
                self._enter_compare(min(self.core.log_end, m.end_index))
                self.hold_until_ms = self.core.now_ms + self.core.config.heartbeat_interval_ms
                self.probing = True
                return False
            if self.state is not _APPEND:
                return False  # a late answer to a push of an earlier round
            if code == ResponseCode.REPEATED_PUSH:
                return False  # the follower holds that push already, waiting for an earlier one
            log.debug("push rejected peer=%s code=%s index=%d end=%d", self.peer, code, m.index, m.end_index)
            self._enter_compare(min(self.core.log_end, m.end_index))
            return False
        if t == PushType.COMPARE:
            if self.state is not PushType.COMPARE or m.index != self.compare_index or self.in_flight_ms is None:
                return False
            self.in_flight_ms = None
            self.compare_answered = True
            begin = self.core.log.begin_index
            if m.end_index < begin - 1:
                # The follower's log ends before ours begins: the entries it lacks are gone here (retention).
                # TRUNCATE from our begin on resets its log to start there.
                self.compare_index = begin - 1
                self.state = PushType.TRUNCATE
                self.resetting = True
                return False
            # Retention may have moved our begin since this round started: what lies before it agrees
            # trivially now, and nothing below it can be pushed.
            self.match_lo = max(self.match_lo, begin - 1)
            c = self.compare_index
            if m.code == _SUCCESS:
                self.match_lo = max(self.match_lo, c)
            else:
                self.match_hi = min(self.match_hi, c)
            self.match_hi = min(self.match_hi, m.end_index + 1)  # the follower has nothing beyond its end
            lo, hi = self.match_lo, self.match_hi
            if hi <= lo + 1:  # lo is the highest agreeing index we know of
                self.compare_index = lo
                if lo == begin - 1 and m.begin_index <= lo <= m.end_index and m.code != _SUCCESS:
                    # The follower holds our begin - 1, whose term we no longer know (retention): a TRUNCATE
                    # lets it check its prefix against the chain CRC of our first record; it keeps a prefix
                    # that links and resets one that does not (an old term's entries).
                    self.state = PushType.TRUNCATE
                    self.resetting = True
                elif m.end_index <= lo or lo >= self.core.log_end:
                    # nothing of the follower's to replace (entries beyond our end are not ours, but are left
                    # alone: the APPEND that reaches them replaces them if they conflict)
                    self.match_index = max(self.match_index, min(lo, m.end_index))
                    self._enter_append(lo + 1)
                else:
                    self.state = PushType.TRUNCATE
            elif m.code != _SUCCESS and m.end_index < c:
                self.compare_index = m.end_index  # probe the follower's end first
            else:
                guess = self._before_term_run(min(c, hi - 1)) if m.code != _SUCCESS else lo
                self.compare_index = guess if lo < guess < hi else (lo + hi) // 2
            return False
        if t == PushType.TRUNCATE:
            if self.state is not PushType.TRUNCATE or m.index != self.compare_index or self.in_flight_ms is None:
                return False
            if m.code == _SUCCESS:
                self.match_index = max(self.match_index, self.truncate_last)
                self._enter_append(self.truncate_last + 1)
            else:
                self._enter_compare(min(self.core.log_end, m.end_index))
        return False

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

    def on_heartbeat_response(self, prev_heard_ms: int) -> None:
        """The follower is reachable again: what we sent while it was not is lost, do not wait for timeouts."""
        core = self.core
        if self.state is not _APPEND:
            if self.in_flight_ms is not None and core.now_ms - self.in_flight_ms >= core.config.heartbeat_interval_ms:
                self._compare_timed_out()
        elif self.pending and core.now_ms - prev_heard_ms > 2 * core.config.heartbeat_interval_ms:
            oldest_sent_ms = next(iter(self.pending.values()))[1]
            if oldest_sent_ms > prev_heard_ms:
                self._enter_compare(core.log_end)

    def _compare_timed_out(self) -> None:
        self.in_flight_ms = None  # the next pump sends it again
        if self.state is PushType.COMPARE and not self.compare_answered:
            # never heard back: probe at our end as it is now (we may have grown meanwhile)
            self._enter_compare(self.core.log_end)

    def on_tick(self, now_ms: int) -> None:
        timeout = self.core.config.max_push_timeout_ms
        if self.state is _APPEND:
            if not self.pending and self.watermark < self.match_index:
                # Entries a COMPARE/TRUNCATE round matched are not in `pending`: if the follower's write of them
                # failed after it answered (a full disk), no ack will ever come and nothing would resend them.
                if self.unacked_since_ms is None:
                    self.unacked_since_ms = now_ms
                elif now_ms - self.unacked_since_ms >= timeout:
                    log.debug("matched entries never acked peer=%s watermark=%d match=%d: compare", self.peer,
                              self.watermark, self.match_index)
                    self._enter_compare(self.core.log_end)
                return
            self.unacked_since_ms = None
            if self.pending:
                oldest = next(iter(self.pending.values()))
                if now_ms - oldest[1] >= timeout:
                    # Lost (or the follower is stuck): find out what it holds rather than resending the whole
                    # window at once (after a partition heals that would be a burst past the quota).
                    log.debug("push timeout peer=%s first=%d last=%d: compare", self.peer, oldest[2].first_index,
                              oldest[0])
                    self._enter_compare(self.core.log_end)
        elif self.in_flight_ms is not None and now_ms - self.in_flight_ms >= timeout:
            self._compare_timed_out()
