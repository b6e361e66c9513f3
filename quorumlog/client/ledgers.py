"""`quorumlog.LedgerClient`: BookKeeper's ledgers over the nodes' bookies (docs/interfaces.md "Ledgers").

    async with LedgerClient(peers) as lc:
        w = await lc.create_ledger(ensemble=3, write_quorum=2, ack_quorum=2)
        eid = await w.add_entry(b"x")                  # acked in order once ack_quorum bookies stored it
        await w.close()
        r = await lc.open_ledger(w.ledger_id, recovery=True)
        async for e in r.read(0, r.last_add_confirmed): ...

The protocol is the sans-I/O cores of quorumlog/ledger (writer, recovery); this module is their runtime:
it sends their messages to the bookies (one pipelined connection per node), turns a failed or silent bookie
into `bookie_failed` (the writer then changes its ensemble), and does the metadata work they ask for with
compare-and-set in `_meta` (client/ledger_registry.py).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace
from typing import AsyncIterator

from ..codes import ResponseCode
from ..errors import (BadRequest, MetadataVersionConflict, NetworkError,
                      NoSuchEntry, QuorumLogError)
from ..ledger import LedgerMetadata, LedgerWriterCore, NeedClose, NeedEnsembleChange
from ..ledger.metadata import State
from ..peers import Address, parse_peers
from .ledger_stream import (DEFAULT_ROLL_BYTES, LedgerStreamWriter, StreamEntry, open_stream_writer,
                            read_stream)
from ..wire.ledger import (MAX_LEDGER_ENTRY_BYTES, AddEntry, BookieOp, BookieOpRequest, ReadEntry, ReadLac,
                           from_op_response, pack_adds, to_op_request, unpack_add_results, unpack_entry)
from ..ledger.driver import recover
from .ledger_adds import AddSender
from .ledger_registry import LedgerRegistry, new_metadata

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_MS = 10_000
DEFAULT_BOOKIE_TIMEOUT_MS = 5_000  # BookKeeper addEntryTimeout is 10 s; a silent bookie is replaced sooner
READ_AHEAD = 64  # entries read at once (BookKeeper's readahead batches)
# An idle writer tells its last ensemble its last add confirmed after this long, so readers see its last entry
# without waiting for the next add (BookKeeper's explicitLacInterval, off by default there). 0: never.
DEFAULT_EXPLICIT_LAC_INTERVAL_MS = 100
METADATA_ATTEMPTS = 5  # compare-and-set retries of one metadata change


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    entry_id: int
    body: bytes


class LedgerClient:
    def __init__(self, peers: str | dict[str, Address], *, timeout_ms: int = DEFAULT_TIMEOUT_MS,
                 bookie_timeout_ms: int = DEFAULT_BOOKIE_TIMEOUT_MS, token: str | None = None,
                 tls_ca: str | None = None, explicit_lac_interval_ms: int = DEFAULT_EXPLICIT_LAC_INTERVAL_MS,
                 max_entry_bytes: int = MAX_LEDGER_ENTRY_BYTES) -> None:
        """max_entry_bytes: a bigger body is refused (EntryTooLarge) before anything is sent; keep it at most the
        bookies' max_ledger_entry_bytes (the same default)."""
        nodes = parse_peers(peers) if isinstance(peers, str) else dict(peers)
        self.explicit_lac_interval_ms = explicit_lac_interval_ms
        self.max_entry_bytes = max_entry_bytes
        if not nodes:
            raise ValueError("peers: no nodes")
        self.registry = LedgerRegistry(nodes, timeout_ms=timeout_ms, bookie_timeout_ms=bookie_timeout_ms,
                                       client_name="ledger-client", token=token, tls_ca=tls_ca)
        self._adds = AddSender(self.registry)  # (one per client: its writers' adds share requests)
        self.timeout_ms = timeout_ms

    async def __aenter__(self) -> "LedgerClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def close(self) -> None:
        await self.registry.close()

    # -- ledgers -------------------------------------------------------------------------------------------
    async def create_ledger(self, ensemble: int = 3, write_quorum: int = 2, ack_quorum: int = 2) -> "LedgerWriter":
        if not ensemble >= write_quorum >= ack_quorum >= 1:
            raise BadRequest(f"need ensemble >= write_quorum >= ack_quorum >= 1, got {ensemble}/{write_quorum}/"
                             f"{ack_quorum}")
        bookies = await self.registry.place(ensemble)
        lid = await self.registry.next_ledger_id()
        md = await self.registry.put(new_metadata(lid, bookies, write_quorum, ack_quorum))
        log.info("ledger created id=%d ensemble=%s W=%d A=%d", lid, bookies, write_quorum, ack_quorum)
        return LedgerWriter(self.registry, md, self.explicit_lac_interval_ms, self._adds, self.max_entry_bytes)

    async def open_ledger(self, ledger_id: int, recovery: bool = True) -> "LedgerReader":
        """recovery=True: fence the ledger, recover its last entries and close it (a writer still adding gets
        LEDGER_FENCED). recovery=False: no fence; read up to the last add confirmed the bookies report."""
        md = await self.registry.get(ledger_id)
        if recovery and md.state is not State.CLOSED:
            md = await recover(self.registry, md)
        reader = LedgerReader(self.registry, md)
        if md.state is not State.CLOSED:
            await reader.read_last_add_confirmed()
        return reader

    async def describe(self, ledger_id: int) -> LedgerMetadata:
        return await self.registry.get(ledger_id)

    async def list_ledgers(self) -> list[LedgerMetadata]:
        return await self.registry.list()

    async def delete_ledger(self, ledger_id: int) -> None:
        """Remove the metadata (compare-and-set), then tell every bookie that held it to drop it (its entries
        go at the bookie's next garbage collection). A bookie that does not hear it keeps dead entries only."""
        for _ in range(METADATA_ATTEMPTS):
            md = await self.registry.get(ledger_id)
            try:
                await self.registry.delete(md)
                break
            except MetadataVersionConflict:
                continue
        else:
            raise MetadataVersionConflict(f"ledger {ledger_id}: kept changing while being deleted")
        bookies = sorted({b for seg in md.ensembles for b in seg.bookies})
        await asyncio.gather(*(self._drop(b, ledger_id) for b in bookies))

    async def _drop(self, bookie: str, ledger_id: int) -> None:
        try:
            await self.registry.call(bookie, BookieOpRequest(self.registry.request_id(), BookieOp.DELETE, ledger_id))
        except (QuorumLogError, OSError) as e:
            log.warning("ledger %d: bookie %s did not hear the delete: %s", ledger_id, bookie, e)

    async def bookies(self) -> dict[str, dict]:
        """Every bookie's state (read_write / read_only / down), disk use and ledger count."""
        return await self.registry.bookies()

    async def underreplicated(self) -> list[dict]:
        """The ledgers auto-recovery is re-replicating: {ledger_id, lost, since_ms} each."""
        return await self.registry.underreplicated()

    async def decommission_bookie(self, bookie: str) -> None:
        """Drain a bookie: no new ledgers on it, and auto-recovery copies every fragment it holds elsewhere.
        Done when no ledger names it (`ledgers_on`)."""
        await self.registry.decommission(bookie)

    # -- streams (client/ledger_stream.py) -------------------------------------------------------------------
    async def open_stream_writer(self, name: str, *, ensemble: int = 3, write_quorum: int = 2, ack_quorum: int = 2,
                                 roll_bytes: int = DEFAULT_ROLL_BYTES) -> LedgerStreamWriter:
        """Become the writer of the named stream (a log made of ledgers): fences the previous writer's ledger."""
        return await open_stream_writer(self, name, ensemble=ensemble, write_quorum=write_quorum,
                                        ack_quorum=ack_quorum, roll_bytes=roll_bytes)

    def read_stream(self, name: str, start: int = 0, end: int | None = None) -> AsyncIterator[StreamEntry]:
        """The stream's entries at offsets [start, end) (default: all readable now), in order, without fencing."""
        return read_stream(self, name, start, end)

    async def ledgers_on(self, bookie: str) -> list[int]:
        return [md.ledger_id for md in await self.registry.list()
                if any(bookie in seg.bookies for seg in md.ensembles)]


