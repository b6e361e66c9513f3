"""The producer-state snapshot: the idempotent-producer table as of an index, as bytes.

Written by a FileStore beside its log (the `producers` file, as Kafka keeps producer-state snapshots) and sent
by a leader with the TRUNCATE that resets a follower whose log ends below the leader's begin index (the batches
it would have learned the table from are gone).

    magic u32 | version u16 | snapshot_index i64 | clients u32 |
      per client: client_id u64 | forgotten i64 (-1: none) | batches u32 | per batch: seq u64 first i64 last i64
    [version 2: configs u32 | per config: index i64 | size u32 | body]
    | crc32c u32 (of all before it)

Version 2 adds the membership configurations (quorumlog/raft/membership.py) the log's entries set, so they
survive retention and travel with a follower's reset exactly as the producer table does (a configuration is an
entry tagged by the reserved producer log_entry.MEMBERSHIP_PRODUCER_ID). Version 1 is still read.
"""

from __future__ import annotations

import struct

from ..errors import CorruptEntry
from ..frozen import frozen
from .log_entry import crc32c

_MAGIC, _VERSION = 0x514C5053, 2  # "QLPS"
_HEAD = struct.Struct(">IHqI")
_CLIENT = struct.Struct(">QqI")
_BATCH = struct.Struct(">Qqq")
_CRC = struct.Struct(">I")
_CONFIG = struct.Struct(">qI")
_U32 = struct.Struct(">I")

# client_id -> (forgotten seq or -1, [(seq, first, last), ...] oldest first)
State = dict[int, tuple[int, list[tuple[int, int, int]]]]


@frozen
class ProducerSnapshot:
    snapshot_index: int  # the table holds every tagged batch whose last index <= this (and maybe later ones)
    state: State
    configs: tuple[tuple[int, bytes], ...] = ()  # (index, body) of membership entries, by index


def encode_snapshot(snap: ProducerSnapshot) -> bytes:
    parts = [_HEAD.pack(_MAGIC, _VERSION, snap.snapshot_index, len(snap.state))]
    for client_id, (forgotten, batches) in snap.state.items():
        parts.append(_CLIENT.pack(client_id, forgotten, len(batches)))
        parts.extend(_BATCH.pack(*b) for b in batches)
    parts.append(_U32.pack(len(snap.configs)))
    for index, config in snap.configs:
        parts.append(_CONFIG.pack(index, len(config)))
        parts.append(config)
    body = b"".join(parts)
    return body + _CRC.pack(crc32c(body))


def decode_snapshot(data: bytes, path: str = "producer snapshot") -> ProducerSnapshot:
    if len(data) < _HEAD.size + _CRC.size or _CRC.unpack_from(data, len(data) - _CRC.size)[0] != \
            crc32c(data[:-_CRC.size]):
        raise CorruptEntry(f"producer snapshot {path}: crc mismatch or truncated")
    magic, version, snapshot_index, n = _HEAD.unpack_from(data, 0)
    if magic != _MAGIC or version not in (1, _VERSION):
        raise CorruptEntry(f"producer snapshot {path}: magic {magic:#x} version {version}")
    off, state = _HEAD.size, {}
    try:
        for _ in range(n):
            client_id, forgotten, k = _CLIENT.unpack_from(data, off)
            off += _CLIENT.size
            state[client_id] = (forgotten, [_BATCH.unpack_from(data, off + i * _BATCH.size) for i in range(k)])
            off += k * _BATCH.size
        configs = []
        if version >= 2:
            (m,) = _U32.unpack_from(data, off)
            off += _U32.size
            for _ in range(m):
                index, size = _CONFIG.unpack_from(data, off)
                off += _CONFIG.size
                if off + size > len(data) - _CRC.size:
                    raise struct.error(f"config of {size} bytes beyond the end")
                configs.append((index, bytes(data[off: off + size])))
                off += size
    except struct.error as e:
        raise CorruptEntry(f"producer snapshot {path}: {e}") from None
    if off != len(data) - _CRC.size:
        raise CorruptEntry(f"producer snapshot {path}: {len(data) - _CRC.size - off} trailing bytes")
    return ProducerSnapshot(snapshot_index, state, tuple(configs))
