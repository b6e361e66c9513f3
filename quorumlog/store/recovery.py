"""Recovery's forward scan: from a known-good record, accept records while magic, sizes, pos, index continuity,
body CRC and chain CRC all hold; report where and why the valid data ends.

A record is accepted only at its own `pos`, with the next index and a chain CRC that continues the previous
entry's, so stale bytes beyond a cut (a torn tail further out, an old truncated suffix) are never taken for
entries of this log.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import CorruptEntry
from ..format import log_entry
from ..format.log_entry import (
    BLANK, BLANK_MAGIC, CHAIN, CHANNEL_PRODUCER_TAG, ENTRY_MAGIC, HEADER, HEADER_SIZE, INDEX_MAGIC, INDEX_UNIT,
    MIN_BLANK_SIZE, PRODUCER_TAG_SIZE,
    crc32c,
)
from .segments import Segment


class RecoveryError(CorruptEntry):
    """The store cannot open: names the file, the offset and why."""

    def __init__(self, message: str, *, path: str = "", offset: int = -1) -> None:
        super().__init__(message)
        self.path = path
        self.offset = offset


@dataclass(slots=True)
class ScanResult:
    seg_i: int  # segment where valid data ends
    offset: int  # in-segment offset just after the last valid record (or blank)
    last_index: int  # -1 if nothing valid was scanned and nothing preceded
    last_term: int
    last_chain: int
    units: bytearray = field(default_factory=bytearray)  # index units of every record accepted
    reason: str | None = None  # None: clean end (zeros, or a full last segment); else why the scan stopped
    segment_firsts: dict[int, int] = field(default_factory=dict)  # seg_i -> first index seen at offset 0

    @property
    def torn(self) -> bool:
        return self.reason is not None


def check_record(view, off: int, seg_size: int, seg_start: int, expected_index: int,
                 prev_chain: int | None) -> tuple[str | None, tuple]:
    """(why it is bad or None, header tuple). The record must leave room for a blank after it."""
    if off + HEADER_SIZE > seg_size:
        return "truncated header", ()
    h = HEADER.unpack_from(view, off)
    magic, total, index, term, pos, channel, chain, body_crc, ts, body_size = h
    if magic != ENTRY_MAGIC:
        return f"bad magic {magic:#x}", h
    if body_size < 0 or total != HEADER_SIZE + body_size or off + total + MIN_BLANK_SIZE > seg_size:
        return f"bad sizes total={total} body={body_size}", h
    if channel & CHANNEL_PRODUCER_TAG and body_size < PRODUCER_TAG_SIZE:
        return f"producer-tagged body of {body_size} bytes", h
    if index != expected_index:
        return f"index {index}, expected {expected_index}", h
    if pos != seg_start + off:
        return f"pos {pos}, expected {seg_start + off}", h
    if crc32c(view[off + HEADER_SIZE: off + total]) != body_crc:
        return "body crc mismatch", h
    if prev_chain is not None and \
            crc32c(CHAIN.pack(index, term, channel, body_crc, ts, body_size), prev_chain) != chain:
        return "chain crc mismatch", h
    return None, h


def scan_forward(segs: list[Segment], seg_i: int, off: int, expected_index: int, prev_chain: int | None,
                 last_term: int) -> ScanResult:
    """Walk records from (seg_i, off) on; prev_chain None accepts the first record's chain as is."""
    units = bytearray()
    upack = INDEX_UNIT.pack
    firsts: dict[int, int] = {}
    last_index, last_chain = expected_index - 1, prev_chain if prev_chain is not None else 0
    seg = segs[seg_i]
    reason: str | None = None
    fast = log_entry.compiled
    while True:
        size = seg.size_bytes
        if off == size:  # a blank filled the segment before
            if seg_i + 1 < len(segs):
                seg_i, off, seg = seg_i + 1, 0, segs[seg_i + 1]
                continue
            break
        if off + MIN_BLANK_SIZE > size:
            reason = "no room for a record or blank"
            break
        magic, total = BLANK.unpack_from(seg.view, off)
        if magic == 0 and total == 0:
            break  # preallocated zeros: the clean end of the log
        if magic == BLANK_MAGIC:
            if total != size - off:
                reason = f"blank of {total} bytes does not end the segment ({size - off} left)"
                break
            off = size
            continue
        if fast is not None:  # the run of good records in one C call; whatever stops it is judged below
            n, off2, chain, term, run_units, _tags = fast.scan(
                seg.view, off, size, expected_index=expected_index, prev_chain=prev_chain, check_chain=True,
                pos_base=seg.start, room=MIN_BLANK_SIZE, check_tag=True, want_units=True)
            if n:
                if off == 0:
                    firsts[seg_i] = expected_index
                units += run_units
                prev_chain = last_chain = chain
                last_index, last_term = expected_index + n - 1, term
                expected_index += n
                off = off2
                continue
        why, h = check_record(seg.view, off, size, seg.start, expected_index, prev_chain)
        if why is not None:
            reason = why
            break
        if off == 0:
            firsts[seg_i] = expected_index
        units += upack(INDEX_MAGIC, seg.start + off, h[1], h[2], h[3])
        prev_chain = last_chain = h[6]
        last_index, last_term = expected_index, h[3]
        expected_index += 1
        off += h[1]
    return ScanResult(seg_i, off, last_index, last_term, last_chain, units, reason, firsts)


_MAGIC_BYTES = ENTRY_MAGIC.to_bytes(4, "big")


def valid_record_after(segs: list[Segment], seg_i: int, off: int, after_index: int,
                       after_term: int) -> tuple[str, int, int] | None:
    """(path, offset, index) of a whole, CRC-valid record of this log beyond a scan's stop, or None.

    A torn tail has nothing valid after it: the write that tore was the last one. A record that sits at its own
    `pos`, with a later index, no older term and a good body CRC beyond the stop means the stop is damage in
    the middle of the log (a flipped bit on a written, maybe acknowledged, record): cutting there would
    drop every entry after it. Searched in the stopping segment and at the start of every later one.
    """
    for i in range(seg_i, len(segs)):
        seg = segs[i]
        mm, size = seg.mm, seg.size_bytes
        cand = mm.find(_MAGIC_BYTES, off + 1) if i == seg_i else (0 if mm[:4] == _MAGIC_BYTES else -1)
        while cand != -1 and cand + HEADER_SIZE <= size:
            _, total, index, term, pos, _ch, _chain, body_crc, _ts, body_size = HEADER.unpack_from(seg.view, cand)
            if (pos == seg.start + cand and index > after_index and term >= after_term and body_size >= 0
                    and total == HEADER_SIZE + body_size and cand + total <= size
                    and crc32c(seg.view[cand + HEADER_SIZE: cand + total]) == body_crc):
                return seg.path, cand, index
            cand = mm.find(_MAGIC_BYTES, cand + 1) if i == seg_i else -1
    return None
