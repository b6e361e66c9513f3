"""A bookie's index in RocksDB (BookKeeper's DbLedgerStorage: the ledger index and the entry location index
in RocksDB), through rocksdict:

    b"E" ledger u64 entry u64  -> entry log id u64, offset u64      where each entry's record is
    b"L" ledger u64            -> fenced u8, deleted u8, last add confirmed i64 (piggybacked or explicit)
    b"M"                       -> journal mark (file u64, offset u64) the last checkpoint covers
    b"I"                       -> this bookie's instance id (made once, with its first empty directory)

Changes since the last checkpoint live in memory (readers see them at once) and reach RocksDB in one synced
write batch with the journal mark at the checkpoint, so the index on disk always matches entry logs that
were fsynced before it, and replay from the mark redoes the rest.

That batch is written unsynced and its WAL then fdatasynced here: rocksdict holds the GIL through a synced
write, fsync included, so a checkpoint on another thread froze the node's event loop for as long as the disk
took (measured: a thread of 1 ms synced writes kept the main thread waiting half the time; with os.fdatasync in
their place, never). RocksDB hands an unsynced write to the OS before it returns, so syncing the WAL files
(and the directory, for a WAL just created) makes it as durable as `sync=True` would.
"""

from __future__ import annotations

import os
import re
import struct
import time
import uuid
from dataclasses import dataclass
from itertools import islice

from rocksdict import Options, Rdict, WriteBatch, WriteOptions

from .entry_log import Location

_KEY = struct.Struct(">cQQ")
_LEDGER_KEY = struct.Struct(">cQ")
_LOC = struct.Struct(">QQ")
_STATE = struct.Struct(">BBq")
_MARK_KEY, _INSTANCE_KEY = b"M", b"I"
_WAL = re.compile(r"^\d+\.log$")  # RocksDB's write-ahead log files
_UNSYNCED = WriteOptions()  # (sync False: handed to the OS, then _sync_wal)
_COMMIT_CHUNK = 1024  # index entries per write at a checkpoint (see write_commit)


@dataclass(frozen=True, slots=True)
class LedgerState:
    fenced: bool = False
    deleted: bool = False
    explicit_lac: int = -1


def _entry_key(ledger_id: int, entry_id: int) -> bytes:
    return _KEY.pack(b"E", ledger_id, entry_id)


