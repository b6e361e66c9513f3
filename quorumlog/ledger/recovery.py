"""Ledger recovery, sans-I/O (BookKeeper's LedgerRecoveryOp, as corrected after its TLA+ model):

    r = LedgerRecoveryCore(metadata)   # the runtime already moved it to IN_RECOVERY with compare-and-set
    r.start(); deliver r.take() messages; r.on_read_lac(...), r.on_read(...), r.on_add(...)
    ... until r.result: NeedClose(metadata CLOSED) or a failure code

1. Fence: ReadLac with the fence flag to every bookie of the last ensemble. Done once each of the E write
   sets has at least W − A + 1 answers (then no writer can reach A acks in any write set: it is fenced; the
   seed's E − A + 1 holds only for W = E). The LAC is the highest answered.
2. Read forward from the LAC entry, every read with the fence flag (BookKeeper #2614): an entry is present if
   one bookie has it; absent once W − A + 1 bookies of its write set answer "no such entry"; an answer of
   "unknown" (a bookie that lost its data: BookKeeper #2612's limbo) or an error never counts as absent, and
   a write set that answers neither way fails recovery (LEDGER_RECOVERY_FAILED; retry later).
3. Write each entry found back to its whole write set (recovery adds go through the fence), then close the
   ledger at the last entry found, with the length that entry carries. Concurrent recoveries converge on the
   compare-and-set of step 3's metadata.

A write-back a bookie refuses or cannot take (it died: the reason a ledger is often recovered at all) is an
ensemble change, as BookKeeper's recovery does through its LedgerHandle: `take_change()` hands the runtime a
NeedEnsembleChange (a new segment from the first entry read, the failed bookies replaced); the runtime picks
the bookies and calls `ensemble_changed(md)` (or `ensemble_change_failed()`), and the write-backs go to the
new write sets. The new segment is not written to the metadata on its own: the close carries it, so of two
concurrent recoveries only the one whose close wins names its replacements. Reads keep following the
ensembles the entries were written to (`read_md`): a replacement holds nothing and its "no such entry" must
never count.
"""

from __future__ import annotations

from dataclasses import replace

from ..codes import ResponseCode
from ..wire.ledger import AddEntry, AddResponse, ReadEntry, ReadLac, ReadLacResponse, ReadResponse, unpack_entry
from .metadata import LedgerMetadata, State, write_set_positions
from .writer import NeedClose, NeedEnsembleChange

_ABSENT = (ResponseCode.NO_SUCH_ENTRY, ResponseCode.NO_SUCH_LEDGER)


