"""Entry logs (BookKeeper's EntryLogger): the entries of every ledger interleaved in append order, in files
`entrylog-ID.log` that roll over at `entry_log_file_bytes`. Written through the page cache and fsynced at
checkpoints (the journal holds the durable copy until then).

Record: `[u32 size][u32 crc32c(body)][u64 ledger][i64 entry][body]`; a location is (log id, offset of the
record). Compaction copies the live records of a log into the current one and deletes it (storage.py).

Appends collect in a buffer of the logger's own (BookKeeper's DbLedgerStorage keeps a write cache for the same
reason) and are written a MiB at a time: reads of the records in it are served from it, so a full disk that
keeps them from the file hides none of them, and a write that fails or is cut short leaves the file an exact
prefix of the log's records, the rest still buffered, in order (no record is ever split between a failed
write and a later one at a shifted offset).

Each log's bytes per ledger (BookKeeper's EntryLogMetadata) are counted as it is written, and found once by a
walk of the record headers for a log written before this process started: garbage collection judges a log
by them instead of reading it whole on the node's loop (a full pass over GBs of logs stalled every node for
seconds each minute).
"""

from __future__ import annotations

import os
import re
import struct
from typing import Callable, Iterator

from ..errors import CorruptEntry
from ..format.log_entry import crc32c
from ..store.files import start_writeback

ENTRY_LOG_FILE_BYTES = 64 * 1024 * 1024  # BookKeeper logSizeLimit is 1 GiB; smaller logs compact sooner
# Appends are handed to the OS a MiB at a time (flush_begin, scans and rolls hand over the rest): an 8 KiB
# buffer cost a write() every few 1 KiB adds, the bookie's biggest per-add cost in a profile.
_BUFFER_BYTES = 1 << 20
_write = os.write  # (tests put a failing disk here)
_HEAD = struct.Struct(">IIQq")  # body size, crc32c(body), ledger id, entry id
_FILE = re.compile(r"^entrylog-(\d{20})\.log$")

Location = tuple[int, int]  # (entry log id, offset of the record)


