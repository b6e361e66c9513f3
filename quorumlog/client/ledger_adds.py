"""The adds of a ledger client's writers, sent to each bookie once per event-loop iteration.

A writer queues the adds its core addressed; when the iteration ends each bookie gets what is queued for it
in one request: ADD for a lone add, ADD_BATCH for several of one ledger, ADD_MULTI for several ledgers' (each
answer's codes go back to its writer's core). A request's cost (a frame, a future and a timer on each side, a
journal submission on the bookie) is then paid once per bookie and iteration, however the adds are spread
over writers: 64 writers with one add in flight each ran at a quarter of one writer with 64 in flight before.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from ..codes import ResponseCode
from ..errors import QuorumLogError
from ..wire.ledger import MAX_ADD_BATCH, AddEntry, BookieOp, BookieOpRequest, pack_multi_adds, unpack_multi_results
from .ledger_registry import LedgerRegistry

if TYPE_CHECKING:
    from .ledgers import LedgerWriter

log = logging.getLogger(__name__)


class AddSender:
    def __init__(self, registry: LedgerRegistry) -> None:
        self.registry = registry
        self._queued: dict[str, dict["LedgerWriter", list[AddEntry]]] = {}  # bookie -> writer -> its adds
        self._scheduled = False
        self._tasks: set[asyncio.Task] = set()

    def queue(self, writer: "LedgerWriter", m: AddEntry) -> None:
        per_writer = self._queued.get(m.to)
        if per_writer is None:
            per_writer = self._queued[m.to] = {}
        adds = per_writer.get(writer)
        if adds is None:
            per_writer[writer] = [m]
        else:
            adds.append(m)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._scheduled = False
        queued, self._queued = self._queued, {}
        for bookie, per_writer in queued.items():
            group: list[tuple["LedgerWriter", list[AddEntry]]] = []
            size = 0
            for writer, adds in per_writer.items():
                for i in range(0, len(adds), MAX_ADD_BATCH):
                    chunk = adds[i:i + MAX_ADD_BATCH]
                    if size + len(chunk) > MAX_ADD_BATCH:
                        self._send(bookie, group)
                        group, size = [], 0
                    group.append((writer, chunk))
                    size += len(chunk)
            if group:
                self._send(bookie, group)

    def _send(self, bookie: str, group: list[tuple["LedgerWriter", list[AddEntry]]]) -> None:
        if len(group) == 1:
            writer, adds = group[0]
            coro = writer.send_adds(bookie, adds)
        else:
            coro = self._send_multi(bookie, group)
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send_multi(self, bookie: str, group: list[tuple["LedgerWriter", list[AddEntry]]]) -> None:
        try:
            resp = await self.registry.call(bookie, BookieOpRequest(
                self.registry.request_id(), BookieOp.ADD_MULTI,
                data=pack_multi_adds([(writer.ledger_id, adds) for writer, adds in group])))
            if resp.code != ResponseCode.SUCCESS:
                raise QuorumLogError.for_code(resp.code, resp.message)
            results = unpack_multi_results(resp.data)
        except (QuorumLogError, OSError, ValueError) as e:
            log.info("%d adds of %d ledgers to %s failed: %s", sum(len(a) for _, a in group), len(group), bookie, e)
            for writer, _ in group:
                writer.bookie_failed(bookie)
            return
        by_ledger: dict[int, list[tuple[int, int]]] = {}
        for ledger_id, entry_id, code in results:
            by_ledger.setdefault(ledger_id, []).append((entry_id, code))
        for writer, adds in group:
            got = by_ledger.get(writer.ledger_id)
            if got is None or len(got) != len(adds):  # (a bookie that answers for other adds: not one to trust)
                log.warning("ledger %d: %s answered %d of its %d adds", writer.ledger_id, bookie,
                            len(got or ()), len(adds))
                writer.bookie_failed(bookie)
            else:
                writer.add_results(bookie, got)
