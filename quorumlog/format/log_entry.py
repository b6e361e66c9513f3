"""The entry record and index unit on disk (docs/interfaces.md "Entry on disk").

DLedger's layout extended with a store timestamp, big-endian like DLedger's ByteBuffer:

    magic i32 | total_size i32 | index i64 | term i64 | pos i64 | channel i32 |
    chain_crc u32 | body_crc u32 | timestamp_ms i64 | body_size i32 | body

`chain_crc` is CRC32C over (index, term, channel, body_crc, timestamp_ms, body_size) seeded with the
previous entry's chain_crc, so a record's header is covered too and entry i's chain_crc names the whole
prefix up to i. `pos` is left out of the chain on purpose: it is the record's offset in *this* node's data
segments, which a follower rewrites in place when it stores the leader's bytes.

Channel bits: CHANNEL_BATCH_CONTINUES marks every entry of a client batch but its last, so a batch is
recognisably whole or partial (a leader commits only whole batches and drops a partial one at its log's end
when elected: see raft/core.py). CHANNEL_NOOP marks a new leader's no-op entry, which readers skip.
Channel bit 0 (CHANNEL_PRODUCER_TAG): the stored body ends with a 20-byte producer tag
(client_id u64, seq u64, batch_count u32) on the *last* entry of an idempotent batch, so any node that
holds the batch can rebuild the dedup table from its log. `decode_*` strip the tag; users never see it.
"""

from __future__ import annotations

import importlib
import logging
import os
import struct
from typing import Iterator, Sequence

from ..frozen import frozen

log = logging.getLogger(__name__)

ENTRY_MAGIC = 0x514C4531  # "QLE1"
BLANK_MAGIC = 0x514C4230  # "QLB0": padding at a segment's end
INDEX_MAGIC = 0x514C4931  # "QLI1"

HEADER = struct.Struct(">iiqqqiIIqi")
HEADER_SIZE = HEADER.size  # 56
assert HEADER_SIZE == 56
CHAIN = struct.Struct(">qqiIqi")  # index, term, channel, body_crc, timestamp_ms, body_size
INDEX_UNIT = struct.Struct(">iqiqq")  # magic, pos, size, index, term
INDEX_UNIT_SIZE = INDEX_UNIT.size
assert INDEX_UNIT_SIZE == 32
BLANK = struct.Struct(">ii")  # magic, total_size
MIN_BLANK_SIZE = BLANK.size

POS_OFFSET = 24  # byte offset of `pos` inside the header
POS = struct.Struct(">q")

CHANNEL_PRODUCER_TAG = 1
CHANNEL_NOOP = 2  # a new leader's no-op entry (Raft §8): stored and replicated, never shown to readers
CHANNEL_BATCH_CONTINUES = 4  # more entries of the same atomic batch follow this one
# Membership entries (quorumlog/raft/membership.py) are no-op entries tagged by this reserved producer id, seq =
# the configuration's version: every store already finds and remembers tagged batches, so it finds these too.
MEMBERSHIP_PRODUCER_ID = (1 << 64) - 1
PRODUCER_TAG = struct.Struct(">QQI")  # client_id, seq, batch_count
PRODUCER_TAG_SIZE = PRODUCER_TAG.size

# The compiled fast path (quorumlog/format/_fastcodec.c): the same records and the same accept/reject
# decisions as the Python below, which stays the reference. Optional at build time; QUORUMLOG_PURE_PYTHON=1
# forces the Python path (tests, before/after measurements). Chosen once, at import, as `compiled` (the C
# module, or None); the store and the readers call it there. Tests that compare both paths in one process
# set `log_entry.compiled` to None for the Python one.
PURE_PYTHON_ENV = "QUORUMLOG_PURE_PYTHON"


def load_compiled(module: str):
    """An optional compiled module (this codec's, the topics' pull decoder), or None when it was not built or
    QUORUMLOG_PURE_PYTHON=1."""
    if os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0"):
        return None
    try:
        return importlib.import_module(module)
    except ImportError as e:  # built without a C compiler: correct, only slower
        log.debug("compiled %s not available, using pure Python: %s", module, e)
        return None


