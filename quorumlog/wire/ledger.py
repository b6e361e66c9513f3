"""Ledger protocol messages between a ledger client (writer, reader, recovery) and a bookie. Pure data.

Entry payloads travel as the bookie stores them: the client's body behind an 16-byte header with the
writer's last-add-confirmed and the ledger's length after this entry (BookKeeper's entry format carries the
same two fields), so recovery learns both from any copy it reads.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ..codes import ResponseCode

ENTRY_HEADER = struct.Struct(">qq")  # last add confirmed when written, ledger length after this entry


def pack_entry(lac: int, length: int, body: bytes) -> bytes:
    return ENTRY_HEADER.pack(lac, length) + bytes(body)


def unpack_entry(data: bytes) -> tuple[int, int, bytes]:
    lac, length = ENTRY_HEADER.unpack_from(data)
    return lac, length, bytes(data[ENTRY_HEADER.size:])


@dataclass(frozen=True, slots=True)
class AddEntry:
    to: str
    ledger_id: int
    entry_id: int
    data: bytes  # pack_entry(...)
    lac: int
    recovery: bool = False  # a recovery write-back: goes through the fence


@dataclass(frozen=True, slots=True)
class AddResponse:
    frm: str
    ledger_id: int
    entry_id: int
    code: ResponseCode


@dataclass(frozen=True, slots=True)
class ReadEntry:
    to: str
    ledger_id: int
    entry_id: int
    fence: bool = False  # recovery reads fence too (BookKeeper #2614)


@dataclass(frozen=True, slots=True)
class ReadResponse:
    frm: str
    ledger_id: int
    entry_id: int
    code: ResponseCode  # SUCCESS, NO_SUCH_ENTRY, NO_SUCH_LEDGER, UNKNOWN (a bookie that lost its data), ...
    data: bytes = b""


@dataclass(frozen=True, slots=True)
class ReadLac:
    to: str
    ledger_id: int
    fence: bool = False


@dataclass(frozen=True, slots=True)
class ReadLacResponse:
    frm: str
    ledger_id: int
    code: ResponseCode
    lac: int = -1


BookieRequest = AddEntry | ReadEntry | ReadLac
BookieResponse = AddResponse | ReadResponse | ReadLacResponse
