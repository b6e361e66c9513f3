"""Drives the sans-I/O ledger writer and recovery against real bookie storage (one BookieStorage per bookie in
a temporary directory), with the runtime's two duties done here: metadata compare-and-set and picking the
replacement bookie of an ensemble change. Bookies can be down (requests fail: the writer is told), hung (no
answer at all), wiped (in limbo) or restarted."""

from __future__ import annotations

import os
import shutil

from quorumlog.bookie.handler import BookieHandler
from quorumlog.bookie.storage import BookieConfig, BookieStorage
from quorumlog.codes import ResponseCode
from quorumlog.ledger import LedgerMetadata, LedgerRecoveryCore, LedgerWriterCore, NeedClose, NeedEnsembleChange
from quorumlog.ledger.metadata import Segment, State
from quorumlog.wire.ledger import AddEntry, AddResponse, ReadEntry, ReadLac, ReadLacResponse, ReadResponse

CONFIG = BookieConfig(entry_log_file_bytes=256 * 1024)


class Cluster:
    def __init__(self, tmp_path, n: int = 5) -> None:
        self.root = str(tmp_path)
        self.ids = [f"b{i}" for i in range(n)]
        self.storage = {b: BookieStorage(os.path.join(self.root, b), CONFIG) for b in self.ids}
        self.limbo: dict[str, set[int]] = {b: set() for b in self.ids}
        self.handlers = {b: BookieHandler(b, self.storage[b], lambda lid, b=b: lid in self.limbo[b])
                         for b in self.ids}
        self.down: set[str] = set()
        self.hung: set[str] = set()
        self.metadata: dict[int, LedgerMetadata] = {}  # the `_meta` record, with its version
        self.next_ledger = 1
        self.recovery_changes: list[NeedEnsembleChange] = []

    def close(self) -> None:
        for s in self.storage.values():
            s.close()

    # -- bookies ---------------------------------------------------------------------------------------
    def restart(self, b: str) -> None:
        self.storage[b].close()
        self.storage[b] = BookieStorage(os.path.join(self.root, b), CONFIG)
        self.handlers[b].storage = self.storage[b]

    def wipe(self, b: str) -> None:
        """Its disk is lost: it comes back empty (a new instance id), in limbo for the ledgers it held."""
        held = set(self.storage[b].ledgers())
        self.storage[b].close()
        shutil.rmtree(os.path.join(self.root, b))
        self.storage[b] = BookieStorage(os.path.join(self.root, b), CONFIG)
        self.handlers[b].storage = self.storage[b]
        self.limbo[b] |= held

    def call(self, req):
        """A bookie's answer, None if it is hung; raises ConnectionError if it is down."""
        if req.to in self.down:
            raise ConnectionError(req.to)
        if req.to in self.hung:
            return None
        return self.handlers[req.to].handle(req).result(10)

    # -- metadata --------------------------------------------------------------------------------------
    def create(self, e: int, w: int, a: int, bookies: list[str] | None = None) -> LedgerMetadata:
        lid = self.next_ledger
        self.next_ledger += 1
        md = LedgerMetadata(lid, e, w, a, (Segment(0, tuple(bookies or self.ids[:e])),), version=1)
        self.metadata[lid] = md
        return md

    def cas(self, md: LedgerMetadata) -> LedgerMetadata | None:
        current = self.metadata[md.ledger_id]
        if current.version != md.version:
            return None
        from dataclasses import replace
        new = replace(md, version=md.version + 1)
        self.metadata[md.ledger_id] = new
        return new

    # -- a writer --------------------------------------------------------------------------------------
    def pump_writer(self, w: LedgerWriterCore, order=None) -> list:
        """Deliver until quiet; returns every AddDone."""
        done = []
        while True:
            messages, finished, requests = w.take()
            done += finished
            if not (messages or finished or requests):
                return done
            if order is not None:
                messages = order(messages)
            for m in messages:
                try:
                    resp = self.call(m)
                except ConnectionError:
                    w.bookie_failed(m.to)
                    continue
                if resp is not None:
                    w.on_response(resp)
            for r in requests:
                if isinstance(r, NeedEnsembleChange):
                    self._ensemble_change(w, r)
                else:
                    assert isinstance(r, NeedClose)
                    new = self.cas(r.metadata)
                    w.closed(ResponseCode.SUCCESS if new else ResponseCode.METADATA_VERSION_CONFLICT)

    def _ensemble_change(self, w: LedgerWriterCore, r: NeedEnsembleChange) -> None:
        current = self.metadata[w.md.ledger_id]
        if current.state is not State.OPEN or current.version != w.md.version:
            w.ensemble_change_failed(ResponseCode.LEDGER_FENCED)  # a recovery moved it under us
            return
        ens = list(w.md.last_ensemble)
        spare = [b for b in self.ids if b not in ens and b not in self.down and b not in self.hung]
        for i, b in enumerate(ens):
            if b in r.failed:
                if not spare:
                    w.ensemble_change_failed(ResponseCode.NOT_ENOUGH_BOOKIES)
                    return
                ens[i] = spare.pop(0)
        new = self.cas(w.md.with_ensemble(r.first_entry_id, tuple(ens)))
        assert new is not None
        w.ensemble_changed(new)

    # -- a recovery ------------------------------------------------------------------------------------
    def begin_recovery(self, ledger_id: int) -> LedgerRecoveryCore | None:
        from dataclasses import replace
        md = self.metadata[ledger_id]
        if md.state is State.CLOSED:
            return None
        if md.state is State.OPEN:
            md = self.cas(replace(md, state=State.IN_RECOVERY))
        return LedgerRecoveryCore(md)

    def run_recovery(self, r: LedgerRecoveryCore, order=None):
        r.start()
        while r.result is None:
            messages = r.take()
            change = r.take_change()
            if change is not None:
                self._recovery_ensemble_change(r, change)
            elif not messages:
                break
            if order is not None:
                messages = order(messages)
            for m in messages:
                try:
                    resp = self.call(m)
                except ConnectionError:
                    resp = _error_response(m)
                if resp is None:
                    continue
                r.on_answer(resp)
        return r.result

    def _recovery_ensemble_change(self, r: LedgerRecoveryCore, change: NeedEnsembleChange) -> None:
        """The runtime's part: spare bookies for the failed ones (the metadata is not written: the close is)."""
        ens = list(r.md.last_ensemble)
        spare = [b for b in self.ids if b not in ens and b not in self.down and b not in self.hung]
        for i, b in enumerate(ens):
            if b in change.failed:
                if not spare:
                    r.ensemble_change_failed()
                    return
                ens[i] = spare.pop(0)
        self.recovery_changes.append(change)
        r.ensemble_changed(r.md.with_ensemble(change.first_entry_id, tuple(ens)))


def _error_response(m):
    code = ResponseCode.NETWORK_ERROR
    if isinstance(m, ReadLac):
        return ReadLacResponse(m.to, m.ledger_id, code)
    if isinstance(m, ReadEntry):
        return ReadResponse(m.to, m.ledger_id, m.entry_id, code)
    assert isinstance(m, AddEntry)
    return AddResponse(m.to, m.ledger_id, m.entry_id, code)