class EntryLogger:
    def __init__(self, directory: str, file_bytes: int = ENTRY_LOG_FILE_BYTES) -> None:
        self.dir = directory
        os.makedirs(directory, exist_ok=True)
        self.file_bytes = file_bytes
        ids = self.log_ids()
        self.current_id = ids[-1] + 1 if ids else 0  # never append to a log a crash may have torn
        self._fd = self._open(self.current_id)
        self._written = 0  # bytes of the current log in its file; the rest of _offset is in _pending
        self._pending = bytearray()
        self._offset = 0
        self._unsynced: set[int] = {self.current_id}
        # log id -> {ledger id: bytes of its records}; the current log's is counted by append, older ones' are
        # filled in by ledger_bytes / set_ledger_bytes
        self._ledger_bytes: dict[int, dict[int, int]] = {self.current_id: {}}

    def _path(self, log_id: int) -> str:
        return os.path.join(self.dir, f"entrylog-{log_id:020d}.log")

    def log_ids(self) -> list[int]:
        return sorted(int(m.group(1)) for m in map(_FILE.match, os.listdir(self.dir)) if m)

    def _open(self, log_id: int) -> int:
        return os.open(self._path(log_id), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def _make_room(self) -> None:
        """Raises OSError if the log must roll or the buffer be written and cannot."""
        if self._offset >= self.file_bytes:
            self.roll()
        elif len(self._pending) >= _BUFFER_BYTES:
            self.write_out()

    def append(self, ledger_id: int, entry_id: int, body: bytes) -> Location:
        """Raises OSError (the record not appended) if the log must roll or the buffer be written and cannot."""
        self._make_room()
        location = (self.current_id, self._offset)
        self._pending += _HEAD.pack(len(body), crc32c(body), ledger_id, entry_id)
        self._pending += body
        size = _HEAD.size + len(body)
        self._offset += size
        counts = self._ledger_bytes[self.current_id]
        counts[ledger_id] = counts.get(ledger_id, 0) + size
        return location

    def append_records(self, ledger_id: int, write: "Callable[[int, int, bytearray, int], int]") -> None:
        """Several records of a ledger at once (the bookie's C path, add_items.py): write(log id, offset, buffer,
        file_bytes) appends them to the buffer, the first at that offset of that log, stops once the log holds
        file_bytes (where append would roll it), and returns their size. The log rolls or the buffer is written
        out before them, as before one append."""
        self._make_room()
        size = write(self.current_id, self._offset, self._pending, self.file_bytes)
        self._offset += size
        counts = self._ledger_bytes[self.current_id]
        counts[ledger_id] = counts.get(ledger_id, 0) + size

    def write_out(self) -> None:
        """Hand the buffer to the OS. Raises OSError with what was written taken out of the buffer: the file
        stays an exact prefix of the log, the rest of it buffered."""
        if not self._pending:
            return
        done = 0
        view = memoryview(self._pending)
        try:
            while done < len(view):
                with view[done:] as part:  # (released even if a failed write's traceback keeps it)
                    done += _write(self._fd, part)
        finally:
            view.release()
            del self._pending[:done]
            start_writeback(self._fd, self._written, done)  # (a checkpoint's fdatasync then finds little left)
            self._written += done

    def roll(self) -> None:
        """The next log. Raises OSError (still on the current one) if its buffer cannot be written out or the new
        log cannot be made."""
        self.write_out()  # (records indexed already: they must reach the file before it is left)
        new = self._open(self.current_id + 1)
        os.close(self._fd)
        self.current_id += 1
        self._fd, self._written, self._offset = new, 0, 0
        self._unsynced.add(self.current_id)
        self._ledger_bytes[self.current_id] = {}

    def flush_begin(self) -> list[str]:
        """Hand every appended record to the OS; the paths whose data sync_paths must make durable."""
        self.write_out()
        paths = [self._path(log_id) for log_id in sorted(self._unsynced)]
        self._unsynced = {self.current_id}
        return paths

    @staticmethod
    def sync_paths(paths: list[str]) -> None:
        """fdatasync each (by its own descriptor: may run on another thread while appends go on)."""
        for path in paths:
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue  # compacted away since: its live records were copied and synced
            try:
                os.fdatasync(fd)
            finally:
                os.close(fd)

    def flush(self) -> None:
        """Make every appended record durable (a checkpoint's first step)."""
        self.write_out()
        for log_id in sorted(self._unsynced):
            if log_id == self.current_id:
                os.fdatasync(self._fd)
            else:
                fd = os.open(self._path(log_id), os.O_RDONLY)
                try:
                    os.fdatasync(fd)
                finally:
                    os.close(fd)
        self._unsynced = {self.current_id}
        fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def read(self, location: Location, ledger_id: int, entry_id: int) -> bytes:
        log_id, offset = location
        if log_id == self.current_id and offset >= self._written:  # (a reader following a writer: no syscall)
            at = offset - self._written
            head = bytes(self._pending[at:at + _HEAD.size])
            if len(head) != _HEAD.size:
                raise CorruptEntry(f"entry log {log_id} offset {offset}: truncated header")
            size, crc, ledger, entry = _HEAD.unpack(head)
            body = bytes(self._pending[at + _HEAD.size:at + _HEAD.size + size])
        else:
            with open(self._path(log_id), "rb") as f:
                f.seek(offset)
                head = f.read(_HEAD.size)
                if log_id == self.current_id and len(head) < _HEAD.size:  # (the file ends inside it: a write cut)
                    head += bytes(self._pending[:_HEAD.size - len(head)])
                if len(head) != _HEAD.size:
                    raise CorruptEntry(f"entry log {log_id} offset {offset}: truncated header")
                size, crc, ledger, entry = _HEAD.unpack(head)
                body = f.read(size)
            if log_id == self.current_id and len(body) < size:
                start = max(0, offset + _HEAD.size - self._written)
                body += bytes(self._pending[start:start + size - len(body)])
        if (ledger, entry) != (ledger_id, entry_id) or len(body) != size or crc32c(body) != crc:
            raise CorruptEntry(f"entry log {log_id} offset {offset}: expected {ledger_id}/{entry_id}, found "
                               f"{ledger}/{entry} ({len(body)} of {size} bytes)")
        return body

    def read_log(self, log_id: int) -> bytes:
        """A log other than the current one, whole: it no longer changes, so any thread may read it."""
        assert log_id != self.current_id
        with open(self._path(log_id), "rb") as f:
            return f.read()

    def scan(self, log_id: int, data: bytes | None = None) -> Iterator[tuple[int, int, int, bytes]]:
        """(offset, ledger, entry, body) of every intact record of a log, in order (compaction, GC); `data`: the
        log's bytes when the caller read them already (read_log, off its loop)."""
        if data is None:
            if log_id == self.current_id:
                self.write_out()
            with open(self._path(log_id), "rb") as f:
                data = f.read()
        pos = 0
        while pos + _HEAD.size <= len(data):
            size, crc, ledger, entry = _HEAD.unpack_from(data, pos)
            body = data[pos + _HEAD.size:pos + _HEAD.size + size]
            if len(body) != size or crc32c(body) != crc:
                return  # a torn tail: never indexed (the journal replays it into a newer log)
            yield pos, ledger, entry, body
            pos += _HEAD.size + size

    def unmapped(self) -> list[int]:
        """Logs whose bytes per ledger are not known yet (written before this process started)."""
        return [i for i in self.log_ids() if i not in self._ledger_bytes]

    def map_ledgers(self, log_id: int) -> dict[int, int]:
        """{ledger: bytes} of a log by a walk of its record headers (bodies skipped, not checked: a torn tail
        ends it). Reads only the file, so a node runs it off its loop; set_ledger_bytes keeps the result."""
        counts: dict[int, int] = {}
        with open(self._path(log_id), "rb", buffering=_BUFFER_BYTES) as f:  # (a seek within it reads nothing)
            end = os.fstat(f.fileno()).st_size
            pos = 0
            while pos + _HEAD.size <= end:
                f.seek(pos)
                head = f.read(_HEAD.size)
                if len(head) < _HEAD.size:
                    break
                size, _, ledger, _ = _HEAD.unpack(head)
                if pos + _HEAD.size + size > end:
                    break
                counts[ledger] = counts.get(ledger, 0) + _HEAD.size + size
                pos += _HEAD.size + size
        return counts

    def set_ledger_bytes(self, log_id: int, counts: dict[int, int]) -> None:
        if log_id in self.log_ids():  # (not removed meanwhile)
            self._ledger_bytes.setdefault(log_id, counts)

    def ledger_bytes(self, log_id: int) -> dict[int, int]:
        """{ledger: bytes of its records} in a log (mapped now if it was not yet)."""
        if log_id not in self._ledger_bytes:
            self.set_ledger_bytes(log_id, self.map_ledgers(log_id))
        return self._ledger_bytes[log_id]

    def size_of(self, log_id: int) -> int:
        if log_id == self.current_id:
            return self._offset  # (appends still in the buffer count too)
        return os.path.getsize(self._path(log_id))

    def remove(self, log_id: int) -> None:
        assert log_id != self.current_id
        os.unlink(self._path(log_id))
        self._ledger_bytes.pop(log_id, None)

    def close(self) -> None:
        try:
            self.write_out()
        finally:
            os.close(self._fd)
