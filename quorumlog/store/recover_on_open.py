"""Opening a FileStore: find the last valid record from the checkpoint on, cut a torn tail, rebuild index
units, restore begin/end/committed indexes and the producer table (a mixin of FileStore, which owns the state).

Recovery starts at the checkpoint's end index E (every entry <= E was durable, index units included, when the
checkpoint was written) and checks records forward; only when E itself cannot be confirmed does it scan the
whole log. It never deletes anything before it knows the checkpoint is not ahead of the valid data.
"""

from __future__ import annotations

import bisect
import logging
import os
import time

from ..errors import CorruptEntry
from ..format import log_entry
from .checkpoint import Checkpoint, read_checkpoint, remove_stale_tmp
from .producers import read_snapshot as read_producer_snapshot
from ..format.log_entry import (
    BLANK_MAGIC, ENTRY_MAGIC, HEADER, HEADER_SIZE, INDEX_MAGIC, INDEX_UNIT, INDEX_UNIT_SIZE, MIN_BLANK_SIZE,
    PRODUCER_TAG, PRODUCER_TAG_SIZE,
)
from .files import TMP_SUFFIX, fsync_dir, zero_nonzero
from .recovery import RecoveryError, check_record, scan_forward, valid_record_after
from .segments import Segment, list_segments

log = logging.getLogger(__name__)

# On a torn tail, bytes this far past the cut are zeroed; anything further out cannot pass for a record of
# this log (see recovery.py) and is overwritten by later appends.
TORN_TAIL_ZERO_BYTES = 8 * 1024 * 1024

_EMPTY_CHAIN = 0


