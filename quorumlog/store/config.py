"""StoreConfig: the file store's knobs, with DLedger's defaults where DLedger has one."""

from __future__ import annotations

from dataclasses import dataclass, fields

from ..format import log_entry
from .base import DEFAULT_MAX_ENTRY_BYTES

GIB = 1024 * 1024 * 1024
MIN_DATA_SEGMENT_BYTES = 4 * 1024  # tests use a few KiB to force rollovers


@dataclass(frozen=True, slots=True)
class StoreConfig:
    # DLedger's mappedFileSizeForEntryData (1 GiB, like RocketMQ's commit log).
    data_segment_size_bytes: int = GIB
    # 4M units of 32 bytes = 128 MiB per index segment, so one index segment covers many data segments.
    index_segment_size_bytes: int = log_entry.INDEX_UNIT_SIZE * 4 * 1024 * 1024
    max_entry_bytes: int = DEFAULT_MAX_ENTRY_BYTES
    # Appends are refused above this used/total ratio of the filesystem. DLedger starts force-cleaning at
    # diskSpaceRatioToForceClean = 0.85 and forbids writes at diskFullRatio = 0.90 (forceClean + 0.05); we
    # refuse writes already at 0.85 so that the preallocated next segment and the index still fit.
    disk_full_ratio: float = 0.85
    file_reserved_hours: float = 72  # DLedger's fileReservedHours
    # Reserve segments' blocks up front (fallocate: a full disk shows when a segment is made, not in the
    # middle of an append); the next segment is prepared in the background. Why not zero-filled ahead like
    # RocketMQ's warm-up: files.SegmentAllocator. False: sparse files.
    preallocate: bool = True
    # flush() also writes a checkpoint when the last one is older than this (DLedger's checkPointInterval).
    checkpoint_interval_ms: int = 3_000
    # statvfs is asked at most this often by the disk guard.
    disk_check_interval_ms: int = 1_000

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "preallocate":
                if not isinstance(value, bool):
                    raise ValueError(f"preallocate must be a bool, got {value!r}")
            elif isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{f.name} must be a number, got {value!r}")
            elif f.name.endswith(("_bytes", "_entries", "_ms")) and not isinstance(value, int):
                raise ValueError(f"{f.name} must be an integer, got {value!r}")
        if self.max_entry_bytes < 1:
            raise ValueError(f"max_entry_bytes must be >= 1, got {self.max_entry_bytes}")
        if self.data_segment_size_bytes < max(MIN_DATA_SEGMENT_BYTES, self.max_record_bytes + log_entry.MIN_BLANK_SIZE):
            raise ValueError(
                f"data_segment_size_bytes {self.data_segment_size_bytes} must be >= {MIN_DATA_SEGMENT_BYTES} and hold"
                f" one largest record ({self.max_record_bytes} bytes) plus a blank record")
        u = log_entry.INDEX_UNIT_SIZE
        if self.index_segment_size_bytes < 4 * u or self.index_segment_size_bytes % u:
            raise ValueError(f"index_segment_size_bytes {self.index_segment_size_bytes} must be a multiple of {u}"
                             f" and hold at least 4 units")
        if not 0.0 < self.disk_full_ratio <= 1.0:
            raise ValueError(f"disk_full_ratio must be in (0, 1], got {self.disk_full_ratio}")
        if self.file_reserved_hours < 0:
            raise ValueError(f"file_reserved_hours must be >= 0, got {self.file_reserved_hours}")
        if self.checkpoint_interval_ms < 0:
            raise ValueError(f"checkpoint_interval_ms must be >= 0, got {self.checkpoint_interval_ms}")
        if self.disk_check_interval_ms < 0:
            raise ValueError(f"disk_check_interval_ms must be >= 0, got {self.disk_check_interval_ms}")

    @property
    def max_record_bytes(self) -> int:
        """Largest stored record: header + body + a producer tag."""
        return log_entry.HEADER_SIZE + self.max_entry_bytes + log_entry.PRODUCER_TAG_SIZE

    @property
    def index_units_per_segment(self) -> int:
        return self.index_segment_size_bytes // log_entry.INDEX_UNIT_SIZE
