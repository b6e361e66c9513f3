"""A bookie's journal (BookKeeper's Journal): every add, fence and explicit LAC is written here first and
fsynced before it is acknowledged; group commit batches what arrives within `journal_max_group_wait_ms`.

Files `journal-SEQ.log` hold records `[u32 size][u32 crc32c(payload)][payload]`; a file rolls over past
`journal_file_bytes`. The storage checkpoints (entry logs fsynced, index written) and then records the
journal's mark (file, offset) it covers: replay on restart starts there, and files wholly below it are
deleted. A torn or corrupt record ends replay (it was never acknowledged: acks follow the fsync).

One writer thread owns the files: `submit(payload)` returns a concurrent.futures.Future resolved once the
record is durable (or failed with the OSError that kept it from being so: the storage then fails its adds).
"""

from __future__ import annotations

import logging
import os
import re
import struct
import threading
import time
from collections import deque
from concurrent.futures import Future
from typing import Iterator

from ..format.log_entry import crc32c

log = logging.getLogger(__name__)

JOURNAL_MAX_GROUP_WAIT_MS = 2  # BookKeeper journalMaxGroupWaitMSec
# BookKeeper journalFlushWhenQueueEmpty (false there): true here — the writer fsyncs as soon as it has drained
# the queue; records arriving during an fsync form the next group (natural batching, as the node's group
# commit does), so a lone add does not wait 2 ms and a busy bookie still groups hundreds per fsync.
JOURNAL_FLUSH_WHEN_QUEUE_EMPTY = True
JOURNAL_BUFFERED_WRITES_THRESHOLD = 512 * 1024  # journalBufferedWritesThreshold: flush a group at this size
JOURNAL_FILE_BYTES = 256 * 1024 * 1024  # journalMaxSizeMB is 2 GiB; smaller files are deleted sooner
# BookKeeper journalRemovePagesFromCache (true): once synced, the journal's pages leave the page cache. Only
# replay reads them, and every page they hold is one the next write must take elsewhere: on this VM, page
# cache growing into memory not used lately cost 2.4 s of kernel CPU per GB written, against 0.2-0.3 s when
# it reuses pages just freed.
JOURNAL_REMOVE_PAGES_FROM_CACHE = True
_PAGE = 4096
_HEAD = struct.Struct(">II")  # payload size, crc32c
_FILE = re.compile(r"^journal-(\d{20})\.log$")
MAX_RECORD_BYTES = 64 * 1024 * 1024