class LedgerWriter:
    """The handle of a ledger this client created (BookKeeper's LedgerHandle): adds, then close."""

    def __init__(self, registry: LedgerRegistry, md: LedgerMetadata,
                 explicit_lac_interval_ms: int = DEFAULT_EXPLICIT_LAC_INTERVAL_MS,
                 adds: AddSender | None = None, max_entry_bytes: int = MAX_LEDGER_ENTRY_BYTES) -> None:
        self.registry = registry
        self.core = LedgerWriterCore(md, max_entry_bytes)
        self._explicit_lac_interval_ms = explicit_lac_interval_ms
        self._lac_sent = -1  # the last add confirmed the bookies were told (on an add or explicitly)
        self._lac_timer: asyncio.TimerHandle | None = None
        self._waiters: dict[int, asyncio.Future] = {}
        self._next_request = 0
        self._tasks: set[asyncio.Task] = set()
        self._adds = adds or AddSender(registry)  # sends its adds to each bookie, in rounds (client/ledger_adds.py)

    @property
    def ledger_id(self) -> int:
        return self.core.md.ledger_id

    @property
    def metadata(self) -> LedgerMetadata:
        return self.core.md

    @property
    def last_add_confirmed(self) -> int:
        return self.core.lac

    async def add_entry(self, body: bytes) -> int:
        """Store body as the next entry; returns its entry id once it and every entry before it is stored
        on ack_quorum bookies of its write set. Raises LedgerFenced, LedgerClosed, NotEnoughBookies, and
        EntryTooLarge (over max_entry_bytes: nothing sent, no entry id taken)."""
        self._next_request += 1  # (_request inlined: this is the per-add path)
        rid = self._next_request
        fut = asyncio.get_running_loop().create_future()
        self._waiters[rid] = fut
        core = self.core
        core.add(rid, body)  # (copies body into the entry it sends)
        if core.done or core.requests:
            self._pump()  # (refused: the ledger is closed or fenced)
        elif core.messages:  # (an add's share of _pump, without the rest: this is the per-add path)
            self._queue_adds(core.take_messages())
        done = await fut
        if done.code != ResponseCode.SUCCESS:
            raise QuorumLogError.for_code(done.code, f"ledger {self.ledger_id}")
        return done.entry_id

    async def close(self) -> int:
        """Wait for pending adds, then mark the ledger CLOSED at its last add confirmed. Returns it."""
        done = await self._request(self.core.close)
        return done.entry_id

    async def _request(self, start) -> object:
        self._next_request += 1
        rid = self._next_request
        fut = asyncio.get_running_loop().create_future()
        self._waiters[rid] = fut
        start(rid)
        self._pump()
        done = await fut
        if done.code != ResponseCode.SUCCESS:
            raise QuorumLogError.for_code(done.code, f"ledger {self.ledger_id}")
        return done

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _pump(self) -> None:
        core = self.core
        if not (core.messages or core.done or core.requests):
            return  # (nothing new: every add and answer pumps, most of them find nothing)
        messages, done, requests = core.take()
        for d in done:
            fut = self._waiters.pop(d.request_id, None)
            if fut is not None and not fut.done():
                fut.set_result(d)
        if messages:
            self._queue_adds(messages)
        for r in requests:
            self._spawn(self._change_ensemble(r) if isinstance(r, NeedEnsembleChange) else self._close(r))
        if self._explicit_lac_interval_ms and core.lac > self._lac_sent and not core.pending \
                and core.error is None and self._lac_timer is None:
            self._lac_timer = asyncio.get_running_loop().call_later(self._explicit_lac_interval_ms / 1000,
                                                                    self._explicit_lac)

    def _queue_adds(self, messages: list[AddEntry]) -> None:
        self._adds.queue(self, messages)
        self._lac_sent = max(self._lac_sent, messages[-1].lac)  # (every add carries it)

    def _explicit_lac(self) -> None:
        self._lac_timer = None
        core = self.core
        if core.pending or core.error is not None or core.lac <= self._lac_sent:
            return  # adds resumed (they carry it), or nothing new, or the ledger is done
        self._lac_sent = lac = core.lac
        for bookie in core.md.last_ensemble:
            self._spawn(self._write_lac(bookie, lac))

    async def _write_lac(self, bookie: str, lac: int) -> None:
        try:
            await self.registry.call(bookie, BookieOpRequest(self.registry.request_id(), BookieOp.WRITE_LAC,
                                                             self.ledger_id, lac=lac))
        except (QuorumLogError, OSError) as e:  # best effort: readers then wait for the next add
            log.debug("ledger %d: explicit LAC %d to %s failed: %s", self.ledger_id, lac, bookie, e)

    # -- what the AddSender calls ----------------------------------------------------------------------------
    async def send_adds(self, bookie: str, adds: list[AddEntry]) -> bool:
        """Send this writer's adds to a bookie (ADD for one, ADD_BATCH for more) and take the answers; whether
        the bookie answered."""
        if len(adds) > 1:
            return await self._send_batch(bookie, adds)
        m = adds[0]
        answered = True
        try:
            resp = await self.registry.call(m.to, to_op_request(self.registry.request_id(), m))
            self.core.on_response(from_op_response(m.to, resp))  # type: ignore[arg-type]
        except (QuorumLogError, OSError) as e:
            log.info("ledger %d: add %d to %s failed: %s", self.ledger_id, m.entry_id, m.to, e)
            self.core.bookie_failed(m.to)
            answered = False
        self._pump()
        return answered

    def add_results(self, bookie: str, results: list[tuple[int, int]]) -> None:
        self.core.on_add_results(bookie, results)
        self._pump()

    def bookie_failed(self, bookie: str) -> None:
        self.core.bookie_failed(bookie)
        self._pump()

    async def _send_batch(self, bookie: str, adds: list[AddEntry]) -> bool:
        answered = True
        try:
            resp = await self.registry.call(bookie, BookieOpRequest(
                self.registry.request_id(), BookieOp.ADD_BATCH, self.ledger_id, data=pack_adds(adds)))
            if resp.code != ResponseCode.SUCCESS:
                raise QuorumLogError.for_code(resp.code, resp.message)
            self.core.on_add_results(bookie, unpack_add_results(resp.data))
        except (QuorumLogError, OSError, ValueError) as e:
            log.info("ledger %d: %d adds from %d to %s failed: %s", self.ledger_id, len(adds), adds[0].entry_id,
                     bookie, e)
            self.core.bookie_failed(bookie)
            answered = False
        self._pump()
        return answered

    async def _change_ensemble(self, r: NeedEnsembleChange) -> None:
        md = self.core.md
        try:
            for _ in range(METADATA_ATTEMPTS):
                new = await self.registry.replace_bookies(md, r.first_entry_id, set(r.failed))
                try:
                    written = await self.registry.put(new)
                    log.warning("ledger %d: ensemble change from entry %d: %s -> %s", self.ledger_id,
                                r.first_entry_id, list(md.last_ensemble), list(written.last_ensemble))
                    self.core.ensemble_changed(written)
                    break
                except MetadataVersionConflict:
                    md = await self.registry.get(self.ledger_id)
                    if md.state is not State.OPEN:  # a recovery fenced us: we are done
                        self.core.ensemble_change_failed(ResponseCode.LEDGER_FENCED)
                        break
            else:
                self.core.ensemble_change_failed(ResponseCode.METADATA_VERSION_CONFLICT)
        except QuorumLogError as e:
            log.warning("ledger %d: ensemble change failed: %s", self.ledger_id, e)
            self.core.ensemble_change_failed(e.code)
        self._pump()

    async def _close(self, r: NeedClose) -> None:
        try:
            await self.registry.put(r.metadata)
            self.core.closed(ResponseCode.SUCCESS)
        except MetadataVersionConflict:
            current = await self.registry.get(self.ledger_id)
            if current.state is State.OPEN and current.ensembles[-1] == r.metadata.ensembles[-1]:
                # auto-recovery replaced a lost bookie of an earlier segment: close over its metadata
                try:
                    await self.registry.put(replace(r.metadata, ensembles=current.ensembles, version=current.version))
                    self.core.closed(ResponseCode.SUCCESS)
                except QuorumLogError as e:
                    self.core.closed(e.code)
                self._pump()
                return
            # a recovery closed it first: fine if it kept exactly what we acknowledged
            same = current.state is State.CLOSED and current.last_entry_id == r.metadata.last_entry_id
            self.core.closed(ResponseCode.SUCCESS if same else ResponseCode.LEDGER_FENCED)
        except QuorumLogError as e:
            self.core.closed(e.code)
        self._pump()


