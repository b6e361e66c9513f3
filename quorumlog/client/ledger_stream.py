"""A log made of ledgers (BookKeeper's "ledgers to logs", as DistributedLog and Pulsar's managed ledgers do it):
a named stream whose writer adds to one ledger at a time and rolls to a new one past `roll_bytes`.

The stream is a record in `_meta`, `streams/NAME` = {ensemble, write_quorum, ack_quorum, ledgers: [{ledger_id,
first_offset, created_ms}]}, changed only by compare-and-set. A stream offset is dense across the ledgers:
ledger k's entry e is offset first_offset(k) + e.

One writer at a time, by fencing: a new writer recovers (fences and closes) the stream's last ledger if it is
still open, then appends its own ledger to the record. The writer it replaced gets LEDGER_FENCED on its next
add, or a compare-and-set conflict when it rolls, and stops: it can never add after the new writer started.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Protocol

from ..errors import BadRequest, LedgerFenced, MetadataVersionConflict
from ..ledger.metadata import LedgerMetadata
from .ledger_registry import LedgerRegistry

log = logging.getLogger(__name__)


class OpenLedgerWriter(Protocol):
    """What a stream needs of the writer of its open ledger (client/ledgers.py's LedgerWriter)."""
    ledger_id: int

    async def add_entry(self, body: bytes) -> int: ...

    async def close(self) -> int: ...


class StreamLedgers(Protocol):
    """What a stream needs of a ledger client (client/ledgers.py's LedgerClient): ledgers and the metadata."""
    registry: LedgerRegistry

    async def create_ledger(self, ensemble: int = 3, write_quorum: int = 2, ack_quorum: int = 2) -> Any: ...

    async def open_ledger(self, ledger_id: int, recovery: bool = True) -> Any: ...

    async def delete_ledger(self, ledger_id: int) -> None: ...


STREAMS_PREFIX = "streams/"
DEFAULT_ROLL_BYTES = 64 * 1024 * 1024  # DistributedLog's default log segment rolls at 256 MB or 2 h
OPEN_ATTEMPTS = 16


@dataclass(frozen=True, slots=True)
class StreamLedger:
    ledger_id: int
    first_offset: int
    created_ms: int


@dataclass(frozen=True, slots=True)
class StreamEntry:
    offset: int  # dense across the stream's ledgers
    ledger_id: int
    entry_id: int
    created_ms: int  # when its ledger was started (entries carry no time of their own)
    body: bytes


@dataclass(frozen=True, slots=True)
class StreamRecord:
    name: str
    ensemble: int
    write_quorum: int
    ack_quorum: int
    ledgers: tuple[StreamLedger, ...]
    version: int = 0  # of `streams/NAME` in `_meta` (0: not created yet)

    def to_json(self) -> bytes:
        return json.dumps({"ensemble": self.ensemble, "write_quorum": self.write_quorum,
                           "ack_quorum": self.ack_quorum,
                           "ledgers": [{"ledger_id": x.ledger_id, "first_offset": x.first_offset,
                                        "created_ms": x.created_ms} for x in self.ledgers]}, sort_keys=True).encode()

    @classmethod
    def from_json(cls, name: str, data: bytes, version: int) -> "StreamRecord":
        d = json.loads(data)
        return cls(name, d["ensemble"], d["write_quorum"], d["ack_quorum"],
                   tuple(StreamLedger(x["ledger_id"], x["first_offset"], x["created_ms"]) for x in d["ledgers"]),
                   version)


def stream_key(name: str) -> str:
    if not name or "/" in name or len(name) > 200:
        raise BadRequest(f"stream name {name!r}: 1..200 characters, no '/'")
    return STREAMS_PREFIX + name


async def get_stream(lc: StreamLedgers, name: str) -> StreamRecord | None:
    found = await lc.registry.meta.kv_get(stream_key(name))
    return None if found is None else StreamRecord.from_json(name, found[0], found[1])


async def put_stream(lc: StreamLedgers, rec: StreamRecord) -> StreamRecord:
    version = await lc.registry.meta.kv_put(stream_key(rec.name), rec.to_json(), expected_version=rec.version)
    return StreamRecord(rec.name, rec.ensemble, rec.write_quorum, rec.ack_quorum, rec.ledgers, version)


async def _next_offset(lc: StreamLedgers, rec: StreamRecord) -> int:
    """Where a new ledger starts: after the last ledger, which is fenced and closed first if still open."""
    if not rec.ledgers:
        return 0
    last = rec.ledgers[-1]
    md = (await lc.open_ledger(last.ledger_id, recovery=True)).metadata
    return last.first_offset + md.last_entry_id + 1


class LedgerStreamWriter:
    """Adds to the stream's current ledger; rolls to a new ledger past roll_bytes."""

    def __init__(self, lc: StreamLedgers, rec: StreamRecord, writer: OpenLedgerWriter, roll_bytes: int) -> None:
        self.lc = lc
        self.record = rec
        self.writer = writer
        self.roll_bytes = roll_bytes
        self.first_offset = rec.ledgers[-1].first_offset
        self._bytes = 0
        self._rolling = asyncio.Lock()

    @property
    def name(self) -> str:
        return self.record.name

    async def add(self, body: bytes) -> int:
        """Add one entry; its stream offset once acknowledged (after ack_quorum bookies, in order). Adds may
        be concurrent: offsets follow the order of the calls."""
        if self._bytes >= self.roll_bytes:
            async with self._rolling:
                if self._bytes >= self.roll_bytes:  # (not rolled by the add we waited for)
                    await self.roll()
        self._bytes += len(body)
        writer, first = self.writer, self.first_offset
        return first + await writer.add_entry(body)

    async def roll(self) -> None:
        """Close the current ledger and continue in a new one. LedgerFenced if another writer took over."""
        last = await self.writer.close()
        rec = self.record
        new = await self.lc.create_ledger(rec.ensemble, rec.write_quorum, rec.ack_quorum)
        entry = StreamLedger(new.ledger_id, self.first_offset + last + 1, _now_ms())
        try:
            self.record = await put_stream(self.lc, StreamRecord(rec.name, rec.ensemble, rec.write_quorum,
                                                                 rec.ack_quorum, rec.ledgers + (entry,), rec.version))
        except MetadataVersionConflict:
            await new.close()
            await self.lc.delete_ledger(new.ledger_id)
            raise LedgerFenced(f"stream {rec.name}: another writer opened it") from None
        self.writer, self.first_offset, self._bytes = new, entry.first_offset, 0
        log.info("stream %s rolled to ledger %d at offset %d", rec.name, new.ledger_id, entry.first_offset)

    async def close(self) -> None:
        await self.writer.close()


async def open_stream_writer(lc: StreamLedgers, name: str, *, ensemble: int = 3, write_quorum: int = 2,
                             ack_quorum: int = 2, roll_bytes: int = DEFAULT_ROLL_BYTES) -> LedgerStreamWriter:
    """Become the stream's writer (creating the stream with these quorums if it does not exist): fence and
    close its last ledger, start a new one."""
    if roll_bytes < 1:
        raise BadRequest(f"roll_bytes {roll_bytes} < 1")
    for _ in range(OPEN_ATTEMPTS):
        rec = await get_stream(lc, name) or StreamRecord(name, ensemble, write_quorum, ack_quorum, ())
        first = await _next_offset(lc, rec)
        w = await lc.create_ledger(rec.ensemble, rec.write_quorum, rec.ack_quorum)
        entry = StreamLedger(w.ledger_id, first, _now_ms())
        try:
            rec = await put_stream(lc, StreamRecord(name, rec.ensemble, rec.write_quorum, rec.ack_quorum,
                                                    rec.ledgers + (entry,), rec.version))
        except MetadataVersionConflict:  # another writer got there first: fence it in turn
            await w.close()
            await lc.delete_ledger(w.ledger_id)
            continue
        log.info("stream %s: writer on ledger %d from offset %d", name, w.ledger_id, first)
        return LedgerStreamWriter(lc, rec, w, roll_bytes)
    raise MetadataVersionConflict(f"stream {name}: {OPEN_ATTEMPTS} writers raced to open it")


async def stream_extent(lc: StreamLedgers, name: str) -> list[tuple[StreamLedger, LedgerMetadata, int]]:
    """(ledger, its metadata, last readable entry id) for each ledger of the stream: a closed ledger's last
    entry, the open one's last add confirmed (no fence: the writer goes on)."""
    rec = await get_stream(lc, name)
    if rec is None:
        raise BadRequest(f"no ledger stream named {name!r}")
    out = []
    for x in rec.ledgers:
        r = await lc.open_ledger(x.ledger_id, recovery=False)
        out.append((x, r.metadata, r.last_add_confirmed))
    return out


async def read_stream(lc: StreamLedgers, name: str, start: int = 0,
                      end: int | None = None) -> AsyncIterator[StreamEntry]:
    """Entries at stream offsets [start, end) (end: what is readable now), in order."""
    for x, md, last in await stream_extent(lc, name):
        lo = max(start - x.first_offset, 0)
        hi = last if end is None else min(last, end - 1 - x.first_offset)
        if lo > hi:
            continue
        r = await lc.open_ledger(x.ledger_id, recovery=False)
        async for e in r.read(lo, hi):
            yield StreamEntry(x.first_offset + e.entry_id, x.ledger_id, e.entry_id, x.created_ms, e.body)


def _now_ms() -> int:
    return int(time.time() * 1000)
