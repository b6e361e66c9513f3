"""FileStore: the durable segmented log (DLedger's mmap file store, rebuilt).

    <dir>/data/<start offset, 20 digits>   data segments, fixed size, records + a blank at the end
    <dir>/index/<first index, 20 digits>   index segments of 32-byte units: entry i at (i - start) * 32
    <dir>/checkpoint                      end index and committed index, replaced atomically

Writes: one pwrite per batch per segment for records, one per index segment for units. flush() fdatasyncs
the *data* segments written since the last flush; index units are derived data and are fdatasynced by
checkpoint() before the checkpoint names them, and recovery rebuilds every unit after the checkpoint from
the data. That keeps a single-entry flush at one device flush, like the raw disk (measured in bench/store.py).

Threads: appends, reads and truncation run on one thread (the event loop); flush() and checkpoint() may run
on a worker thread at the same time. `_lock` guards the segment lists, the end/durable indexes and the dirty
sets; `_sync_lock` serialises flush, checkpoint, truncate, retention and close, so no fd is closed or
rewritten under a running fdatasync.
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
import time
from typing import Sequence

from ..failpoints import crash_point
from ..errors import CorruptEntry, DiskError, DiskFull, EmptyBatch, EntryTooLarge, IndexOutOfRange
from ..format import log_entry
from .base import ProducerBatch
from ..format.log_entry import Records
from .checkpoint import CHECKPOINT_NAME, Checkpoint, write_checkpoint
from ..format.log_entry import (
    BLANK_MAGIC, CHAIN, ENTRY_MAGIC, HEADER, HEADER_SIZE, INDEX_MAGIC, INDEX_UNIT, INDEX_UNIT_SIZE, MIN_BLANK_SIZE,
    POS, PRODUCER_TAG, PRODUCER_TAG_SIZE, Entry, crc32c,
)
from .config import StoreConfig
from .disk_guard import DiskGuard
from ..format.log_entry import encode_records_and_units, producer_tag
from .files import SegmentAllocator, fsync_dir, is_enospc, write_zeros
from ..format.producer_state import decode_snapshot, encode_snapshot
from .membership import MembershipLog
from .producers import PRODUCERS_NAME, ProducerSnapshot, ProducerTable
from .producers import write_snapshot as write_producer_snapshot
from .recover_on_open import RecoverOnOpen
from .recovery import check_record
from .segments import Segment, segment_name

log = logging.getLogger(__name__)

_EMPTY_CHAIN = 0  # chain seed of entry 0
IOV_MAX = min(os.sysconf("SC_IOV_MAX"), 1024) if hasattr(os, "sysconf") else 1024
_POSITION_HINTS = 256  # (read_at_position: a few per slave reading; cleared when full)


class FileStore(RecoverOnOpen):
    """LogStore on disk; see the module docstring for the layout and the threading rules."""

    def __init__(self, path: str, config: StoreConfig | None = None) -> None:
        self.path = os.path.abspath(path)
        self.config = config or StoreConfig()
        self.max_entry_bytes = self.config.max_entry_bytes
        self.corrupt_records = 0  # distinct records found corrupt and refused (a metric)
        self._corrupt_seen: set[tuple[str, int]] = set()
        self._lock = threading.RLock()
        self._sync_lock = threading.RLock()
        self._allocator = SegmentAllocator()
        self._data_dir = os.path.join(self.path, "data")
        self._index_dir = os.path.join(self.path, "index")
        self._checkpoint_path = os.path.join(self.path, CHECKPOINT_NAME)
        self._producers_path = os.path.join(self.path, PRODUCERS_NAME)
        self._producers_snapshot_version = -1
        for d in (self.path, self._data_dir, self._index_dir):
            os.makedirs(d, exist_ok=True)
        self._disk = DiskGuard(self.path, self.config.disk_full_ratio, self.config.disk_check_interval_ms)
        self._data: list[Segment] = []
        self._data_starts: list[int] = []
        self._index: dict[int, Segment] = {}
        self._units_per_index = self.config.index_units_per_segment
        self._dirty_data: dict[int, Segment] = {}  # id(segment) -> segment, written since the last flush
        self._dirty_index: dict[int, Segment] = {}  # written since the last checkpoint
        # Segments read since the last release_read_pages, which unmaps their pages (Segment.release_pages): what
        # a reader walks through (a follower catching up, a Spark backfill) does not stay in this process's RSS.
        self._paged_in: set[Segment] = set()
        self._checkpoint_deferred = False  # flush() could not write it (a full disk): said once, until it can
        self._producers = ProducerTable()
        self._membership = MembershipLog()
        self._begin = 0
        self._end = -1
        # Entries from here to the end had their CRCs checked by this process (written by it, validated on
        # append_records, scanned by recovery, or served once): reads skip re-checking them, as Kafka's
        # broker does; everything below is checked on its first read.
        self._verified_from = 0
        self._position_hints: dict[int, int] = {}  # position -> the entry beginning there (read_at_position)
        self._end_term = -1
        self._end_chain = _EMPTY_CHAIN
        self._write_pos = 0
        self._durable = -1
        self._committed = -1
        self._checkpoint_end = -1
        self._last_checkpoint_s = time.monotonic()
        self._failed: str | None = None
        self._closed = False
        # The next data and index segments are prepared (fallocated) in the background once the active one
        # is half full: early enough to be ready at rollover.
        self._prepare_at_bytes = self.config.data_segment_size_bytes // 2
        self._prepared_after: Segment | None = None
        self._prepared_index_after = -1
        try:
            self._recover()
        except BaseException:
            self._close_files()
            raise

    # -- LogView -----------------------------------------------------------------------------------
    @property
    def begin_index(self) -> int:
        return self._begin

    @property
    def end_index(self) -> int:
        return self._end

    @property
    def end_term(self) -> int:
        return self._end_term

    @property
    def committed_index(self) -> int:
        return self._committed

    @property
    def durable_index(self) -> int:
        return self._durable

    @property
    def disk_used_ratio(self) -> float:
        return self._disk.ratio

    def term_at(self, index: int) -> int:
        with self._lock:  # retention may run on a worker thread
            return self._term_at(index)

    def _term_at(self, index: int) -> int:
        return self._unit(index)[2]

    def chain_crc_at(self, index: int) -> int:
        with self._lock:  # retention may run on a worker thread
            return self._chain_crc_at(index)

    def _chain_crc_at(self, index: int) -> int:
        if index == self._end and index >= self._begin:
            return self._end_chain
        pos, size, _term = self._unit(index)
        seg = self._data_seg(pos)
        return HEADER.unpack_from(seg.view, pos - seg.start)[6]

    def bytes_between(self, start: int, end: int) -> int:
        with self._lock:  # retention may run on a worker thread
            return self._bytes_between(start, end)

    def _bytes_between(self, start: int, end: int) -> int:
        if end < start:
            return 0
        ps, _ss, _ = self._unit(start)
        pe, se, _ = self._unit(end)
        i, j = self._data_seg_i(ps), self._data_seg_i(pe)
        if i == j:
            return pe + se - ps
        total = self._records_end(i) - ps + (pe + se - self._data[j].start)
        for k in range(i + 1, j):
            total += self._records_end(k) - self._data[k].start
        return total

    def end_for_bytes(self, start: int, max_bytes: int, max_count: int) -> int:
        with self._lock:  # retention may run on a worker thread
            return self._end_for_bytes(start, max_bytes, max_count)

    def _end_for_bytes(self, start: int, max_bytes: int, max_count: int) -> int:
        self._check_range(start)
        last = min(self._end, start + max(1, max_count) - 1)
        if self._bytes_between(start, last) <= max_bytes:
            return last
        lo, hi = start, last  # largest j with bytes_between(start, j) <= max_bytes, at least start
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._bytes_between(start, mid) <= max_bytes:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def find_producer_batch(self, client_id: int, seq: int) -> ProducerBatch | None:
        return self._producers.find(client_id, seq)

    def producer_last_seq(self, client_id: int) -> int | None:
        return self._producers.last_seq(client_id)

    def producer_window_floor(self, client_id: int) -> int | None:
        return self._producers.window_floor(client_id)

    def membership(self) -> tuple[int, bytes] | None:
        return self._membership.latest()

    # -- physical positions (master/slave HA addresses the log by byte offset, as RocketMQ's CommitLog) ------
    @property
    def write_position(self) -> int:
        """One past the last record's bytes: a master/slave member's max physical offset."""
        return self._write_pos

    def first_position(self) -> int:
        """Where the first record still held begins (the write position while the log is empty)."""
        with self._lock:
            return self._unit(self._begin)[0] if self._end >= self._begin else self._write_pos

    def position_after(self, index: int) -> int:
        """Where entry `index`'s bytes end (the first position when index is below the log)."""
        with self._lock:
            if index < self._begin:
                return self._unit(self._begin)[0] if self._end >= self._begin else self._write_pos
            pos, size, _ = self._unit(index)
            return pos + size

    def position_of(self, index: int) -> int:
        """Where entry `index`'s bytes begin: past a sealed segment's blank when it opens the next segment (so
        not always position_after(index - 1))."""
        with self._lock:
            return self._unit(index)[0]

    def index_at_position(self, pos: int) -> int:
        with self._lock:
            return self._index_at_position(pos)[0]

    def _index_at_position(self, pos: int) -> tuple[int, int]:
        """(the entry whose record begins at `pos`, 0), or (the next entry, blank length) when `pos` is where a
        sealed segment's records end and its blank begins; end + 1 at the write position. ValueError for any
        other position (the middle of a record, outside the log)."""
        if pos == self._write_pos:
            return self._end + 1, 0
        hint = self._position_hints.get(pos)
        if hint is not None and self._begin <= hint <= self._end and self._unit(hint)[0] == pos:
            return hint, 0  # (checked against its index unit: a stale hint only costs the search below)
        lo, hi = self._begin, self._end  # the first entry beginning at or after pos
        if self._end < self._begin or not self._unit(lo)[0] <= pos < self._write_pos:
            raise ValueError(f"position {pos} is outside the log [{self.first_position()}, {self._write_pos}]")
        while lo < hi:
            mid = (lo + hi) // 2
            if self._unit(mid)[0] < pos:
                lo = mid + 1
            else:
                hi = mid
        p, _size, _ = self._unit(lo)
        if p == pos:
            return lo, 0
        prev_pos, prev_size, _ = self._unit(lo - 1)
        seg = self._data[self._data_seg_i(prev_pos)]
        if prev_pos + prev_size == pos and p >= seg.end:
            return lo, seg.end - pos
        raise ValueError(f"position {pos} is inside a record")

    def _hint_position(self, pos: int, index: int) -> None:
        """Entry `index` (probably) begins at `pos`: _index_at_position checks a hint before it uses it."""
        if len(self._position_hints) >= _POSITION_HINTS:
            self._position_hints.clear()
        self._position_hints[pos] = index

    def read_at_position(self, pos: int, max_bytes: int) -> bytes | memoryview:
        """The log's bytes as they lie from physical position `pos`, within one segment, cut at a record end:
        at most max_bytes but at least one record. From a sealed segment's end of records: its blank, then the
        first record of the next segment. b"" at the write position."""
        with self._lock:
            index, blank = self._index_at_position(pos)
            if index > self._end:
                return b""
            gap = b""
            if blank:
                seg = self._data[self._data_seg_i(pos)]
                gap = seg.view[pos - seg.start: seg.end - seg.start]
            records = self._read(index, max(1, max_bytes - len(gap)))
            chunk = records.chunks[0]  # (the first chunk lies in one segment: a byte range of the file)
            size = len(gap) + memoryview(chunk).nbytes
            if len(records.chunks) == 1:
                # Where this read ends is where the next read from here begins, and what the reader will report
                # holding: remember which entry begins there, so neither searches the index.
                self._hint_position(pos + size, records.last_index + 1)
            # Without a blank, the records' view as a Raft push sends them (no copy: the HA frame goes to the
            # socket from the page cache's map); after a segment's end, its blank and the records joined.
            return bytes(gap) + bytes(chunk) if blank else chunk

    def append_at_position(self, pos: int, data: bytes | memoryview) -> int:
        """A slave's append of its master's bytes from `pos` (this log's write position): records as they are
        (CRC- and chain-checked, never re-encoded), after a leading blank when the master's segment ended there.
        The two logs must lie the same way (equal segment sizes); a difference raises CorruptEntry."""
        if pos != self._write_pos:
            raise ValueError(f"append at position {pos}, this log ends at {self._write_pos}")
        view = memoryview(data).cast("B")
        if len(view) >= MIN_BLANK_SIZE and log_entry.BLANK.unpack_from(view, 0)[0] == BLANK_MAGIC:
            blank = log_entry.BLANK.unpack_from(view, 0)[1]
            seg_end = self._data[-1].end
            if pos + blank != seg_end or blank >= len(view):
                raise CorruptEntry(f"master's segment ends at {pos + blank}, this log's at {seg_end} "
                                   f"(data_segment_size differs?)")
            view = view[blank:]
        self._hint_position(pos, self._end + 1)  # (the master's confirm offsets fall on these positions)
        self.append_records(view)
        if self._write_pos != pos + len(data):
            raise CorruptEntry(f"records from position {pos} end here at {self._write_pos}, at the master at "
                               f"{pos + len(data)} (data_segment_size differs?)")
        return self._end

    # -- reads -------------------------------------------------------------------------------------
    def get(self, index: int) -> Entry:
        with self._lock:  # retention may run on a worker thread
            return self._get(index)

    def _get(self, index: int) -> Entry:
        pos, size, term = self._unit(index)
        seg = self._data_seg(pos)
        off = pos - seg.start
        prev_chain = self._prev_chain(index)
        why, h = check_record(seg.view, off, seg.size_bytes, seg.start, index, prev_chain)
        if why is None and (h[1] != size or h[3] != term):
            why = f"record size/term {h[1]}/{h[3]} disagree with index unit {size}/{term}"
        if why is not None:
            self._report_corrupt(seg.path, off, index, why)
        body = seg.view[off + HEADER_SIZE: off + size]
        user_body, _tag = log_entry.split_producer_tag(h[5], body)
        return Entry(index, term, h[8], user_body)

    def read(self, start: int, max_bytes: int, end: int | None = None) -> Records:
        with self._lock:  # retention may run on a worker thread
            return self._read(start, max_bytes, end)

    def _read(self, start: int, max_bytes: int, end: int | None = None) -> Records:
        """Raw records as memoryview slices of the segments' mmaps (zero-copy), every one CRC-checked.

        A corrupt record is never served: the read stops before it (CorruptEntry if it is the first).
        The views stay valid after retention or truncation unmaps/rewrites the file only in the sense
        that they keep the map alive; bytes of a truncated suffix may change under them.
        """
        last = self._end if end is None else min(end, self._end)
        if start > last:
            return Records(start, start - 1, (), 0)
        stop = self._end_for_bytes(start, max_bytes, last - start + 1)
        if start >= self._verified_from:
            return self._read_verified(start, stop)
        pos, _size, _term = self._unit(start)
        seg_i = self._data_seg_i(pos)
        seg = self._data[seg_i]
        off = pos - seg.start
        chunk_start = off
        prev_chain = self._prev_chain(start)
        chunks: list[memoryview] = []
        total_bytes = 0
        index = start
        fast = log_entry.compiled
        while index <= stop:
            if fast is not None:  # the checked prefix in one C call; what stops it is handled below in Python
                n, off2, chain, _term, _u, _t = fast.scan(
                    seg.view, off, seg.size_bytes, expected_index=index, prev_chain=prev_chain, check_chain=True,
                    pos_base=seg.start, room=MIN_BLANK_SIZE, check_tag=True, max_count=stop - index + 1)
                if n:
                    index += n
                    off = off2
                    prev_chain = chain
                    if index > stop:
                        break
            if off + MIN_BLANK_SIZE <= seg.size_bytes and log_entry.BLANK.unpack_from(seg.view, off)[0] == BLANK_MAGIC:
                if off > chunk_start:
                    chunks.append(seg.view[chunk_start:off])
                    total_bytes += off - chunk_start
                seg_i += 1
                seg = self._data[seg_i]
                self._paged_in.add(seg)
                off = chunk_start = 0
                continue
            why, h = check_record(seg.view, off, seg.size_bytes, seg.start, index, prev_chain)
            if why is not None:
                if index == start:
                    self._report_corrupt(seg.path, off, index, why)
                self._note_corrupt(seg.path, off, index, why)
                break
            prev_chain = h[6]
            off += h[1]
            index += 1
        if off > chunk_start:
            chunks.append(seg.view[chunk_start:off])
            total_bytes += off - chunk_start
        if index >= self._verified_from:  # checked up to where checked entries begin: one range again
            self._verified_from = start
        return Records(start, index - 1, tuple(chunks), total_bytes)

    def records_at(self, indexes: bytes) -> list[tuple[memoryview, tuple]] | None:
        """Chosen entries read in place through the index, not by walking the range they span (a topic pull
        wants one queue's entries among the group's others): `indexes` ascending, as native int64s. Per data
        segment touched, (its view, record_positions-like columns of the entries found there). None when the
        compiled codec is missing, an entry below the checked ones is asked for, or a unit or header is off:
        the caller then reads the range, every record checked."""
        fast = log_entry.compiled
        wanted = memoryview(indexes).cast("q")
        if fast is None or not wanted:
            return None if fast is None else []
        with self._lock:
            self._check_range(wanted[0])
            self._check_range(wanted[-1])
            if wanted[0] < self._verified_from:
                return None
            out: list[tuple[memoryview, tuple]] = []
            k = 0
            while k < len(wanted):
                index_seg = self._index_seg(wanted[k])
                if index_seg is None:
                    return None
                self._paged_in.add(index_seg)
                data_seg = self._data[self._data_seg_i(self._unit(wanted[k])[0])]
                got = fast.records_at(index_seg.view, index_seg.start, data_seg.view, data_seg.start, indexes, k)
                if got is None or got[0] == k:
                    return None
                k, cols = got
                out.append((data_seg.view, cols))
            return out

    def _read_verified(self, start: int, stop: int) -> Records:
        """Already-checked records start..stop: cut at segment ends with index arithmetic, no per-record work."""
        chunks: list[memoryview] = []
        total_bytes = 0
        i = start
        while i <= stop:
            pos, _size, _ = self._unit(i)
            seg = self._data[self._data_seg_i(pos)]
            lo, hi = i, stop  # the last entry of this segment within stop
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if self._unit(mid)[0] < seg.end:
                    lo = mid
                else:
                    hi = mid - 1
            last_pos, last_size, _ = self._unit(lo)
            chunks.append(seg.view[pos - seg.start: last_pos + last_size - seg.start])
            total_bytes += last_pos + last_size - pos
            i = lo + 1
        return Records(start, stop, tuple(chunks), total_bytes)

    # -- writes ------------------------------------------------------------------------------------
    def append_batch(self, term: int, bodies: Sequence[bytes], timestamp_ms: int,
                     producer: tuple[int, int] | None = None, noop: bool = False) -> int:
        if not bodies:
            raise EmptyBatch("empty batch")
        channel = log_entry.CHANNEL_NOOP if noop else 0
        fast = log_entry.compiled
        if fast is not None:  # one C call instead of three passes over the bodies
            lengths = None
            body_total, body_max = fast.body_sizes(bodies)
        else:
            lengths = list(map(len, bodies))
            body_total, body_max = sum(lengths), max(lengths)
        if body_max > self.max_entry_bytes:
            raise EntryTooLarge(f"entry of {body_max} bytes > max_entry_bytes {self.max_entry_bytes}")
        self._check_writable()
        n = len(bodies)
        tag = producer_tag(producer[0], producer[1], n) if producer is not None else None
        first = self._end + 1
        total = body_total + HEADER_SIZE * n + (PRODUCER_TAG_SIZE if tag else 0)
        tags = () if producer is None else ((producer[0], producer[1], first, first + n - 1),)
        seg = self._data[-1]
        if self._write_pos + total + MIN_BLANK_SIZE <= seg.end:  # the common case: one segment
            parts, units, chain = log_entry.encode_for_write(first, term, bodies, timestamp_ms, self._write_pos,
                                                         self._end_chain, tag, channel)
            self._commit_write([(seg, self._write_pos, parts)], [], units, first, first + n - 1, term, chain,
                               self._write_pos + total, tags)
        else:
            sizes = [HEADER_SIZE + x for x in (lengths if lengths is not None else map(len, bodies))]
            if tag:
                sizes[-1] += PRODUCER_TAG_SIZE
            plan = self._plan(sizes)
            writes, chain, index, new_segs = [], self._end_chain, first, []
            all_units = []
            try:
                for k, (a, b, pos) in enumerate(plan):
                    seg = self._segment_for_part(k, pos, new_segs)
                    part = bodies[a:b]
                    if part:
                        records, units, chain = encode_records_and_units(
                            index, term, part, timestamp_ms, pos, chain, tag if b == n else None, channel,
                            ends_batch=b == n)
                    else:  # not even the first record fits before the segment end: only its blank
                        records, units = b"", b""
                    index += b - a
                    all_units.append(units)
                    end_pos = pos + len(records)
                    if k + 1 < len(plan):
                        records += log_entry.encode_blank(seg.end - end_pos) if seg.end > end_pos else b""
                    writes.append((seg, pos, records))
            except BaseException:
                self._discard_new_segments(new_segs)
                raise
            self._commit_write(writes, new_segs, b"".join(all_units), first, first + n - 1, term, chain, end_pos,
                               tags)
        return self._end

    def append_records(self, data: bytes | memoryview) -> int:
        view = memoryview(data).cast("B")
        self._check_writable()
        expected = self._end + 1
        prev_chain: int | None = self._end_chain if (self._end >= self._begin or self._begin == 0) else None
        if log_entry.compiled is not None and self._append_records_fast(view, expected, prev_chain):
            return self._end
        starts: list[int] = []
        sizes: list[int] = []
        terms: list[int] = []
        tags: list[tuple[int, int, int, int]] = []
        off, n_bytes = 0, len(view)
        max_body = self.max_entry_bytes + PRODUCER_TAG_SIZE
        while off < n_bytes:
            if n_bytes - off < HEADER_SIZE:
                raise CorruptEntry(f"truncated record header at offset {off} of pushed records")
            magic, total, index, term, _pos, channel, chain, body_crc, ts, body_size = HEADER.unpack_from(view, off)
            if magic != ENTRY_MAGIC:
                raise CorruptEntry(f"bad magic {magic:#x} at offset {off} of pushed records")
            if body_size < 0 or total != HEADER_SIZE + body_size or off + total > n_bytes:
                raise CorruptEntry(f"bad sizes total={total} body={body_size} at offset {off} of pushed records")
            if body_size > max_body:
                raise EntryTooLarge(f"record of {body_size} bytes > max_entry_bytes {self.max_entry_bytes}")
            if index != expected:
                raise CorruptEntry(f"record index {index}, expected {expected}")
            if crc32c(view[off + HEADER_SIZE: off + total]) != body_crc:
                raise CorruptEntry(f"body crc mismatch for index {index} at offset {off} of pushed records")
            if prev_chain is not None and \
                    crc32c(CHAIN.pack(index, term, channel, body_crc, ts, body_size), prev_chain) != chain:
                raise CorruptEntry(f"chain crc mismatch at index {index}")
            if channel & log_entry.CHANNEL_PRODUCER_TAG:
                if body_size < PRODUCER_TAG_SIZE:
                    raise CorruptEntry(f"producer-tagged body of {body_size} bytes at index {index}")
                client_id, seq, count = PRODUCER_TAG.unpack_from(view, off + total - PRODUCER_TAG_SIZE)
                tags.append((client_id, seq, index - count + 1, index))
            prev_chain = chain
            starts.append(off)
            sizes.append(total)
            terms.append(term)
            expected += 1
            off += total
        if not sizes:
            raise EmptyBatch("no records")
        first = self._end + 1
        plan = self._plan(sizes)
        writes, new_segs, units = [], [], bytearray()
        upack = INDEX_UNIT.pack
        try:
            for k, (a, b, pos) in enumerate(plan):
                seg = self._segment_for_part(k, pos, new_segs)
                buf = bytearray(view[starts[a]: starts[b - 1] + sizes[b - 1]]) if b > a else bytearray()
                p, rel = pos, 0
                for i in range(a, b):  # this node's layout: rewrite pos in place
                    POS.pack_into(buf, rel + log_entry.POS_OFFSET, p)
                    units += upack(INDEX_MAGIC, p, sizes[i], first + i, terms[i])
                    p += sizes[i]
                    rel += sizes[i]
                end_pos = p
                if k + 1 < len(plan) and seg.end > end_pos:
                    buf += log_entry.encode_blank(seg.end - end_pos)
                writes.append((seg, pos, buf))
        except BaseException:
            self._discard_new_segments(new_segs)
            raise
        self._commit_write(writes, new_segs, bytes(units), first, expected - 1, terms[-1], prev_chain or 0, end_pos,
                           tags)
        return self._end

    def _append_records_fast(self, view: memoryview, expected: int, prev_chain: int | None) -> bool:
        """append_records in two C calls (check all, then copy with this node's pos + build units) when every
        record is good and they fit in the active segment; False leaves the case to the Python path, which
        raises the reference error for a bad record (the C scan accepts exactly what the Python loop does)."""
        n_bytes = len(view)
        fast = log_entry.compiled
        n, end_off, chain, term, _units, tags = fast.scan(
            view, 0, n_bytes, expected_index=expected, prev_chain=prev_chain, check_chain=True,
            max_body=self.max_entry_bytes + PRODUCER_TAG_SIZE, check_tag=True)
        seg = self._data[-1]
        pos = self._write_pos
        if n == 0 or end_off != n_bytes or pos + n_bytes + MIN_BLANK_SIZE > seg.end:
            return False
        buf, units = fast.relocate(view, 0, n_bytes, pos, expected)
        self._commit_write([(seg, pos, buf)], [], units, expected, expected + n - 1, term, chain, pos + n_bytes, tags)
        return True

    def truncate_after(self, index: int) -> None:
        assert index >= self._committed, f"truncate_after({index}) below committed {self._committed}"
        assert index >= self._begin - 1, f"truncate_after({index}) below begin {self._begin}"
        if index >= self._end:
            return
        self._check_not_failed()
        with self._sync_lock:
            old_end = self._end
            if index >= self._begin:
                pos, size, _ = self._unit(index)
                cut = pos + size
            else:
                cut = self._data[0].start
            seg_i = self._data_seg_i(cut)
            seg = self._data[seg_i]
            written_end = self._write_pos if seg_i == len(self._data) - 1 else self._records_end(seg_i) + MIN_BLANK_SIZE
            if self._checkpoint_end > index:
                # Lower the checkpoint before any byte is zeroed: a crash or ENOSPC half-way through the cut
                # must leave a checkpoint that the data still confirms, or the node cannot reopen.
                self._write_checkpoint(min(self._durable, index))
            try:
                fd = seg.writable_fd()
                write_zeros(fd, cut - seg.start, written_end - seg.start)
                os.fdatasync(fd)
                crash_point("store.truncate.after_data")
                dropped = self._data[seg_i + 1:]
                # Index units of the dropped entries: zero them so no later reader can mistake them.
                first_drop = index + 1
                unit_segs = self._zero_units(first_drop, old_end)
                for useg in unit_segs:
                    os.fdatasync(useg.writable_fd())
            except OSError as e:
                raise self._disk_error("truncate", seg.path, e) from e
            with self._lock:
                del self._data[seg_i + 1:]
                del self._data_starts[seg_i + 1:]
                for d in dropped:
                    self._dirty_data.pop(id(d), None)
                seg.records_end = -1
                if seg.first_index > index:
                    seg.first_index = -1
                self._write_pos = cut
                self._end = index
                self._verified_from = min(self._verified_from, index + 1)
                self._durable = min(self._durable, index)
                if index >= self._begin:
                    self._end_term = self.term_at(index)
                    self._end_chain = self._record_chain_crc(index)
                else:
                    self._end_term, self._end_chain = -1, _EMPTY_CHAIN
            for d in dropped:
                d.delete()
            self._drop_index_segments_after(index)
            if dropped:
                fsync_dir(self._data_dir)
            self._producers.drop_after(index)
            self._membership.drop_after(index)
            self._write_producer_snapshot()  # before new batches reuse these indexes
            log.info("truncated log after index=%d old_end=%d file=%s offset=%d", index, old_end, seg.path,
                     cut - seg.start)

    def producer_state(self) -> bytes:
        with self._lock:
            return encode_snapshot(self._snapshot_locked())

    def reset(self, begin_index: int, producers: bytes | None = None, start: int | None = None) -> None:
        """Drop the whole log and start it empty at `begin_index` (DLedger's follower reset): the leader no
        longer holds the entries this log would need next (retention deleted them), so this node takes the
        leader's log from its begin index on. Everything below `begin_index` is committed group-wide. Entries at
        or after `begin_index` may be held (a prefix that differs from the leader's): they go too."""
        assert begin_index > self._committed, f"reset({begin_index}) would drop committed entries up to {self._committed}"
        self._check_not_failed()
        snap = decode_snapshot(producers) if producers else None
        with self._sync_lock:
            old_data, old_index = list(self._data), list(self._index.values())
            # The new first segment starts past every old one: a first segment at offset 0 means begin 0.
            # A master/slave member passes `start`: its master's first position, a segment start past its own.
            floor = max(self._data[-1].end if self._data else 0, self.config.data_segment_size_bytes)
            if start is not None and (start < floor or start % self.config.data_segment_size_bytes):
                raise ValueError(f"reset at position {start}: must be a segment start at or past {floor}")
            start = floor if start is None else start
            with self._lock:
                self._data, self._data_starts, self._index = [], [], {}
                self._dirty_data.clear()
                self._dirty_index.clear()
                self._begin = self._verified_from = begin_index
                self._end = self._durable = self._committed = begin_index - 1
                self._end_term, self._end_chain = -1, _EMPTY_CHAIN
                self._write_pos = start
                # The batches below begin_index are in no log we can scan any more: only the leader's table
                # remembers them, and a client's retry of one must still be recognised (never appended twice).
                self._producers.load(snap.state if snap else {})
                self._producers.drop_after(begin_index - 1)
                self._membership.load(snap.configs if snap else ())
                self._membership.drop_after(begin_index - 1)
            try:
                # First a checkpoint that claims nothing (end -1) but names the new begin, then the files: a crash
                # at any step reopens the old log, an empty log at 0, or the empty log at begin_index — each one
                # the leader brings up to date again.
                write_checkpoint(self._checkpoint_path, Checkpoint(-1, -1, begin_index))
                for seg in old_data + old_index:
                    seg.delete()
                seg = self._new_data_segment(start)
                with self._lock:
                    self._data.append(seg)
                    self._data_starts.append(start)
                self._index_seg(begin_index, create=True)
                fsync_dir(self._data_dir)
                fsync_dir(self._index_dir)
                self._write_checkpoint(begin_index - 1)
                self._write_producer_snapshot()
            except OSError as e:
                raise self._disk_error("reset", self.path, e) from e
            self._prepared_after, self._prepared_index_after = None, -1
            log.warning("log reset to begin_index=%d (the leader no longer holds what this log needed next)",
                        begin_index)

    def flush(self) -> int:
        """fdatasync every data segment written since the last flush; safe to call from a worker thread
        while appends go on: the returned index was captured before the sync started."""
        with self._sync_lock:
            self._check_not_failed()
            with self._lock:
                end = self._end
                segs = list(self._dirty_data.values())
                self._dirty_data.clear()
            for seg in segs:
                try:
                    os.fdatasync(seg.writable_fd())
                except OSError as e:
                    raise self._disk_error("fdatasync", seg.path, e) from e
            with self._lock:
                if end > self._durable:
                    self._durable = end
                active = self._data[-1] if self._data else None
                for seg in segs:
                    if seg is not active and id(seg) not in self._dirty_data:
                        seg.close_fd()  # sealed and synced: keep the mmap, free the fd and its pages
                        seg.release_pages()
            durable = self._durable
            if (time.monotonic() - self._last_checkpoint_s) * 1000 >= self.config.checkpoint_interval_ms \
                    and durable != self._checkpoint_end:
                try:
                    self._checkpoint_locked()
                except DiskFull as e:
                    # What this flush synced is durable all the same: the checkpoint only tells recovery where
                    # to start its scan. On a disk full to the last block its new file cannot be written, and
                    # failing the flush held back every ack of entries already on disk; it waits an interval.
                    self._last_checkpoint_s = time.monotonic()
                    if not self._checkpoint_deferred:
                        log.warning("checkpoint deferred, the flush stands: %s (recovery would scan from "
                                    "end_index=%d)", e, self._checkpoint_end)
                    self._checkpoint_deferred = True
            return durable

    def set_committed_index(self, index: int) -> None:
        assert index <= self._end, f"commit {index} beyond end {self._end}"
        self._committed = max(self._committed, index)

    def checkpoint(self) -> None:
        with self._sync_lock:
            self._check_not_failed()
            self._checkpoint_locked()

    def delete_expired(self, now_ms: int, safe_index: int) -> int:
        """Retention: delete whole data segments last written more than file_reserved_hours ago whose
        entries are all <= safe_index (what every replica has) and durable; returns how many."""
        reserved_ms = self.config.file_reserved_hours * 3600 * 1000
        deleted = 0
        with self._sync_lock:
            limit = min(safe_index, self._durable)
            while len(self._data) > 1:
                seg, nxt = self._data[0], self._data[1]
                if nxt.first_index < 0 or nxt.first_index - 1 > limit:
                    break
                if now_ms - seg.last_write_ms < reserved_ms:
                    break
                gone = [seg]
                with self._lock:  # readers hold it too: none is inside a segment we drop
                    del self._data[0]
                    del self._data_starts[0]
                    self._dirty_data.pop(id(seg), None)
                    self._begin = nxt.first_index
                    self._membership.compact(self._begin)
                    u = self._units_per_index
                    for start in sorted(self._index):
                        if start + u <= self._begin:
                            useg = self._index.pop(start)
                            self._dirty_index.pop(id(useg), None)
                            gone.append(useg)
                for g in gone:  # Records handed out earlier keep their maps alive (see Segment.close)
                    g.delete()
                deleted += 1
                log.info("retention deleted segment path=%s begin_index=%d", seg.path, self._begin)
            if deleted:
                fsync_dir(self._data_dir)
                fsync_dir(self._index_dir)
        return deleted

    def close(self) -> None:
        if self._closed:
            return
        try:
            if self._failed is None:
                self.flush()
                self.checkpoint()
        finally:
            self._closed = True
            self._close_files()

    def __enter__(self) -> "FileStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- internals: writing ------------------------------------------------------------------------
    def _check_writable(self) -> None:
        self._check_not_failed()
        self._disk.check()

    def _check_not_failed(self) -> None:
        if self._closed:
            raise DiskError(f"store {self.path} is closed")
        if self._failed is not None:
            raise DiskError(f"store {self.path} failed earlier and refuses writes: {self._failed}")

    def _disk_error(self, what: str, path: str, e: OSError) -> Exception:
        if is_enospc(e):
            self._disk.mark_full()
            return DiskFull(f"{what} {path}: {e.strerror}")
        # After a failed write or fsync the page cache state is unknown (fsyncgate): stop writing for good.
        self._failed = f"{what} {path}: {e!r}"
        log.error("disk error, store refuses further writes what=%s path=%s error=%r", what, path, e)
        return DiskError(f"{what} {path}: {e.strerror}")

    def _plan(self, sizes: list[int]) -> list[tuple[int, int, int]]:
        """Split records over segments: (first record, end record, global pos) per segment, in order.

        Every record leaves room for a blank behind it, so a segment always ends with a blank record.
        """
        parts = []
        seg_size = self.config.data_segment_size_bytes
        pos = acc = self._write_pos
        seg_end = self._data[-1].end
        if pos == seg_end:  # the active segment is full (its blank is written): start in a new one
            seg_end += seg_size
        a = 0
        for i, s in enumerate(sizes):
            if acc + s + MIN_BLANK_SIZE > seg_end:
                parts.append((a, i, pos))
                pos = acc = seg_end
                seg_end += seg_size
                a = i
            acc += s
        parts.append((a, len(sizes), pos))
        return parts

    def _segment_for_part(self, k: int, pos: int, new_segs: list[Segment]) -> Segment:
        if k == 0:
            seg = self._data[-1]
            assert seg.start <= pos < seg.end or pos == seg.end == self._write_pos
            if pos < seg.end:
                return seg
        seg = self._new_data_segment(pos)
        new_segs.append(seg)
        return seg

    def _new_data_segment(self, start: int) -> Segment:
        size = self.config.data_segment_size_bytes
        path = os.path.join(self._data_dir, segment_name(start))
        try:
            self._allocator.take(path, size, self.config.preallocate)
        except OSError as e:
            raise self._disk_error("create segment", path, e) from e
        return Segment(start, path, size)

    def _discard_new_segments(self, new_segs: list[Segment]) -> None:
        for seg in new_segs:
            try:
                seg.delete()
            except OSError:
                log.exception("could not remove unused segment path=%s", seg.path)

    def _commit_write(self, writes: list[tuple[Segment, int, bytes]], new_segs: list[Segment], units: bytes,
                      first: int, last: int, term: int, chain: int, end_pos: int, tags=()) -> None:
        """Write records and units; on failure undo what was written and raise DiskFull/DiskError. The batches'
        producer tags (client_id, seq, first, last) enter the table under the same lock as the new end, so a
        producer snapshot taken from another thread never covers an end without its batches."""
        done: list[tuple[Segment, int, int]] = []
        unit_writes = self._unit_writes(first, units)
        try:
            for seg, pos, buf in writes:
                if isinstance(buf, list):
                    self._pwritev_all(seg.writable_fd(), buf, pos - seg.start, seg.path, done, seg)
                elif isinstance(buf, log_entry.RecordParts):
                    self._write_parts(seg.writable_fd(), buf, pos - seg.start, seg.path, done, seg)
                else:
                    self._pwrite_all(seg.writable_fd(), buf, pos - seg.start, seg.path, done, seg)
            for useg, off, ubuf in unit_writes:
                self._pwrite_all(useg.writable_fd(), ubuf, off, useg.path, done, useg)
        except BaseException:
            self._undo(done)
            self._discard_new_segments(new_segs)
            raise
        now_ms = int(time.time() * 1000)
        with self._lock:
            for seg in new_segs:
                self._data.append(seg)
                self._data_starts.append(seg.start)
            for seg, pos, buf in writes:
                head = buf[0] if isinstance(buf, list) else buf.headers if isinstance(buf, log_entry.RecordParts) else buf
                if seg.first_index < 0 and pos == seg.start and len(head) >= HEADER_SIZE \
                        and HEADER.unpack_from(head, 0)[0] == ENTRY_MAGIC:
                    seg.first_index = HEADER.unpack_from(head, 0)[2]
                seg.last_write_ms = now_ms
                self._dirty_data[id(seg)] = seg
            for useg, _off, _buf in unit_writes:
                self._dirty_index[id(useg)] = useg
            self._end = last
            self._end_term = term
            self._end_chain = chain
            self._write_pos = end_pos
            for tag in tags:
                self._producers.remember(*tag)
                if tag[0] == log_entry.MEMBERSHIP_PRODUCER_ID:
                    self._membership.add(tag[3], self._get(tag[3]).body)
        active = self._data[-1]
        if end_pos - active.start >= self._prepare_at_bytes and self._prepared_after is not active:
            self._prepared_after = active
            self._allocator.prepare(os.path.join(self._data_dir, segment_name(active.end)),
                                    self.config.data_segment_size_bytes, self.config.preallocate)
        u = self._units_per_index
        index_start = (last + 1) - (last + 1) % u
        if (last + 1 - index_start) * 2 >= u and self._prepared_index_after != index_start:
            self._prepared_index_after = index_start
            self._allocator.prepare(os.path.join(self._index_dir, segment_name(index_start + u)),
                                    u * INDEX_UNIT_SIZE, self.config.preallocate)

    def _pwrite_all(self, fd: int, buf, off: int, path: str, done: list, seg: Segment) -> None:
        view = memoryview(buf)
        written = 0
        try:
            while written < len(view):
                written += os.pwrite(fd, view[written:], off + written)
        except OSError as e:
            done.append((seg, off, written))
            raise self._disk_error("write", path, e) from e
        done.append((seg, off, written))

    def _write_parts(self, fd: int, parts: log_entry.RecordParts, off: int, path: str, done: list,
                     seg: Segment) -> None:
        """The compiled codec's headers + the caller's bodies in one pwritev (per IOV_MAX buffers), no copy."""
        try:
            written = log_entry.write_record_parts(fd, off, parts)
        except OSError as e:
            done.append((seg, off, getattr(e, "written", 0)))
            raise self._disk_error("write", path, e) from e
        done.append((seg, off, written))

    def _pwritev_all(self, fd: int, parts: list, off: int, path: str, done: list, seg: Segment) -> None:
        """One pwritev per IOV_MAX buffers (one call for batches up to IOV_MAX/2 entries, never one per entry)."""
        written = 0
        try:
            for i in range(0, len(parts), IOV_MAX):
                chunk = parts[i:i + IOV_MAX]
                want = sum(map(len, chunk))
                n = os.pwritev(fd, chunk, off + written)
                written += n
                if n < want:  # a short write (signal, nearly full disk): finish this chunk the plain way
                    rest = memoryview(b"".join(chunk))[n:]
                    while rest:
                        m = os.pwrite(fd, rest, off + written)
                        written += m
                        rest = rest[m:]
        except OSError as e:
            done.append((seg, off, written))
            raise self._disk_error("write", path, e) from e
        done.append((seg, off, written))

    def _undo(self, done: list[tuple[Segment, int, int]]) -> None:
        """Erase a failed batch's bytes so recovery cannot find half of it (blocks are allocated: zeroing them
        needs no new space)."""
        for seg, off, n in done:
            if n:
                try:
                    write_zeros(seg.writable_fd(), off, off + n)
                except OSError:
                    log.exception("could not undo a partial write path=%s offset=%d", seg.path, off)

    def _unit_writes(self, first: int, units: bytes) -> list[tuple[Segment, int, bytes]]:
        u = self._units_per_index
        out = []
        index, rel, n = first, 0, len(units) // INDEX_UNIT_SIZE
        while rel < n:
            useg = self._index_seg(index, create=True)
            slot = index - useg.start
            take = min(n - rel, u - slot)
            out.append((useg, slot * INDEX_UNIT_SIZE, units[rel * INDEX_UNIT_SIZE: (rel + take) * INDEX_UNIT_SIZE]))
            rel += take
            index += take
        return out

    def _zero_units(self, first: int, last: int) -> list[Segment]:
        touched = []
        index = first
        while index <= last:
            useg = self._index_seg(index)
            slot = index - useg.start if useg is not None else 0
            take = min(last - index + 1, self._units_per_index - (index % self._units_per_index))
            if useg is not None:
                write_zeros(useg.writable_fd(), slot * INDEX_UNIT_SIZE, (slot + take) * INDEX_UNIT_SIZE)
                touched.append(useg)
            index += take
        return touched

    def _drop_index_segments_after(self, index: int) -> None:
        keep_start = (index + 1) - (index + 1) % self._units_per_index
        gone = [s for s in self._index if s > keep_start]
        for start in gone:
            useg = self._index.pop(start)
            self._dirty_index.pop(id(useg), None)
            useg.delete()
        if gone:
            fsync_dir(self._index_dir)

    def _checkpoint_locked(self) -> None:
        with self._lock:
            end = self._durable
            segs = list(self._dirty_index.values())
            self._dirty_index.clear()
        try:
            for seg in segs:
                try:
                    os.fdatasync(seg.writable_fd())
                except OSError as e:
                    raise self._disk_error("fdatasync", seg.path, e) from e
            self._write_checkpoint(end)
            self._write_producer_snapshot()
        except DiskFull:
            with self._lock:  # (the next checkpoint syncs them again, and closes their fds once it names them)
                for seg in segs:
                    self._dirty_index.setdefault(id(seg), seg)
            raise
        if self._checkpoint_deferred:
            log.warning("checkpoint written again end_index=%d", end)
            self._checkpoint_deferred = False
        current = self._index_seg(self._end + 1)
        for seg in segs:
            if seg is not current:
                seg.close_fd()
                seg.release_pages()
        self.release_read_pages()

    def release_read_pages(self) -> None:
        """Unmap the pages of the sealed segments read since the last call (the node calls it every
        checkpoint_interval_ms; about 4 ms per GiB mapped, 10 us for a segment with none). The page cache keeps
        them: a read that comes back faults them in again."""
        with self._lock:
            if self._closed:
                return
            paged_in, self._paged_in = self._paged_in, set()
            keep = (self._index_seg(self._end + 1), self._data[-1] if self._data else None)
        for seg in list(paged_in):  # (copied at once: a reader without the lock may still add to it)
            if seg not in keep:
                seg.release_pages()

    def _write_producer_snapshot(self) -> None:
        """Persist the producer table with the end index it covers, when it changed since the last one."""
        with self._lock:
            version = self._producers.version
            if version == self._producers_snapshot_version:
                return
            snap = self._snapshot_locked()
        try:
            write_producer_snapshot(self._producers_path, snap)
        except OSError as e:
            raise self._disk_error("producer snapshot", self._producers_path, e) from e
        self._producers_snapshot_version = version

    def _snapshot_locked(self) -> ProducerSnapshot:
        return ProducerSnapshot(self._end, self._producers.state(), self._membership.state())

    def _write_checkpoint(self, end: int) -> None:
        try:
            write_checkpoint(self._checkpoint_path, Checkpoint(end, min(self._committed, end), self._begin))
        except OSError as e:
            raise self._disk_error("checkpoint", self._checkpoint_path, e) from e
        self._checkpoint_end = end
        self._last_checkpoint_s = time.monotonic()

    # -- internals: lookups ------------------------------------------------------------------------
    def _check_range(self, index: int) -> None:
        if not self._begin <= index <= self._end:
            raise IndexOutOfRange(f"index {index} outside [{self._begin}, {self._end}]")

    def _index_seg(self, index: int, create: bool = False) -> Segment | None:
        u = self._units_per_index
        start = index - index % u
        seg = self._index.get(start)
        if seg is None and create:
            path = os.path.join(self._index_dir, segment_name(start))
            size = u * INDEX_UNIT_SIZE
            try:
                self._allocator.take(path, size, self.config.preallocate)
            except OSError as e:
                raise self._disk_error("create index segment", path, e) from e
            seg = Segment(start, path, size)
            with self._lock:
                self._index[start] = seg
        return seg

    def _unit(self, index: int) -> tuple[int, int, int]:
        """(pos, size, term) of entry `index` from its index unit, checked."""
        self._check_range(index)
        seg = self._index_seg(index)
        if seg is None:
            raise CorruptEntry(f"index segment for entry {index} missing in {self._index_dir}")
        self._paged_in.add(seg)  # (read through its map; the current one stays mapped: release_read_pages)
        off = (index - seg.start) * INDEX_UNIT_SIZE
        magic, pos, size, idx, term = INDEX_UNIT.unpack_from(seg.view, off)
        if magic != INDEX_MAGIC or idx != index or size < HEADER_SIZE:
            self._report_corrupt(seg.path, off, index, f"bad index unit magic={magic:#x} index={idx} size={size}")
        return pos, size, term

    def _data_seg_i(self, pos: int) -> int:
        i = bisect.bisect_right(self._data_starts, pos) - 1
        if i < 0 or pos >= self._data[i].end:
            raise CorruptEntry(f"position {pos} is in no data segment of {self._data_dir}")
        if i != len(self._data) - 1:
            self._paged_in.add(self._data[i])
        return i

    def _data_seg(self, pos: int) -> Segment:
        return self._data[self._data_seg_i(pos)]

    def _records_end(self, i: int) -> int:
        """Global offset where sealed segment i's records end (its blank starts)."""
        seg = self._data[i]
        if seg.records_end < 0:
            nxt = self._data[i + 1]
            if nxt.first_index < 0 or nxt.first_index - 1 < self._begin:
                raise CorruptEntry(f"cannot place the end of segment {seg.path}")
            pos, size, _ = self._unit(nxt.first_index - 1)
            seg.records_end = pos + size
        return seg.records_end

    def _prev_chain(self, index: int) -> int | None:
        """Chain CRC of entry index-1, to check entry `index`'s chain (None: not known, skip the check)."""
        if index == 0:
            return _EMPTY_CHAIN
        if index - 1 < self._begin:
            return None
        pos, _size, _ = self._unit(index - 1)
        seg = self._data_seg(pos)
        return HEADER.unpack_from(seg.view, pos - seg.start)[6]

    def _record_chain_crc(self, index: int) -> int:
        pos, _size, _ = self._unit(index)
        seg = self._data_seg(pos)
        return HEADER.unpack_from(seg.view, pos - seg.start)[6]


    def _note_corrupt(self, path: str, offset: int, index: int, why: str) -> None:
        key = (path, offset)
        if key not in self._corrupt_seen:
            self._corrupt_seen.add(key)
            self.corrupt_records += 1
            log.error("corrupt record refused file=%s offset=%d index=%d reason=%s", path, offset, index, why)

    def _report_corrupt(self, path: str, offset: int, index: int, why: str) -> None:
        self._note_corrupt(path, offset, index, why)
        raise CorruptEntry(f"corrupt record for index {index} in {path} at offset {offset}: {why}")

    def _close_files(self) -> None:
        self._allocator.close()
        for seg in self._data:
            seg.close()
        for seg in self._index.values():
            seg.close()
