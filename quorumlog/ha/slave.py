"""The slave's side (RocketMQ's HAClient): report the max offset it holds on connecting, after every append and
every `heartbeat_interval_ms`; append each frame's bytes as they are (the log checks their CRCs when it
reads them; they are never re-encoded) only if the frame starts exactly at its own max offset — otherwise
the connection is out of step and drops (the slave reconnects and reports again).

    c = HAClient(log, config, now_ms)
    c.on_connected(now_ms) -> [SlaveReport]
    c.on_message(Transfer | Reset, now_ms) -> [SlaveReport] or [Drop]
    c.poll(now_ms) -> [SlaveReport] (the periodic report) or [Drop] (the master went silent)
"""

from __future__ import annotations

from .log import HALog
from .master import HAConfig
from .messages import Drop, Reset, SlaveReport, Transfer


class HAClient:
    def __init__(self, log: HALog, config: HAConfig, now_ms: int) -> None:
        self.log = log
        self.config = config
        self.last_read_ms = now_ms
        self.last_report_ms = now_ms
        self.connected = False

    def on_connected(self, now_ms: int) -> list[SlaveReport]:
        self.connected = True
        self.last_read_ms = now_ms
        return [self._report(now_ms)]

    def on_disconnected(self) -> None:
        self.connected = False

    def on_message(self, m: Transfer | Reset, now_ms: int) -> list[SlaveReport | Drop]:
        if not self.connected:
            return []
        self.last_read_ms = now_ms
        if isinstance(m, Reset):
            # (#3388) our offset is gone from the master: restart where it can serve. A Reset we already
            # followed (the master answered a report we sent before it) must not wipe what came after it.
            if not self.log.min_offset() <= m.offset <= self.log.max_offset():
                self.log.reset(m.offset)
            return [self._report(now_ms)]
        mine = self.log.max_offset()
        if m.offset != mine:
            self.connected = False
            return [Drop(f"master sent offset {m.offset}, this slave holds up to {mine}")]
        if m.heartbeat:
            return []
        self.log.append(m.offset, m.data)
        return [self._report(now_ms)]

    def poll(self, now_ms: int) -> list[SlaveReport | Drop]:
        if not self.connected:
            return []
        if now_ms - self.last_read_ms >= self.config.housekeeping_ms:
            self.connected = False
            return [Drop(f"master silent for {now_ms - self.last_read_ms} ms")]
        if now_ms - self.last_report_ms >= self.config.heartbeat_interval_ms:
            return [self._report(now_ms)]
        return []

    def _report(self, now_ms: int) -> SlaveReport:
        self.last_report_ms = now_ms
        return SlaveReport(self.log.max_offset())