class LedgerRecoveryCore:
    def __init__(self, metadata: LedgerMetadata) -> None:
        assert metadata.state is State.IN_RECOVERY
        self.md = metadata  # where write-backs go (changes on a failed write-back) and what the close writes
        self.read_md = metadata  # where the entries were written: reads follow it
        self.first_read = 0
        self._to_replace: set[str] = set()
        self._change: NeedEnsembleChange | None = None
        self._changing = False
        self._changes = 0
        self.lac_answers: dict[str, int] = {}
        self.lac_errors: set[str] = set()
        self.fenced = False
        self.next = -1  # the entry being read
        self._no: set[str] = set()
        self._err: set[str] = set()
        self.found: dict[int, tuple[bytes, int]] = {}  # entry -> (stored data, length after it)
        self.reading_done = False
        self.last_entry_id = -1
        self._written_back: dict[int, set[str]] = {}
        self.result: NeedClose | ResponseCode | None = None
        self.messages: list[ReadLac | ReadEntry | AddEntry] = []

    def take(self) -> list[ReadLac | ReadEntry | AddEntry]:
        out, self.messages = self.messages, []
        return out

    def on_answer(self, m: ReadLacResponse | ReadResponse | AddResponse) -> None:
        """A bookie's answer to any of take()'s messages."""
        if isinstance(m, ReadLacResponse):
            self.on_read_lac(m)
        elif isinstance(m, ReadResponse):
            self.on_read(m)
        else:
            self.on_add(m)

    def take_change(self) -> NeedEnsembleChange | None:
        out, self._change = self._change, None
        return out

    # -- 1. fence and find the LAC ------------------------------------------------------------------------
    def start(self) -> None:
        for bookie in self.md.last_ensemble:
            self.messages.append(ReadLac(bookie, self.md.ledger_id, fence=True))

    def on_read_lac(self, m: ReadLacResponse) -> None:
        if self.fenced or self.result is not None or m.frm not in self.md.last_ensemble:
            return
        if m.code == ResponseCode.SUCCESS or m.code in _ABSENT:
            self.lac_answers[m.frm] = m.lac if m.code == ResponseCode.SUCCESS else -1
        else:
            self.lac_errors.add(m.frm)
        if self._fence_covers_every_write_set():
            self.fenced = True
            self.first_read = max(max(self.lac_answers.values()), 0)
            self._read(self.first_read)
        elif len(self.lac_answers) + len(self.lac_errors) == self.md.ensemble_size:
            self._fail()

    def _fence_covers_every_write_set(self) -> bool:
        e, w, a = self.md.ensemble_size, self.md.write_quorum, self.md.ack_quorum
        need = w - a + 1
        ens = self.md.last_ensemble
        return all(sum(1 for p in write_set_positions(j, e, w) if ens[p] in self.lac_answers) >= need
                   for j in range(e))

    # -- 2. read forward -----------------------------------------------------------------------------------
    def _read(self, entry_id: int) -> None:
        self.next = entry_id
        self._no, self._err = set(), set()
        for bookie in self.read_md.write_set(entry_id):
            self.messages.append(ReadEntry(bookie, self.md.ledger_id, entry_id, fence=True))

    def on_read(self, m: ReadResponse) -> None:
        if self.reading_done or self.result is not None or m.entry_id != self.next:
            return  # a late answer for an entry decided already
        ws = self.read_md.write_set(m.entry_id)
        if m.frm not in ws:
            return
        if m.code == ResponseCode.SUCCESS:
            _lac, length, _body = unpack_entry(m.data)
            self.found[m.entry_id] = (m.data, length)
            self._write_back(m.entry_id, m.data)
            self._read(m.entry_id + 1)
            return
        (self._no if m.code in _ABSENT else self._err).add(m.frm)
        if len(self._no) >= self._absent_answers_needed():
            self.reading_done = True
            self.last_entry_id = m.entry_id - 1
            self._maybe_close()
        elif len(self._no) + len(self._err) == len(ws):
            self._fail()

    def _absent_answers_needed(self) -> int:
        """"No such entry" from W - A + 1 bookies of a write set: then no A of them can have acknowledged it
        (one such answer is not enough: the bookie may be new, or wiped)."""
        return self.md.write_quorum - self.md.ack_quorum + 1

    def _reads_after_change(self, md: LedgerMetadata) -> LedgerMetadata:
        """Reads keep to the bookies the entries were written to: a replacement has none of them, and its "no
        such entry" means nothing."""
        return self.read_md

    # -- 3. write back, close ------------------------------------------------------------------------------
    def _write_back(self, entry_id: int, data: bytes) -> None:
        self._written_back[entry_id] = set()
        lac = max(self.lac_answers.values(), default=-1)
        for bookie in self.md.write_set(entry_id):
            self.messages.append(AddEntry(bookie, self.md.ledger_id, entry_id, data, lac, recovery=True))

    def on_add(self, m: AddResponse) -> None:
        acks = self._written_back.get(m.entry_id)
        if acks is None or self.result is not None or m.frm not in self.md.write_set(m.entry_id):
            return  # (an answer from a bookie an ensemble change replaced)
        if m.code != ResponseCode.SUCCESS:
            self._to_replace.add(m.frm)
            self._request_change()
            return
        acks.add(m.frm)
        self._maybe_close()

    # -- an ensemble change for the write-backs ---------------------------------------------------------------
    def _request_change(self) -> None:
        if self._changing:
            return  # the bookie is replaced once the change in flight is done
        if self._changes >= self.md.ensemble_size:
            self._fail()  # every position replaced once and still failing: give up, a retry starts over
            return
        self._changing = True
        self._changes += 1
        self._change = NeedEnsembleChange(self.first_read, frozenset(self._to_replace))

    def ensemble_changed(self, md: LedgerMetadata) -> None:
        """The runtime's answer to take_change(): md has a new last segment from first_read without the failed
        bookies (not written to the metadata: the close writes it). Write-backs not yet acknowledged go to it."""
        if self.result is not None:
            return
        assert md.state is State.IN_RECOVERY and md.version == self.md.version
        self._changing = False
        self.md = md
        self.read_md = self._reads_after_change(md)
        self._to_replace -= self._to_replace - set(md.last_ensemble)
        for entry_id, acks in self._written_back.items():
            ws = md.write_set(entry_id)
            acks &= set(ws)
            data = self.found[entry_id][0]
            lac = max(self.lac_answers.values(), default=-1)
            for bookie in ws:
                if bookie not in acks:
                    self.messages.append(AddEntry(bookie, md.ledger_id, entry_id, data, lac, recovery=True))
        if self._to_replace:
            self._request_change()  # a bookie of the new ensemble failed meanwhile

    def ensemble_change_failed(self) -> None:
        self._changing = False
        self._fail()

    def _maybe_close(self) -> None:
        if not self.reading_done or self.result is not None:
            return
        a = self.md.ack_quorum
        if any(len(acks) < a for e, acks in self._written_back.items() if e <= self.last_entry_id):
            return
        # (the last entry was read here, unless it lies below the LAC entry: only a wrong "absent" gets there)
        length = self.found.get(self.last_entry_id, (b"", 0))[1]
        self.result = NeedClose(replace(self.md, state=State.CLOSED, last_entry_id=self.last_entry_id,
                                        length=length))

    def _fail(self) -> None:
        self.result = ResponseCode.LEDGER_RECOVERY_FAILED
