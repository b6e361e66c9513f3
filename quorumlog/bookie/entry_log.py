"""Entry logs (BookKeeper's EntryLogger): the entries of every ledger interleaved in append order, in files
`entrylog-ID.log` that roll over at `entry_log_file_bytes`. Written through the page cache and fsynced at
checkpoints (the journal holds the durable copy until then).

Record: `[u32 size][u32 crc32c(body)][u64 ledger][i64 entry][body]`; a location is (log id, offset of the
record). Compaction copies the live records of a log into the current one and deletes it (storage.py).
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

    def _path(self, log_id: int) -> str:
        return os.path.join(self.dir, f"entrylog-{log_id:020d}.log")

    def log_ids(self) -> list[int]:
        return sorted(int(m.group(1)) for m in map(_FILE.match, os.listdir(self.dir)) if m)

    def append(self, ledger_id: int, entry_id: int, body: bytes) -> Location:
        if self._offset >= self.file_bytes:
            self._roll()
        location = (self.current_id, self._offset)
        self._file.write(_HEAD.pack(len(body), crc32c(body), ledger_id, entry_id))
        self._file.write(body)
        self._offset += _HEAD.size + len(body)
        return location

    def _roll(self) -> None:
        self._file.flush()
        self._file.close()
        self.current_id += 1
        self._file = open(self._path(self.current_id), "ab", buffering=_BUFFER_BYTES)
        self._offset = 0
        self._unsynced.add(self.current_id)

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
        if log_id == self.current_id:
            self._file.flush()
        with open(self._path(log_id), "rb") as f:
            f.seek(offset)
            head = f.read(_HEAD.size)
            if len(head) != _HEAD.size:
                raise CorruptEntry(f"entry log {log_id} offset {offset}: truncated header")
            size, crc, ledger, entry = _HEAD.unpack(head)
            body = f.read(size)
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

    def size_of(self, log_id: int) -> int:
        if log_id == self.current_id:
            self._file.flush()  # (appends still in the buffer count too)
        return os.path.getsize(self._path(log_id))

    def remove(self, log_id: int) -> None:
        assert log_id != self.current_id
        os.unlink(self._path(log_id))

    def close(self) -> None:
        self._file.flush()
        self._file.close()
