"""Ledger protocol messages between a ledger client (writer, reader, recovery) and a bookie. Pure data.

Entry payloads travel as the bookie stores them: the client's body behind an 16-byte header with the
writer's last-add-confirmed and the ledger's length after this entry (BookKeeper's entry format carries the
same two fields), so recovery learns both from any copy it reads.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from ..codes import ResponseCode
from ..frozen import frozen

ENTRY_HEADER = struct.Struct(">qq")  # last add confirmed when written, ledger length after this entry
# The largest entry body a ledger takes (config max_ledger_entry_bytes; BookKeeper bounds it by
# nettyMaxFrameSizeBytes): the writer refuses a bigger one before sending anything, a bookie refuses it with
# ENTRY_TOO_LARGE. The cap may not exceed LEDGER_ENTRY_BYTES_CEILING: an entry with its headers must fit one
# bookie journal record (bookie/journal.py MAX_RECORD_BYTES, 64 MiB: replay stops at a bigger one) and one
# frame with its request's headers (transport MAX_FRAME_BYTES, 64 MiB + 64 KiB), or it would be acknowledged
# and then lost or unreadable.
MAX_LEDGER_ENTRY_BYTES = 16 * 1024 * 1024
LEDGER_ENTRY_BYTES_CEILING = 60 * 1024 * 1024


def pack_entry(lac: int, length: int, body: bytes) -> bytes:
    return ENTRY_HEADER.pack(lac, length) + bytes(body)


def unpack_entry(data: bytes) -> tuple[int, int, bytes]:
    lac, length = ENTRY_HEADER.unpack_from(data)
    return lac, length, bytes(data[ENTRY_HEADER.size:])


@dataclass(slots=True)  # (not frozen: a writer makes W of these per add, and a frozen __init__ costs twice)
class AddEntry:
    to: str
    ledger_id: int
    entry_id: int
    data: bytes  # pack_entry(...)
    lac: int
    recovery: bool = False  # a recovery write-back: goes through the fence


@frozen
class AddResponse:
    frm: str
    ledger_id: int
    entry_id: int
    code: ResponseCode


@frozen
class ReadEntry:
    to: str
    ledger_id: int
    entry_id: int
    fence: bool = False  # recovery reads fence too (BookKeeper #2614)


@frozen
class ReadResponse:
    frm: str
    ledger_id: int
    entry_id: int
    code: ResponseCode  # SUCCESS, NO_SUCH_ENTRY, NO_SUCH_LEDGER, UNKNOWN (a bookie that lost its data), ...
    data: bytes = b""


@frozen
class ReadLac:
    to: str
    ledger_id: int
    fence: bool = False


@frozen
class ReadLacResponse:
    frm: str
    ledger_id: int
    code: ResponseCode
    lac: int = -1


BookieRequest = AddEntry | ReadEntry | ReadLac
BookieResponse = AddResponse | ReadResponse | ReadLacResponse


# -- on the wire: a client's request to a node's bookie, and its answer ------------------------------------
# The sans-I/O messages above address bookies by name (the simulator delivers them); on a node's client port
# one request kind carries them all with an operation byte, as BookKeeper's protocol does (OperationType).

class BookieOp(IntEnum):
    ADD = 1  # data = pack_entry(...); flags RECOVERY
    READ = 2  # flags FENCE
    READ_LAC = 3  # flags FENCE
    INFO = 4  # the bookie's state: JSON {bookie_id, instance_id, state, disk_used, ledgers}
    DELETE = 5  # drop a deleted ledger's entries (garbage collected later)
    ADD_BATCH = 6  # data = pack_adds([...]): several adds of one ledger to one bookie; answer pack_add_results
    WRITE_LAC = 7  # lac: an idle writer's last add confirmed (BookKeeper's WriteLac, explicitLacInterval)
    ADD_MULTI = 8  # data = pack_multi_adds([...]): adds of several ledgers to one bookie; pack_multi_results


FLAG_FENCE, FLAG_RECOVERY = 0x01, 0x02

# ADD_BATCH: a writer with many adds in flight sends each bookie the ones addressed to it in one request, so
# a request's cost (a frame, a future, a timer on each side) is paid once per batch, not per entry; the bookie
# journals them together (one group commit). BookKeeper has no such request (its client is Java, a request is
# cheap there); Pulsar gets the same effect by batching messages into entries.
_ADD_ITEM = struct.Struct(">qqI")  # entry id, lac, data size; data
_ADD_RESULT = struct.Struct(">qH")  # entry id, response code
MAX_ADD_BATCH = 1024


def pack_adds(adds: "list[AddEntry]") -> bytes:
    parts = []
    for m in adds:
        parts += (_ADD_ITEM.pack(m.entry_id, m.lac, len(m.data)), m.data)
    return b"".join(parts)


def unpack_adds(data: bytes) -> list[tuple[int, memoryview, int]]:
    """An ADD_BATCH's adds as (entry id, data, lac), as the bookie stores them (no object per add, no copy:
    each data is a view of `data`). Raises ValueError on a malformed batch."""
    view = memoryview(data)
    out, _ = take_adds(view, 0, None)
    return out


def take_adds(view: memoryview, pos: int, count: int | None) -> tuple[list[tuple[int, memoryview, int]], int]:
    """`count` add items from pos (None: up to the end) and where they end; at most MAX_ADD_BATCH."""
    out, item = [], _ADD_ITEM
    while (len(out) < count) if count is not None else (pos < len(view)):
        if pos + item.size > len(view):
            raise ValueError("truncated add batch")
        entry_id, lac, size = item.unpack_from(view, pos)
        pos += item.size
        if pos + size > len(view) or entry_id < 0:
            raise ValueError(f"bad add batch item (entry {entry_id}, {size} bytes)")
        out.append((entry_id, view[pos:pos + size], lac))  # (a view: a frame is never written once handed out)
        pos += size
        if len(out) > MAX_ADD_BATCH:
            raise ValueError(f"more than {MAX_ADD_BATCH} adds in one batch")
    return out, pos


# ADD_MULTI: the adds of many writers of one client (each its own ledger, a few adds in flight each) that go to
# one bookie together (client/ledger_adds.py), in one request: without it each writer pays a request per add on
# both sides, and 64 writers with one add in flight each ran at a quarter of one writer with 64 in flight.
# Sections [ledger id, count] then `count` ADD_BATCH items; the answer: (ledger id, entry id, code) per add.
_SECTION = struct.Struct(">qI")  # ledger id, adds
_MULTI_RESULT = struct.Struct(">qqH")  # ledger id, entry id, response code


def pack_multi_adds(sections: "list[tuple[int, list[AddEntry]]]") -> bytes:
    parts = []
    for ledger_id, adds in sections:
        parts += (_SECTION.pack(ledger_id, len(adds)), pack_adds(adds))
    return b"".join(parts)


def unpack_multi_adds(data: bytes, take=None) -> list[tuple[int, list[tuple[int, memoryview, int]]]]:
    """An ADD_MULTI's sections as (ledger id, [(entry id, data, lac), ...]). Raises ValueError on a malformed
    request (a section past the end, an empty one, more than MAX_ADD_BATCH adds in all). `take(view, pos, count)`
    reads a section's adds and where they end (take_adds; the bookie's keeps them in place, bookie/add_items.py)."""
    take = take or take_adds
    out, pos, view, total = [], 0, memoryview(data), 0
    while pos < len(view):
        if pos + _SECTION.size > len(view):
            raise ValueError("truncated add section")
        ledger_id, count = _SECTION.unpack_from(view, pos)
        total += count
        if ledger_id <= 0 or count == 0 or total > MAX_ADD_BATCH:
            raise ValueError(f"bad add section (ledger {ledger_id}, {count} adds, {total} in all)")
        adds, pos = take(view, pos + _SECTION.size, count)
        out.append((ledger_id, adds))
    return out


def pack_multi_results(results: "list[tuple[int, int, int]]") -> bytes:
    return b"".join(_MULTI_RESULT.pack(lid, eid, code) for lid, eid, code in results)


def unpack_multi_results(data: bytes) -> list[tuple[int, int, int]]:
    if len(data) % _MULTI_RESULT.size:
        raise ValueError("truncated add section results")
    return list(_MULTI_RESULT.iter_unpack(data))


def pack_add_results(results: "list[tuple[int, int]]") -> bytes:
    return b"".join(_ADD_RESULT.pack(eid, code) for eid, code in results)


def unpack_add_results(data: bytes) -> list[tuple[int, int]]:
    if len(data) % _ADD_RESULT.size:
        raise ValueError("truncated add batch results")
    return list(_ADD_RESULT.iter_unpack(data))


@frozen
class BookieOpRequest:
    request_id: int
    op: BookieOp
    ledger_id: int = 0
    entry_id: int = -1
    lac: int = -1
    flags: int = 0
    data: bytes = b""


@frozen
class BookieOpResponse:
    request_id: int
    code: ResponseCode
    op: BookieOp = BookieOp.INFO
    ledger_id: int = 0
    entry_id: int = -1
    lac: int = -1
    data: bytes = b""
    message: str = ""


def to_op_request(request_id: int, m: BookieRequest) -> BookieOpRequest:
    if isinstance(m, AddEntry):
        return BookieOpRequest(request_id, BookieOp.ADD, m.ledger_id, m.entry_id, m.lac,
                               FLAG_RECOVERY if m.recovery else 0, m.data)
    if isinstance(m, ReadEntry):
        return BookieOpRequest(request_id, BookieOp.READ, m.ledger_id, m.entry_id, flags=FLAG_FENCE if m.fence else 0)
    return BookieOpRequest(request_id, BookieOp.READ_LAC, m.ledger_id, flags=FLAG_FENCE if m.fence else 0)


def from_op_request(bookie_id: str, r: BookieOpRequest) -> BookieRequest:
    """The sans-I/O request an op request carries (ADD, READ, READ_LAC only)."""
    if r.op is BookieOp.ADD:
        return AddEntry(bookie_id, r.ledger_id, r.entry_id, r.data, r.lac, bool(r.flags & FLAG_RECOVERY))
    if r.op is BookieOp.READ:
        return ReadEntry(bookie_id, r.ledger_id, r.entry_id, bool(r.flags & FLAG_FENCE))
    assert r.op is BookieOp.READ_LAC
    return ReadLac(bookie_id, r.ledger_id, bool(r.flags & FLAG_FENCE))


def to_op_response(request_id: int, m: BookieResponse) -> BookieOpResponse:
    if isinstance(m, AddResponse):
        return BookieOpResponse(request_id, m.code, BookieOp.ADD, m.ledger_id, m.entry_id)
    if isinstance(m, ReadResponse):
        return BookieOpResponse(request_id, m.code, BookieOp.READ, m.ledger_id, m.entry_id, data=m.data)
    return BookieOpResponse(request_id, m.code, BookieOp.READ_LAC, m.ledger_id, lac=m.lac)


def from_op_response(bookie_id: str, r: BookieOpResponse) -> BookieResponse:
    if r.op is BookieOp.ADD:
        return AddResponse(bookie_id, r.ledger_id, r.entry_id, r.code)
    if r.op is BookieOp.READ:
        return ReadResponse(bookie_id, r.ledger_id, r.entry_id, r.code, r.data)
    return ReadLacResponse(bookie_id, r.ledger_id, r.code, r.lac)
