"""Entry logs (BookKeeper's EntryLogger): the entries of every ledger interleaved in append order, in files
`entrylog-ID.log` that roll over at `entry_log_file_bytes`. Written through the page cache and fsynced at
checkpoints (the journal holds the durable copy until then).

Record: `[u32 size][u32 crc32c(body)][u64 ledger][i64 entry][body]`; a location is (log id, offset of the
record). Compaction copies the live records of a log into the current one and deletes it (storage.py).

A write that fails (a full disk) may leave part of a record in the file: the logger is then `broken`, and the
next append first hands over what the buffer still holds and starts a new log, so no record is ever written
after a partial one (a location is the offset the logger counted, which a stray partial record would shift).

Each log's bytes per ledger (BookKeeper's EntryLogMetadata) are counted as it is written, and found once by a
walk of the record headers for a log written before this process started: garbage collection judges a log
by them instead of reading it whole on the node's loop (a full pass over GBs of logs stalled every node for
seconds each minute).
"""

from __future__ import annotations

import os
import re
import struct
from typing import Iterator

from ..errors import CorruptEntry
from ..format.log_entry import crc32c

ENTRY_LOG_FILE_BYTES = 64 * 1024 * 1024  # BookKeeper logSizeLimit is 1 GiB; smaller logs compact sooner
# Appends are handed to the OS a MiB at a time (flush_begin, reads and rolls hand over the rest): the default
# 8 KiB buffer cost a write() every few 1 KiB adds, the bookie's biggest per-add cost in a profile.
_BUFFER_BYTES = 1 << 20
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
        self._file = open(self._path(self.current_id), "ab", buffering=_BUFFER_BYTES)
        self._offset = 0
        self._unsynced: set[int] = {self.current_id}
        # log id -> {ledger id: bytes of its records}; the current log's is counted by append, older ones' are
        # filled in by ledger_bytes / set_ledger_bytes
        self._ledger_bytes: dict[int, dict[int, int]] = {self.current_id: {}}
        self.broken: OSError | None = None  # a write failed: the next append starts a new log first

    def _path(self, log_id: int) -> str:
        return os.path.join(self.dir, f"entrylog-{log_id:020d}.log")

    def log_ids(self) -> list[int]:
        return sorted(int(m.group(1)) for m in map(_FILE.match, os.listdir(self.dir)) if m)

    def append(self, ledger_id: int, entry_id: int, body: bytes) -> Location:
        if self._offset >= self.file_bytes or self.broken is not None:
            self.roll()
        location = (self.current_id, self._offset)
        try:
            self._file.write(_HEAD.pack(len(body), crc32c(body), ledger_id, entry_id))
            self._file.write(body)
        except OSError as e:
            self.broken = e
            raise
        size = _HEAD.size + len(body)
        self._offset += size
        counts = self._ledger_bytes[self.current_id]
        counts[ledger_id] = counts.get(ledger_id, 0) + size
        return location

    def roll(self) -> None:
        """The next log. Raises OSError (nothing changed, but what the buffer held may be partly written) if the
        current log's buffer cannot be handed over or the new log cannot be made."""
        try:
            self._file.flush()  # (records already indexed: they must reach the file before it is left)
            new = open(self._path(self.current_id + 1), "ab", buffering=_BUFFER_BYTES)
        except OSError as e:
            self.broken = self.broken or e
            raise
        self._file.close()
        self.current_id += 1
        self._file = new
        self._offset = 0
        self._unsynced.add(self.current_id)
        self._ledger_bytes[self.current_id] = {}
        self.broken = None

    def flush_begin(self) -> list[str]:
        """Hand every appended record to the OS; the paths whose data sync_paths must make durable."""
        self._file.flush()
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
        self._file.flush()
        for log_id in sorted(self._unsynced):
            if log_id == self.current_id:
                os.fdatasync(self._file.fileno())
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
        unwritten: OSError | None = None
        if log_id == self.current_id:
            try:
                self._file.flush()
            except OSError as e:  # a full disk: the records still in the buffer cannot be read; the others can
                unwritten = e
        with open(self._path(log_id), "rb") as f:
            f.seek(offset)
            head = f.read(_HEAD.size)
            if len(head) != _HEAD.size:
                if unwritten is not None:
                    raise unwritten
                raise CorruptEntry(f"entry log {log_id} offset {offset}: truncated header")
            size, crc, ledger, entry = _HEAD.unpack(head)
            body = f.read(size)
            if len(body) != size and unwritten is not None:
                raise unwritten
        if (ledger, entry) != (ledger_id, entry_id) or len(body) != size or crc32c(body) != crc:
            raise CorruptEntry(f"entry log {log_id} offset {offset}: expected {ledger_id}/{entry_id}, found "
                               f"{ledger}/{entry} ({len(body)} of {size} bytes)")
        return body

    def scan(self, log_id: int) -> Iterator[tuple[int, int, int, bytes]]:
        """(offset, ledger, entry, body) of every intact record of a log, in order (compaction, GC)."""
        if log_id == self.current_id:
            self._file.flush()
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
            self._file.flush()  # (appends still in the buffer count too)
        return os.path.getsize(self._path(log_id))

    def remove(self, log_id: int) -> None:
        assert log_id != self.current_id
        os.unlink(self._path(log_id))
        self._ledger_bytes.pop(log_id, None)

    def close(self) -> None:
        self._file.flush()
        self._file.close()
