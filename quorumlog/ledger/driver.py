"""The asyncio driver of the sans-I/O ledger recovery, over any LedgerIo: the client's (client/ledger_registry.py)
and the node's auto-recovery (server/services/auto_recovery.py) both recover ledgers through it.

`LedgerIo` is what it needs: a bookie call (one BookieOpRequest, its response; raises QuorumLogError or
OSError when the bookie fails or is silent), fresh request ids, and the metadata's get and compare-and-set put.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import Protocol

from ..codes import ResponseCode
from ..errors import LedgerRecoveryFailed, MetadataVersionConflict, QuorumLogError
from ..wire.ledger import (AddResponse, BookieOpRequest, BookieOpResponse, ReadEntry, ReadLac, ReadLacResponse,
                           ReadResponse, from_op_response, to_op_request)
from .metadata import LedgerMetadata, State
from .recovery import LedgerRecoveryCore
from .writer import NeedClose, NeedEnsembleChange

log = logging.getLogger(__name__)

RECOVERY_ATTEMPTS = 6
RECOVERY_BACKOFF_S = (0.0, 0.2, 0.4, 0.8, 1.6, 2.0)  # ~5 s in all: a bookie just started answers UNKNOWN
# until it has compared itself with `_meta` (limbo), a failed write-back waits for a replacement bookie


class LedgerIo(Protocol):
    async def call(self, bookie: str, request: BookieOpRequest,
                   timeout_ms: float | None = None) -> BookieOpResponse: ...

    def request_id(self) -> int: ...

    async def get(self, ledger_id: int) -> LedgerMetadata: ...

    async def put(self, md: LedgerMetadata) -> LedgerMetadata: ...

    async def replace_bookies(self, md: LedgerMetadata, first_entry_id: int,
                              failed: set[str]) -> LedgerMetadata: ...


async def recover(registry: LedgerIo, md: LedgerMetadata) -> LedgerMetadata:
    """Fence and close an open ledger (BookKeeper's LedgerRecoveryOp; ledger/recovery.py has the protocol).
    Concurrent recoveries converge on the metadata's compare-and-set. Returns the CLOSED metadata."""
    last_error = ""
    for attempt in range(RECOVERY_ATTEMPTS):
        if md.state is State.CLOSED:
            return md
        await asyncio.sleep(RECOVERY_BACKOFF_S[attempt])
        try:
            if md.state is State.OPEN:
                md = await registry.put(replace(md, state=State.IN_RECOVERY))
            result = await _run_recovery(registry, md)
            if isinstance(result, ResponseCode):
                last_error = result.name
                md = await registry.get(md.ledger_id)
                continue
            closed = await registry.put(result.metadata)
            log.warning("ledger %d recovered: last_entry_id=%d length=%d", md.ledger_id, closed.last_entry_id,
                        closed.length)
            return closed
        except MetadataVersionConflict as e:  # another recovery (or the writer) moved it: look again
            last_error = str(e)
            md = await registry.get(md.ledger_id)
    raise LedgerRecoveryFailed(f"ledger {md.ledger_id}: {RECOVERY_ATTEMPTS} attempts, last: {last_error}")


async def _run_recovery(registry: LedgerIo, md: LedgerMetadata) -> NeedClose | ResponseCode:
    core = LedgerRecoveryCore(md)
    answers: asyncio.Queue = asyncio.Queue()
    tasks: set[asyncio.Task] = set()

    async def send(m) -> None:
        try:
            resp = await registry.call(m.to, to_op_request(registry.request_id(), m))
            answers.put_nowait(from_op_response(m.to, resp))
        except (QuorumLogError, OSError) as e:
            code = e.code if isinstance(e, QuorumLogError) else ResponseCode.NETWORK_ERROR
            answers.put_nowait(_failed(m, code))

    async def change(r: NeedEnsembleChange) -> None:
        try:
            answers.put_nowait(await registry.replace_bookies(core.md, r.first_entry_id, set(r.failed)))
        except (QuorumLogError, OSError) as e:
            log.warning("ledger %d: recovery's ensemble change failed: %s", md.ledger_id, e)
            answers.put_nowait(None)

    def spawn(coro) -> None:
        t = asyncio.get_running_loop().create_task(coro)
        tasks.add(t)
        t.add_done_callback(tasks.discard)

    core.start()
    try:
        while core.result is None:
            for m in core.take():
                spawn(send(m))
            if (r := core.take_change()) is not None:
                log.warning("ledger %d: recovery replaces %s from entry %d", md.ledger_id, sorted(r.failed),
                            r.first_entry_id)
                spawn(change(r))
            if core.result is not None:
                break
            if not tasks and answers.empty():
                return ResponseCode.LEDGER_RECOVERY_FAILED  # nothing in flight and undecided: cannot happen
            a = await answers.get()
            if a is None:
                core.ensemble_change_failed()
            elif isinstance(a, LedgerMetadata):
                core.ensemble_changed(a)
            else:
                core.on_answer(a)
    finally:
        for t in tasks:
            t.cancel()
    return core.result


def _failed(m, code: ResponseCode):
    if isinstance(m, ReadLac):
        return ReadLacResponse(m.to, m.ledger_id, code)
    if isinstance(m, ReadEntry):
        return ReadResponse(m.to, m.ledger_id, m.entry_id, code)
    return AddResponse(m.to, m.ledger_id, m.entry_id, code)
