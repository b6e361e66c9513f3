"""The idempotent-producer table: client_id -> the last PRODUCER_WINDOW_BATCHES (seq -> first, last index).

Rebuilt from the log itself (the producer tag on a batch's last entry), so any replica can dedupe after
failover. Same semantics as MemoryStore's.

A FileStore also keeps a snapshot of the table (the `producers` file, as Kafka keeps producer-state snapshots):
the table as of `snapshot_index`, so a restart loads it and scans only the entries after it, instead of the
whole log or, as before, a tail that forgot older clients (whose retries were then appended twice).

    magic u32 | version u16 | snapshot_index i64 | clients u32 |
      per client: client_id u64 | forgotten i64 (-1: none) | batches u32 | per batch: seq u64 first i64 last i64
    | crc32c u32 (of all before it)
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from dataclasses import dataclass

from ..errors import CorruptEntry
from ..format.log_entry import crc32c
from .base import PRODUCER_WINDOW_BATCHES, ProducerBatch
from .files import atomic_write_file

PRODUCERS_NAME = "producers"
_MAGIC, _VERSION = 0x514C5053, 1  # "QLPS"
_HEAD = struct.Struct(">IHqI")
_CLIENT = struct.Struct(">QqI")
_BATCH = struct.Struct(">Qqq")
_CRC = struct.Struct(">I")

# client_id -> (forgotten seq or -1, [(seq, first, last), ...] oldest first)
State = dict[int, tuple[int, list[tuple[int, int, int]]]]


@dataclass(frozen=True, slots=True)
class ProducerSnapshot:
    snapshot_index: int  # the table holds every tagged batch whose last index <= this (and maybe later ones)
    state: State


def encode_snapshot(snap: ProducerSnapshot) -> bytes:
    parts = [_HEAD.pack(_MAGIC, _VERSION, snap.snapshot_index, len(snap.state))]
    for client_id, (forgotten, batches) in snap.state.items():
        parts.append(_CLIENT.pack(client_id, forgotten, len(batches)))
        parts.extend(_BATCH.pack(*b) for b in batches)
    body = b"".join(parts)
    return body + _CRC.pack(crc32c(body))


def decode_snapshot(data: bytes, path: str = PRODUCERS_NAME) -> ProducerSnapshot:
    if len(data) < _HEAD.size + _CRC.size or _CRC.unpack_from(data, len(data) - _CRC.size)[0] != \
            crc32c(data[:-_CRC.size]):
        raise CorruptEntry(f"producer snapshot {path}: crc mismatch or truncated")
    magic, version, snapshot_index, n = _HEAD.unpack_from(data, 0)
    if magic != _MAGIC or version != _VERSION:
        raise CorruptEntry(f"producer snapshot {path}: magic {magic:#x} version {version}")
    off, state = _HEAD.size, {}
    try:
        for _ in range(n):
            client_id, forgotten, k = _CLIENT.unpack_from(data, off)
            off += _CLIENT.size
            state[client_id] = (forgotten, [_BATCH.unpack_from(data, off + i * _BATCH.size) for i in range(k)])
            off += k * _BATCH.size
    except struct.error as e:
        raise CorruptEntry(f"producer snapshot {path}: {e}") from None
    if off != len(data) - _CRC.size:
        raise CorruptEntry(f"producer snapshot {path}: {len(data) - _CRC.size - off} trailing bytes")
    return ProducerSnapshot(snapshot_index, state)


def read_snapshot(path: str) -> ProducerSnapshot | None:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    return decode_snapshot(data, path)


def write_snapshot(path: str, snap: ProducerSnapshot) -> None:
    atomic_write_file(path, encode_snapshot(snap))


class ProducerTable:
    def __init__(self, window_batches: int = PRODUCER_WINDOW_BATCHES) -> None:
        self.window_batches = window_batches
        self._windows: dict[int, OrderedDict[int, tuple[int, int]]] = {}
        # Highest seq per client that may have been appended and is no longer remembered. Only a seq at or
        # below it is "too old to tell"; pipelined batches that arrive out of order above it are new.
        self._forgotten: dict[int, int] = {}
        self.version = 0  # bumped by every change: a snapshot is written only when the table moved

    def state(self) -> State:
        """A copy of the table (callers hold the store's lock so it matches an end index)."""
        return {cid: (self._forgotten.get(cid, -1), [(seq, f, l) for seq, (f, l) in w.items()])
                for cid, w in self._windows.items()} | \
            {cid: (fg, []) for cid, fg in self._forgotten.items() if cid not in self._windows}

    def load(self, state: State) -> None:
        self.clear()
        for cid, (forgotten, batches) in state.items():
            if forgotten >= 0:
                self._forgotten[cid] = forgotten
            if batches:
                self._windows[cid] = OrderedDict((seq, (f, l)) for seq, f, l in batches)

    def batches(self) -> list[tuple[int, int, int, int]]:
        """(client_id, seq, first, last) of every remembered batch."""
        return [(cid, seq, f, l) for cid, w in self._windows.items() for seq, (f, l) in w.items()]

    def remember(self, client_id: int, seq: int, first_index: int, last_index: int) -> None:
        self.version += 1
        window = self._windows.setdefault(client_id, OrderedDict())
        window[seq] = (first_index, last_index)
        window.move_to_end(seq)
        while len(window) > self.window_batches:
            old_seq, _ = window.popitem(last=False)
            self._forgotten[client_id] = max(old_seq, self._forgotten.get(client_id, old_seq))

    def find(self, client_id: int, seq: int) -> ProducerBatch | None:
        hit = self._windows.get(client_id, {}).get(seq)
        return ProducerBatch(client_id, seq, *hit) if hit else None

    def last_seq(self, client_id: int) -> int | None:
        window = self._windows.get(client_id)
        return max(window) if window else None

    def window_floor(self, client_id: int) -> int | None:
        """Lowest seq this table can still judge: a seq below it may have been appended and forgotten
        (None: nothing forgotten, every unknown seq is new)."""
        forgotten = self._forgotten.get(client_id)
        return None if forgotten is None else forgotten + 1

    def drop_after(self, index: int) -> None:
        """Forget batches whose tag entry was truncated away (their last entry > index)."""
        for client_id in list(self._windows):
            window = self._windows[client_id]
            for seq in [s for s, (_first, last) in window.items() if last > index]:
                del window[seq]
                self.version += 1
            if not window:
                del self._windows[client_id]

    def clear(self) -> None:
        self.version += 1
        self._windows.clear()
        self._forgotten.clear()
