"""A member's FileStore as the HA state machines see it (ha/log.py's HALog): bytes at physical offsets.

Offsets are the store's own physical positions, as RocketMQ's are its CommitLog's: every member of a
master/slave group has the same `data_segment_size`, so a record lies at the same position everywhere and a
segment's blank padding is part of the byte stream. Frames are cut at record ends (ha_transfer_batch_bytes, or
one record when a record is bigger), so a slave appends each frame whole, checked, at once.

A Reset to an offset this log does not hold is kept pending until the first frame from there: the store starts
again at that position, with the frame's first index as its begin index (an offset alone does not name one).
"""

from __future__ import annotations

from ...format.log_entry import HEADER


class StoreHALog:
    def __init__(self, store, segment_bytes: int) -> None:
        self.store = store
        self.segment_bytes = segment_bytes
        self._pending_reset: int | None = None

    def min_offset(self) -> int:
        return self._pending_reset if self._pending_reset is not None else self.store.first_position()

    def max_offset(self) -> int:
        return self._pending_reset if self._pending_reset is not None else self.store.write_position

    def segment_start(self, offset: int) -> int:
        return offset - offset % self.segment_bytes

    def read(self, offset: int, max_bytes: int) -> bytes | memoryview:
        return self.store.read_at_position(offset, max_bytes)

    def append(self, offset: int, data: bytes) -> None:
        if self._pending_reset is not None:
            if offset != self._pending_reset:
                raise ValueError(f"append at {offset}, this log restarts at {self._pending_reset}")
            begin_index = HEADER.unpack_from(data, 0)[2]  # (a segment start: a record, never a blank, is first)
            self.store.reset(begin_index, start=offset)
            self._pending_reset = None
        self.store.append_at_position(offset, data)

    def reset(self, offset: int) -> None:
        if offset != self.store.write_position or self.store.end_index >= self.store.begin_index:
            self._pending_reset = offset

    def truncate(self, offset: int) -> None:
        index = self.store.index_at_position(offset)
        self.store.truncate_after(index - 1)

    def index_below(self, offset: int) -> int:
        """The last entry whose bytes all lie below `offset` (a slave's or the confirm offset)."""
        return self.store.index_at_position(offset) - 1 if self._pending_reset is None else self.store.begin_index - 1
