"""A bookie's answers to the ledger protocol (BookKeeper's BookieRequestProcessor), over its storage:
add (LEDGER_FENCED, BOOKIE_READ_ONLY, NO_SUCH_LEDGER), read with or without the fence flag, ReadLac.

A bookie that lost its data (a wiped disk comes back with a new instance id) must not say "no such entry"
for a ledger it held: recovery would take that for absence and truncate acknowledged entries (BookKeeper
#2612). `in_limbo(ledger)` — the runtime's answer from the metadata — makes it answer UNKNOWN instead.

`handle(request)` returns a concurrent.futures.Future of the response: adds and fences complete once durable.
A fence completes on the journal's thread, but the storage is single-threaded apart from its journal writer:
what a fenced read does after the fence (read the entry, whose entry log the owner's thread is appending to)
runs on the owner's thread, through `on_owner_thread` (the node passes its loop's call_soon_threadsafe).
"""

from __future__ import annotations

import errno

from concurrent.futures import Future
from typing import Callable

from ..codes import ResponseCode
from ..errors import QuorumLogError
from ..wire.ledger import AddEntry, AddResponse, BookieRequest, BookieResponse, ReadEntry, ReadLac, ReadLacResponse, \
    ReadResponse
from .storage import BookieStorage


def _done(response: BookieResponse) -> Future:
    f: Future = Future()
    f.set_result(response)
    return f


def _run_here(fn: Callable[[], None]) -> None:
    fn()


def _then(inner: Future, make: Callable[[object], BookieResponse], fail: Callable[[ResponseCode], BookieResponse],
          via: Callable[[Callable[[], None]], None] = _run_here) -> Future:
    """`make` of inner's result (or `fail` of its error's code), called through `via` (on the thread it runs)."""
    out: Future = Future()

    def finish(f: Future) -> None:
        e = f.exception()
        if e is None:
            via(lambda: out.set_result(make(f.result())))
        else:
            out.set_result(fail(e.code if isinstance(e, QuorumLogError) else
                                ResponseCode.DISK_FULL if getattr(e, "errno", None) == errno.ENOSPC else
                                ResponseCode.DISK_ERROR))
    inner.add_done_callback(finish)
    return out


class BookieHandler:
    def __init__(self, bookie_id: str, storage: BookieStorage,
                 in_limbo: Callable[[int], bool] = lambda ledger_id: False,
                 on_owner_thread: Callable[[Callable[[], None]], None] = _run_here) -> None:
        self.id = bookie_id
        self.storage = storage
        self.in_limbo = in_limbo
        self.on_owner_thread = on_owner_thread

    def handle(self, req: BookieRequest) -> Future:
        if isinstance(req, AddEntry):
            return self._add(req)
        if isinstance(req, ReadEntry):
            return self._read(req)
        assert isinstance(req, ReadLac)
        return self._read_lac(req)

    def _add(self, req: AddEntry) -> Future:
        def fail(code: ResponseCode) -> AddResponse:
            return AddResponse(self.id, req.ledger_id, req.entry_id, code)
        try:
            fut = self.storage.add_entry(req.ledger_id, req.entry_id, req.data, lac=req.lac, recovery=req.recovery)
        except QuorumLogError as e:
            return _done(fail(e.code))
        return _then(fut, lambda _: AddResponse(self.id, req.ledger_id, req.entry_id, ResponseCode.SUCCESS), fail)

    def add_batch(self, ledger_id: int, adds: list[tuple[int, bytes, int]], recovery: bool) -> Future:
        """Several adds of one ledger (the ADD_BATCH request's (entry id, data, lac) each): a Future of the one
        code they all get (the checks are per ledger, and they become durable together)."""
        try:
            fut = self.storage.add_entries(ledger_id, adds, recovery=recovery)
        except QuorumLogError as e:
            return _done(e.code)  # type: ignore[arg-type]
        return _then(fut, lambda _: ResponseCode.SUCCESS, lambda code: code)  # type: ignore[arg-type,return-value]

    def add_multi(self, sections: list[tuple[int, list[tuple[int, bytes, int]]]]) -> Future:
        """The adds of several ledgers (an ADD_MULTI request's sections): a Future of each ledger's code — its
        refusal, or SUCCESS once the stored adds are durable (DISK_ERROR if the journal failed them)."""
        refused, fut = self.storage.add_sections(sections)
        codes = {lid: refused[lid].code if lid in refused else ResponseCode.SUCCESS for lid, _ in sections}
        return _then(fut, lambda _: codes,  # type: ignore[arg-type,return-value]
                     lambda code: {lid: c if lid in refused else code for lid, c in codes.items()})

    def _absent(self, ledger_id: int, code: ResponseCode) -> ResponseCode:
        return ResponseCode.UNKNOWN if self.in_limbo(ledger_id) else code

    def _read(self, req: ReadEntry) -> Future:
        def read(_=None) -> ReadResponse:
            try:
                data = self.storage.read_entry(req.ledger_id, req.entry_id)
            except QuorumLogError as e:
                code = e.code
                if code in (ResponseCode.NO_SUCH_ENTRY, ResponseCode.NO_SUCH_LEDGER):
                    code = self._absent(req.ledger_id, code)
                return ReadResponse(self.id, req.ledger_id, req.entry_id, code)
            return ReadResponse(self.id, req.ledger_id, req.entry_id, ResponseCode.SUCCESS, data)
        if not req.fence:
            return _done(read())
        return _then(self.storage.fence(req.ledger_id), read,
                     lambda code: ReadResponse(self.id, req.ledger_id, req.entry_id, code), self.on_owner_thread)

    def _read_lac(self, req: ReadLac) -> Future:
        def answer(lac: object) -> ReadLacResponse:
            if self.in_limbo(req.ledger_id):
                return ReadLacResponse(self.id, req.ledger_id, ResponseCode.UNKNOWN)
            return ReadLacResponse(self.id, req.ledger_id, ResponseCode.SUCCESS, int(lac))  # type: ignore[arg-type]
        if not req.fence:
            return _done(answer(self.storage.last_add_confirmed(req.ledger_id)))
        return _then(self.storage.fence(req.ledger_id), answer,
                     lambda code: ReadLacResponse(self.id, req.ledger_id, code), self.on_owner_thread)