class RecoverOnOpen:
    """FileStore's opening steps; they read and set FileStore's fields (see FileStore.__init__)."""

    def _recover(self) -> None:
        t0 = time.monotonic()
        for d in (self._data_dir, self._index_dir):
            for name in os.listdir(d):
                if name.endswith(TMP_SUFFIX):
                    os.unlink(os.path.join(d, name))
        remove_stale_tmp(self.path)
        self._open_segments()
        try:
            cp = read_checkpoint(self._checkpoint_path)
        except CorruptEntry as e:
            # Written atomically, so this is a damaged disk: fall back to scanning the whole log.
            log.error("ignoring unreadable checkpoint, scanning the whole log: %s", e)
            cp = None
        if not self._data:
            if cp is not None and cp.end_index >= 0:
                raise RecoveryError(f"checkpoint says end_index {cp.end_index} but {self._data_dir} has no segments",
                                    path=self._data_dir, offset=0)
            seg = self._new_data_segment(0)
            self._data.append(seg)
            self._data_starts.append(0)
            self._write_pos = 0
            self._index_seg(0, create=True)  # created now, not inside the first append
            self._write_checkpoint(-1)
            return
        begin = self._find_begin(cp)
        self._begin = begin
        start = self._scan_start(cp, begin)
        if start is None:  # from the beginning
            prev = _EMPTY_CHAIN if begin == 0 else None
            scan = scan_forward(self._data, 0, 0, begin, prev, -1)
            scan_first = begin
        else:
            seg_i, off, e_index, e_term, e_chain = start
            scan = scan_forward(self._data, seg_i, off, e_index + 1, e_chain, e_term)
            scan_first = e_index + 1
        cp_end = cp.end_index if cp is not None else -1
        bad_seg = self._data[scan.seg_i]
        if scan.last_index < cp_end:
            raise RecoveryError(
                f"checkpoint end_index {cp_end} is ahead of the valid data: last valid entry is {scan.last_index},"
                f" then {scan.reason or 'end of data'} in {bad_seg.path} at offset {scan.offset}",
                path=bad_seg.path, offset=scan.offset)
        if scan.torn:
            later = valid_record_after(self._data, scan.seg_i, scan.offset, scan.last_index, scan.last_term)
            if later is not None:
                path, offset, index = later
                raise RecoveryError(
                    f"corrupt record in the middle of the log: {scan.reason} in {bad_seg.path} at offset "
                    f"{scan.offset} (expected entry {scan.last_index + 1}), yet entry {index} is valid in {path} at "
                    f"offset {offset}; refusing to cut acknowledged entries as a torn tail. Replace this node's "
                    f"data (an empty data dir re-syncs from the group) or restore the file",
                    path=bad_seg.path, offset=scan.offset)
        # From here on we repair: cut the torn tail, drop later segments, rebuild index units.
        if scan.torn:
            log.warning("cutting torn tail file=%s offset=%d reason=%s last_valid_index=%d", bad_seg.path,
                        scan.offset, scan.reason, scan.last_index)
            fd = bad_seg.writable_fd()
            zero_nonzero(fd, scan.offset, min(bad_seg.size_bytes, scan.offset + TORN_TAIL_ZERO_BYTES))
        for seg in self._data[scan.seg_i + 1:]:
            log.warning("dropping data segment after the end of the log path=%s", seg.path)
            seg.delete()
        del self._data[scan.seg_i + 1:]
        del self._data_starts[scan.seg_i + 1:]
        for seg_i, idx in scan.segment_firsts.items():
            self._data[seg_i].first_index = idx
        self._end = scan.last_index
        self._verified_from = scan_first  # older entries are checked on their first read
        self._write_pos = self._data[scan.seg_i].start + scan.offset
        if self._end >= self._begin:
            self._end_term, self._end_chain = scan.last_term, scan.last_chain
        else:
            self._end_term, self._end_chain = -1, _EMPTY_CHAIN
        if scan.units:
            self._write_units(scan_first, bytes(scan.units))
        for seg in self._data:
            if seg.first_index < 0 and self._end >= self._begin:
                try:
                    seg.first_index = self._first_index_at_or_after(seg.start)
                except CorruptEntry as e:  # reads across this segment will refuse; the store still opens
                    log.error("cannot place the first entry of segment %s: %s", seg.path, e)
        self._drop_index_segments_after(self._end)
        # Make what we scanned durable (it may only have been in the page cache), then checkpoint it.
        for seg in self._data[0 if start is None else start[0]:]:
            os.fdatasync(seg.writable_fd())
        for seg in list(self._index.values()):
            if seg.fd is not None:
                os.fdatasync(seg.fd)
        fsync_dir(self._data_dir)
        fsync_dir(self._index_dir)
        self._durable = self._end
        self._committed = min(cp.committed_index, self._end) if cp is not None else -1
        # Retention deletes only committed entries, and may run after the last checkpoint: whatever lies below
        # our begin index was committed, whatever the checkpoint says.
        self._committed = max(self._committed, self._begin - 1)
        self._write_checkpoint(self._end)
        for seg in self._data[:-1]:
            seg.close_fd()
        self._rebuild_producers()
        self._index_seg(self._end + 1, create=True)
        log.info("recovered store path=%s begin_index=%d end_index=%d committed_index=%d scanned=%d "
                 "from_checkpoint=%s elapsed_ms=%.1f", self.path, self._begin, self._end, self._committed,
                 max(0, scan.last_index - scan_first + 1), start is not None, (time.monotonic() - t0) * 1000)

    def _open_segments(self) -> None:
        seg_size = self.config.data_segment_size_bytes
        found = list_segments(self._data_dir)
        for k, (start, path) in enumerate(found):
            size = found[k + 1][0] - start if k + 1 < len(found) else max(seg_size, os.path.getsize(path))
            self._data.append(Segment(start, path, size))
            self._data_starts.append(start)
        index_found = list_segments(self._index_dir)
        if index_found:
            # The files' own geometry wins over the config (it may have changed): the gap between
            # consecutive names, or a lone file's size when larger than the config's.
            if len(index_found) > 1:
                units = min(b[0] - a[0] for a, b in zip(index_found, index_found[1:]))
            else:
                size = os.path.getsize(index_found[0][1])
                units = max(self._units_per_index, size // INDEX_UNIT_SIZE)
            if units != self._units_per_index:
                log.warning("index segments hold %d units, config says %d: keeping the files' geometry",
                            units, self._units_per_index)
                self._units_per_index = units
            for start, path in index_found:
                if start % self._units_per_index:
                    raise RecoveryError(f"index segment {path} does not start at a multiple of "
                                        f"{self._units_per_index} units", path=path, offset=0)
                self._index[start] = Segment(start, path, self._units_per_index * INDEX_UNIT_SIZE)

    def _find_begin(self, cp: Checkpoint | None) -> int:
        """begin_index: 0 for a log whose first segment starts at offset 0 (retention never deleted
        anything), else the index in the first record's header, confirmed by its CRC or its index unit."""
        first = self._data[0]
        if first.start == 0:
            return 0
        h = HEADER.unpack_from(first.view, 0)
        if h[0] == 0 and cp is not None and cp.begin_index > 0 and cp.end_index < cp.begin_index:
            return cp.begin_index  # reset to the leader's begin, nothing written since (see FileStore.reset)
        why, _ = check_record(first.view, 0, first.size_bytes, first.start, h[2], None)
        if why is None:
            return h[2]
        useg = self._index_seg(h[2])
        if h[0] == ENTRY_MAGIC and useg is not None:
            unit = INDEX_UNIT.unpack_from(useg.view, (h[2] - useg.start) * INDEX_UNIT_SIZE)
            if unit[0] == INDEX_MAGIC and unit[1] == first.start and unit[3] == h[2]:
                return h[2]  # the record is damaged but its place is known: reads will refuse it
        raise RecoveryError(f"first record of {first.path} at offset 0 is unreadable ({why}): cannot tell "
                            f"begin_index", path=first.path, offset=0)

    def _first_index_at_or_after(self, pos: int) -> int:
        """Smallest index whose record starts at or after global offset `pos`, by binary search over the
        index units (the records themselves may be damaged; -1 if none)."""
        lo, hi = self._begin, self._end + 1
        while lo < hi:
            mid = (lo + hi) // 2
            if self._unit(mid)[0] >= pos:
                hi = mid
            else:
                lo = mid + 1
        return lo if lo <= self._end else -1

    def _scan_start(self, cp: Checkpoint | None, begin: int) -> tuple[int, int, int, int, int] | None:
        """(seg_i, offset after entry E, E, term, chain) for the checkpoint's entry E, if it checks out."""
        if cp is None or cp.end_index < begin:
            return None
        e = cp.end_index
        useg = self._index_seg(e)
        if useg is None:
            log.warning("checkpoint entry %d has no index segment: scanning from the beginning", e)
            return None
        magic, pos, size, idx, term = INDEX_UNIT.unpack_from(useg.view, (e - useg.start) * INDEX_UNIT_SIZE)
        i = bisect.bisect_right(self._data_starts, pos) - 1
        if magic != INDEX_MAGIC or idx != e or i < 0 or pos >= self._data[i].end:
            log.warning("checkpoint entry %d has a bad index unit in %s: scanning from the beginning", e, useg.path)
            return None
        seg = self._data[i]
        why, h = check_record(seg.view, pos - seg.start, seg.size_bytes, seg.start, e, None)
        if why is None and h[1] != size:
            why = f"size {h[1]} disagrees with its index unit ({size})"
        if why is None and not self._chain_confirmed(e, h, i, pos - seg.start + size):
            why = "its chain crc agrees with neither neighbour"
        if why is not None:
            log.warning("checkpoint entry %d unreadable in %s at offset %d (%s): scanning from the beginning",
                        e, seg.path, pos - seg.start, why)
            return None
        return i, pos - seg.start + size, e, h[3], h[6]

    def _chain_confirmed(self, e: int, h: tuple, seg_i: int, next_off: int) -> bool:
        """Entry e's chain field continues e-1's, or e+1 continues it: the scan may start from it."""
        if e == 0:
            prev: int | None = _EMPTY_CHAIN
        elif e - 1 >= self._begin:
            # Not self._unit(): the end index is not known yet while recovering (it range-checks against it),
            # which made every reopen after a clean close scan the whole log.
            prev = None
            useg = self._index_seg(e - 1)
            if useg is not None:
                magic, pos, size, idx, _term = INDEX_UNIT.unpack_from(useg.view, (e - 1 - useg.start) * INDEX_UNIT_SIZE)
                if magic == INDEX_MAGIC and idx == e - 1 and size >= HEADER_SIZE:
                    try:
                        pseg = self._data_seg(pos)
                    except CorruptEntry:
                        pseg = None
                    if pseg is not None and pos - pseg.start + HEADER_SIZE <= pseg.size_bytes:
                        prev = HEADER.unpack_from(pseg.view, pos - pseg.start)[6]
        else:
            return True  # e is the first entry kept: nothing to compare with
        if prev is not None and log_entry.chain_crc_of(prev, h[2], h[3], h[5], h[7], h[8], h[9]) == h[6]:
            return True
        seg, off = self._data[seg_i], next_off
        if off + MIN_BLANK_SIZE <= seg.size_bytes and log_entry.BLANK.unpack_from(seg.view, off)[0] == BLANK_MAGIC:
            if seg_i + 1 >= len(self._data):
                return False
            seg, off = self._data[seg_i + 1], 0
        why, _ = check_record(seg.view, off, seg.size_bytes, seg.start, e + 1, h[6])
        return why is None

    def _write_units(self, first: int, units: bytes) -> None:
        for useg, off, ubuf in self._unit_writes(first, units):
            os.pwrite(useg.writable_fd(), ubuf, off)
            self._dirty_index[id(useg)] = useg

    def _rebuild_producers(self) -> None:
        """The producer table: the `producers` snapshot plus the tagged batches after it (ProducerTable.rebuild);
        a missing or damaged snapshot means a scan of the whole log."""
        try:
            snap = read_producer_snapshot(self._producers_path)
        except CorruptEntry as e:
            log.error("ignoring the producer snapshot, scanning the whole log: %s", e)
            snap = None
        if snap is None and self._end >= self._begin:
            log.warning("no producer snapshot: scanning %d entries for producer tags", self._end - self._begin + 1)
        self._producers.rebuild(snap, self._begin, self._end, self._tag_at)
        self._membership.rebuild(snap, self._begin, self._end, self._producers, lambda i: self._get(i).body)
        self._write_producer_snapshot()

    def _tag_at(self, index: int) -> tuple[int, int, int] | None:
        """The producer tag (client_id, seq, batch_count) on entry `index`, or None (no tag, or damaged)."""
        useg = self._index_seg(index)
        if useg is None:
            return None
        magic, pos, size, idx, _term = INDEX_UNIT.unpack_from(useg.view, (index - useg.start) * INDEX_UNIT_SIZE)
        i = bisect.bisect_right(self._data_starts, pos) - 1
        if magic != INDEX_MAGIC or idx != index or i < 0 \
                or pos - self._data_starts[i] + size > self._data[i].size_bytes:
            return None
        seg, off = self._data[i], pos - self._data_starts[i]
        if not HEADER.unpack_from(seg.view, off)[5] & log_entry.CHANNEL_PRODUCER_TAG:
            return None
        why, _h = check_record(seg.view, off, seg.size_bytes, seg.start, index, None)
        if why is not None:  # a damaged tag must not poison the dedup table
            self._note_corrupt(seg.path, off, index, why)
            return None
        return PRODUCER_TAG.unpack_from(seg.view, off + size - PRODUCER_TAG_SIZE)