class LedgerIndex:
    def __init__(self, directory: str) -> None:
        self.dir = directory
        self.db = Rdict(directory, options=Options(raw_mode=True))
        sync = WriteOptions()
        sync.sync = True
        self.db.set_write_options(sync)
        self._wal_files: set[str] = set()  # the WAL files synced last time (a new one: the directory too)
        self._entries: dict[tuple[int, int], Location] = {}
        self._last: dict[int, int] = {}  # ledger -> its highest entry id among the in-memory ones
        self._states: dict[int, LedgerState] = {}
        # a checkpoint being written by another thread (begin_commit .. end_commit): still read from here
        self._c_entries: dict[tuple[int, int], Location] = {}
        self._c_last: dict[int, int] = {}
        self._c_states: dict[int, LedgerState] = {}
        instance = self.db.get(_INSTANCE_KEY)
        if instance is None:
            instance = uuid.uuid4().hex.encode()
            self.db.put(_INSTANCE_KEY, instance)
        self.instance_id = instance.decode()

    # -- entries ------------------------------------------------------------------------------------------
    def put(self, ledger_id: int, entry_id: int, location: Location) -> None:
        self._entries[(ledger_id, entry_id)] = location
        if entry_id > self._last.get(ledger_id, -1):
            self._last[ledger_id] = entry_id

    def put_many(self, ledger_id: int, locations: "dict[tuple[int, int], Location]", last_entry: int) -> None:
        """put for several entries of a ledger: {(ledger, entry): location}, the highest entry among them."""
        self._entries.update(locations)
        if last_entry > self._last.get(ledger_id, -1):
            self._last[ledger_id] = last_entry

    def get(self, ledger_id: int, entry_id: int) -> Location | None:
        loc = self._entries.get((ledger_id, entry_id)) or self._c_entries.get((ledger_id, entry_id))
        if loc is not None:
            return loc
        raw = self.db.get(_entry_key(ledger_id, entry_id))
        return None if raw is None else _LOC.unpack(raw)

    def last_entry(self, ledger_id: int) -> int:
        """The highest entry id stored for the ledger, -1 if none."""
        it = self.db.iter()
        it.seek_for_prev(_entry_key(ledger_id, (1 << 64) - 1))
        on_disk = -1
        if it.valid():
            kind, ledger, entry = _KEY.unpack(it.key())
            if kind == b"E" and ledger == ledger_id:
                on_disk = entry
        return max(on_disk, self._last.get(ledger_id, -1), self._c_last.get(ledger_id, -1))

    def has_entries(self, ledger_id: int) -> bool:
        return self.last_entry(ledger_id) >= 0

    # -- ledgers ------------------------------------------------------------------------------------------
    def state(self, ledger_id: int) -> LedgerState | None:
        st = self._states.get(ledger_id) or self._c_states.get(ledger_id)
        if st is not None:
            return st
        raw = self.db.get(_LEDGER_KEY.pack(b"L", ledger_id))
        if raw is None:
            return None
        fenced, deleted, lac = _STATE.unpack(raw)
        return LedgerState(bool(fenced), bool(deleted), lac)

    def set_state(self, ledger_id: int, state: LedgerState) -> None:
        self._states[ledger_id] = state

    def ledgers(self) -> list[int]:
        """Every ledger this bookie holds state for (deleted ones until garbage collection drops them)."""
        out = set(self._states) | set(self._c_states)
        for key in self.db.keys(from_key=b"L"):
            if key[:1] != b"L":
                break
            out.add(_LEDGER_KEY.unpack(key)[1])
        return sorted(out)

    def drop_ledger(self, ledger_id: int) -> None:
        """Garbage collection: forget a deleted ledger's entries and state (durably, at once)."""
        for entries in (self._entries, self._c_entries):
            for key in [k for k in entries if k[0] == ledger_id]:
                del entries[key]
        for d in (self._last, self._c_last, self._states, self._c_states):
            d.pop(ledger_id, None)
        self.db.delete_range(_entry_key(ledger_id, 0), _entry_key(ledger_id + 1, 0))
        self.db.delete(_LEDGER_KEY.pack(b"L", ledger_id))

    # -- checkpoints --------------------------------------------------------------------------------------
    def mark(self) -> tuple[int, int]:
        raw = self.db.get(_MARK_KEY)
        return (0, 0) if raw is None else _LOC.unpack(raw)

    def commit(self, mark: tuple[int, int]) -> None:
        """Write what changed since the last checkpoint and the journal mark it covers, in one synced batch."""
        self.begin_commit()
        self.write_commit(mark)
        self.end_commit()

    def begin_commit(self) -> None:
        """Set aside what changed so far (changes from now on go to fresh maps); reads still see both."""
        assert not (self._c_entries or self._c_states), "one checkpoint at a time"
        self._c_entries, self._entries = self._entries, {}
        self._c_last, self._last = self._last, {}
        self._c_states, self._states = self._states, {}

    def write_commit(self, mark: tuple[int, int]) -> None:
        """The synced write of what begin_commit set aside (may run on another thread: it only reads those).

        The entries go in batches of _COMMIT_CHUNK, the GIL let go between them: building and writing one batch
        of a second's entries held it (rocksdict keeps it through a write) for 15-30 ms, which the node's loop
        waited out. The states and the mark go last, in one batch: a crash before it leaves some entries
        written and the old mark, and replay from that mark puts them again (at their new locations, in entry
        logs as durable as the old ones: sync_paths ran first)."""
        entries = iter(self._c_entries.items())
        while True:
            chunk = list(islice(entries, _COMMIT_CHUNK))
            if not chunk:
                break
            wb = WriteBatch(raw_mode=True)
            for (ledger, entry), loc in chunk:
                wb.put(_entry_key(ledger, entry), _LOC.pack(*loc))
            self.db.write(wb, _UNSYNCED)
            time.sleep(0)  # (the loop thread, if it waits for the GIL, gets it now rather than in 5 ms)
        wb = WriteBatch(raw_mode=True)
        for ledger, st in self._c_states.items():
            wb.put(_LEDGER_KEY.pack(b"L", ledger), _STATE.pack(st.fenced, st.deleted, st.explicit_lac))
        wb.put(_MARK_KEY, _LOC.pack(*mark))
        self.db.write(wb, _UNSYNCED)
        self._sync_wal()

    def _sync_wal(self) -> None:
        """fdatasync RocksDB's WAL files (GIL released, unlike a synced write through rocksdict)."""
        names = {n for n in os.listdir(self.dir) if _WAL.match(n)}
        for name in names:
            try:
                fd = os.open(os.path.join(self.dir, name), os.O_RDONLY)
            except FileNotFoundError:
                continue  # (its memtable was flushed to a table file, synced, since the listing)
            try:
                os.fdatasync(fd)
            finally:
                os.close(fd)
        if names - self._wal_files:
            fd = os.open(self.dir, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        self._wal_files = names

    def end_commit(self) -> None:
        self._c_entries, self._c_last, self._c_states = {}, {}, {}

    def abort_commit(self) -> None:
        """The write of what begin_commit set aside failed (a full disk): it goes back, the changes made since on
        top, for the next checkpoint to write."""
        self._c_entries.update(self._entries)
        self._entries, self._c_entries = self._c_entries, {}
        for ledger, entry in self._last.items():
            if entry > self._c_last.get(ledger, -1):
                self._c_last[ledger] = entry
        self._last, self._c_last = self._c_last, {}
        self._c_states.update(self._states)
        self._states, self._c_states = self._c_states, {}

    def close(self) -> None:
        self.db.close()
