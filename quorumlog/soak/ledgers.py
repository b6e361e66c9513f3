"""The ledger soak: writers adding to ledgers over 5 real node processes (each a bookie, metadata in `_meta`)
while bookies are faulted, one fault per cycle; then every ledger is recovered and checked.

    python -m quorumlog.soak.ledgers --seed S --cycles N [--out FILE]

Workload: `writers` writers, each creating a ledger (E=3 W=2 A=2), adding with 16 in flight, closing it after
a few hundred entries and starting the next; a writer fenced or failed starts a new ledger. Writer 0 has a
client of its own, the others share one (their adds go together in ADD_MULTI requests). Each cycle, a
recovery client opens one ledger being written with recovery (the writer must get LEDGER_FENCED), and one
fault from FAULT_KINDS is applied to a bookie for `hold_s`, then healed:

  kill9_bookie      kill -9 a bookie (the writers' ensemble changes), restarted at the heal
  pause_bookie      SIGSTOP a bookie (silent, connections open), SIGCONT at the heal
  wipe_bookie       kill -9 a bookie, delete its bookie directory, restart it at once: it comes back in limbo
                    for the ledgers it held (at most one wiped per run: two wiped copies of an entry with
                    W=2 is data loss that no protocol can prevent). Clients retrying open_ledger(recovery=True)
                    on the ledgers naming it race its open and registration (their fences reach it before it
                    registers), and half the time it is killed and restarted once more before it registers
  restart_racing_recovery
                    kill -9 a bookie and restart it at once, with recoveries racing its registration as above
  second_failure_in_change
                    SIGSTOP a bookie; once the writers timed it out and are writing their ensemble changes,
                    kill -9 a second one; SIGCONT the first (its late answers arrive after it was replaced)
  kill9_meta_leader kill -9 the `_meta` group's leader (metadata changes wait for a new one)
  fill_bookie_disk  fill the bookie's disk to the last byte (each bookie directory is a tmpfs of its own,
                    BOOKIE_DISK): adds hit ENOSPC before the bookie's 250 ms check sees it, the bookie turns
                    read-only; the filler is deleted at the heal and the bookie repairs itself. Without root
                    (no tmpfs) the cycle is a kill9_bookie, noted as such

Checked at the end: every bookie answers, read-write, and auto-recovery has nothing left to do (no ledger marked
under-replicated: a wiped bookie's lost copies were re-made elsewhere); every ledger is closed (open ones
recovered); every entry acknowledged to a
writer is within its ledger's last_entry_id and reads back with its body; every entry up to last_entry_id
is readable; a ledger's closed metadata (last_entry_id, length) never changed once seen closed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field

from ..errors import LedgerFenced, QuorumLogError
from ..ledger.metadata import State
from ..peers import parse_peers
from .loop_lag import LoopLagTally
from .processes import Cluster, fill_to_last_byte

log = logging.getLogger(__name__)

FAULT_KINDS = ("kill9_bookie", "pause_bookie", "wipe_bookie", "kill9_meta_leader", "fill_bookie_disk",
               "restart_racing_recovery", "second_failure_in_change")
BOOKIE_TIMEOUT_MS = 2_000  # the writers' (a silent bookie is replaced after this)
RACING_RECOVERIES = 8  # ledgers recovered at once, each retried, while a restarted bookie registers
BOOKIE_DISK = "512M"  # a tmpfs per bookie directory (a 110-cycle run stores ~100 MB on each)
ENTRIES_PER_LEDGER = 300
IN_FLIGHT = 16
# auto-recovery quicker than its defaults, so a run ends with it done: a bookie down for a cycle's hold (≤ 3 s)
# is not lost; a wiped one's limbo ledgers are re-replicated within a few periods
AUTO_RECOVERY_ARGS = ("--auditor-period-ms", "1000", "--lost-bookie-recovery-delay-ms", "5000",
                      "--open-ledger-rereplication-grace-period-ms", "10000")
FINAL_WAIT_S = 120


@dataclass
class Cycle:
    cycle: int
    kind: str
    target: str = ""
    hold_s: float = 2.0
    fenced_writer: bool | None = None  # the recovery racing a writer fenced it
    acks_after_heal: int = 0
    note: str = ""


@dataclass
class LedgerSoakResult:
    seed: int
    cycles: list[Cycle]
    ledgers: int
    acked: int
    violations: list[str]
    errors: dict[str, int]
    seconds: float
    recovered_cycles: int = 0
    writer_errors: list[str] = field(default_factory=list)
    loop_lag: dict = field(default_factory=dict)  # the nodes' event-loop lag (loop_lag.py)

    @property
    def passed(self) -> bool:
        return not self.violations and self.recovered_cycles == len(self.cycles)

    def figures(self) -> dict:
        return {"seed": self.seed, "cycles": len(self.cycles), "passed": self.passed,
                "recovered_cycles": self.recovered_cycles, "ledgers": self.ledgers, "acked_entries": self.acked,
                "violations": self.violations[:20], "errors": self.errors, "seconds": round(self.seconds, 1),
                "kinds": {k: sum(1 for c in self.cycles if c.kind == k) for k in FAULT_KINDS},
                "recoveries_that_fenced_a_writer": sum(1 for c in self.cycles if c.fenced_writer),
                "loop_lag": self.loop_lag,
                "per_cycle": [asdict(c) for c in self.cycles]}


class LedgerSoak:
    def __init__(self, base_dir: str, seed: int, cycles: int, writers: int = 3) -> None:
        self.base_dir = base_dir
        self.seed = seed
        self.rng = random.Random(seed * 104729 + 3)
        self.cluster = Cluster(base_dir, n=5, extra_args=AUTO_RECOVERY_ARGS)
        self.writers = writers
        self.plan = self._schedule(cycles)
        self.acked: dict[int, dict[int, bytes]] = {}  # ledger -> entry -> body, acknowledged
        self.active: dict[int, object] = {}  # ledger -> its LedgerWriter, while being written
        self.closed_seen: dict[int, tuple[int, int]] = {}  # ledger -> (last_entry_id, length) when seen closed
        self.errors: dict[str, int] = {}
        self.ack_times: list[float] = []
        self.writer_errors: list[str] = []
        self.disks: dict[str, str] = {}  # node -> its bookie directory, a tmpfs mount (fill_bookie_disk)
        self.loop_lag = LoopLagTally()

    def _schedule(self, cycles: int) -> list[Cycle]:
        """Every kind once first (in a random order), then at random."""
        first = list(FAULT_KINDS)
        self.rng.shuffle(first)
        plan, wiped = [], False
        for i in range(cycles):
            kind = first[i] if i < len(first) else self.rng.choice(FAULT_KINDS)
            if kind == "wipe_bookie":
                if wiped:
                    kind = "kill9_bookie"
                wiped = True
            plan.append(Cycle(i, kind, hold_s=self.rng.choice((1.0, 2.0, 3.0))))
        return plan

    # -- workload --------------------------------------------------------------------------------------
    def _client(self):
        from ..ledgers import LedgerClient

        return LedgerClient(self.cluster.peers, timeout_ms=10_000, bookie_timeout_ms=BOOKIE_TIMEOUT_MS)

    async def _writer(self, i: int, stop: asyncio.Event, shared=None) -> None:
        """Writer 0 has a client of its own; the others share one, so their adds to a bookie travel together in
        ADD_MULTI requests (a ledger fenced or failing among others' adds in one request)."""
        if shared is not None:
            return await self._write_ledgers(i, stop, shared)
        async with self._client() as lc:
            await self._write_ledgers(i, stop, lc)

    async def _write_ledgers(self, i: int, stop: asyncio.Event, lc) -> None:
        while not stop.is_set():
            try:
                w = await lc.create_ledger(3, 2, 2)
            except QuorumLogError as e:
                self._count(e)
                await asyncio.sleep(0.2)
                continue
            lid = w.ledger_id
            self.acked[lid] = {}
            self.active[lid] = w
            sem = asyncio.Semaphore(IN_FLIGHT)
            failed = asyncio.Event()
            tasks = set()

            async def add(body: bytes) -> None:
                try:
                    eid = await w.add_entry(body)
                    self.acked[lid][eid] = body
                    self.ack_times.append(time.monotonic())
                except QuorumLogError as e:
                    self._count(e)
                    failed.set()
                finally:
                    sem.release()
            for k in range(ENTRIES_PER_LEDGER):
                await sem.acquire()
                if failed.is_set() or stop.is_set():
                    sem.release()
                    break
                t = asyncio.create_task(add(b"w%d-L%d-%d-" % (i, lid, k) + os.urandom(self.rng.randrange(0, 200))))
                tasks.add(t)
                t.add_done_callback(tasks.discard)
            await asyncio.gather(*tasks)
            self.active.pop(lid, None)
            if not failed.is_set():
                try:
                    await w.close()
                except QuorumLogError as e:
                    self._count(e)

    def _count(self, e: QuorumLogError) -> None:
        self.errors[e.code.name] = self.errors.get(e.code.name, 0) + 1

    # -- faults ----------------------------------------------------------------------------------------
    async def _meta_leader(self) -> str | None:
        from ..client.groups import GroupAdmin

        async with GroupAdmin(parse_peers(self.cluster.peers), timeout_ms=3_000) as admin:
            for nid, st in (await admin.cluster_status()).items():
                if isinstance(st, dict) and any(g["group"] == "_meta" and g.get("role") == "leader"
                                                for g in st["groups"]):
                    return nid
        return None

    async def _race_recovery(self, c: Cycle) -> None:
        """Recover a ledger that is being written: its writer must end with LEDGER_FENCED, nothing it was
        acknowledged lost (checked at the end)."""
        from ..ledgers import LedgerClient

        if not self.active:
            return
        lid = self.rng.choice(sorted(self.active))
        w = self.active.get(lid)
        try:
            async with LedgerClient(self.cluster.peers, timeout_ms=10_000, bookie_timeout_ms=2_000) as lc:
                r = await lc.open_ledger(lid, recovery=True)
                self._seen_closed(lid, r.metadata)
        except QuorumLogError as e:
            self._count(e)
            c.note += f"racing recovery of {lid} failed: {e}; "
            return
        try:
            await w.add_entry(b"after the recovery")  # type: ignore[attr-defined]
            c.fenced_writer = False
        except LedgerFenced:
            c.fenced_writer = True
        except QuorumLogError as e:
            c.fenced_writer = e.code.name in ("LEDGER_FENCED", "LEDGER_CLOSED")

    def _seen_closed(self, lid: int, md) -> None:
        if md.state is State.CLOSED:
            seen = self.closed_seen.setdefault(lid, (md.last_entry_id, md.length))
            if seen != (md.last_entry_id, md.length):
                raise AssertionError(f"ledger {lid} closed at {seen}, later {md.last_entry_id, md.length}")

    async def _recoveries_racing(self, c: Cycle, until: float) -> None:
        """Clients retrying open_ledger(recovery=True) on ledgers naming the target while it restarts: their fences
        and reads reach it before it has registered (and settled its limbo)."""
        from ..ledgers import LedgerClient

        async with LedgerClient(self.cluster.peers, timeout_ms=5_000, bookie_timeout_ms=BOOKIE_TIMEOUT_MS) as lc:
            try:
                lids = [lid for lid in await lc.ledgers_on(c.target) if lid in self.acked]
            except QuorumLogError as e:
                self._count(e)
                return
            lids = sorted(self.rng.sample(lids, min(RACING_RECOVERIES, len(lids))))
            recovered = 0

            async def recover(lid: int) -> None:
                nonlocal recovered
                while time.monotonic() < until:
                    try:
                        r = await lc.open_ledger(lid, recovery=True)
                    except QuorumLogError as e:
                        self._count(e)
                        await asyncio.sleep(0.05)
                        continue
                    self._seen_closed(lid, r.metadata)
                    recovered += 1
                    return
            await asyncio.gather(*(recover(lid) for lid in lids))
            c.note += f"racing recoveries: {recovered} of {len(lids)} ledgers recovered; "

    async def _restart_racing_recovery(self, c: Cycle, node, wipe: bool) -> asyncio.Task:
        racing = asyncio.create_task(self._recoveries_racing(c, time.monotonic() + c.hold_s + 5))
        await asyncio.sleep(0)  # (the clients start: their first tries meet the bookie going down)
        node.kill9()
        if wipe:
            shutil.rmtree(os.path.join(node.data_dir, "bookie"), ignore_errors=True)
        node.start()
        if self.rng.random() < 0.5:  # killed again before it registers: what the fences created is on its disk
            await asyncio.sleep(self.rng.uniform(0.1, 0.5))
            node.kill9()
            node.start()
            c.note += "restarted again before registering; "
        return racing

    async def _cycle(self, c: Cycle) -> None:
        nodes = self.cluster.nodes
        c.target = self.rng.choice(sorted(nodes))
        if c.kind == "kill9_meta_leader":
            c.target = await self._meta_leader() or c.target
        await self._race_recovery(c)
        node = nodes[c.target]
        if c.kind == "fill_bookie_disk" and c.target not in self.disks:
            c.kind, c.note = "kill9_bookie", "fill_bookie_disk without a tmpfs (not root)"
        filler = os.path.join(self.disks.get(c.target, ""), "filler")
        racing: asyncio.Task | None = None
        second = None
        if c.kind in ("kill9_bookie", "kill9_meta_leader"):
            node.kill9()
        elif c.kind == "fill_bookie_disk":
            await asyncio.to_thread(fill_to_last_byte, filler)
        elif c.kind == "pause_bookie":
            node.signal(signal.SIGSTOP)
        elif c.kind in ("wipe_bookie", "restart_racing_recovery"):
            racing = await self._restart_racing_recovery(c, node, wipe=c.kind == "wipe_bookie")
        elif c.kind == "second_failure_in_change":
            node.signal(signal.SIGSTOP)
            # the writers time the stopped bookie out and write their ensemble changes: a second one fails then
            await asyncio.sleep(BOOKIE_TIMEOUT_MS / 1000 + self.rng.uniform(0.0, 0.3))
            second = nodes[self.rng.choice(sorted(set(nodes) - {c.target}))]
            second.kill9()
            c.note += f"second failure {second.node_id}; "
        log.info("cycle %d: %s %s", c.cycle, c.kind, c.target)
        await asyncio.sleep(c.hold_s)
        if c.kind in ("pause_bookie", "second_failure_in_change"):
            node.signal(signal.SIGCONT)
        elif c.kind == "fill_bookie_disk":
            os.remove(filler)
        for n in nodes.values():
            if not n.alive:
                n.start()
        if racing is not None:
            await racing
        healed = time.monotonic()
        deadline = healed + 30
        while time.monotonic() < deadline:
            c.acks_after_heal = sum(1 for t in self.ack_times[-500:] if t > healed)
            if c.acks_after_heal >= 50:
                break
            await asyncio.sleep(0.1)

    async def _read_loop_lag(self, wait_all_s: float = 0.0) -> None:
        """Every answering node's loop lag; with wait_all_s, until every node answers (one restarted by the
        last cycle may still be opening its stores) or that long."""
        from ..client.groups import GroupAdmin

        deadline = time.monotonic() + wait_all_s
        try:
            async with GroupAdmin(parse_peers(self.cluster.peers), timeout_ms=3_000) as admin:
                while True:
                    statuses = await admin.cluster_status()
                    self.loop_lag.record(statuses)
                    if all(isinstance(s, dict) for s in statuses.values()) or time.monotonic() > deadline:
                        return
                    await asyncio.sleep(0.5)
        except (QuorumLogError, OSError, asyncio.TimeoutError) as e:
            log.warning("loop lag not read: %s", e)

    # -- the run ---------------------------------------------------------------------------------------
    async def _run(self) -> list[str]:
        from ..client.groups import GroupAdmin
        from ..ledgers import LedgerClient

        async with GroupAdmin(parse_peers(self.cluster.peers), timeout_ms=20_000) as admin:
            await admin.wait_answering(30)
            await admin.create_meta()
        async with LedgerClient(self.cluster.peers) as lc:  # every bookie registered (limbo known)
            deadline = time.monotonic() + 30
            while sum(1 for i in (await lc.bookies()).values() if i.get("limbo_known")) < 5:
                if time.monotonic() > deadline:
                    raise RuntimeError("bookies never registered")
                await asyncio.sleep(0.2)
        stop = asyncio.Event()
        async with self._client() as shared:
            tasks = [asyncio.create_task(self._writer(i, stop, shared if i else None)) for i in range(self.writers)]
            try:
                await asyncio.sleep(1.0)
                for c in self.plan:
                    await self._read_loop_lag()  # (before the fault: a kill -9 loses what came after)
                    await self._cycle(c)
                await self._read_loop_lag(wait_all_s=30)
            finally:
                stop.set()
                done = await asyncio.gather(*tasks, return_exceptions=True)
                self.writer_errors = [repr(d) for d in done if isinstance(d, BaseException)]
        return await self._check()

    async def _check(self) -> list[str]:
        from ..ledgers import LedgerClient

        violations = []
        async with LedgerClient(self.cluster.peers, timeout_ms=20_000) as lc:
            # every bookie up and writable again (a filled one repaired) and auto-recovery done (a wiped bookie's
            # lost copies re-made elsewhere)
            deadline = time.monotonic() + FINAL_WAIT_S
            while True:
                unwell = {b: i.get("state") for b, i in (await lc.bookies()).items() if i.get("state") != "read_write"}
                marked = await lc.underreplicated()
                if not unwell and not marked:
                    break
                if time.monotonic() > deadline:
                    violations.append(f"after {FINAL_WAIT_S} s: bookies not read-write {unwell}, ledgers still "
                                      f"under-replicated {[m['ledger_id'] for m in marked][:10]}")
                    break
                await asyncio.sleep(0.5)
            for lid in sorted(self.acked):
                try:
                    r = await lc.open_ledger(lid, recovery=True)
                except QuorumLogError as e:
                    violations.append(f"ledger {lid}: could not be recovered: {e}")
                    continue
                md = r.metadata
                try:
                    self._seen_closed(lid, md)
                except AssertionError as e:
                    violations.append(str(e))
                acked = self.acked[lid]
                beyond = [e for e in acked if e > md.last_entry_id]
                if beyond:
                    violations.append(f"ledger {lid}: entries {beyond[:5]} acknowledged beyond last_entry_id "
                                      f"{md.last_entry_id}")
                try:
                    got = {e.entry_id: e.body async for e in r.read()} if md.last_entry_id >= 0 else {}
                except QuorumLogError as e:
                    violations.append(f"ledger {lid}: unreadable up to {md.last_entry_id}: {e}")
                    continue
                lost = [e for e, body in acked.items() if got.get(e) != body]
                if lost:
                    violations.append(f"ledger {lid}: acknowledged entries lost or changed: {lost[:5]}")
        return violations

    def _mount_disks(self) -> None:
        for nid, node in self.cluster.nodes.items():
            path = os.path.join(node.data_dir, "bookie")
            os.makedirs(path, exist_ok=True)
            r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={BOOKIE_DISK}", "tmpfs", path],
                               capture_output=True)
            if r.returncode != 0:
                log.warning("no tmpfs for the bookies (fill_bookie_disk becomes kill9_bookie): %s",
                            r.stderr.decode().strip())
                return
            self.disks[nid] = path

    def run(self) -> LedgerSoakResult:
        t0 = time.monotonic()
        if os.geteuid() == 0:
            self._mount_disks()
        self.cluster.start()
        try:
            violations = asyncio.run(self._run())
        finally:
            self.cluster.stop()
            for path in self.disks.values():
                subprocess.run(["umount", "-l", path], capture_output=True)
        recovered = sum(1 for c in self.plan if c.acks_after_heal >= 50)
        return LedgerSoakResult(self.seed, self.plan, len(self.acked), sum(len(a) for a in self.acked.values()),
                                violations, self.errors, time.monotonic() - t0, recovered, self.writer_errors,
                                self.loop_lag.figures())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m quorumlog.soak.ledgers", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--cycles", type=int, default=20)
    p.add_argument("--writers", type=int, default=3)
    p.add_argument("--out", help="write the figures (JSON) here too")
    p.add_argument("--verbose", action="store_true")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO if a.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(message)s")
    base = tempfile.mkdtemp(prefix="quorumlog-ledger-soak-")
    result = LedgerSoak(base, a.seed, a.cycles, a.writers).run()
    figures = result.figures()
    text = json.dumps(figures, indent=1)
    print(text if a.verbose else json.dumps({k: v for k, v in figures.items() if k != "per_cycle"}, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    if result.passed:
        shutil.rmtree(base, ignore_errors=True)
    else:
        print(f"logs: {base}", file=sys.stderr)
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
