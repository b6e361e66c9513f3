"""A group's files beside its log, for both kinds of group: opening its store, its last flush on close, and the
disk blocks its directory holds (status and metrics)."""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING

from ..clock import monotonic_ms
from ..config import NodeConfig
from .group_commit import GroupCommitter

if TYPE_CHECKING:
    from ..store.file_store import FileStore

log = logging.getLogger(__name__)

STATUS_DISK_BYTES_INTERVAL_MS = 2_000


async def final_flush(store: FileStore, committer: GroupCommitter, group: str) -> None:
    """A closing group's last fsync and checkpoint, after any running fsync (io_lock)."""
    try:
        async with committer.io_lock:
            await asyncio.to_thread(store.flush)
            await asyncio.to_thread(store.checkpoint)
    except Exception as e:  # noqa: BLE001 - a failing disk must not block shutdown
        log.error("final flush/checkpoint failed group=%s: %s", group, e)


class DirectoryBytes:
    """The disk blocks under a group's directory for status and metrics, counted on a thread: the walk stats
    every file, and once the inode cache is cold (after drop_caches, or pushed out by heavy writes) each stat
    reads the disk behind everything queued there. On the loop it stalled every group of the node (204 ms
    measured under batched writes, at a status request). `value()` answers the last count at once and starts
    the next when that one is older than STATUS_DISK_BYTES_INTERVAL_MS."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._bytes = 0
        self._at_ms = -STATUS_DISK_BYTES_INTERVAL_MS
        self._counting: asyncio.Future[int] | None = None

    def value(self) -> int:
        t = monotonic_ms()
        if self._counting is None and t - self._at_ms >= STATUS_DISK_BYTES_INTERVAL_MS:
            self._at_ms = t
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # (no loop: a tool reading a status directly)
                self._bytes = directory_bytes(self._path)
                return self._bytes
            self._counting = loop.run_in_executor(None, directory_bytes, self._path)
            self._counting.add_done_callback(self._counted)
        return self._bytes

    def _counted(self, fut: asyncio.Future[int]) -> None:
        self._counting = None
        if not fut.cancelled() and fut.exception() is None:
            self._bytes = fut.result()


def directory_bytes(data_dir: str) -> int:
    """Disk blocks used under a group's directory (a sparse segment counts what it holds)."""
    total = 0
    for root, dirs, files in os.walk(data_dir):
        if root == data_dir and "groups" in dirs:
            dirs.remove("groups")  # the default group's directory holds the others' (node.py)
        for f in files:
            try:
                total += os.stat(os.path.join(root, f)).st_blocks * 512
            except OSError:
                pass
    return total


def open_store(cfg: NodeConfig) -> FileStore:
    from ..store.file_store import FileStore
    return FileStore(os.path.join(cfg.data_dir, "store"), cfg.store_config())
