"""The adds of a ledger client's writers, sent to each bookie in one request at a time, in rounds.

A writer queues the adds its core addressed. A bookie gets what is queued for it in one request: ADD for a lone
add, ADD_BATCH for several of one ledger, ADD_MULTI for several ledgers' (each answer's codes go back to its
writer's core). While its request is out, the bookie's next adds wait and leave together with its answer. A free
bookie's adds also wait while other bookies' requests are out (a round), at most ROUND_WAIT_S, and not at all
once ROUND_BYTES are queued for it or nothing is out.

- A request's cost (a frame, a future and a timer on each side, a journal submission and most likely an
  fdatasync of its own on the bookie) is paid once per bookie and round, however the adds are spread over
  writers: 64 writers with one add in flight each ran at a quarter of one writer with 64 in flight before
  ADD_MULTI.
- One request out per bookie, in rounds: a writer's add completes with the answers of two bookies, and its next
  add goes to another pair. Sent as they came, 64 ledgers over 5 bookies made requests of ~7 adds, each with
  an fdatasync of its own (1.1-1.3 requests per journal group), at 12,300 adds/s. One out per bookie: 15,600;
  in rounds (waiting up to 3 ms): 18,000-21,000, and one writer with 64 in flight 30,000-32,000 against
  26,700 with one out per bookie (measured 2026-11-27, 5 nodes on 2 cores). The bound keeps a hung bookie from holding the other
  bookies' adds for longer than that until its request times out.
- A bookie that does not answer (connection lost, timeout) fails the adds queued behind its request too: their
  writers change ensembles at once instead of sending them to it and waiting out another timeout.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from ..codes import ResponseCode
from ..errors import QuorumLogError
from ..wire.ledger import MAX_ADD_BATCH, AddEntry, BookieOp, BookieOpRequest, pack_multi_adds, unpack_multi_results
from .ledger_registry import LedgerRegistry



class AddingWriter(Protocol):
    """What the sender needs of a ledger writer (client/ledgers.py's): its adds go out, their answers and a
    bookie's failure come back."""
    ledger_id: int

    async def send_adds(self, bookie: str, adds: list[AddEntry]) -> bool: ...

    def add_results(self, bookie: str, results: list[tuple[int, int]]) -> None: ...

    def bookie_failed(self, bookie: str) -> None: ...

log = logging.getLogger(__name__)

ROUND_WAIT_S = 0.003  # a free bookie's adds wait at most this long for the others' answers (see above)
ROUND_BYTES = 256 * 1024  # ... and not at all once this much is queued for it: its request is full enough
MAX_ADD_REQUEST_BYTES = 16 * 1024 * 1024  # (a frame may carry 64 MiB; a bookie's answer should not wait on more)


class AddSender:
    def __init__(self, registry: LedgerRegistry) -> None:
        self.registry = registry
        self._queued: dict[str, dict[AddingWriter, list[AddEntry]]] = {}  # bookie -> writer -> its adds
        self._in_flight: set[str] = set()  # bookies with a request of ours out
        self._round_timers: dict[str, asyncio.Handle] = {}  # free bookies with adds, waiting for the round
        self._queued_bytes: dict[str, int] = {}  # bookie -> bytes of its queued adds
        self._scheduled = False
        self._tasks: set[asyncio.Task] = set()

    def queue(self, writer: AddingWriter, messages: list[AddEntry]) -> None:
        """A writer's adds, each to its bookie (a pump's: the adds its callers made in one loop iteration)."""
        queued, queued_bytes, bookies = self._queued, self._queued_bytes, []
        for m in messages:
            to = m.to
            per_writer = queued.get(to)
            if per_writer is None:
                per_writer = queued[to] = {}
                bookies.append(to)
            elif to not in bookies:
                bookies.append(to)
            adds = per_writer.get(writer)
            if adds is None:
                per_writer[writer] = [m]
            else:
                adds.append(m)
            queued_bytes[to] = queued_bytes.get(to, 0) + len(m.data)
        for bookie in bookies:
            self._want(bookie)

    def _want(self, bookie: str) -> None:
        """The bookie has adds queued and no request of ours out. With no request out anywhere they leave at the
        end of this iteration; else when the round ends (the last request out is answered), or ROUND_WAIT_S
        from now, or at the end of this iteration once ROUND_BYTES are queued for the bookie."""
        if bookie in self._in_flight:
            return
        loop = asyncio.get_running_loop()
        if not self._in_flight:
            if not self._scheduled:
                self._scheduled = True
                loop.call_soon(self._flush)
            return
        waiting = self._round_timers.get(bookie)
        if self._queued_bytes.get(bookie, 0) >= ROUND_BYTES:
            if isinstance(waiting, asyncio.TimerHandle):
                waiting.cancel()
                waiting = None
            if waiting is None:
                self._round_timers[bookie] = loop.call_soon(self._flush_one, bookie)
        elif waiting is None:
            self._round_timers[bookie] = loop.call_later(ROUND_WAIT_S, self._flush_one, bookie)

    def _flush(self) -> None:
        self._scheduled = False
        for bookie in [b for b in self._queued if b not in self._in_flight]:
            self._send_next(bookie)

    def _flush_one(self, bookie: str) -> None:
        self._round_timers.pop(bookie, None)
        if bookie in self._queued and bookie not in self._in_flight:
            self._send_next(bookie)

    def _send_next(self, bookie: str) -> None:
        """One request with the bookie's queued adds, oldest writer first, up to MAX_ADD_BATCH adds and
        MAX_ADD_REQUEST_BYTES (at least one add); the rest stays queued, in order."""
        group: list[tuple[AddingWriter, list[AddEntry]]] = []
        rest: dict[AddingWriter, list[AddEntry]] = {}
        count = size = 0
        for writer, adds in self._queued.pop(bookie).items():
            take = 0
            if not rest:
                while take < len(adds) and count < MAX_ADD_BATCH and \
                        (count == 0 or size + len(adds[take].data) <= MAX_ADD_REQUEST_BYTES):
                    size += len(adds[take].data)
                    count += 1
                    take += 1
                if take:
                    group.append((writer, adds if take == len(adds) else adds[:take]))
            if take < len(adds):
                rest[writer] = adds[take:]
        if rest:
            self._queued[bookie] = rest
            self._queued_bytes[bookie] = sum(len(m.data) for adds in rest.values() for m in adds)
        else:
            self._queued_bytes.pop(bookie, None)
        timer = self._round_timers.pop(bookie, None)
        if timer is not None:
            timer.cancel()
        self._in_flight.add(bookie)
        task = asyncio.get_running_loop().create_task(self._send(bookie, group))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, bookie: str, group: list[tuple[AddingWriter, list[AddEntry]]]) -> None:
        try:
            if len(group) == 1:
                writer, adds = group[0]
                answered = await writer.send_adds(bookie, adds)
            else:
                answered = await self._send_multi(bookie, group)
        finally:
            self._in_flight.discard(bookie)
        if not answered:
            self._queued_bytes.pop(bookie, None)
            for writer in self._queued.pop(bookie, {}):
                writer.bookie_failed(bookie)  # (the core re-sends their adds to the replacement)
        if not self._in_flight:  # the round is over: every free bookie's adds leave
            if self._queued and not self._scheduled:
                self._scheduled = True
                asyncio.get_running_loop().call_soon(self._flush)
        elif bookie in self._queued:
            self._want(bookie)

    async def _send_multi(self, bookie: str, group: list[tuple[AddingWriter, list[AddEntry]]]) -> bool:
        """Whether the bookie answered (each add's code then went to its writer)."""
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
            return False
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
        return True
