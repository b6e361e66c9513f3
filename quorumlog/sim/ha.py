"""The master/slave HA transfer in the deterministic simulator:

    python -m quorumlog.sim.ha --seeds 1000 [--start S] [--seed S --trace] [--bug ack_on_send]

One master appending records and two slaves, each behind its own connection with delays (in order, as TCP),
driven by the real HAConnection / HAClient / GroupTransferService over MemoryHALogs. Faults: cut links (the
connection drops both ways and reconnects later), paused slaves (the connection stays open, nothing is read:
housekeeping drops it), slave restarts, master retention past a lagging slave (it must Reset, not heartbeat
forever: RocketMQ #3388). Appends wait for SYNC_MASTER acks (min_in_sync_replicas 2).

Checker: a slave's bytes always equal the master's at the same offsets; an append acknowledged SUCCESS is held
(reported) by enough slaves at that moment; after healing every slave converges to the master's end and new
appends succeed. Not simulated yet: master crashes and switches (the controller is still to build).
"""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass

from ..codes import ResponseCode
from ..ha import GroupTransferService, HAClient, HAConnection, MemoryHALog
from ..ha.master import HAConfig
from ..ha.messages import Drop, Reset, SlaveReport, Transfer
from .seed_cli import seed_main

PLANTED = ("ack_on_send",)
STEP_MS = 5
SLAVES = ("s1", "s2")


class Violation(Exception):
    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind


@dataclass
class _Link:
    up: bool = True
    paused: bool = False  # the slave reads nothing (SIGSTOP): the connection stays open
    connected: bool = False
    reconnect_at: int = 0
    conn: HAConnection | None = None
    to_slave: list | None = None  # [(deliver_at_ms, message)]
    to_master: list | None = None


