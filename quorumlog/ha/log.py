"""The log as HA sees it: bytes at physical offsets, in segments (RocketMQ's CommitLog of mapped files), with a
first retained offset once retention deleted old segments. `MemoryHALog` is the simulator's and the tests'."""

from __future__ import annotations

from typing import Protocol


class HALog(Protocol):
    segment_bytes: int

    def min_offset(self) -> int: ...  # the first byte still held

    def max_offset(self) -> int: ...  # one past the last byte held

    def segment_start(self, offset: int) -> int: ...  # where the segment holding offset begins

    def read(self, offset: int, max_bytes: int) -> bytes | memoryview: ...  # min_offset <= offset <= max_offset

    def append(self, offset: int, data: bytes) -> None: ...  # offset == max_offset (a slave's appends)

    def reset(self, offset: int) -> None: ...  # drop everything; the log now begins (and ends) at offset

    def truncate(self, offset: int) -> None: ...  # keep only bytes below offset (a diverged tail)


class MemoryHALog:
    def __init__(self, segment_bytes: int = 1 << 20) -> None:
        self.segment_bytes = segment_bytes
        self._base = 0
        self._data = bytearray()

    def min_offset(self) -> int:
        return self._base

    def max_offset(self) -> int:
        return self._base + len(self._data)

    def segment_start(self, offset: int) -> int:
        return offset - offset % self.segment_bytes

    def read(self, offset: int, max_bytes: int) -> bytes:
        assert self._base <= offset <= self.max_offset(), (offset, self._base, self.max_offset())
        pos = offset - self._base
        return bytes(self._data[pos:pos + max_bytes])

    def append(self, offset: int, data: bytes) -> None:
        if offset != self.max_offset():
            raise ValueError(f"append at {offset}, log ends at {self.max_offset()}")
        self._data += data

    def reset(self, offset: int) -> None:
        self._base, self._data = offset, bytearray()

    def truncate(self, offset: int) -> None:
        if offset < self._base:
            self.reset(offset)
        else:
            del self._data[offset - self._base:]

    def delete_before(self, offset: int) -> None:
        """Retention: forget the bytes below offset (rounded down to a segment start)."""
        cut = max(self._base, min(self.segment_start(offset), self.max_offset()))
        del self._data[:cut - self._base]
        self._base = cut
