"""The disk guard: appends are refused with DiskFull above disk_full_ratio; reads go on.

statvfs is cached for disk_check_interval_ms so the guard costs a clock read per batch, not a syscall — while
appends go on. While it refuses them, each check asks statvfs again: a refused batch does no other work, and the
member takes appends again as soon as space returns, not up to an interval later (a `_meta` member refusing on
a stale reading held a commit, and with it a master/slave hand-over, for a second).
The ratio is DLedger's: (total - free) / total, with `free` counting blocks reserved for root.
"""

from __future__ import annotations

import logging
import os
import time

from ..errors import DiskFull

log = logging.getLogger(__name__)


def used_ratio(path: str) -> float:
    st = os.statvfs(path)
    if st.f_blocks == 0:
        return 0.0
    return (st.f_blocks - st.f_bfree) / st.f_blocks


class DiskGuard:
    def __init__(self, path: str, disk_full_ratio: float, check_interval_ms: int) -> None:
        self.path = path
        self.disk_full_ratio = disk_full_ratio
        self.check_interval_s = check_interval_ms / 1000.0
        self._next_check = 0.0
        self._held_until = 0.0  # mark_full: refused until then, unless space was freed since
        self._held_ratio = 0.0  # (the reading at the ENOSPC)
        self._ratio = 0.0
        self._full = False

    @property
    def ratio(self) -> float:
        return self._ratio

    def check(self) -> None:
        now = time.monotonic()
        if self._full or now >= self._next_check:
            self.refresh(now)
        if self._full:
            raise DiskFull(f"disk usage {self._ratio:.1%} of {self.path} above disk_full_ratio {self.disk_full_ratio}")

    def refresh(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        self._ratio = used_ratio(self.path)
        held = now < self._held_until and self._ratio >= self._held_ratio
        full = held or self._ratio > self.disk_full_ratio
        if full != self._full:
            log.warning("disk guard %s path=%s used_ratio=%.3f disk_full_ratio=%.3f",
                        "refusing appends" if full else "accepting appends again", self.path, self._ratio,
                        self.disk_full_ratio)
        self._full = full
        self._next_check = now + self.check_interval_s

    def mark_full(self) -> None:
        """A write hit ENOSPC: refuse appends for an interval unless space is freed meanwhile (statvfs reads less
        used than now), then as the ratio says. (ENOSPC below the ratio — out of inodes, say — would otherwise
        fail a write per batch.)"""
        self._held_ratio = used_ratio(self.path)
        self._full = True
        self._next_check = self._held_until = time.monotonic() + self.check_interval_s