class HASim:
    def __init__(self, seed: int, bugs: frozenset[str] = frozenset(), trace=None) -> None:
        self.rng = random.Random(seed)
        self.bugs = bugs
        self.trace = trace
        self.now = 0
        self.config = HAConfig(transfer_batch_bytes=512, heartbeat_interval_ms=200, housekeeping_ms=1_000,
                               max_unacked_bytes=4_096)
        self.master = MemoryHALog(segment_bytes=2_048)
        self.logs = {s: MemoryHALog(segment_bytes=2_048) for s in SLAVES}
        self.clients = {s: HAClient(self.logs[s], self.config, 0) for s in SLAVES}
        self.links = {s: _Link() for s in SLAVES}
        self.gts = GroupTransferService(min_in_sync_replicas=2, slave_timeout_ms=600, not_catchup_ms=1_500)
        self.pending: dict[int, int] = {}  # request id -> end offset
        self.next_rid = 0
        self.acked = 0
        self.refused: dict[str, int] = {}
        self.faults_until = 0
        self.last: tuple[int, ResponseCode] | None = None

    def log(self, text: str) -> None:
        if self.trace:
            self.trace(f"{self.now:7d} {text}")

    # -- connections -----------------------------------------------------------------------------------
    def _connect(self, s: str) -> None:
        link = self.links[s]
        link.connected, link.to_slave, link.to_master = True, [], []
        link.conn = HAConnection(s, self.master, self.config, self.now)
        self.gts.on_slave_connected(s)
        self._send_master(s, self.clients[s].on_connected(self.now))
        self.log(f"{s} connected")

    def _drop(self, s: str, why: str) -> None:
        link = self.links[s]
        if not link.connected:
            return
        link.connected, link.conn, link.to_slave, link.to_master = False, None, None, None
        self.clients[s].on_disconnected()
        self.gts.on_slave_gone(s)
        link.reconnect_at = self.now + self.rng.randint(20, 200)
        self.log(f"{s} dropped: {why}")

    def _delay(self) -> int:
        return self.rng.choice((1, 2, 5, 10, 20))

    def _send_master(self, s: str, msgs: list) -> None:
        link = self.links[s]
        for m in msgs:
            if isinstance(m, Drop):
                return self._drop(s, m.reason)
            link.to_master.append((self.now + self._delay(), m))  # type: ignore[union-attr]

    def _send_slave(self, s: str, msgs: list) -> None:
        link = self.links[s]
        for m in msgs:
            if isinstance(m, Drop):
                return self._drop(s, m.reason)
            link.to_slave.append((self.now + self._delay(), m))  # type: ignore[union-attr]
            if "ack_on_send" in self.bugs and isinstance(m, Transfer) and m.data:
                # PLANTED BUG: count bytes as the slave's once sent, not once it reported them
                self.gts.on_slave_offset(s, m.offset + len(m.data), self.master.max_offset(), self.now)

    def _deliver(self, s: str) -> None:
        link = self.links[s]
        while link.connected and link.to_master and link.to_master[0][0] <= self.now:
            _, m = link.to_master.pop(0)
            assert isinstance(m, SlaveReport) and link.conn is not None
            out = link.conn.on_report(m, self.now)
            if not out or isinstance(out[0], Reset):
                if link.conn.slave_ack_offset >= 0:
                    self.gts.on_slave_offset(s, link.conn.slave_ack_offset, self.master.max_offset(), self.now,
                                             link.conn.skipped_to)
            self._send_slave(s, out)
        while link.connected and not link.paused and link.to_slave and link.to_slave[0][0] <= self.now:
            _, m = link.to_slave.pop(0)
            self._send_master(s, self.clients[s].on_message(m, self.now))

    # -- the run ---------------------------------------------------------------------------------------
    def _append(self) -> None:
        data = bytes(self.rng.getrandbits(8) for _ in range(self.rng.randint(1, 300)))
        start = self.master.max_offset()
        self.master.append(start, data)
        self.next_rid += 1
        done = self.gts.request(self.next_rid, self.master.max_offset(), self.now, start)
        if done is None:
            self.pending[self.next_rid] = self.master.max_offset()
        else:
            self._done(done)

    def _done(self, d) -> None:
        self.pending.pop(d.request_id, None)
        self.last = (d.request_id, d.code)
        if d.code == ResponseCode.SUCCESS:
            holders = [s for s in SLAVES if self.logs[s].max_offset() >= d.end_offset
                       and self.logs[s].min_offset() <= d.end_offset - 1]
            if len(holders) + 1 < self.gts.min_in_sync_replicas:
                raise Violation("acked_not_held", f"append ending at {d.end_offset} acknowledged, held by "
                                                  f"{holders} ({[self.logs[s].max_offset() for s in SLAVES]})")
            self.acked += 1
        else:
            self.refused[d.code.name] = self.refused.get(d.code.name, 0) + 1

    def _fault(self) -> None:
        s = self.rng.choice(SLAVES)
        link = self.links[s]
        kind = self.rng.choice(("cut", "pause", "restart", "retention"))
        hold = self.rng.randint(100, 2_500)
        if kind == "cut":
            link.up = False
            self._drop(s, "link cut")
        elif kind == "pause":
            link.paused = True
        elif kind == "restart":
            self._drop(s, "slave restarted")
            self.clients[s] = HAClient(self.logs[s], self.config, self.now)
        elif kind == "retention":
            cut = self.master.max_offset() - self.rng.randint(0, 6_000)
            self.master.delete_before(cut)
            self.log(f"retention: master holds from {self.master.min_offset()}")
            return
        self.faults_until = max(self.faults_until, self.now + hold)
        self.log(f"fault {kind} {s} for {hold} ms")

    def _heal(self) -> None:
        for link in self.links.values():
            link.up, link.paused = True, False

    def _step(self) -> None:
        self.now += STEP_MS
        for s in SLAVES:
            link = self.links[s]
            if not link.connected and link.up and self.now >= link.reconnect_at:
                self._connect(s)
            if link.connected:
                self._deliver(s)
            if link.connected and link.conn is not None:
                self._send_slave(s, link.conn.poll(self.now))
            if link.connected and not link.paused:
                self._send_master(s, self.clients[s].poll(self.now))
        for d in self.gts.poll(self.now):
            self._done(d)
        self._check_prefix()

    def _check_prefix(self) -> None:
        for s in SLAVES:
            log = self.logs[s]
            lo = max(log.min_offset(), self.master.min_offset())
            hi = min(log.max_offset(), self.master.max_offset())
            if lo < hi and log.read(lo, hi - lo) != self.master.read(lo, hi - lo):
                raise Violation("diverged", f"{s}'s bytes {lo}..{hi} differ from the master's")
            if log.max_offset() > self.master.max_offset():
                raise Violation("ahead", f"{s} holds up to {log.max_offset()}, master {self.master.max_offset()}")

    def run(self, steps: int = 4_000) -> None:
        for _ in range(steps):
            if self.rng.random() < 0.3:
                self._append()
            if self.rng.random() < 0.004:
                self._fault()
            if self.now >= self.faults_until:
                self._heal()
            self._step()
        self._heal()
        self.faults_until = 0
        for _ in range(2_000):  # 10 s healed: everyone converges, appends succeed
            self._step()
            if all(self.logs[s].max_offset() == self.master.max_offset() for s in SLAVES) and not self.pending:
                break
        for s in SLAVES:
            if self.logs[s].max_offset() != self.master.max_offset():
                raise Violation("not_converged", f"{s} at {self.logs[s].max_offset()}, master "
                                                 f"{self.master.max_offset()} 10 s after healing")
        for _ in range(100):  # (a report at the master's end puts each back in the SyncStateSet)
            self._step()
        self._append()
        for _ in range(400):
            if not self.pending:
                break
            self._step()
        if self.last != (self.next_rid, ResponseCode.SUCCESS):
            raise Violation("liveness", f"the append after healing ended {self.last} (pending {self.pending})")


def run_seed(seed: int, bugs: frozenset[str] = frozenset(), trace=None) -> Violation | None:
    sim = HASim(seed, bugs, trace)
    try:
        sim.run()
    except Violation as v:
        return v
    return None


def main(argv: list[str] | None = None) -> int:
    return seed_main("quorumlog.sim.ha", __doc__, run_seed, PLANTED, "ha", argv)


if __name__ == "__main__":
    sys.exit(main())
