"""The ledger writer, sans-I/O (BookKeeper's LedgerHandle add path): striped quorum writes, in-order acks,
ensemble change, close.

    w = LedgerWriterCore(metadata)          # an OPEN ledger this client created
    entry_id = w.add(request_id, body)      # then deliver w.take() messages, feed responses back
    w.on_response(AddResponse(...)); w.bookie_failed("n3"); w.ensemble_changed(new_metadata); w.close(rid)

- Entry e goes to its write set (metadata.write_set); it is acknowledged to its caller once `ack_quorum`
  bookies of that set stored it *and* every lower entry was acknowledged: the last-add-confirmed (LAC) only
  moves forward through a gap-free prefix, and every add carries it.
- A bookie that fails an add (an error, a dropped connection, a timeout: the runtime calls bookie_failed)
  is replaced: the writer asks for an ensemble change from LAC + 1 (NeedEnsembleChange); the runtime picks
  the replacement and writes the metadata with compare-and-set, then calls ensemble_changed. Pending adds
  are re-sent to their new write sets (acks from bookies still in the set are kept), so acks stay in order.
- LEDGER_FENCED from any bookie (a recovery fenced the ledger) fails every pending add with LEDGER_FENCED and
  every later one: the writer is done. A closed ledger refuses adds with LEDGER_CLOSED.
- close() waits for pending adds, then asks the runtime to write CLOSED with last_entry_id = LAC and its
  length (NeedClose).
- A body over `max_entry_bytes` is refused with ENTRY_TOO_LARGE and takes no entry id: nothing is sent (a
  bookie would refuse it too; see wire/ledger.py MAX_LEDGER_ENTRY_BYTES).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterable

from ..codes import ResponseCode
from ..wire.ledger import MAX_LEDGER_ENTRY_BYTES, AddEntry, AddResponse, pack_entry
from .metadata import LedgerMetadata, State


@dataclass(slots=True)  # (one per add: not frozen, whose __init__ costs twice)
class AddDone:
    request_id: int
    code: ResponseCode
    entry_id: int = -1


@dataclass(frozen=True, slots=True)
class NeedEnsembleChange:
    first_entry_id: int
    failed: frozenset[str]  # replace these bookies in the last ensemble


@dataclass(frozen=True, slots=True)
class NeedClose:
    metadata: LedgerMetadata  # CLOSED, last_entry_id, length: write it with compare-and-set


@dataclass(slots=True)
class _Add:
    request_id: int
    data: bytes
    length: int  # the ledger's length once this entry is in
    write_set: tuple[str, ...]  # (of the current ensemble: set again on an ensemble change)
    acks: set[str] = field(default_factory=set)


class LedgerWriterCore:
    def __init__(self, metadata: LedgerMetadata, max_entry_bytes: int = MAX_LEDGER_ENTRY_BYTES) -> None:
        assert metadata.state is State.OPEN
        self.md = metadata
        self.max_entry_bytes = max_entry_bytes
        self.next_entry = 0
        self.lac = -1
        self.length = 0  # of the acknowledged prefix
        self._tail_length = 0  # of every entry added
        self.pending: dict[int, _Add] = {}
        self._stripes = self._stripes_of(metadata)
        self._failed: set[str] = set()  # bookies to replace (a change is in flight or due)
        self.changing = False
        self.error: ResponseCode | None = None  # LEDGER_FENCED / LEDGER_CLOSED / a failed change: final
        self._close_request: int | None = None
        self.messages: list[AddEntry] = []
        self.done: list[AddDone] = []
        self.requests: list[NeedEnsembleChange | NeedClose] = []

    def take(self) -> tuple[list[AddEntry], list[AddDone], list[NeedEnsembleChange | NeedClose]]:
        out = (self.messages, self.done, self.requests)
        self.messages, self.done, self.requests = [], [], []
        return out

    def take_messages(self) -> list[AddEntry]:
        """take()'s messages alone (after an add that neither finished nor asked anything: the add path)."""
        out, self.messages = self.messages, []
        return out

    # -- adds ---------------------------------------------------------------------------------------------
    def add(self, request_id: int, body: bytes) -> int:
        if self.error is not None or self._close_request is not None:
            self.done.append(AddDone(request_id, self.error or ResponseCode.LEDGER_CLOSED))
            return -1
        if len(body) > self.max_entry_bytes:
            self.done.append(AddDone(request_id, ResponseCode.ENTRY_TOO_LARGE))
            return -1
        entry_id = self.next_entry
        self.next_entry += 1
        self._tail_length += len(body)
        add = _Add(request_id, pack_entry(self.lac, self._tail_length, body), self._tail_length,
                   self._stripes[entry_id % len(self._stripes)])
        self.pending[entry_id] = add
        if not self.changing:
            self._send(entry_id, add)
        return entry_id

    @staticmethod
    def _stripes_of(md: LedgerMetadata) -> tuple[tuple[str, ...], ...]:
        """The last ensemble's write sets by entry id mod E (new adds are always in the last segment)."""
        first = md.ensembles[-1].first_entry_id
        by_entry = {e % md.ensemble_size: md.write_set(e) for e in range(first, first + md.ensemble_size)}
        return tuple(by_entry[i] for i in range(md.ensemble_size))

    def _send(self, entry_id: int, add: _Add) -> None:
        ledger_id, lac, acks = self.md.ledger_id, self.lac, add.acks
        self.messages += [AddEntry(bookie, ledger_id, entry_id, add.data, lac)
                          for bookie in add.write_set if bookie not in acks]

    def on_response(self, m: AddResponse) -> None:
        self.on_add_results(m.frm, ((m.entry_id, m.code),))

    def on_add_results(self, bookie: str, results: Iterable[tuple[int, int]]) -> None:
        """A bookie's answers as (entry id, code): one add's, or an ADD_BATCH's taken in one go (the acks
        counted, then the LAC moved once), with the outcome of taking them one by one."""
        ok, fenced = ResponseCode.SUCCESS, ResponseCode.LEDGER_FENCED
        for entry_id, code in results:
            add = self.pending.get(entry_id)
            if add is None or self.error is not None:
                continue  # an answer for an entry acknowledged already, or after the writer ended
            if code == ok:
                if bookie in add.write_set and bookie not in self._failed:
                    add.acks.add(bookie)
                continue
            self._advance()  # (what was acknowledged before this answer stays acknowledged)
            if code == fenced:
                self._fail_all(fenced)
            else:
                self.bookie_failed(bookie)
        self._advance()

    def _advance(self) -> None:
        a = self.md.ack_quorum
        while True:
            add = self.pending.get(self.lac + 1)
            if add is None or len(add.acks) < a:
                break
            self.lac += 1
            self.length = add.length
            del self.pending[self.lac]
            self.done.append(AddDone(add.request_id, ResponseCode.SUCCESS, self.lac))
        self._maybe_close()

    # -- ensemble changes ---------------------------------------------------------------------------------
    def bookie_failed(self, bookie: str) -> None:
        if self.error is not None or bookie not in self.md.last_ensemble or bookie in self._failed:
            return
        self._failed.add(bookie)
        for add in self.pending.values():
            add.acks.discard(bookie)
        if not self.changing:
            self.changing = True
            self.requests.append(NeedEnsembleChange(self.lac + 1, frozenset(self._failed)))

    def ensemble_changed(self, metadata: LedgerMetadata) -> None:
        """The runtime wrote the new ensemble (from LAC + 1 at the time it was asked)."""
        self.changing = False
        self.md = metadata
        self._stripes = self._stripes_of(metadata)
        self._failed &= set(metadata.last_ensemble)  # replaced now
        self._retarget_pending(metadata)
        if self._failed:  # another bookie failed meanwhile: change again (and send once it is replaced)
            self.changing = True
            self.requests.append(NeedEnsembleChange(self.lac + 1, frozenset(self._failed)))
            return
        for entry_id, add in sorted(self.pending.items()):
            self._send(entry_id, add)
        self._advance()

    def _retarget_pending(self, metadata: LedgerMetadata) -> None:
        """Every pending add takes its write set in the new metadata at once, even while another change is due:
        a replaced bookie has left every write set, so a late answer from it is never counted (the entry would
        be acknowledged on bookies the metadata does not place it on, and recovery would close it away)."""
        for entry_id, add in self.pending.items():
            add.write_set = metadata.write_set(entry_id)
            add.acks &= set(add.write_set)

    def ensemble_change_failed(self, code: ResponseCode) -> None:
        """NOT_ENOUGH_BOOKIES, or the metadata moved under us (a recovery: LEDGER_FENCED)."""
        self.changing = False
        self._fail_all(code)

    # -- close --------------------------------------------------------------------------------------------
    def close(self, request_id: int) -> None:
        if self.error is not None:
            self.done.append(AddDone(request_id, self.error))
            return
        self._close_request = request_id
        self._maybe_close()

    def _maybe_close(self) -> None:
        if self._close_request is not None and not self.pending and not self.changing and self.error is None:
            self.requests.append(NeedClose(replace(self.md, state=State.CLOSED, last_entry_id=self.lac,
                                                   length=self.length)))
            self.error = ResponseCode.LEDGER_CLOSED  # no add after this

    def closed(self, code: ResponseCode) -> None:
        """The runtime wrote (or failed to write) the CLOSED metadata."""
        rid, self._close_request = self._close_request, None
        if rid is not None:
            self.done.append(AddDone(rid, code, self.lac))

    def _fail_all(self, code: ResponseCode) -> None:
        self.error = code
        for add in self.pending.values():
            self.done.append(AddDone(add.request_id, code))
        self.pending.clear()
        if self._close_request is not None:
            self.done.append(AddDone(self._close_request, code))
            self._close_request = None
