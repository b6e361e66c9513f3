"""The append path's encoder: records *and* their index units in one pass, byte-identical to codec.encode_batch.

One loop per batch with pre-bound struct packers; body CRCs via map() (a C loop). Measured ~0.6 µs/entry for
4096-entry batches, records and index units together.
"""

from __future__ import annotations

from typing import Sequence

from .codec import (
    CHAIN, CHANNEL_BATCH_CONTINUES, CHANNEL_PRODUCER_TAG, ENTRY_MAGIC, HEADER, HEADER_SIZE, INDEX_MAGIC, INDEX_UNIT, PRODUCER_TAG,
    crc32c,
)


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
    parts, units, chain = encode_parts_and_units(first_index, term, bodies, timestamp_ms, first_pos, prev_chain_crc,
                                                 tag, channel, ends_batch)
    return b"".join(parts), units, chain


def encode_parts_and_units(first_index: int, term: int, bodies: Sequence[bytes], timestamp_ms: int,
                           first_pos: int, prev_chain_crc: int, tag: bytes | None = None,
                           channel: int = 0, ends_batch: bool = True) -> tuple[list, bytes, int]:
    """Like encode_records_and_units, but the records as [header, body, header, body, ...] for pwritev:
    handing the kernel the caller's bodies costs ~0.4 µs per 1 KiB entry against ~1.1-1.6 for joining them
    into one buffer first (bench/store.py, cpu_1024B_x4096)."""
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
