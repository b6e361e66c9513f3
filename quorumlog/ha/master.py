"""The master's side of one slave connection (RocketMQ's HAConnection: its ReadSocketService and
WriteSocketService as one state machine).

    c = HAConnection("n1", log, config, now_ms)
    c.on_report(SlaveReport(offset), now_ms) -> [] or [Reset(...)] or [Drop(reason)]
    c.poll(now_ms) -> [Transfer(...), ...] or [Drop(reason)]   # call after appends and on a timer

The slave's reports set `slave_ack_offset` (what it holds) and, the first time, `slave_request_offset` (where
it asked to start). Transfers go from `next_transfer_from_where` in frames of at most `transfer_batch_bytes`,
at most `max_unacked_bytes` beyond the slave's acknowledged offset; `push2slave_max_offset` is the end of the
last frame sent. A slave that reported 0 starts at the beginning of the master's current segment, as RocketMQ
does (an empty slave gets recent data, not the whole history; a full copy is a new member's catch-up, not
HA's). Refusals, each from a RocketMQ bug report:
  - a report beyond the master's end (#1155, #3015) is never counted as acknowledged: the connection drops;
  - a report below what the master still holds (#3388, retention deleted it) answers Reset(start of the
    master's oldest segment) instead of heartbeating forever;
  - a connection silent for `housekeeping_ms` drops (a half-open connection); one the runtime saw end drops
    at once (`lost`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from .log import HALog
from .messages import Drop, Reset, SlaveReport, Transfer


class Ack(StrEnum):
    """When a master/slave group answers an append: once `min_in_sync_replicas` members of its SyncStateSet hold
    it (`sync`, RocketMQ's SYNC_MASTER), or after the master's own write (`async`, ASYNC_MASTER)."""
    SYNC = "sync"
    ASYNC = "async"


@dataclass(frozen=True, slots=True)
class HAConfig:
    transfer_batch_bytes: int = 32 * 1024  # RocketMQ haTransferBatchSize
    heartbeat_interval_ms: int = 5_000  # RocketMQ haSendHeartbeatInterval
    housekeeping_ms: int = 20_000  # RocketMQ haHousekeepingInterval
    max_unacked_bytes: int = 4 * 1024 * 1024  # bytes sent beyond the slave's last report (bounds buffering)
    # An empty slave starts at the master's current segment (RocketMQ's way: recent data, fast) or, False,
    # at the first byte the master holds: what a member must hold to be elected master without losing
    # acknowledged history (a group with a controller runs so).
    empty_slave_from_current_segment: bool = True


class HAConnection:
    def __init__(self, slave_id: str, log: HALog, config: HAConfig, now_ms: int) -> None:
        self.slave_id = slave_id
        self.log = log
        self.config = config
        self.slave_request_offset = -1  # its first report
        self.slave_ack_offset = -1  # its latest report (never beyond the master's end)
        self.next_transfer_from_where = -1  # -1: not decided until the first report
        self.push2slave_max_offset = -1
        # > 0: where this slave's copy (re)starts past bytes it never got — an empty slave started at our current
        # segment, or a Reset once retention deleted what it needed next: it holds no byte before it
        # (GroupTransferService counts it only for appends starting at or past it; simulator seeds 3000924, 3000081)
        self.skipped_to = 0
        self._window_from = -1  # where sending (re)started: the window's base until the slave reports beyond it
        self.last_read_ms = now_ms
        self.last_write_ms = now_ms
        self.closed: str | None = None

    def on_report(self, m: SlaveReport, now_ms: int) -> list[Drop | Reset]:
        if self.closed:
            return []
        self.last_read_ms = now_ms
        end, start = self.log.max_offset(), self.log.min_offset()
        if m.offset > end:
            return self._drop(f"slave {self.slave_id} reported offset {m.offset} beyond the master's end {end}")
        if m.offset < start:
            # (#3388) what it would need next is gone from here: it restarts at our oldest segment
            self.next_transfer_from_where = self._window_from = start
            self.slave_request_offset = max(self.slave_request_offset, m.offset)
            self.skipped_to = max(self.skipped_to, start)
            return [Reset(start)]
        if self.slave_request_offset < 0:
            self.slave_request_offset = m.offset
            from_segment = self.config.empty_slave_from_current_segment
            self.next_transfer_from_where = m.offset if m.offset > 0 else (
                max(start, self.log.segment_start(end)) if from_segment else start)
            self._window_from = self.next_transfer_from_where
            if m.offset == 0 and self.next_transfer_from_where > start:
                self.skipped_to = self.next_transfer_from_where
            if m.offset == 0 and self.next_transfer_from_where > 0:
                return [Reset(self.next_transfer_from_where)]
        self.slave_ack_offset = max(self.slave_ack_offset, m.offset)
        if self.next_transfer_from_where < m.offset:
            self.next_transfer_from_where = m.offset  # (it got further by another connection's frames)
        return []

    def poll(self, now_ms: int) -> list[Transfer | Reset | Drop]:
        """Frames to send now: the log from next_transfer_from_where, or a heartbeat when idle."""
        if self.closed:
            return []
        if now_ms - self.last_read_ms >= self.config.housekeeping_ms:
            return self._drop(f"slave {self.slave_id} silent for {now_ms - self.last_read_ms} ms")
        if self.next_transfer_from_where < 0:
            return []  # waiting for its first report
        out: list[Transfer | Reset | Drop] = []
        cfg = self.config
        end = self.log.max_offset()
        # The window counts from what the slave reported (or where a Reset restarts it), not from what was sent:
        # polls between two reports (every append, every tick) must not each push another window.
        limit = max(self.slave_ack_offset, self._window_from) + cfg.max_unacked_bytes
        while self.next_transfer_from_where < end and self.next_transfer_from_where < limit:
            if self.next_transfer_from_where < self.log.min_offset():
                out.append(Reset(self.log.min_offset()))  # (retention overtook it)
                self.next_transfer_from_where = self._window_from = self.log.min_offset()
                self.skipped_to = max(self.skipped_to, self.next_transfer_from_where)
                continue
            data = self.log.read(self.next_transfer_from_where,
                                 min(cfg.transfer_batch_bytes, limit - self.next_transfer_from_where))
            if not data:
                break
            out.append(Transfer(self.next_transfer_from_where, data))
            self.next_transfer_from_where += len(data)
            self.push2slave_max_offset = self.next_transfer_from_where
        if out:
            self.last_write_ms = now_ms
        elif now_ms - self.last_write_ms >= cfg.heartbeat_interval_ms:
            out.append(Transfer(self.next_transfer_from_where))  # the empty header: a heartbeat
            self.last_write_ms = now_ms
        return out

    def heartbeat_if_caught_up(self, now_ms: int) -> list[Transfer]:
        """A heartbeat frame now, if the slave reported everything sent to it (a frame at any other offset would
        drop its session): for news the frames carry besides bytes — the runtime's confirm offset."""
        if self.closed or not 0 <= self.next_transfer_from_where <= self.slave_ack_offset:
            return []
        self.last_write_ms = now_ms
        return [Transfer(self.next_transfer_from_where)]

    def lost(self, reason: str) -> list[Drop]:
        """The runtime saw the slave's connection end: the session ends now (RocketMQ closes the HAConnection)."""
        return [] if self.closed else self._drop(reason)

    def _drop(self, reason: str) -> list:
        self.closed = reason
        return [Drop(reason)]
