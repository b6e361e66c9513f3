"""A bookie's journal (BookKeeper's Journal): every add, fence and explicit LAC is written here first and
fsynced before it is acknowledged; group commit batches what arrives within `journal_max_group_wait_ms`.

Files `journal-SEQ.log` hold records `[u32 size][u32 crc32c(payload)][payload]`; a file rolls over past
`journal_file_bytes`. The storage checkpoints (entry logs fsynced, index written) and then records the
journal's mark (file, offset) it covers: replay on restart starts there, and files wholly below it are
deleted. A torn or corrupt record ends replay (it was never acknowledged: acks follow the fsync).

One writer thread owns the files: `submit(payload)` returns a concurrent.futures.Future resolved once the
record is durable (or failed with the OSError that kept it from being so: the storage then fails its adds).

A write or fdatasync that fails (a full disk, an I/O error) fails its group, and the journal is `error` from then
on: every later group fails at once, without touching the disk, until `repair()` succeeds. Repair abandons the
file the failure happened in (after a failed fdatasync its pages may be gone while a retry reports success: no
byte is written there again) and starts a new one; replay reads past the torn tail of an abandoned file into
the files after it. BookKeeper's bookie shuts down on a journal IOException; here the bookie turns read-only
and comes back by itself once the disk takes writes again (storage.py).
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


class Framed:
    """`count` records framed already, as the writer frames them (the bookie's C path makes a batch's at once)."""

    __slots__ = ("data", "count")

    def __init__(self, data: bytes, count: int) -> None:
        self.data, self.count = data, count


def _payload_bytes(payload: "bytes | tuple[bytes, bytes | memoryview] | Framed") -> int:
    if type(payload) is tuple:
        head, body = payload
        return len(head) + len(body)
    if type(payload) is Framed:
        return len(payload.data)
    return len(payload)


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
        self.error: OSError | None = None  # the failure that broke the journal, until repair() succeeds
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

    def _roll(self, *, abandon: bool = False) -> None:
        """Start the next file; the current one is fsynced first, or, after a failure, abandoned as it is."""
        if self._file is not None and not abandon:
            os.fsync(self._file.fileno())
        new = open(self._path(self._seq + 1), "ab")
        try:
            _fsync_dir(self.dir)
        except OSError:
            new.close()
            raise
        if self._file is not None:
            try:
                self._file.close()
            except OSError:  # an abandoned file's unwritten buffer: never acknowledged
                pass
        self._seq += 1
        self._file = new
        self._offset = self._dropped = 0

    # -- replay -------------------------------------------------------------------------------------------
    def replay(self, mark: Mark) -> Iterator[bytes]:
        """Payloads of the records from `mark` on, in order, up to the first torn or corrupt one of the last file.
        A torn record in an earlier file ends that file only: a file is complete (fsynced) before the next one
        starts, unless a write failed in it and it was abandoned (repair()), its tail never acknowledged."""
        files = self.files()
        for i, (seq, path) in enumerate(files):
            if seq < mark[0]:
                continue
            last = i == len(files) - 1
            with open(path, "rb") as f:
                data = f.read()
            pos = mark[1] if seq == mark[0] else 0
            while pos + _HEAD.size <= len(data):
                size, crc = _HEAD.unpack_from(data, pos)
                payload = data[pos + _HEAD.size:pos + _HEAD.size + size]
                if size > MAX_RECORD_BYTES or len(payload) != size or crc32c(payload) != crc:
                    break
                yield payload
                pos += _HEAD.size + size
            if pos != len(data):
                if last:
                    log.warning("journal replay stops at a torn tail file=%s offset=%d", path, pos)
                    return
                log.warning("journal replay leaves the torn tail of an abandoned file=%s offset=%d", path, pos)

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

    def submit_many(self, payloads: "list[bytes | tuple[bytes, bytes | memoryview] | Framed]") -> Future:
        """Records that become durable together (one Future: a batch of adds costs one completion). A record
        may come as (head, body), its payload their concatenation: the writer joins it into its write as it
        is, rather than the caller copying each body once more to make one; or several as Framed. A record over
        MAX_RECORD_BYTES is never written: replay would take it for a torn tail and drop it with every record
        after it (the storage refuses such an entry first: BookieConfig.max_entry_bytes)."""
        for p in payloads:
            if type(p) is not Framed and _payload_bytes(p) > MAX_RECORD_BYTES:
                raise ValueError(f"journal record of {_payload_bytes(p)} bytes > MAX_RECORD_BYTES {MAX_RECORD_BYTES}")
        return self._enqueue(payloads)

    def repair(self) -> Future:
        """After a failure: a new file, if the disk takes one (done with None; failed with the OSError)."""
        return self._enqueue(None)

    def _enqueue(self, payloads: "list | None") -> Future:
        fut: Future = Future()
        with self._cond:
            if self._closed:
                fut.set_exception(OSError("journal closed"))
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
                while time.monotonic() < deadline and self._queued_bytes() < self.group_bytes:
                    time.sleep(min(0.0005, self.max_group_wait_s))
            with self._cond:
                batch = list(self._queue)
                self._queue.clear()
            repairs = [fut for payloads, fut in batch if payloads is None]
            if repairs:
                batch = [item for item in batch if item[0] is not None]
                self._repair(repairs)
            if not batch:
                continue
            if self.error is not None:  # broken: fail at once, until a repair
                for _, fut in batch:
                    fut.set_exception(self.error)
                continue
            try:
                self._write(batch)
            except OSError as e:  # nothing of this group is acknowledged; the file is never written again
                log.error("journal write failed, the bookie's adds fail until it is repaired: %s", e)
                self.error = e
                for _, fut in batch:
                    fut.set_exception(e)
                continue
            for _, fut in batch:
                fut.set_result(self.durable)

    def _queued_bytes(self) -> int:
        """The payload bytes waiting (a repair has none; a record may be bytes, (head, body) or Framed)."""
        with self._cond:
            return sum(_payload_bytes(p) for ps, _ in self._queue if ps is not None for p in ps)

    def _repair(self, waiting: list[Future]) -> None:
        if self.error is not None:
            try:
                self._roll(abandon=True)
            except OSError as e:
                for fut in waiting:
                    fut.set_exception(e)
                return
            log.warning("journal repaired: file %d abandoned after %s, writing to file %d", self._seq - 1,
                        self.error, self._seq)
            self.error = None
            self.durable = (self._seq, 0)
        for fut in waiting:
            fut.set_result(None)

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
                elif type(payload) is Framed:
                    parts.append(payload.data)
                    records += payload.count
                    continue
                else:
                    parts += (_HEAD.pack(len(payload), crc32c(payload)), payload)
                records += 1
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