def _load_fast():
    fast = load_compiled("quorumlog.format._fastcodec")
    if fast is not None:  # a module built from another layout would write records no reader here accepts
        layout = {"ENTRY_MAGIC": ENTRY_MAGIC, "INDEX_MAGIC": INDEX_MAGIC, "HEADER_SIZE": HEADER_SIZE,
                  "UNIT_SIZE": INDEX_UNIT_SIZE, "CHAIN_SIZE": CHAIN.size, "TAG_SIZE": PRODUCER_TAG_SIZE,
                  "CHANNEL_PRODUCER_TAG": CHANNEL_PRODUCER_TAG, "CHANNEL_BATCH_CONTINUES": CHANNEL_BATCH_CONTINUES}
        wrong = {k: (getattr(fast, k, None), v) for k, v in layout.items() if getattr(fast, k, None) != v}
        assert not wrong, f"_fastcodec was compiled for another record layout (theirs, ours): {wrong}"
    return fast


compiled = _load_fast()


def _crc32c_function():
    """CRC32C (Castagnoli): the compiled codec's, which is the `crc32c` package's function (parity-tested), or
    that package's in the pure Python path. (The package's own import reads its installed metadata: 80 ms that
    every command would pay before it did anything.)"""
    if compiled is not None:
        return compiled.crc32c
    from crc32c import crc32c as package_crc32c
    return package_crc32c


crc32c = _crc32c_function()


def compiled_codec() -> str | None:
    """Which record codec runs: 'C (sse4.2)' / 'C (table)' for the extension, None for pure Python."""
    return f"C ({compiled.crc_backend()})" if compiled is not None else None


def record_columns(buf):
    """Spark's Arrow columns of the records tiling `buf`, in one C pass: (n, index, term, timestamp_us,
    body_offsets, body_data) as native int64 / int32 Arrow buffers (bytes), producer tags stripped, no-op
    entries left out. None without the compiled codec, or when a record is malformed (callers then take the
    Python path, which raises the reference error). Boundaries and sizes only: CRCs are the serving store's
    job."""
    return compiled.record_columns(buf) if compiled is not None else None


def record_positions(buf):
    """record_columns without copying the bodies: (n, index, term, timestamp_us, body_starts, body_ends), the
    user bodies' places in `buf` as native int32s (producer tags left out, no-op entries too). None as
    record_columns gives None."""
    return compiled.record_positions(buf) if compiled is not None else None


@frozen
class Records:
    """Raw stored records first_index..last_index, as buffers to send or decode without re-encoding.

    `chunks` are contiguous runs of records (one per data segment touched); padding is never included.
    An empty read has last_index == first_index - 1 and no chunks.
    """

    first_index: int
    last_index: int
    chunks: tuple[bytes | memoryview, ...]
    size_bytes: int

    @property
    def count(self) -> int:
        return self.last_index - self.first_index + 1


@frozen
class Entry:
    """One entry as users see it: the body without any producer tag."""

    index: int
    term: int
    timestamp_ms: int
    body: bytes


@frozen
class RecordHeader:
    magic: int
    total_size: int
    index: int
    term: int
    pos: int
    channel: int
    chain_crc: int
    body_crc: int
    timestamp_ms: int
    body_size: int


@frozen
class ProducerTag:
    client_id: int
    seq: int
    batch_count: int


def chain_crc_of(prev_chain_crc: int, index: int, term: int, channel: int, body_crc: int,
                 timestamp_ms: int, body_size: int) -> int:
    return crc32c(CHAIN.pack(index, term, channel, body_crc, timestamp_ms, body_size), prev_chain_crc)


def encode_batch(first_index: int, term: int, bodies: Sequence[bytes], timestamp_ms: int, first_pos: int,
                 prev_chain_crc: int, producer: tuple[int, int] | None = None,
                 noop: bool = False) -> tuple[bytearray, list[int], int]:
    """Encode consecutive entries into one buffer: (buffer, each record's size, last chain_crc).

    `first_pos` is the data-segment offset the first record will land at; records are assumed contiguous
    (the caller splits a batch at segment ends). With `producer` = (client_id, seq) the last entry carries
    the producer tag.
    """
    if not bodies:
        return bytearray(), [], prev_chain_crc
    tag = producer_tag(producer[0], producer[1], len(bodies)) if producer is not None else None
    records, units, chain = encode_records_and_units(first_index, term, bodies, timestamp_ms, first_pos,
                                                     prev_chain_crc, tag, CHANNEL_NOOP if noop else 0)
    sizes = [u[2] for u in INDEX_UNIT.iter_unpack(units)]
    return bytearray(records), sizes, chain


def producer_tag(client_id: int, seq: int, batch_count: int) -> bytes:
    return PRODUCER_TAG.pack(client_id, seq, batch_count)


