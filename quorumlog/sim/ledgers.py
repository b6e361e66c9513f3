"""The ledger protocol in the deterministic simulator: one writer (quorumlog/ledger/writer.py) adding to a
ledger over simulated bookies (the real BookieHandler over MemoryBookie), recoveries
(quorumlog/ledger/recovery.py) that fence it while it writes, and faults: bookie crashes that lose what was
not synced, wiped bookies, client-bookie partitions, slow bookies, and a second bookie failing while the
writer's ensemble change is being written. Metadata lives in a compare-and-set store, as `_meta` keeps it.

A restarted bookie goes through the node's open and registration path (quorumlog/ledger/limbo.py, the code
server/services/bookie.py runs): it serves at once, with every ledger in limbo until it has read its `_meta`
record and the ledgers naming it, a while later; then it settles its limbo (persisted, lost with a wipe) and
registers its instance. Requests race that window: a recovery started as a wiped bookie comes back fences it
before it registers.

    python -m quorumlog.sim.ledgers --seeds 1000 [--start S] [--bug trust_one_no_such_entry]
    python -m quorumlog.sim.ledgers --seed S --trace

The checker: every entry acknowledged to the writer was stored (answered SUCCESS) by ack_quorum bookies of
its write set in the writer's metadata; it is within the closed ledger's last_entry_id and readable with its
body from its write set; every entry up to last_entry_id is readable; a closed ledger's metadata never
changes; after the faults heal the ledger ends CLOSED (liveness).

Planted bugs, installed from here (never in the cores): trust_one_no_such_entry, read_from_replacement (the
recovery core's); limbo_from_registration (limbo judged on what the bookie holds when it registers, so a
fence that came first hides its ledger); count_replaced_bookie (pending adds keep their old write sets while
a second ensemble change is due, so a replaced bookie's late answer counts).
"""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass, replace
from types import MethodType
from typing import Iterable

from ..bookie.handler import BookieHandler
from ..bookie.memory import MemoryBookie
from ..codes import ResponseCode
from ..ledger import BookieLimbo, LedgerRecoveryCore, LedgerWriterCore, NeedClose, NeedEnsembleChange
from ..ledger.metadata import LedgerMetadata, Segment, State
from ..wire.ledger import AddEntry, AddResponse, ReadEntry, ReadLac, ReadLacResponse, ReadResponse, unpack_entry
from .checker import Violation
from .scheduler import Scheduler
from .seed_cli import seed_main

QUORUMS = ((3, 2, 2), (3, 3, 2), (3, 3, 3), (4, 3, 2), (5, 3, 2), (4, 2, 2))
PLANTED = ("trust_one_no_such_entry", "read_from_replacement", "limbo_from_registration", "count_replaced_bookie")


