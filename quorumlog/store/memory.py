"""MemoryStore: the LogStore interface in memory, for the raft core's tests and the simulator.

It keeps the same record bytes a FileStore would (so pushes carry real records), and models durability:
`crash()` loses whatever was not flushed, as a kill -9 before fdatasync would. Its producer table comes back
after a crash as a FileStore's does: the snapshot of the last checkpoint (or truncate) plus the tagged
batches after it, so retention (`delete_before`) leaves it as partial as it would be on disk.
"""

from __future__ import annotations

from typing import Sequence

from ..errors import CorruptEntry, EmptyBatch, EntryTooLarge, IndexOutOfRange
from ..format import log_entry
from .base import DEFAULT_MAX_ENTRY_BYTES, ProducerBatch
from ..format.log_entry import Records
from ..format.producer_state import ProducerSnapshot, decode_snapshot, encode_snapshot
from .membership import MembershipLog
from .producers import ProducerTable
from ..format.log_entry import Entry


class MemoryStore:
    def __init__(self, max_entry_bytes: int = DEFAULT_MAX_ENTRY_BYTES) -> None:
        self.max_entry_bytes = max_entry_bytes
        self._begin = 0
        self._records: list[bytes] = []
        self._terms: list[int] = []
        self._chains: list[int] = []
        self._offsets: list[int] = [0]  # prefix sums of record sizes; len == len(records) + 1
        self._durable = -1
        self._committed = -1
        self._checkpoint_committed = -1
        self._producers = ProducerTable()
        self._producer_snapshot: ProducerSnapshot | None = None  # FileStore's `producers` file
        self._membership = MembershipLog()

    # -- reads -------------------------------------------------------------------------------------
    @property
    def begin_index(self) -> int:
        return self._begin

    @property
    def end_index(self) -> int:
        return self._begin + len(self._records) - 1

    @property
    def end_term(self) -> int:
        return self._terms[-1] if self._terms else -1

    @property
    def committed_index(self) -> int:
        return self._committed

    @property
    def durable_index(self) -> int:
        return self._durable

    def _slot(self, index: int) -> int:
        if not self._begin <= index <= self.end_index:
            raise IndexOutOfRange(f"index {index} outside [{self._begin}, {self.end_index}]")
        return index - self._begin

    def term_at(self, index: int) -> int:
        return self._terms[self._slot(index)]

    def chain_crc_at(self, index: int) -> int:
        return self._chains[self._slot(index)]

    def bytes_between(self, start: int, end: int) -> int:
        if end < start:
            return 0
        return self._offsets[self._slot(end) + 1] - self._offsets[self._slot(start)]

    def end_for_bytes(self, start: int, max_bytes: int, max_count: int) -> int:
        s = self._slot(start)
        last = min(len(self._records) - 1, s + max(1, max_count) - 1)
        limit = self._offsets[s] + max_bytes
        lo, hi = s, last  # largest slot j in [s, last] with offsets[j+1] <= limit, at least s
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._offsets[mid + 1] <= limit:
                lo = mid
            else:
                hi = mid - 1
        return self._begin + lo

    def get(self, index: int) -> Entry:
        ((h, body),) = log_entry.iter_records(self._records[self._slot(index)])
        return Entry(h.index, h.term, h.timestamp_ms, log_entry.split_producer_tag(h.channel, body)[0])

    def read(self, start: int, max_bytes: int, end: int | None = None) -> Records:
        last = self.end_index if end is None else min(end, self.end_index)
        if start > last:
            return Records(start, start - 1, (), 0)
        stop = self.end_for_bytes(start, max_bytes, last - start + 1)
        data = b"".join(self._records[self._slot(start): self._slot(stop) + 1])
        return Records(start, stop, (data,), len(data))

    def records_at(self, indexes: bytes) -> None:
        return None  # (one bytes object per record: reading the range is as cheap)

    def find_producer_batch(self, client_id: int, seq: int) -> ProducerBatch | None:
        return self._producers.find(client_id, seq)

    def producer_last_seq(self, client_id: int) -> int | None:
        return self._producers.last_seq(client_id)

    def producer_window_floor(self, client_id: int) -> int | None:
        return self._producers.window_floor(client_id)

    def membership(self) -> tuple[int, bytes] | None:
        return self._membership.latest()

    # -- writes ------------------------------------------------------------------------------------
    def append_batch(self, term: int, bodies: Sequence[bytes], timestamp_ms: int,
                     producer: tuple[int, int] | None = None, noop: bool = False) -> int:
        if not bodies:
            raise EmptyBatch("empty batch")
        for body in bodies:
            if len(body) > self.max_entry_bytes:
                raise EntryTooLarge(f"entry of {len(body)} bytes > max_entry_bytes {self.max_entry_bytes}")
        first = self.end_index + 1
        prev_chain = self._chains[-1] if self._chains else 0
        buf, sizes, _ = log_entry.encode_batch(first, term, bodies, timestamp_ms, self._offsets[-1], prev_chain, producer,
                                            noop)
        self._append_encoded(bytes(buf), sizes)
        return self.end_index

    def append_records(self, data: bytes | memoryview) -> int:
        prev_chain = self._chains[-1] if self._chains else 0
        expected = self.end_index + 1
        recs, sizes = [], []
        for h, _body in log_entry.iter_records(data):
            if h.index != expected:
                raise CorruptEntry(f"record index {h.index}, expected {expected}")
            chain = log_entry.chain_crc_of(prev_chain, h.index, h.term, h.channel, h.body_crc, h.timestamp_ms, h.body_size)
            if chain != h.chain_crc and (self._records or self._begin == 0):
                raise CorruptEntry(f"chain crc mismatch at index {h.index}")
            prev_chain = h.chain_crc
            expected += 1
            sizes.append(h.total_size)
        if not sizes:
            raise EmptyBatch("no records")
        view = memoryview(data)
        off = 0
        pos = self._offsets[-1]
        for size in sizes:
            rec = bytearray(view[off: off + size])
            log_entry.POS.pack_into(rec, log_entry.POS_OFFSET, pos)  # this node's layout
            recs.append(bytes(rec))
            off += size
            pos += size
        self._append_encoded(b"".join(recs), sizes)
        return self.end_index

    def _append_encoded(self, buf: bytes, sizes: list[int]) -> None:
        off = 0
        for size in sizes:
            rec = buf[off: off + size]
            off += size
            h = log_entry.read_header(rec)
            self._records.append(rec)
            self._terms.append(h.term)
            self._chains.append(h.chain_crc)
            self._offsets.append(self._offsets[-1] + size)
            if h.channel & log_entry.CHANNEL_PRODUCER_TAG:
                tag = log_entry.PRODUCER_TAG.unpack_from(rec, size - log_entry.PRODUCER_TAG_SIZE)
                self._producers.remember(tag[0], tag[1], h.index - tag[2] + 1, h.index)
                if tag[0] == log_entry.MEMBERSHIP_PRODUCER_ID:
                    self._membership.add(h.index, self.get(h.index).body)

    def truncate_after(self, index: int) -> None:
        assert index >= self._committed, f"truncate_after({index}) below committed {self._committed}"
        assert index >= self._begin - 1
        keep = index - self._begin + 1
        if keep >= len(self._records):
            return
        del self._records[keep:], self._terms[keep:], self._chains[keep:], self._offsets[keep + 1:]
        self._durable = min(self._durable, index)
        self._producers.drop_after(index)
        self._membership.drop_after(index)
        self._snapshot_producers()  # before new batches reuse these indexes, as FileStore does

    def producer_state(self) -> bytes:
        return encode_snapshot(ProducerSnapshot(self.end_index, self._producers.state(), self._membership.state()))

    def reset(self, begin_index: int, producers: bytes | None = None) -> None:
        """Drop the whole log and start it empty at `begin_index` (see FileStore.reset)."""
        assert begin_index > self._committed, f"reset({begin_index}) would drop committed entries up to {self._committed}"
        snap = decode_snapshot(producers) if producers else None
        del self._records[:], self._terms[:], self._chains[:]
        self._offsets = [0]
        self._begin = begin_index
        self._durable = self._committed = self._checkpoint_committed = begin_index - 1
        self._producers.load(snap.state if snap else {})
        self._producers.drop_after(begin_index - 1)
        self._membership.load(snap.configs if snap else ())
        self._membership.drop_after(begin_index - 1)
        self._snapshot_producers()

    def delete_before(self, index: int) -> None:
        """Retention: drop the entries below `index` (all durable and committed), as FileStore.delete_expired
        drops whole segments; the producer table keeps what it knew, as the file store's does."""
        assert index <= min(self._durable, self._committed) + 1, "retention deletes only durable, committed entries"
        assert index <= self.end_index, "retention keeps the last entry (a FileStore keeps its last segment)"
        k = index - self._begin
        if k <= 0:
            return
        del self._records[:k], self._terms[:k], self._chains[:k]
        del self._offsets[:k]  # positions stay where they were: they are the records' physical offsets
        self._begin = index
        self._membership.compact(index)

    def _snapshot_producers(self) -> None:
        self._producer_snapshot = ProducerSnapshot(self.end_index, self._producers.state(), self._membership.state())

    def _tag_at(self, index: int) -> tuple[int, int, int] | None:
        rec = self._records[index - self._begin]
        h = log_entry.read_header(rec)
        if not h.channel & log_entry.CHANNEL_PRODUCER_TAG:
            return None
        return log_entry.PRODUCER_TAG.unpack_from(rec, h.total_size - log_entry.PRODUCER_TAG_SIZE)

    def _rebuild_producers(self) -> None:
        """After a crash: the snapshot of the last checkpoint plus the tagged batches after it, as a FileStore
        reopens (ProducerTable.rebuild)."""
        self._producers.rebuild(self._producer_snapshot, self._begin, self.end_index, self._tag_at)
        self._membership.rebuild(self._producer_snapshot, self._begin, self.end_index, self._producers,
                                 lambda i: self.get(i).body)

    def flush(self) -> int:
        self._durable = self.end_index
        return self._durable

    def set_committed_index(self, index: int) -> None:
        assert index <= self.end_index, f"commit {index} beyond end {self.end_index}"
        self._committed = max(self._committed, index)

    def checkpoint(self) -> None:
        self._checkpoint_committed = min(self._committed, self._durable)
        self._snapshot_producers()

    def close(self) -> None:
        pass

    # -- simulation --------------------------------------------------------------------------------
    def crash(self, keep_unflushed: int = 0) -> None:
        """Lose what was not flushed, except the first `keep_unflushed` unflushed entries (the OS may have
        written some of them back before the crash)."""
        keep_to = min(self.end_index, self._durable + max(0, keep_unflushed))
        keep = keep_to - self._begin + 1
        del self._records[keep:], self._terms[keep:], self._chains[keep:], self._offsets[keep + 1:]
        self._durable = self.end_index
        # below begin_index is committed (retention deletes only that), even if no checkpoint said so yet
        self._committed = max(min(self._checkpoint_committed, self.end_index), self._begin - 1)
        self._rebuild_producers()