def encode_records_and_units(first_index: int, term: int, bodies: Sequence[bytes], timestamp_ms: int,
                             first_pos: int, prev_chain_crc: int, tag: bytes | None = None,
                             channel: int = 0, ends_batch: bool = True) -> tuple[bytes, bytes, int]:
    """(records, index units, last chain_crc) for contiguous records from first_pos.

    `tag` (a producer tag) is appended to the last body and sets its channel bit. `channel` is OR-ed into
    every entry (CHANNEL_NOOP); every entry but the batch's last carries CHANNEL_BATCH_CONTINUES, and so
    does this part's last entry when the batch goes on in the next segment (`ends_batch` False).
    """
    fast = compiled
    if fast is not None:
        return fast.encode(first_index, term, bodies, timestamp_ms, first_pos, prev_chain_crc, tag, channel,
                           ends_batch)
    parts, units, chain = _py_encode_parts_and_units(first_index, term, bodies, timestamp_ms, first_pos,
                                                     prev_chain_crc, tag, channel, ends_batch)
    return b"".join(parts), units, chain


def encode_parts_and_units(first_index: int, term: int, bodies: Sequence[bytes], timestamp_ms: int,
                           first_pos: int, prev_chain_crc: int, tag: bytes | None = None,
                           channel: int = 0, ends_batch: bool = True) -> tuple[list, bytes, int]:
    """Like encode_records_and_units, but the records as a list of buffers to write with one pwritev (their
    concatenation is the records). Compiled: [records], one buffer built in one C call (CRC and copy in one
    pass over each body). Pure Python: [header, body, header, body, ...], handing the kernel the caller's
    bodies (~0.4 µs per 1 KiB entry against ~1.1-1.6 for joining them in Python first)."""
    fast = compiled
    if fast is not None:
        records, units, chain = fast.encode(first_index, term, bodies, timestamp_ms, first_pos, prev_chain_crc,
                                            tag, channel, ends_batch)
        return [records], units, chain
    return _py_encode_parts_and_units(first_index, term, bodies, timestamp_ms, first_pos, prev_chain_crc, tag,
                                      channel, ends_batch)


@frozen
class RecordParts:
    """Records as the compiled codec hands them to the kernel: the headers back to back and the caller's
    bodies (plus the producer tag after the last), written by write_record_parts in one pwritev, so a batch
    is never copied in user space."""

    headers: bytes
    bodies: Sequence
    tag: bytes | None
    size_bytes: int


def encode_for_write(first_index: int, term: int, bodies: Sequence[bytes], timestamp_ms: int, first_pos: int,
                     prev_chain_crc: int, tag: bytes | None = None, channel: int = 0,
                     ends_batch: bool = True) -> tuple[RecordParts | list, bytes, int]:
    """What FileStore writes for a batch: RecordParts (compiled) or encode_parts_and_units' list (pure
    Python); either way, the bytes written are encode_records_and_units' records."""
    fast = compiled
    if fast is None:
        return _py_encode_parts_and_units(first_index, term, bodies, timestamp_ms, first_pos, prev_chain_crc, tag,
                                          channel, ends_batch)
    headers, units, chain = fast.encode_headers(first_index, term, bodies, timestamp_ms, first_pos, prev_chain_crc,
                                                tag, channel, ends_batch)
    _magic, last_pos, last_size, _index, _term = INDEX_UNIT.unpack_from(units, len(units) - INDEX_UNIT_SIZE)
    return RecordParts(headers, bodies, tag, last_pos + last_size - first_pos), units, chain


def write_record_parts(fd: int, offset: int, parts: RecordParts) -> int:
    """Write parts at offset (one pwritev per IOV_MAX buffers); returns the bytes written, raises OSError with
    `.written` set to what went out before the error."""
    written, err = compiled.write_records(fd, offset, parts.headers, parts.bodies, parts.tag)
    if err:
        e = OSError(err, os.strerror(err))
        e.written = written  # type: ignore[attr-defined]
        raise e
    return written