@dataclass(frozen=True, slots=True)
class Options:
    seed: int
    bookies: int
    quorums: tuple[int, int, int]
    adds: int
    add_gap_ms: int
    delay_max_ms: int
    sync_max_ms: int
    timeout_ms: int
    fault_phase_ms: int
    fault_gap_ms: int
    recovery_at_ms: tuple[int, ...]
    register_max_ms: int  # a restarted bookie reads `_meta` within this, and registers within it again
    second_failure: float  # the chance a second bookie fails while an ensemble change is being written
    change_max_ms: int  # an ensemble change's metadata write takes up to this
    stall_at_ms: int  # -1, or when a bookie of the writer's ensemble stalls (SIGSTOP) past the writer's timeout

    @classmethod
    def from_seed(cls, seed: int) -> "Options":
        rng = random.Random(seed * 7 + 3)
        adds, add_gap_ms = rng.randint(20, 120), rng.choice((0, 1, 5))
        # (the stall comes while the writer has adds in flight: it sends its last one at adds * add_gap_ms)
        stall_at_ms = rng.choice((-1, rng.randint(0, max(10, adds * add_gap_ms // 2)), rng.randint(0, 10)))
        return cls(seed, rng.choice((5, 6)), rng.choice(QUORUMS), adds, add_gap_ms,
                   rng.choice((2, 10, 30)), rng.choice((1, 3, 10)), rng.choice((100, 300)),
                   rng.choice((1_500, 3_000)), rng.choice((100, 300, 800)),
                   tuple(sorted(rng.randint(50, 2_500) for _ in range(rng.choice((0, 1, 1, 2, 3))))),
                   rng.choice((20, 100, 400)), rng.choice((0.0, 0.5, 1.0, 1.0)), rng.choice((10, 40, 300)),
                   stall_at_ms)


class LedgerWorld:
    def __init__(self, opts: Options, bugs: frozenset[str] = frozenset(), trace=None) -> None:
        self.o = opts
        self.bugs = bugs
        self.trace = trace
        self.rng = random.Random(opts.seed)
        self.s = Scheduler()
        self.ids = [f"b{i}" for i in range(opts.bookies)]
        self.store = {b: MemoryBookie() for b in self.ids}
        # the bookie's open/registration path (ledger/limbo.py): its instance (a wipe makes another), the one its
        # `_meta` record names, its limbo.json (lost with a wipe), and the limbo of its running incarnation
        self.instance = {b: f"{b}.0" for b in self.ids}
        self.registered: dict[str, str | None] = dict(self.instance)
        self.limbo_file: dict[str, frozenset[int]] = {b: frozenset() for b in self.ids}
        self.registered_file: dict[str, str | None] = dict(self.instance)  # (registered.json)
        self.limbo = {b: self._open_limbo(b) for b in self.ids}
        for b in self.ids:
            self.limbo[b].registered(self.instance[b])
        self.handlers = {b: BookieHandler(b, self.store[b], lambda lid, b=b: self.limbo[b].in_limbo(lid))
                         for b in self.ids}
        self.down: set[str] = set()
        self.cut: set[str] = set()
        self.slow: set[str] = set()
        self.paused: dict[str, int] = {}  # bookie -> when it resumes (SIGSTOP: requests wait, then are answered)
        self.epoch = {b: 0 for b in self.ids}  # incarnation: a crash drops answers of the one before
        e, w, a = opts.quorums
        self.md = LedgerMetadata(1, e, w, a, (Segment(0, tuple(self.rng.sample(self.ids, e))),), version=1)
        self.writer = LedgerWriterCore(self.md)
        if "count_replaced_bookie" in bugs:
            _plant_stale_write_sets(self.writer)
        self.add_ok: dict[int, set[str]] = {}  # entry -> bookies that answered the writer's add SUCCESS
        self.bodies: dict[int, bytes] = {}  # request id -> body
        self.acked: dict[int, bytes] = {}  # entry id -> body acknowledged to the writer
        self.waiting: dict[tuple[str, int], int] = {}  # (bookie, entry) -> request count of the writer
        self.next_rid = 1
        self.recoveries: list[LedgerRecoveryCore] = []
        self.healed = False
        self.done = False
        self.wipes = 0

    def log(self, text: str) -> None:
        if self.trace:
            self.trace(f"[{self.s.now_ms:>6}] {text}")

    # -- metadata store ----------------------------------------------------------------------------------
    def cas(self, md: LedgerMetadata) -> LedgerMetadata | None:
        if md.version != self.md.version:
            return None
        if self.md.state is State.CLOSED:
            raise Violation("closed_changed", f"metadata of a CLOSED ledger rewritten: {md}")
        self.md = replace(md, version=md.version + 1)
        self.log(f"metadata v{self.md.version} {self.md.state.value} last={self.md.last_entry_id} "
                 f"ensembles={[(s.first_entry_id, s.bookies) for s in self.md.ensembles]}")
        return self.md

    # -- network -----------------------------------------------------------------------------------------
    def _delay(self, bookie: str) -> int:
        return self.rng.randint(1, self.o.delay_max_ms) * (10 if bookie in self.slow else 1)

    def send(self, req, on_answer) -> None:
        b = req.to
        if b in self.cut:
            return
        self.s.after(self._delay(b), self._arrive, req, on_answer)

    def _arrive(self, req, on_answer) -> None:
        b = req.to
        if b in self.down or b in self.cut:
            return
        if self.paused.get(b, 0) > self.s.now_ms:
            self.s.at(self.paused[b], self._arrive, req, on_answer)
            return
        epoch = self.epoch[b]
        fut = self.handlers[b].handle(req)

        def answered(f) -> None:
            if self.epoch[b] == epoch:
                self.s.after(self._delay(b), self._answer, b, f.result(), on_answer)
        fut.add_done_callback(answered)

    def _answer(self, b: str, resp, on_answer) -> None:
        if b not in self.cut:
            on_answer(resp)

    def _syncer(self, b: str) -> None:
        if b not in self.down:
            self.store[b].sync()
        self.s.after(self.rng.randint(1, self.o.sync_max_ms), self._syncer, b)

    # -- the writer's runtime ------------------------------------------------------------------------------
    def _add(self, left: int) -> None:
        if left <= 0 or self.healed or self.writer.error is not None:
            return
        rid = self.next_rid
        self.next_rid += 1
        body = b"s%d-r%d" % (self.o.seed, rid)
        self.bodies[rid] = body
        self.writer.add(rid, body)
        self._pump_writer()
        self.s.after(self.o.add_gap_ms, self._add, left - 1)

    def _pump_writer(self) -> None:
        messages, done, requests = self.writer.take()
        for m in messages:
            key = (m.to, m.entry_id)
            self.waiting[key] = self.waiting.get(key, 0) + 1
            self.send(m, self._writer_answer)
            self.s.after(self.o.timeout_ms, self._writer_timeout, key)
        for d in done:
            if d.code == ResponseCode.SUCCESS and d.request_id in self.bodies and d.entry_id >= 0:
                self.acked[d.entry_id] = self.bodies[d.request_id]
                self.log(f"writer acked entry {d.entry_id}")
                self._check_ack(d.entry_id)
        for r in requests:
            written_after = self.rng.randint(1, self.o.change_max_ms)
            self.s.after(written_after, self._writer_request, r)
            if isinstance(r, NeedEnsembleChange) and self.rng.random() < self.o.second_failure:
                self.s.after(self.rng.randint(0, written_after - 1), self._second_failure, r)

    def _check_ack(self, entry_id: int) -> None:
        """An acknowledged entry is stored on ack_quorum bookies where the writer's metadata places it."""
        ws = self.writer.md.write_set(entry_id)
        stored = self.add_ok.get(entry_id, set()) & set(ws)
        if len(stored) < self.writer.md.ack_quorum:
            raise Violation("acked_off_write_set", f"entry {entry_id} acknowledged, stored on {sorted(stored)} of "
                            f"its write set {ws} (answers from {sorted(self.add_ok.get(entry_id, ()))})")

    def _second_failure(self, change: NeedEnsembleChange) -> None:
        """Another bookie of the ensemble fails (its connection drops) while the change is being written."""
        left = [b for b in self.writer.md.last_ensemble if b not in change.failed and b not in self.cut]
        if self.healed or not left or self.writer.error is not None:
            return
        # (the nastiest one: a bookie outside the write set of the next entry to acknowledge, which can then be
        # acknowledged while the change is due)
        first = self.writer.md.write_set(self.writer.lac + 1)
        b = self.rng.choice([b for b in left if b not in first] or left)
        self.log(f"FAULT second failure {b} during the change replacing {sorted(change.failed)}")
        self.cut.add(b)
        self.s.after(self.rng.randint(50, 1_000), self.cut.discard, b)
        self.writer.bookie_failed(b)
        self._pump_writer()

    def _writer_answer(self, resp: AddResponse) -> None:
        self.waiting.pop((resp.frm, resp.entry_id), None)
        if resp.code == ResponseCode.SUCCESS:
            self.add_ok.setdefault(resp.entry_id, set()).add(resp.frm)
        self.writer.on_response(resp)
        self._pump_writer()

    def _writer_timeout(self, key) -> None:
        if key in self.waiting:
            del self.waiting[key]
            self.writer.bookie_failed(key[0])
            self._pump_writer()

    def _writer_request(self, r) -> None:
        w = self.writer
        if isinstance(r, NeedEnsembleChange):
            if self.md.state is not State.OPEN or self.md.version != w.md.version:
                w.ensemble_change_failed(ResponseCode.LEDGER_FENCED)
            else:
                ens = list(w.md.last_ensemble)
                spare = [b for b in self.ids if b not in ens and b not in self.down and b not in self.cut]
                self.rng.shuffle(spare)
                ok = True
                for i, b in enumerate(ens):
                    if b in r.failed:
                        if not spare:
                            ok = False
                            break
                        ens[i] = spare.pop()
                new = self.cas(w.md.with_ensemble(r.first_entry_id, tuple(ens))) if ok else None
                if new is None:
                    w.ensemble_change_failed(ResponseCode.NOT_ENOUGH_BOOKIES if not ok else ResponseCode.LEDGER_FENCED)
                else:
                    w.ensemble_changed(new)
        else:
            assert isinstance(r, NeedClose)
            w.closed(ResponseCode.SUCCESS if self.cas(r.metadata) else ResponseCode.METADATA_VERSION_CONFLICT)
        self._pump_writer()

    # -- recoveries ------------------------------------------------------------------------------------------
    def _recover(self) -> None:
        if self.md.state is State.CLOSED or self.done:
            return
        md = self.md if self.md.state is State.IN_RECOVERY else self.cas(replace(self.md, state=State.IN_RECOVERY))
        r = LedgerRecoveryCore(md)
        plant_recovery_bugs(r, self.bugs)
        self.recoveries.append(r)
        self.log(f"recovery {len(self.recoveries)} starts")
        r.start()
        self._pump_recovery(r)
        self.s.after(self.o.timeout_ms * 5, self._recovery_watchdog, r, None)

    def _pump_recovery(self, r: LedgerRecoveryCore) -> None:
        if isinstance(r.result, NeedClose):
            closed = self.cas(r.result.metadata)
            self.log(f"recovery closes at {r.result.metadata.last_entry_id}: {'ok' if closed else 'lost the CAS'}")
            r.result = ResponseCode.SUCCESS  # handled
            return
        if r.result is not None:
            if r.result != ResponseCode.SUCCESS:
                self.log(f"recovery failed {r.result}")
                r.result = ResponseCode.SUCCESS  # (logged once)
            return
        for m in r.take():
            self.send(m, lambda resp, r=r: self._recovery_answer(r, resp))
            self.s.after(self.o.timeout_ms, self._recovery_timeout, r, m)
        change = r.take_change()
        if change is not None:  # a write-back failed: spare bookies for the failed ones (the close writes it)
            ens = list(r.md.last_ensemble)
            spare = [b for b in self.ids if b not in ens and b not in self.down and b not in self.cut]
            self.rng.shuffle(spare)
            if len(spare) < len(change.failed & set(ens)):
                self.log(f"recovery cannot replace {sorted(change.failed)}")
                r.ensemble_change_failed()
            else:
                ens = [spare.pop() if b in change.failed else b for b in ens]
                self.log(f"recovery replaces {sorted(change.failed)} from {change.first_entry_id}: {ens}")
                r.ensemble_changed(r.md.with_ensemble(change.first_entry_id, tuple(ens)))
            self._pump_recovery(r)

    def _recovery_answer(self, r: LedgerRecoveryCore, resp) -> None:
        r.on_answer(resp)
        self._pump_recovery(r)

    def _recovery_timeout(self, r: LedgerRecoveryCore, m) -> None:
        # the runtime's timeout: an error answer (a late real answer is then ignored or harmless)
        code = ResponseCode.TIMEOUT
        if isinstance(m, ReadLac) and m.to not in r.lac_answers:
            self._recovery_answer(r, ReadLacResponse(m.to, m.ledger_id, code))
        elif isinstance(m, ReadEntry) and m.entry_id == r.next and not r.reading_done:
            self._recovery_answer(r, ReadResponse(m.to, m.ledger_id, m.entry_id, code))
        elif isinstance(m, AddEntry) and m.to not in r._written_back.get(m.entry_id, {m.to}):
            self._recovery_answer(r, AddResponse(m.to, m.ledger_id, m.entry_id, code))

    def _recovery_watchdog(self, r: LedgerRecoveryCore, seen) -> None:
        progress = (r.fenced, r.next, len(r.found), sum(len(a) for a in r._written_back.values()))
        if r.result is None and progress != seen:
            self.s.after(self.o.timeout_ms * 5, self._recovery_watchdog, r, progress)  # still moving
            return
        if r.result is None:
            r.result = ResponseCode.TIMEOUT  # stuck (a hung write-back): give up, as a client would
        if self.md.state is not State.CLOSED and (self.healed or self.rng.random() < 0.5):
            self._recover()  # recovery is retried until the ledger is closed

    # -- faults ----------------------------------------------------------------------------------------------
    def _fault(self) -> None:
        if self.healed:
            return
        b = self.rng.choice(self.ids)
        kind = self.rng.choice(("crash", "crash", "wipe", "cut", "slow", "pause"))
        if kind in ("crash", "wipe") and b not in self.down:
            # an acknowledged entry has A copies: a run loses at most A - 1 disks (beyond that, data is gone
            # and recovery rightly never decides; BookKeeper needs re-replication in between)
            wiped = kind == "wipe" and self.wipes < self.md.ack_quorum - 1
            self.wipes += wiped
            self.log(f"FAULT {'wipe' if wiped else 'crash'} {b}")
            self.down.add(b)
            self.epoch[b] += 1
            if wiped:
                self.store[b].wipe()
                self.limbo_file[b] = frozenset()  # (limbo.json and registered.json are in the bookie's directory)
                self.registered_file[b] = None
                self.instance[b] = f"{b}.{self.epoch[b]}"
            else:
                self.store[b].crash()
            self.s.after(self.rng.randint(50, 1_000), self._restart, b)
            if wiped and self.rng.random() < 0.5:  # a recovery that fences it before it registers
                self.s.after(self.rng.randint(50, 1_000), self._recover)
        elif kind == "cut" and b not in self.cut:
            self.log(f"FAULT cut {b}")
            self.cut.add(b)
            self.s.after(self.rng.randint(50, 1_000), self.cut.discard, b)
        elif kind == "slow":
            self.slow.add(b)
            self.s.after(self.rng.randint(50, 1_000), self.slow.discard, b)
        elif kind == "pause":
            self._pause(self.rng.choice(self.writer.md.last_ensemble))
        self.s.after(self.rng.randint(1, self.o.fault_gap_ms), self._fault)

    def _pause(self, b: str) -> None:
        """SIGSTOP: requests wait and are answered at the resume, often just past the writer's timeout (so the
        answers come once the change replacing it is under way)."""
        if self.paused.get(b, 0) > self.s.now_ms:
            return
        self.paused[b] = self.s.now_ms + self.rng.choice((self.rng.randint(50, 1_000),
                                                          self.o.timeout_ms + self.rng.randint(0, 400)))
        self.log(f"FAULT pause {b} until {self.paused[b]}")

    def _stall(self) -> None:
        """A bookie of the writer's ensemble stops (SIGSTOP) until after the writer timed it out and asked for
        an ensemble change: the adds it then answers are late, perhaps after it was replaced (while a second
        failure keeps another change due)."""
        b = self.rng.choice(self.writer.md.last_ensemble)
        self.paused[b] = self.s.now_ms + self.o.timeout_ms + self.rng.randint(0, 2 * self.o.change_max_ms)
        self.log(f"FAULT stall {b} until {self.paused[b]}")

    def _restart(self, b: str) -> None:
        if b not in self.down:
            return
        self.log(f"restart {b}")
        self.down.discard(b)
        self.limbo[b] = self._open_limbo(b)  # (BookieService.open: before the listener serves)
        self.s.after(self.rng.randint(1, self.o.register_max_ms), self._read_registration, b, self.epoch[b])

    # -- a bookie's open and registration (ledger/limbo.py, as server/services/bookie.py runs it) ---------------
    def _open_limbo(self, b: str) -> BookieLimbo:
        limbo = BookieLimbo(self.limbo_file[b], self.store[b].ledgers(), self.registered_file[b])
        if "limbo_from_registration" in self.bugs:
            _plant_limbo_from_registration(limbo, self.store[b])
        return limbo

    def _read_registration(self, b: str, epoch: int) -> None:
        """It read its `_meta` record and the ledgers naming it; it settles limbo a while later."""
        if self.epoch[b] != epoch:
            return  # (crashed meanwhile: the next incarnation registers)
        naming = {self.md.ledger_id} if any(b in s.bookies for s in self.md.ensembles) else set()
        self.s.after(self.rng.randint(1, self.o.register_max_ms), self._register, b, epoch, self.registered[b],
                     naming)

    def _register(self, b: str, epoch: int, registered: str | None, naming: set[int]) -> None:
        if self.epoch[b] != epoch:
            return
        limbo = self.limbo[b]
        new = limbo.on_registration(registered, self.instance[b], naming)
        if new is not None:
            self.limbo_file[b] = new  # durably, before the new instance is registered
            limbo.persisted(new)
        self.registered[b] = self.instance[b]
        self.registered_file[b] = self.instance[b]
        limbo.registered(self.instance[b])
        self.log(f"{b} registered instance {self.instance[b]} limbo={sorted(limbo.ledgers)}")

    def _heal(self) -> None:
        self.healed = True
        self.log("HEAL")
        for b in sorted(self.down):
            self._restart(b)
        self.cut.clear()
        self.slow.clear()
        self.paused.clear()
        if self.writer.error is None:
            self.writer.close(0)
            self._pump_writer()
        self.s.after(self.o.timeout_ms * 3, self._final_recovery)

    def _final_recovery(self) -> None:
        if self.md.state is not State.CLOSED:
            self._recover()

    # -- run and check ---------------------------------------------------------------------------------------
    def run(self) -> None:
        for b in self.ids:
            self._syncer(b)
        self.s.after(0, self._add, self.o.adds)
        self.s.after(self.rng.randint(1, self.o.fault_gap_ms), self._fault)
        for t in self.o.recovery_at_ms:
            self.s.at(t, self._recover)
        if self.o.stall_at_ms >= 0:
            self.s.at(self.o.stall_at_ms, self._stall)
        self.s.at(self.o.fault_phase_ms, self._heal)
        deadline = self.o.fault_phase_ms + 30_000
        while self.s.now_ms < deadline and len(self.s):
            handler, args = self.s.pop()
            handler(*args)
            if self.healed and self.md.state is State.CLOSED:
                break
        self.done = True
        self.check()

    def check(self) -> None:
        md = self.md
        if md.state is not State.CLOSED:
            raise Violation("liveness", f"ledger not closed 30 s after healing: {md.state.value}")
        for e, body in sorted(self.acked.items()):
            if e > md.last_entry_id:
                raise Violation("acked_beyond_close", f"entry {e} acknowledged, ledger closed at {md.last_entry_id}")
            if self._read(md, e) != body:
                raise Violation("acked_lost", f"entry {e} acknowledged as {body!r}, reads {self._read(md, e)!r}")
        for e in range(md.last_entry_id + 1):
            if self._read(md, e) is None:
                raise Violation("closed_unreadable", f"entry {e} <= last_entry_id {md.last_entry_id} on no bookie")

    def _read(self, md: LedgerMetadata, e: int) -> bytes | None:
        for b in md.write_set(e):
            data = self.store[b].entries.get((md.ledger_id, e))
            if data is not None:
                return unpack_entry(data)[2]
        return None


def plant_recovery_bugs(r: LedgerRecoveryCore, bugs: Iterable[str]) -> None:
    """PLANTED BUGS (tests) in one recovery core: trust_one_no_such_entry decides "not written" on one
    bookie's answer; read_from_replacement reads from the bookies an ensemble change brought in."""
    if "trust_one_no_such_entry" in bugs:
        r._absent_answers_needed = lambda: 1  # type: ignore[method-assign]
    if "read_from_replacement" in bugs:
        r._reads_after_change = lambda md: md  # type: ignore[method-assign]


def _plant_limbo_from_registration(limbo: BookieLimbo, store: MemoryBookie) -> None:
    """PLANTED BUG (tests): limbo judged on the ledgers held at registration, not at open."""
    def on_registration(registered_instance, instance, ledgers_naming_me):
        if registered_instance == instance:
            return None
        new = (set(ledgers_naming_me) - set(store.ledgers())) | limbo.ledgers
        return frozenset(new) if new != limbo.ledgers else None
    limbo.on_registration = on_registration  # type: ignore[method-assign]


def _plant_stale_write_sets(writer: LedgerWriterCore) -> None:
    """PLANTED BUG (tests): when a second change is due, pending adds keep the write sets they had."""
    real = writer.ensemble_changed

    def ensemble_changed(self, metadata: LedgerMetadata) -> None:
        before = {e: (add.write_set, set(add.acks)) for e, add in self.pending.items()}
        real(metadata)
        if self.changing:
            for e, add in self.pending.items():
                if e in before:
                    add.write_set, add.acks = before[e]
    writer.ensemble_changed = MethodType(ensemble_changed, writer)  # type: ignore[method-assign]


def run_seed(seed: int, bugs: frozenset[str] = frozenset(), trace=None) -> Violation | None:
    try:
        LedgerWorld(Options.from_seed(seed), bugs, trace).run()
    except Violation as v:
        return v
    return None


def main(argv: list[str] | None = None) -> int:
    return seed_main("quorumlog.sim.ledgers", __doc__.split("\n\n")[0], run_seed, PLANTED, "ledger", argv, describe=lambda s: str(Options.from_seed(s)))


if __name__ == "__main__":
    sys.exit(main())