Mark = tuple[int, int]  # (file sequence, byte offset): everything before it is durable


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Journal:
    def __init__(self, directory: str, *, max_group_wait_ms: float = JOURNAL_MAX_GROUP_WAIT_MS,
                 group_bytes: int = JOURNAL_BUFFERED_WRITES_THRESHOLD, file_bytes: int = JOURNAL_FILE_BYTES,
                 flush_when_queue_empty: bool = JOURNAL_FLUSH_WHEN_QUEUE_EMPTY,
                 remove_pages_from_cache: bool = JOURNAL_REMOVE_PAGES_FROM_CACHE) -> None:
        self.dir = directory
        os.makedirs(directory, exist_ok=True)
        self.max_group_wait_s = max_group_wait_ms / 1000
        self.group_bytes = group_bytes
        self.file_bytes = file_bytes
        self.flush_when_queue_empty = flush_when_queue_empty
        self.remove_pages_from_cache = remove_pages_from_cache and hasattr(os, "posix_fadvise")
        self._dropped = 0  # the current file's bytes below this left the page cache
        self._queue: deque[tuple[bytes, Future]] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._failed: OSError | None = None
        self._file = None
        self._seq = -1
        self._offset = 0
        self.durable: Mark = (0, 0)
        self.fsyncs = 0
        self.records = 0
        self._thread: threading.Thread | None = None

    # -- files --------------------------------------------------------------------------------------------
    def files(self) -> list[tuple[int, str]]:
        out = []
        for name in os.listdir(self.dir):
            m = _FILE.match(name)
            if m:
                out.append((int(m.group(1)), os.path.join(self.dir, name)))
        return sorted(out)

    def _path(self, seq: int) -> str:
        return os.path.join(self.dir, f"journal-{seq:020d}.log")

    def _roll(self) -> None:
        if self._file is not None:
            os.fsync(self._file.fileno())
            self._file.close()
        self._seq += 1
        self._file = open(self._path(self._seq), "ab")
        self._offset = self._dropped = 0
        _fsync_dir(self.dir)

    # -- replay -------------------------------------------------------------------------------------------
    def replay(self, mark: Mark) -> Iterator[bytes]:
        """Payloads of the records from `mark` on, in order, up to the first torn or corrupt one."""
        for seq, path in self.files():
            if seq < mark[0]:
                continue
            with open(path, "rb") as f:
                data = f.read()
            pos = mark[1] if seq == mark[0] else 0
            while pos + _HEAD.size <= len(data):
                size, crc = _HEAD.unpack_from(data, pos)
                payload = data[pos + _HEAD.size:pos + _HEAD.size + size]
                if size > MAX_RECORD_BYTES or len(payload) != size or crc32c(payload) != crc:
                    log.warning("journal replay stops at a torn record file=%s offset=%d", path, pos)
                    return
                yield payload
                pos += _HEAD.size + size
            if pos != len(data):
                log.warning("journal replay stops at a torn tail file=%s offset=%d", path, pos)
                return

    # -- writing ------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Open a new journal file (never append to one a crash may have torn) and start the writer."""
        files = self.files()
        self._seq = files[-1][0] if files else -1
        self._roll()
        self.durable = (self._seq, 0)
        self._thread = threading.Thread(target=self._run, name="bookie-journal", daemon=True)
        self._thread.start()

    def submit(self, payload: bytes) -> Future:
        return self.submit_many([payload])

    def submit_many(self, payloads: "list[bytes | tuple[bytes, bytes | memoryview]]") -> Future:
        """Records that become durable together (one Future: a batch of adds costs one completion). A record
        may come as (head, body), its payload their concatenation: the writer joins it into its write as it
        is, rather than the caller copying each body once more to make one."""
        fut: Future = Future()
        with self._cond:
            if self._failed is not None or self._closed:
                fut.set_exception(self._failed or OSError("journal closed"))
                return fut
            self._queue.append((payloads, fut))
            self._cond.notify()
        return fut

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue and self._closed:
                    return
            if not self.flush_when_queue_empty:
                # BookKeeper's group commit: let more records arrive for up to max_group_wait, unless a group is
                # full already
                deadline = time.monotonic() + self.max_group_wait_s
                while time.monotonic() < deadline and \
                        sum(len(p) for ps, _ in self._queue for p in ps) < self.group_bytes:
                    time.sleep(min(0.0005, self.max_group_wait_s))
            with self._cond:
                batch = list(self._queue)
                self._queue.clear()
            try:
                self._write(batch)
            except OSError as e:  # the disk failed: nothing after this is durable; adds get the error
                log.error("journal write failed: %s", e)
                with self._cond:
                    self._failed = e
                    pending = list(self._queue)
                    self._queue.clear()
                for _, fut in batch + pending:
                    if not fut.done():
                        fut.set_exception(e)
                return
            for _, fut in batch:
                fut.set_result(self.durable)

    def _write(self, batch: list[tuple[list[bytes], Future]]) -> None:
        if self._offset >= self.file_bytes:
            self._roll()
        parts = []
        records = 0
        for payloads, _ in batch:
            for payload in payloads:
                if type(payload) is tuple:
                    head, body = payload
                    parts += (_HEAD.pack(len(head) + len(body), crc32c(body, crc32c(head))), head, body)
                else:
                    parts += (_HEAD.pack(len(payload), crc32c(payload)), payload)
            records += len(payloads)
        data = b"".join(parts)
        self._file.write(data)
        self._file.flush()
        os.fdatasync(self._file.fileno())
        self._offset += len(data)
        if self.remove_pages_from_cache:
            upto = self._offset - self._offset % _PAGE  # (the part-written last page stays: the next write fills it)
            if upto > self._dropped:
                try:
                    os.posix_fadvise(self._file.fileno(), self._dropped, upto - self._dropped,
                                     os.POSIX_FADV_DONTNEED)
                except OSError as e:  # advice only: the records are durable, the adds must not fail over it
                    log.debug("journal: page cache advice refused: %s", e)
                self._dropped = upto
        self.fsyncs += 1
        self.records += records
        self.durable = (self._seq, self._offset)

    def delete_before(self, mark: Mark) -> int:
        """Delete journal files wholly before `mark` (a checkpoint covers them); returns how many."""
        removed = 0
        for seq, path in self.files():
            if seq < mark[0] and seq != self._seq:
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    continue  # (deleted by a checkpoint before)
                removed += 1
        return removed

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(10)
        if self._file is not None:
            self._file.close()
            self._file = None