def _py_encode_parts_and_units(first_index: int, term: int, bodies: Sequence[bytes], timestamp_ms: int,
                               first_pos: int, prev_chain_crc: int, tag: bytes | None = None,
                               channel: int = 0, ends_batch: bool = True) -> tuple[list, bytes, int]:
    """The reference encoder: [header, body, header, body, ...], index units, last chain_crc."""
    hpack, cpack, upack = HEADER.pack, CHAIN.pack, INDEX_UNIT.pack
    parts: list[bytes] = []
    units: list[bytes] = []
    add, add_unit = parts.append, units.append
    chain, pos, index = prev_chain_crc, first_pos, first_index
    plain = bodies[:-1]
    mid = channel | CHANNEL_BATCH_CONTINUES
    for body, body_crc in zip(plain, map(crc32c, plain)):
        body_size = len(body)
        chain = crc32c(cpack(index, term, mid, body_crc, timestamp_ms, body_size), chain)
        total = HEADER_SIZE + body_size
        add(hpack(ENTRY_MAGIC, total, index, term, pos, mid, chain, body_crc, timestamp_ms, body_size))
        add(body)
        add_unit(upack(INDEX_MAGIC, pos, total, index, term))
        pos += total
        index += 1
    last_channel = channel if ends_batch else mid
    body = bodies[-1]
    if tag is not None:
        body = bytes(body) + tag
        last_channel |= CHANNEL_PRODUCER_TAG
    body_crc = crc32c(body)
    body_size = len(body)
    chain = crc32c(cpack(index, term, last_channel, body_crc, timestamp_ms, body_size), chain)
    total = HEADER_SIZE + body_size
    add(hpack(ENTRY_MAGIC, total, index, term, pos, last_channel, chain, body_crc, timestamp_ms, body_size))
    add(body)
    add_unit(upack(INDEX_MAGIC, pos, total, index, term))
    return parts, b"".join(units), chain


def read_header(buf, offset: int = 0) -> RecordHeader:
    return RecordHeader(*HEADER.unpack_from(buf, offset))


def iter_records(buf) -> Iterator[tuple[RecordHeader, memoryview]]:
    """Walk contiguous records in `buf`, yielding (header, stored body). Raises CorruptEntry on a bad record.

    Checks magic, sizes and body CRC; chain CRC is the store's job (it knows the previous entry).
    Compiled: one C scan checks the whole buffer first; damaged buffers go through the Python walk, which
    yields the good records and raises at the bad one exactly as before.
    """
    fast = compiled
    if fast is not None:
        view = memoryview(buf)
        if view.c_contiguous and view.itemsize == 1:
            end = len(view)
            _n, stop, _chain, _term, _units, _tags = fast.scan(view, 0, end)
            if stop == end:
                return _iter_checked(view)
    return _py_iter_records(buf)


def _iter_checked(view: memoryview) -> Iterator[tuple[RecordHeader, memoryview]]:
    offset, end, unpack = 0, len(view), HEADER.unpack_from
    while offset < end:
        h = RecordHeader(*unpack(view, offset))
        yield h, view[offset + HEADER_SIZE: offset + h.total_size]
        offset += h.total_size


def _py_iter_records(buf) -> Iterator[tuple[RecordHeader, memoryview]]:
    from ..errors import CorruptEntry

    view = memoryview(buf)
    offset, end = 0, len(view)
    while offset < end:
        if end - offset < HEADER_SIZE:
            raise CorruptEntry(f"truncated record header at offset {offset}")
        h = RecordHeader(*HEADER.unpack_from(view, offset))
        if h.magic != ENTRY_MAGIC:
            raise CorruptEntry(f"bad magic {h.magic:#x} at offset {offset}")
        if h.body_size < 0 or h.total_size != HEADER_SIZE + h.body_size or offset + h.total_size > end:
            raise CorruptEntry(f"bad sizes total={h.total_size} body={h.body_size} at offset {offset}")
        body = view[offset + HEADER_SIZE: offset + h.total_size]
        if crc32c(body) != h.body_crc:
            raise CorruptEntry(f"body crc mismatch for index {h.index} at offset {offset}")
        yield h, body
        offset += h.total_size


def split_producer_tag(channel: int, body) -> tuple[bytes, ProducerTag | None]:
    if channel & CHANNEL_PRODUCER_TAG:
        cut = len(body) - PRODUCER_TAG_SIZE
        if cut < 0:
            from ..errors import CorruptEntry

            raise CorruptEntry(f"producer-tagged body of {len(body)} bytes is shorter than its tag")
        return bytes(body[:cut]), ProducerTag(*PRODUCER_TAG.unpack_from(body, cut))
    return bytes(body), None


def decode_records(buf) -> list[Entry]:
    """Raw stored records (as read() returns them) → user-visible entries (no-op entries skipped)."""
    out = []
    for h, body in iter_records(buf):
        if h.channel & CHANNEL_NOOP:
            continue
        user_body, _ = split_producer_tag(h.channel, body)
        out.append(Entry(h.index, h.term, h.timestamp_ms, user_body))
    return out


def encode_index_unit(pos: int, size: int, index: int, term: int) -> bytes:
    return INDEX_UNIT.pack(INDEX_MAGIC, pos, size, index, term)


def encode_blank(size: int) -> bytes:
    assert size >= MIN_BLANK_SIZE
    return BLANK.pack(BLANK_MAGIC, size) + bytes(size - MIN_BLANK_SIZE)