class LedgerReader:
    """A ledger opened for reading (BookKeeper's ReadOnlyLedgerHandle)."""

    def __init__(self, registry: LedgerRegistry, md: LedgerMetadata) -> None:
        self.registry = registry
        self.metadata = md
        self.last_add_confirmed = md.last_entry_id if md.state is State.CLOSED else -1

    @property
    def ledger_id(self) -> int:
        return self.metadata.ledger_id

    @property
    def is_closed(self) -> bool:
        return self.metadata.state is State.CLOSED

    async def read_last_add_confirmed(self) -> int:
        """Advance last_add_confirmed while a writer is adding: the highest LAC the last ensemble reports (no
        fence). Once the ledger is closed, its last entry id."""
        md = self.metadata = await self.registry.get(self.ledger_id)
        if md.state is State.CLOSED:
            self.last_add_confirmed = md.last_entry_id
            return self.last_add_confirmed
        answers = await asyncio.gather(*(self._read_lac(b) for b in md.last_ensemble))
        self.last_add_confirmed = max([self.last_add_confirmed, *(a for a in answers if a is not None)])
        return self.last_add_confirmed

    async def _read_lac(self, bookie: str) -> int | None:
        try:
            resp = await self.registry.call(bookie, to_op_request(self.registry.request_id(),
                                                                  ReadLac(bookie, self.ledger_id)))
        except (QuorumLogError, OSError):
            return None
        return resp.lac if resp.code == ResponseCode.SUCCESS else None

    async def read_entry(self, entry_id: int) -> LedgerEntry:
        """One entry from the first bookie of its write set that has it."""
        if not 0 <= entry_id <= self.last_add_confirmed:
            raise NoSuchEntry(f"ledger {self.ledger_id}: entry {entry_id} is beyond the last add confirmed "
                              f"{self.last_add_confirmed}")
        errors = []
        for bookie in self.metadata.write_set(entry_id):
            try:
                resp = await self.registry.call(bookie, to_op_request(
                    self.registry.request_id(), ReadEntry(bookie, self.ledger_id, entry_id)))
            except (QuorumLogError, OSError) as e:
                errors.append(f"{bookie}: {e}")
                continue
            if resp.code == ResponseCode.SUCCESS:
                _lac, _length, body = unpack_entry(resp.data)
                return LedgerEntry(entry_id, body)
            errors.append(f"{bookie}: {resp.code.name}")
        raise NetworkError(f"ledger {self.ledger_id} entry {entry_id}: no bookie of its write set answered it "
                           f"({'; '.join(errors)})")

    async def read(self, first: int = 0, last: int | None = None) -> AsyncIterator[LedgerEntry]:
        """Entries first..last (default: the last add confirmed), in order, READ_AHEAD at a time."""
        last = self.last_add_confirmed if last is None else last
        if first < 0 or last > self.last_add_confirmed:
            raise NoSuchEntry(f"ledger {self.ledger_id}: {first}..{last} is not within 0..{self.last_add_confirmed}")
        e = first
        while e <= last:
            batch = range(e, min(last, e + READ_AHEAD - 1) + 1)
            for entry in await asyncio.gather(*(self.read_entry(i) for i in batch)):
                yield entry
            e = batch[-1] + 1


__all__ = ["LedgerClient", "LedgerEntry", "LedgerReader", "LedgerWriter"]
