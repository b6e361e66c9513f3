"""EntryHandler: the follower's side of replication (DLedger's EntryHandler).

- APPEND pushes are kept by first index (DLedger's writeRequestMap) and stored strictly in order; one that
  arrives early waits in the buffer, a second copy of a buffered push is answered REPEATED_PUSH, and a
  buffered push that waits longer than `max_push_timeout_ms` is answered INCONSISTENT_STATE so the leader
  re-COMPAREs at once (DLedger's checkAbnormalFuture fast-fail).
- A push overlapping entries we hold is checked against our log (same term at the same index means the
  same prefix: Raft's log matching) and answered SUCCESS or INCONSISTENT_STATE.
- `matched_end` is the highest index known to agree with the current leader's log; acknowledgements carry
  min(durable index, matched_end), so a follower never acks an entry that is not both on disk and the
  leader's. Our commit is min(leader's committed, matched_end).
- COMPARE/TRUNCATE clear the buffer (DLedger does too). Nothing is dropped blindly: a TRUNCATE carries the
  leader's entries and, like an APPEND, replaces only our entries that conflict with them (Raft's rule). An
  entry that agrees with the leader may be one we acknowledged (perhaps before a restart, so we no longer
  know); dropping it could shrink the quorum that committed it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..codes import ResponseCode
from ..format import log_entry
from ..wire.messages import PushRequest, PushResponse, PushType
from .types import AppendRecords

if TYPE_CHECKING:
    from .core import RaftCore

log = logging.getLogger(__name__)

_APPEND = PushType.APPEND
_SUCCESS = ResponseCode.SUCCESS


def _chunk(m: PushRequest) -> bytes | memoryview:
    chunks = m.records.chunks
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


class EntryHandler:
    __slots__ = ("core", "term", "buffer", "matched_end", "acked", "ack_owed")

    def __init__(self, core: "RaftCore") -> None:
        self.core = core
        self.buffer: dict[int, tuple[PushRequest, int]] = {}  # first_index -> (push, received_ms)
        self.reset()

    def reset(self) -> None:
        """A new term: nothing of an earlier leader's is trusted beyond the commit point."""
        self.term = self.core.member.term
        self.buffer.clear()
        self.matched_end = min(self.core.committed_index, self.core.end_index)
        self.acked = -1
        self.ack_owed = False

    def for_current_term(self) -> "EntryHandler":
        """`matched_end` is about the leader of `term` (a term has one leader); any term change voids it,
        however it happened (a vote, a campaign, a message)."""
        if self.term != self.core.member.term:
            self.reset()
        return self

    def watermark(self) -> int:
        return min(self.core.durable_index, self.matched_end)

    def _reply(self, m: PushRequest, code: ResponseCode, index: int) -> None:
        core = self.core
        core.send(PushResponse(core.config.node_id, m.frm, core.member.term, m.push_type, code, index,
                               core.end_index, core.log.begin_index))

    def _ack(self, m: PushRequest) -> None:
        wm = self.watermark()
        self.acked = max(self.acked, wm)
        self.ack_owed = wm < self.matched_end
        self._reply(m, _SUCCESS, wm)

    # -- pushes ------------------------------------------------------------------------------------
    def on_push(self, m: PushRequest) -> None:
        t = m.push_type
        if t is _APPEND or t == PushType.APPEND:
            self._on_append(m)
        elif t == PushType.COMMIT:
            pass
        elif t == PushType.COMPARE:
            self._on_compare(m)
        elif t == PushType.TRUNCATE:
            self._on_truncate(m)
        self.core.follower_commit(m.committed_index, self.matched_end)

    def _on_append(self, m: PushRequest) -> None:
        core = self.core
        first = m.first_index
        if first in self.buffer:
            self._reply(m, ResponseCode.REPEATED_PUSH, first)
            return
        if first > core.end_index + 1:
            if len(self.buffer) >= core.config.max_pending_pushes * 2:
                self._reply(m, ResponseCode.INCONSISTENT_STATE, first)
            else:
                self.buffer[first] = (m, core.now_ms)
            return
        if not self._apply(m):
            return
        buffer = self.buffer
        while buffer:
            nxt = core.end_index + 1
            ready = [f for f in buffer if f <= nxt]
            if not ready:
                break
            for f in sorted(ready):
                pm, _ = buffer.pop(f)
                if not self._apply(pm):
                    return

    def _apply(self, m: PushRequest) -> bool:
        """Store (or confirm) one in-order push; False if it does not follow our log (answered).

        Raft's rule, entry by entry: an entry we hold with the push's term at the same index is the same
        entry (log matching) and is kept; at the first one whose term differs, our suffix from there is
        dropped and the push's records replace it. Nothing is ever dropped that agrees with the leader.
        """
        core = self.core
        log_view = core.log
        first, last = m.first_index, m.last_index
        end = core.end_index
        assert first <= end + 1
        prev = first - 1
        if prev > self.matched_end and prev >= log_view.begin_index:
            if not self._append_follows(prev, m):
                self.buffer.clear()
                self._reply(m, ResponseCode.INCONSISTENT_STATE, first)
                return False
            self.matched_end = prev  # prev agrees, hence (log matching) everything before it too
        data = _chunk(m)
        if first > end:
            core.append_records(AppendRecords(first, last, data))
        else:  # overlaps what we hold: a retry, entries we have, or a suffix that conflicts
            index, off, stop = first, 0, min(last, end)
            header = log_entry.HEADER
            matched = self.matched_end
            while index <= stop:
                h = header.unpack_from(data, off)
                if index > matched and log_view.term_at(index) != h[3]:
                    break  # first conflict
                off += h[1]
                index += 1
            if index <= stop:
                assert index > core.committed_index, f"entry {index} conflicts with the leader but is committed"
                core.truncate_after(index - 1)
            else:
                self.matched_end = max(self.matched_end, stop)
                if last <= end:
                    self._ack(m)
                    return True
            core.append_records(AppendRecords(index, last, memoryview(data)[off:]))
        self.matched_end = last
        self.ack_owed = True
        return True

    def _on_compare(self, m: PushRequest) -> None:
        core = self.core
        self.buffer.clear()
        c = m.prev_index
        log_view = core.log
        if c < log_view.begin_index:
            ok = True  # before our log (begin_index - 1 for an empty one): trivially agrees
        elif c > core.end_index:
            ok = False
        else:
            ok = log_view.term_at(c) == m.prev_term
        if ok:
            self.matched_end = max(self.matched_end, c)
            self._reply(m, _SUCCESS, c)
            self._ack_watermark(m)
        else:
            self._reply(m, ResponseCode.INCONSISTENT_TERM, c)

    def _append_follows(self, prev: int, m: PushRequest) -> bool:
        """An APPEND is taken only where it follows our log: checked here too, not only by the leader's
        COMPARE (DLedger's follower trusts the COMPARE)."""
        return self._follows(prev, m)

    def _follows(self, prev: int, m: PushRequest) -> bool:
        """Does the push's first record follow our entry `prev`? By term (Raft), or, when the leader no longer
        holds `prev` (prev_term -1: below its begin index), by the chain CRC its first record carries, which
        covers our whole prefix."""
        log_view = self.core.log
        if m.prev_term != -1:
            return log_view.term_at(prev) == m.prev_term
        if m.records is None or m.records.size_bytes == 0:
            return False
        h = log_entry.read_header(m.records.chunks[0])  # the first record starts the first chunk
        return h.chain_crc == log_entry.chain_crc_of(log_view.chain_crc_at(prev), h.index, h.term, h.channel,
                                                     h.body_crc, h.timestamp_ms, h.body_size)

    def _on_truncate(self, m: PushRequest) -> None:
        """DLedger's TRUNCATE carries the leader's entries from the agreed index on: replace our conflicting
        suffix with them (only what conflicts is dropped; see _apply)."""
        core = self.core
        self.buffer.clear()
        i = m.prev_index
        if m.records is None or i > core.end_index and m.prev_term != -1:
            self._reply(m, ResponseCode.INCONSISTENT_STATE, i)
            return
        if m.prev_term == -1 and i >= core.log.begin_index and (i > core.end_index or not self._follows(i, m)):
            # `i` is below the leader's begin index, and our log ends before it (we were away longer than its
            # retention, or our disk is new) or differs from the leader's up to it (an old term's entries the
            # leader can no longer compare by term). Everything up to `i` is committed (retention deletes only
            # that), so we start our log at i + 1 with the leader's entries (DLedger's TRUNCATE).
            core.reset_log(i + 1, m.producers)
            self.matched_end = i
        if not self._apply(m):
            return
        self._reply(m, _SUCCESS, i)
        self._ack_watermark(m)

    def _ack_watermark(self, m: PushRequest) -> None:
        """After a COMPARE/TRUNCATE: tell the leader at once what we durably hold of its log, so a new leader
        learns its followers' watermarks without waiting for new entries."""
        core = self.core
        wm = self.watermark()
        if wm >= 0:  # always, even if sent before: the leader re-COMPAREs exactly when it lost our acks
            self.acked = max(self.acked, wm)
            core.send(PushResponse(core.config.node_id, m.frm, core.member.term, _APPEND, _SUCCESS, wm,
                                   core.end_index, core.log.begin_index))
        self.ack_owed = wm < self.matched_end

    # -- durability and time ------------------------------------------------------------------------
    def on_durable(self) -> None:
        core = self.core
        if not self.ack_owed or core.member.leader_id is None:
            return
        wm = self.watermark()
        if wm > self.acked:
            self.acked = wm
            self.ack_owed = wm < self.matched_end
            core.send(PushResponse(core.config.node_id, core.member.leader_id, core.member.term, _APPEND, _SUCCESS,
                                   wm, core.end_index, core.log.begin_index))

    def on_tick(self, now_ms: int) -> None:
        if not self.buffer:
            return
        timeout = self.core.config.max_push_timeout_ms
        expired = [f for f, (_, t) in self.buffer.items() if now_ms - t >= timeout]
        for f in sorted(expired):
            m, _ = self.buffer.pop(f)
            self._reply(m, ResponseCode.INCONSISTENT_STATE, f)
