"""Kafka's RecordBatch v2 (magic 2), both ways: what a Produce request carries and what a Fetch answer serves.

    base_offset i64 | batch_length i32 | partition_leader_epoch i32 | magic i8 (2) | crc u32 (CRC32C of
    everything after it) | attributes i16 | last_offset_delta i32 | base_timestamp i64 | max_timestamp i64 |
    producer_id i64 | producer_epoch i16 | base_sequence i32 | record_count i32 | records

attributes: bits 0-2 compression (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd), bit 3 timestamp type (1:
LogAppendTime), bit 4 transactional, bit 5 control. A record (zig-zag varints): length | attributes i8 |
timestamp_delta varlong | offset_delta varint | key (varint length, -1 null) | value (likewise) | header count
varint | per header: key (varint length, UTF-8) | value (varint length, -1 null).

The records after the header are compressed as one block when the batch is: gzip, snappy (raw, or in the xerial
framing Kafka's Java client writes), lz4 (the frame format) or zstd. Old message formats (magic 0 and 1) are
refused: every client this door serves writes v2 (Produce v3+ requires it).

Everything here raises CorruptBatch (a ProtocolError) for bad input, never anything else.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from dataclasses import dataclass, field

from ...format.log_entry import crc32c  # (the compiled codec's where built: no extra import)

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
COMPRESSION_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
ATTR_COMPRESSION_MASK = 0x07
ATTR_LOG_APPEND_TIME = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20

_HEAD = struct.Struct(">qiibIhiqqqhii")  # base_offset .. record_count
HEADER_SIZE = _HEAD.size  # 61
assert HEADER_SIZE == 61
_CRC_FROM = 21  # the CRC covers attributes .. end
MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024  # a compressed batch may not inflate beyond this (a zip bomb)
_XERIAL_MAGIC = b"\x82SNAPPY\x00"


class CorruptBatch(ValueError):
    """A batch that does not parse, fails its CRC, or uses a format we do not take."""


@dataclass(slots=True)
class Record:
    offset_delta: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


@dataclass(slots=True)
class RecordBatch:
    base_offset: int
    records: list[Record]
    attributes: int = 0
    base_timestamp_ms: int = 0
    max_timestamp_ms: int = 0
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    partition_leader_epoch: int = -1
    last_offset_delta: int = 0

    @property
    def compression(self) -> int:
        return self.attributes & ATTR_COMPRESSION_MASK

    @property
    def record_count(self) -> int:
        return len(self.records)


# -- varints (zig-zag) -------------------------------------------------------------------------------------
def encode_varint(value: int, out: bytearray) -> None:
    v = (value << 1) ^ (value >> 63)  # zig-zag, as a 64-bit varlong (a varint's values are a subset)
    v &= 0xFFFFFFFFFFFFFFFF
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def decode_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """(value, next position); CorruptBatch when it runs off the end or past 10 bytes."""
    result = shift = 0
    end = len(buf)
    while True:
        if pos >= end or shift > 63:
            raise CorruptBatch("varint runs off the end of the batch or is too long")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
    return (result >> 1) ^ -(result & 1), pos


# -- compression -------------------------------------------------------------------------------------------
def _bounded(data: bytes, what: str) -> bytes:
    if len(data) > MAX_DECOMPRESSED_BYTES:
        raise CorruptBatch(f"{what} batch inflates beyond {MAX_DECOMPRESSED_BYTES} bytes")
    return data


def decompress(codec: int, data: bytes) -> bytes:
    try:
        if codec == GZIP:
            d = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
            out = d.decompress(data, MAX_DECOMPRESSED_BYTES + 1)
            return _bounded(out, "gzip")
        if codec == SNAPPY:
            import cramjam
            if data[:8] == _XERIAL_MAGIC:  # xerial: magic, version i32, compatible i32, then [len i32][block]...
                pos, parts, total = 16, [], 0
                while pos < len(data):
                    if pos + 4 > len(data):
                        raise CorruptBatch("snappy: truncated xerial block length")
                    (n,) = struct.unpack_from(">i", data, pos)
                    pos += 4
                    if n < 0 or pos + n > len(data):
                        raise CorruptBatch("snappy: xerial block beyond the end")
                    block = data[pos:pos + n]
                    if cramjam.snappy.decompress_raw_len(block) > MAX_DECOMPRESSED_BYTES:
                        raise CorruptBatch(f"snappy batch inflates beyond {MAX_DECOMPRESSED_BYTES} bytes")
                    part = bytes(cramjam.snappy.decompress_raw(block))
                    total += len(part)
                    if total > MAX_DECOMPRESSED_BYTES:
                        raise CorruptBatch(f"snappy batch inflates beyond {MAX_DECOMPRESSED_BYTES} bytes")
                    parts.append(part)
                    pos += n
                return b"".join(parts)
            if cramjam.snappy.decompress_raw_len(data) > MAX_DECOMPRESSED_BYTES:  # (the length heads the block)
                raise CorruptBatch(f"snappy batch inflates beyond {MAX_DECOMPRESSED_BYTES} bytes")
            return bytes(cramjam.snappy.decompress_raw(data))
        if codec == LZ4:
            import lz4.frame
            return _bounded(lz4.frame.LZ4FrameDecompressor().decompress(data, max_length=MAX_DECOMPRESSED_BYTES + 1),
                            "lz4")
        if codec == ZSTD:
            import io

            import zstandard
            parts, total = [], 0
            with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)) as r:
                while total <= MAX_DECOMPRESSED_BYTES:
                    chunk = r.read(1 << 20)
                    if not chunk:
                        break
                    parts.append(chunk)
                    total += len(chunk)
            return _bounded(b"".join(parts), "zstd")
    except CorruptBatch:
        raise
    except Exception as e:  # noqa: BLE001 - every codec has its own error classes: all are the peer's garbage
        raise CorruptBatch(f"{COMPRESSION_NAMES.get(codec, codec)}: cannot decompress: {e}") from None
    raise CorruptBatch(f"unknown compression codec {codec}")


def compress(codec: int, data: bytes) -> bytes:
    if codec == NONE:
        return data
    if codec == GZIP:
        return gzip.compress(data, compresslevel=6)
    if codec == SNAPPY:
        import cramjam
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == LZ4:
        import lz4.frame
        return lz4.frame.compress(data)
    if codec == ZSTD:
        import zstandard
        return zstandard.ZstdCompressor().compress(data)
    raise ValueError(f"unknown compression codec {codec}")


# -- decoding ----------------------------------------------------------------------------------------------
def _read_bytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    n, pos = decode_varint(buf, pos)
    if n < 0:
        return None, pos
    if pos + n > len(buf):
        raise CorruptBatch("record field runs off the end")
    return bytes(buf[pos:pos + n]), pos + n


def _decode_records(buf: bytes, count: int, base_timestamp_ms: int) -> list[Record]:
    out: list[Record] = []
    pos = 0
    for _ in range(count):
        length, pos = decode_varint(buf, pos)
        end = pos + length
        if length < 0 or end > len(buf):
            raise CorruptBatch(f"record of {length} bytes runs off the end")
        pos += 1  # attributes (unused)
        ts_delta, pos = decode_varint(buf, pos)
        offset_delta, pos = decode_varint(buf, pos)
        key, pos = _read_bytes(buf, pos)
        value, pos = _read_bytes(buf, pos)
        n_headers, pos = decode_varint(buf, pos)
        if n_headers < 0 or n_headers > length:
            raise CorruptBatch(f"{n_headers} headers in a record of {length} bytes")
        headers = []
        for _h in range(n_headers):
            hk, pos = _read_bytes(buf, pos)
            hv, pos = _read_bytes(buf, pos)
            if hk is None:
                raise CorruptBatch("a header with a null key")
            try:
                headers.append((hk.decode("utf-8"), hv))
            except UnicodeDecodeError:
                raise CorruptBatch("a header key that is not UTF-8") from None
        if pos != end:
            raise CorruptBatch(f"record length {length} does not match its fields")
        out.append(Record(offset_delta, base_timestamp_ms + ts_delta, key, value, headers))
    if pos != len(buf):
        raise CorruptBatch(f"{len(buf) - pos} bytes after the batch's {count} records")
    return out


def decode_batches(data: bytes | memoryview | None) -> list[RecordBatch]:
    """Every batch of a Produce request's `records` (usually one). CorruptBatch: a bad CRC, a truncated batch,
    an old message format, a corrupt compressed block."""
    if not data:
        return []
    data = bytes(data)
    out = []
    pos = 0
    while pos < len(data):
        if len(data) - pos < HEADER_SIZE:
            raise CorruptBatch(f"{len(data) - pos} bytes: shorter than a batch header")
        (base_offset, batch_length, leader_epoch, magic, crc, attributes, last_offset_delta, base_ts, max_ts,
         producer_id, producer_epoch, base_sequence, count) = _HEAD.unpack_from(data, pos)
        if magic != 2:
            raise CorruptBatch(f"message format magic {magic}: only RecordBatch v2 (magic 2) is served")
        end = pos + 12 + batch_length
        if batch_length < HEADER_SIZE - 12 or end > len(data):
            raise CorruptBatch(f"batch length {batch_length} beyond the {len(data) - pos} bytes given")
        if crc32c(data[pos + _CRC_FROM:end]) != crc:
            raise CorruptBatch("batch CRC32C mismatch")
        if count < 0 or count > batch_length:
            raise CorruptBatch(f"record count {count}")
        body = data[pos + HEADER_SIZE:end]
        codec = attributes & ATTR_COMPRESSION_MASK
        if codec != NONE:
            body = decompress(codec, body)
        records = _decode_records(body, count, base_ts)
        out.append(RecordBatch(base_offset, records, attributes, base_ts, max_ts, producer_id, producer_epoch,
                               base_sequence, leader_epoch, last_offset_delta))
        pos = end
    return out


# -- encoding ----------------------------------------------------------------------------------------------
def _put_bytes(value: bytes | None, out: bytearray) -> None:
    if value is None:
        encode_varint(-1, out)
    else:
        encode_varint(len(value), out)
        out += value


def encode_record(r: Record, base_timestamp_ms: int, out: bytearray) -> None:
    body = bytearray(b"\x00")
    encode_varint(r.timestamp_ms - base_timestamp_ms, body)
    encode_varint(r.offset_delta, body)
    _put_bytes(r.key, body)
    _put_bytes(r.value, body)
    encode_varint(len(r.headers), body)
    for hk, hv in r.headers:
        _put_bytes(hk.encode("utf-8"), body)
        _put_bytes(hv, body)
    encode_varint(len(body), out)
    out += body


def encode_batch(batch: RecordBatch) -> bytes:
    """The batch's bytes, compressed with its attributes' codec. base/max timestamp and last offset delta
    are computed from the records."""
    records = batch.records
    assert records, "a batch has at least one record"
    base_ts = records[0].timestamp_ms
    max_ts = max(r.timestamp_ms for r in records)
    body = bytearray()
    for r in records:
        encode_record(r, base_ts, body)
    codec = batch.attributes & ATTR_COMPRESSION_MASK
    payload = compress(codec, bytes(body))
    tail = struct.pack(">hiqqqhii", batch.attributes, records[-1].offset_delta, base_ts, max_ts, batch.producer_id,
                       batch.producer_epoch, batch.base_sequence, len(records)) + payload
    head = struct.pack(">qiib", batch.base_offset, len(tail) + 9, batch.partition_leader_epoch, 2)
    return head + struct.pack(">I", crc32c(tail)) + tail
