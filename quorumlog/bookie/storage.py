"""A bookie's storage (BookKeeper's Bookie + DbLedgerStorage): journal, entry logs and a RocksDB index.

    storage = BookieStorage(directory, BookieConfig())
    fut = storage.add_entry(ledger, entry, body)   # concurrent Future: done once the journal fsynced it
    body = storage.read_entry(ledger, entry)       # NoSuchEntry / NoSuchLedger
    storage.fence(ledger)                          # Future, like an add: persisted before it is answered

- An add goes to the current entry log (page cache) and the in-memory index at once, and to the journal,
  whose group commit fsyncs it before the Future completes: the add is acknowledged only then.
- A fenced ledger refuses adds with LEDGER_FENCED, except recovery writes (BookKeeper: recovery adds write
  back what recovery found, through the fence). Fence and explicit LAC are journaled like adds.
- `checkpoint()` fsyncs the entry logs, writes the index changes and the journal mark in one synced RocksDB
  batch, and deletes journal files below the mark. On open, the journal is replayed from the mark.
- Read-only mode (`check_disk`): past `disk_usage_threshold` (0.95) of the disk, new adds are refused with
  BOOKIE_READ_ONLY; reads, fencing and recovery writes go on; below `disk_usage_lwm` (0.90) it is writable
  again (BookKeeper's diskUsageThreshold / diskUsageLwmThreshold).
- A write that fails (ENOSPC before the threshold was seen, an I/O error) fails its adds with DISK_FULL /
  DISK_ERROR, nothing of them acknowledged, and makes the bookie read-only (`disk_error`) until the disk is
  below `disk_usage_lwm` and takes writes again: the journal starts a new file, the entry log writes out what
  it buffered meanwhile (journal.py, entry_log.py). Reads are served throughout, buffered records included.
  A checkpoint that fails leaves the journal as it was and is tried again.
- Deleting a ledger marks it; `gc()` drops deleted ledgers from the index, deletes entry logs with nothing
  live, and compacts those whose live fraction fell below `compaction_threshold` (0.5) by copying the live
  records into the current log (BookKeeper's GarbageCollectorThread, major compaction).

Synchronous and single-threaded apart from the journal's writer: the node runtime calls it from one thread.
"""

from __future__ import annotations

import logging
import os
import shutil
import struct
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Callable, Iterator

from ..errors import BookieReadOnly, DiskError, DiskFull, EntryTooLarge, LedgerFenced, NoSuchEntry, NoSuchLedger, \
    QuorumLogError
from ..store.files import is_enospc
from .add_items import AddItems
from .entry_log import ENTRY_LOG_FILE_BYTES, EntryLogger
from .index import LedgerIndex, LedgerState
from ..wire.ledger import ENTRY_HEADER, LEDGER_ENTRY_BYTES_CEILING, MAX_LEDGER_ENTRY_BYTES, take_adds
from .journal import JOURNAL_FILE_BYTES, JOURNAL_FLUSH_WHEN_QUEUE_EMPTY, JOURNAL_MAX_GROUP_WAIT_MS, \
    MAX_RECORD_BYTES, Framed, Journal, Mark

log = logging.getLogger(__name__)

_ADD, _FENCE, _LAC, _DELETE = 1, 2, 3, 4
# A disk that fails again soon after a repair (an I/O error with space to spare) is tried ever later: each
# repair starts a journal file, and one every check would pile them up.
# Compaction in steps (garbage_steps): the caller's loop runs between steps of at most this many entries looked
# at or bytes copied (a step of 1,024 entries of 1 KiB took 70 ms here, of 256 about 18).
COMPACTION_STEP_ENTRIES = 256
COMPACTION_STEP_BYTES = 1024 * 1024
REPAIR_BACKOFF_S = (0.5, 60.0)  # the first wait, and the longest (also: healthy this long resets the wait)
_REC = struct.Struct(">BQqq")  # type, ledger id, entry id (ADD), LAC (ADD, LAC); the body follows an ADD
# every entry a bookie takes is one journal record replay reads back (a bigger record ends replay as torn)
assert _REC.size + ENTRY_HEADER.size + LEDGER_ENTRY_BYTES_CEILING <= MAX_RECORD_BYTES


@dataclass(frozen=True, slots=True)
class BookieConfig:
    journal_max_group_wait_ms: float = JOURNAL_MAX_GROUP_WAIT_MS  # BookKeeper journalMaxGroupWaitMSec
    journal_flush_when_queue_empty: bool = JOURNAL_FLUSH_WHEN_QUEUE_EMPTY  # BookKeeper's, false there
    journal_file_bytes: int = JOURNAL_FILE_BYTES
    entry_log_file_bytes: int = ENTRY_LOG_FILE_BYTES  # BookKeeper logSizeLimit
    disk_usage_threshold: float = 0.95  # BookKeeper diskUsageThreshold
    disk_usage_lwm: float = 0.90  # BookKeeper diskUsageLwmThreshold
    compaction_threshold: float = 0.5  # BookKeeper majorCompactionThreshold
    max_entry_bytes: int = MAX_LEDGER_ENTRY_BYTES  # of an entry's body (its stored data less ENTRY_HEADER)

    def __post_init__(self) -> None:
        if not 0 < self.max_entry_bytes <= LEDGER_ENTRY_BYTES_CEILING:
            raise ValueError(f"max_entry_bytes={self.max_entry_bytes}: must be in 1..{LEDGER_ENTRY_BYTES_CEILING}")


@dataclass(frozen=True, slots=True)
class ReadLog:
    """garbage_steps asks for an entry log's bytes."""
    log_id: int


@dataclass(frozen=True, slots=True)
class RemoveLog:
    """garbage_steps asks for an entry log to be removed."""
    log_id: int


CHECKPOINT = "checkpoint"  # garbage_steps: a checkpoint must complete before it goes on
STEP = "step"  # garbage_steps: a step of copies done; the caller may run other work


class BookieStorage:
    def __init__(self, directory: str, config: BookieConfig = BookieConfig()) -> None:
        self.dir = directory
        self.config = config
        os.makedirs(directory, exist_ok=True)
        self.index = LedgerIndex(os.path.join(directory, "index"))
        self.entry_log = EntryLogger(os.path.join(directory, "entrylogs"), config.entry_log_file_bytes)
        self.journal = Journal(os.path.join(directory, "journal"), max_group_wait_ms=config.journal_max_group_wait_ms,
                               file_bytes=config.journal_file_bytes,
                               flush_when_queue_empty=config.journal_flush_when_queue_empty)
        self.read_only = False
        self.disk_error: OSError | None = None  # a failed write: read-only until repaired (check_disk)
        self._repairing: Future | None = None  # the journal's repair, asked by check_disk
        self._repair_after = 0.0  # (time.monotonic) no repair is asked before this
        self._repair_wait = REPAIR_BACKOFF_S[0]
        self._repaired_at = float("-inf")
        self.replayed = self._replay()
        self.journal.start()
        self.checkpoint()

    @property
    def instance_id(self) -> str:
        """Made with the bookie's first empty directory: a wiped bookie comes back with another one, so the
        metadata can tell it from the bookie that held the ledgers (it must answer "unknown", not "no such
        entry", for those: BookKeeper #2612)."""
        return self.index.instance_id

    # -- replay -------------------------------------------------------------------------------------------
    def _replay(self) -> int:
        count = 0
        for payload in self.journal.replay(self.index.mark()):
            kind, ledger, entry, lac = _REC.unpack_from(payload)
            if kind == _ADD:
                self._apply_add(ledger, entry, payload[_REC.size:], lac)
            elif kind == _FENCE:
                self._update(ledger, fenced=True)
            elif kind == _LAC:
                self._update(ledger, explicit_lac=lac)
            elif kind == _DELETE:
                self._update(ledger, deleted=True)
            count += 1
        if count:
            log.info("bookie replayed %d journal records dir=%s", count, self.dir)
        return count

    # -- writes -------------------------------------------------------------------------------------------
    def _state(self, ledger_id: int) -> LedgerState:
        return self.index.state(ledger_id) or LedgerState()

    def _update(self, ledger_id: int, **changes) -> LedgerState:
        st = self._state(ledger_id)
        st = LedgerState(changes.get("fenced", st.fenced), changes.get("deleted", st.deleted),
                         max(st.explicit_lac, changes.get("explicit_lac", st.explicit_lac)))
        self.index.set_state(ledger_id, st)
        return st

    def _apply_add(self, ledger_id: int, entry_id: int, body: bytes, lac: int) -> None:
        self._note_lac(ledger_id, lac)
        self.index.put(ledger_id, entry_id, self.entry_log.append(ledger_id, entry_id, body))

    def _note_lac(self, ledger_id: int, lac: int) -> None:
        st = self.index.state(ledger_id)
        if st is None or lac > st.explicit_lac:
            self._update(ledger_id, explicit_lac=lac)  # (a new ledger: the bookie holds it from now on)

    def add_entry(self, ledger_id: int, entry_id: int, body: bytes, *, lac: int = -1,
                  recovery: bool = False) -> Future:
        """Store an entry with the writer's last-add-confirmed piggybacked on it; the Future completes once it
        is durable. Raises LedgerFenced (unless a recovery write), BookieReadOnly (unless a recovery write),
        NoSuchLedger for a deleted ledger."""
        if ledger_id < 0 or entry_id < 0:
            raise ValueError(f"ledger {ledger_id} / entry {entry_id} must be >= 0")
        self._check_add(ledger_id, recovery)
        self._check_size(len(body))
        body = bytes(body)
        try:
            self._apply_add(ledger_id, entry_id, body, lac)
        except OSError as e:
            raise self._disk_failed(e) from None
        return self.journal.submit(_REC.pack(_ADD, ledger_id, entry_id, lac) + body)

    def add_entries(self, ledger_id: int, adds: "AddItems | list[tuple[int, bytes | memoryview, int]]", *,
                    recovery: bool = False) -> Future:
        """add_entry for several (entry id, body, lac) of one ledger; one Future, done once all are durable."""
        if ledger_id < 0 or (type(adds) is not AddItems and any(entry_id < 0 for entry_id, _, _ in adds)):
            raise ValueError(f"ledger {ledger_id} / entries must be >= 0")
        self._check_add(ledger_id, recovery)
        self._check_sizes(adds)
        records: list = []
        try:
            self._stage_adds(ledger_id, adds, records)
        except OSError as e:  # (adds staged before it are never acknowledged: unacknowledged entries may exist)
            raise self._disk_failed(e) from None
        return self.journal.submit_many(records)

    def _stage_adds(self, ledger_id: int, adds: "AddItems | list[tuple[int, bytes | memoryview, int]]",
                    records: list) -> None:
        """Apply the adds (entry log, index) and append their journal records to `records`. The ledger's state
        takes the highest LAC among them once, before them: a LAC is what its writer knows acknowledged, true
        whether or not this bookie stores the add that carried it (_apply_add's per add, in one step)."""
        if not adds:
            return
        if type(adds) is AddItems and adds.compiled:  # (the same records, made by C: a call per entry log)
            self._note_lac(ledger_id, adds.max_lac)
            pos, left, out = adds.pos, adds.count, []

            def write(log_id: int, offset: int, log_buffer: bytearray, log_limit: int) -> int:
                out.append(adds.stage(pos, left, ledger_id, log_id, offset, log_buffer, log_limit))
                return out[-1][1]
            while left:
                self.entry_log.append_records(ledger_id, write)
                journal, _, locations, last_entry, staged, pos = out[-1]
                left -= staged
                self.index.put_many(ledger_id, locations, last_entry)
                records.append(Framed(journal, staged))
            return
        self._note_lac(ledger_id, max(lac for _, _, lac in adds))
        append, put, rec = self.entry_log.append, self.index.put, _REC.pack
        for entry_id, body, lac in adds:  # (bodies may be views of a request: written, never kept)
            put(ledger_id, entry_id, append(ledger_id, entry_id, body))
            records.append((rec(_ADD, ledger_id, entry_id, lac), body))  # (the journal joins them once)

    def add_sections(self, sections: "list[tuple[int, AddItems | list[tuple[int, bytes | memoryview, int]]]]") \
            -> tuple[dict[int, QuorumLogError], Future]:
        """add_entries for several ledgers (an ADD_MULTI request; never recovery writes): the ledgers refused
        (fenced, deleted, read-only), each with its error, and one Future for the adds stored, done once all of
        them are durable (one journal group, one completion)."""
        refused: dict[int, QuorumLogError] = {}
        records: list = []
        for ledger_id, adds in sections:
            try:
                self._check_add(ledger_id, False)
                self._check_sizes(adds)
                self._stage_adds(ledger_id, adds, records)
            except QuorumLogError as e:
                refused[ledger_id] = e
            except OSError as e:
                refused[ledger_id] = self._disk_failed(e)
        if records:
            return refused, self.journal.submit_many(records)
        done: Future = Future()
        done.set_result(self.journal.durable)
        return refused, done

    def _check_size(self, data_bytes: int) -> None:
        if data_bytes - ENTRY_HEADER.size > self.config.max_entry_bytes:
            raise EntryTooLarge(f"ledger entry of {data_bytes - ENTRY_HEADER.size} bytes > max_ledger_entry_bytes "
                                f"{self.config.max_entry_bytes}")

    def _check_sizes(self, adds: "AddItems | list[tuple[int, bytes | memoryview, int]]") -> None:
        """Every add's entry within the cap, before any is stored (a batch is refused whole)."""
        if type(adds) is AddItems and adds.compiled:
            if len(adds.buf) - ENTRY_HEADER.size <= self.config.max_entry_bytes:
                return  # (no add is bigger than its request: the usual case costs nothing per add)
            adds = take_adds(memoryview(adds.buf), adds.pos, adds.count)[0]
        if adds:
            self._check_size(max(len(data) for _, data, _ in adds))

    def _check_add(self, ledger_id: int, recovery: bool) -> None:
        if self.journal.error is not None and self.disk_error is None:  # it failed a group since
            self._disk_failed(self.journal.error)
        st = self.index.state(ledger_id)
        if st is not None and st.deleted:
            raise NoSuchLedger(f"ledger {ledger_id} was deleted")
        if not recovery:
            if st is not None and st.fenced:
                raise LedgerFenced(f"ledger {ledger_id} is fenced")
            if self.read_only:
                raise BookieReadOnly(f"bookie {self.dir} is read-only (disk above {self.config.disk_usage_threshold})")

    def fence(self, ledger_id: int) -> Future:
        """Fence the ledger (recovery's first step): from now on its writer's adds are refused. The Future
        completes once the fence is durable, with the last add confirmed this bookie knows (BookKeeper's
        ReadLac with the fence flag)."""
        last = self._update(ledger_id, fenced=True).explicit_lac
        inner = self.journal.submit(_REC.pack(_FENCE, ledger_id, 0, -1))
        out: Future = Future()
        inner.add_done_callback(lambda f: out.set_exception(f.exception()) if f.exception() else out.set_result(last))
        return out

    def set_explicit_lac(self, ledger_id: int, lac: int) -> Future:
        self._update(ledger_id, explicit_lac=lac)
        return self.journal.submit(_REC.pack(_LAC, ledger_id, 0, lac))

    def delete_ledger(self, ledger_id: int) -> Future:
        self._update(ledger_id, deleted=True)
        return self.journal.submit(_REC.pack(_DELETE, ledger_id, 0, -1))

    # -- reads --------------------------------------------------------------------------------------------
    def read_entry(self, ledger_id: int, entry_id: int) -> bytes:
        st = self.index.state(ledger_id)
        if st is None or st.deleted:
            raise NoSuchLedger(f"no ledger {ledger_id} on this bookie")
        loc = self.index.get(ledger_id, entry_id)
        if loc is None:
            raise NoSuchEntry(f"no entry {entry_id} of ledger {ledger_id} on this bookie")
        try:
            return self.entry_log.read(loc, ledger_id, entry_id)
        except OSError as e:  # (an I/O error reading the log)
            raise DiskError(f"entry {entry_id} of ledger {ledger_id}: {e}") from None

    def last_entry(self, ledger_id: int) -> int:
        return self.index.last_entry(ledger_id)

    def last_add_confirmed(self, ledger_id: int) -> int:
        """The highest LAC a writer told this bookie (piggybacked on adds, or explicit)."""
        return self._state(ledger_id).explicit_lac

    def ledger_state(self, ledger_id: int) -> LedgerState | None:
        return self.index.state(ledger_id)

    def ledgers(self) -> list[int]:
        return [lid for lid in self.index.ledgers() if not self._state(lid).deleted]

    # -- checkpoints, disk, garbage -------------------------------------------------------------------------
    def checkpoint(self) -> None:
        mark, durable_part = self.checkpoint_begin()
        try:
            durable_part()
        except OSError:
            self.checkpoint_abort()
            raise
        self.checkpoint_end(mark)

    def checkpoint_begin(self) -> tuple[Mark, Callable[[], None]]:
        """A checkpoint in three steps, so a node runs the slow middle one (fdatasync of the entry logs, the
        index's synced batch) off its event loop: begin (here: the journal mark, entry logs handed to the OS,
        the index's changes set aside), the returned durable part (any thread), checkpoint_end(mark)."""
        mark = self.journal.durable
        paths = self.entry_log.flush_begin()
        self.index.begin_commit()

        def durable_part() -> None:
            self.entry_log.sync_paths(paths)
            self.index.write_commit(mark)
        return mark, durable_part

    def checkpoint_end(self, mark: Mark, *, delete_journal: bool = True) -> None:
        """The index's commit done; journal files below the mark deleted, unless the caller does that itself
        (journal.delete_before(mark), on any thread: unlinking a 256 MiB file took 57 ms here)."""
        self.index.end_commit()
        if delete_journal:
            self.journal.delete_before(mark)

    def checkpoint_abort(self) -> None:
        """The durable part failed: the index keeps what it set aside for the next checkpoint; the journal is
        not trimmed (it still holds what the failed checkpoint was to cover)."""
        self.index.abort_commit()

    def check_disk(self) -> bool:
        """Enter or leave read-only mode from the disk's usage and write errors; returns whether read-only."""
        if self.journal.error is not None and self.disk_error is None:
            self._disk_failed(self.journal.error)
        usage = shutil.disk_usage(self.dir)
        ratio = usage.used / usage.total if usage.total else 0.0
        if not self.read_only and ratio >= self.config.disk_usage_threshold:
            self.read_only = True
            log.warning("bookie read-only: disk %.1f%% used >= %.0f%% dir=%s", ratio * 100,
                        self.config.disk_usage_threshold * 100, self.dir)
        elif self.read_only and ratio < self.config.disk_usage_lwm and (self.disk_error is None or self._repair()):
            self.read_only = False
            log.warning("bookie writable again: disk %.1f%% used dir=%s", ratio * 100, self.dir)
        return self.read_only

    def _disk_failed(self, e: OSError) -> QuorumLogError:
        """A write failed: read-only until _repair; the error to answer the adds it failed with."""
        if self.disk_error is None:
            log.error("bookie read-only after a failed write: %s dir=%s", e, self.dir)
            now = time.monotonic()
            first, longest = REPAIR_BACKOFF_S
            self._repair_wait = first if now - self._repaired_at > longest else min(longest, self._repair_wait * 2)
            self._repair_after = now + self._repair_wait
        self.disk_error = e
        self.read_only = True
        return (DiskFull if is_enospc(e) else DiskError)(f"bookie {self.dir}: {e}")

    def _repair(self) -> bool:
        """Whether the disk takes writes again: the journal starts a new file (asked of its writer, answered by a
        later check: a hung disk must not hold the caller), then the entry log writes out its buffer."""
        if self._repairing is None:
            if time.monotonic() < self._repair_after and not is_enospc(self.disk_error):
                # (the backoff is for a disk that fails with space to spare; a full one is only repaired once
                # check_disk found it below the low-water mark, i.e. room again: waiting longer helps nobody)
                return False
            self._repairing = self.journal.repair()
        if not self._repairing.done():
            return False
        done, self._repairing = self._repairing, None
        try:
            done.result()
            self.entry_log.write_out()  # (what the entry log buffered while the disk refused it)
        except OSError as e:
            log.info("bookie still read-only, the disk does not take writes yet: %s dir=%s", e, self.dir)
            return False
        log.warning("bookie repaired after %s dir=%s", self.disk_error, self.dir)
        self.disk_error = None
        self._repaired_at = time.monotonic()
        return True

    def gc(self) -> dict[str, int]:
        """Drop deleted ledgers, delete dead entry logs, compact sparse ones. Returns what it did."""
        self.checkpoint()  # the index on disk is complete, so liveness below is judged on it
        return self.collect_garbage()

    def collect_garbage(self) -> dict[str, int]:
        """gc() after its checkpoint (a node runs that off its loop). A log's live fraction is the bytes of
        its ledgers not deleted (BookKeeper's EntryLogMetadata usage), from the entry logger's per-ledger
        counts: only a log to compact is read."""
        stats: dict[str, int] = {}
        steps = self.garbage_steps(stats)
        answer: bytes | None = None
        try:
            while True:
                step = steps.send(answer)
                answer = None
                if isinstance(step, ReadLog):
                    answer = self.entry_log.read_log(step.log_id)
                elif isinstance(step, RemoveLog):
                    self.entry_log.remove(step.log_id)
                elif step is CHECKPOINT:
                    self.checkpoint()
        except StopIteration:
            return stats

    def garbage_steps(self, stats: dict[str, int]) -> Iterator["ReadLog | RemoveLog | str"]:
        """collect_garbage as steps its caller drives, so a node's loop runs between them (a compaction done
        at once held every node's loop for 0.7 s per two 64 MiB logs of 64 KiB entries, 2.9 s of 1 KiB ones):
        ReadLog(id) — send the log's bytes (entry_log.read_log, any thread); RemoveLog(id) — remove it
        (entry_log.remove, any thread: unlinking a 64 MiB log takes tens of ms under load); CHECKPOINT — a
        checkpoint must complete first (the copies durable and indexed before their old log goes); STEP — up to
        COMPACTION_STEP_ENTRIES entries were looked at, or COMPACTION_STEP_BYTES copied. Fills `stats` as
        collect_garbage's result."""
        dropped = [lid for lid in self.index.ledgers() if self._state(lid).deleted]
        for lid in dropped:
            self.index.drop_ledger(lid)
            yield STEP  # (each drop walks the index's uncommitted entries)
        stats.update(ledgers_dropped=len(dropped), logs_removed=0, logs_compacted=0)
        for log_id in self.entry_log.log_ids():
            if log_id == self.entry_log.current_id:
                continue
            ledgers = self.entry_log.ledger_bytes(log_id)
            total = sum(ledgers.values())
            live = sum(n for lid, n in ledgers.items() if self._live(lid))
            if live == 0:
                yield RemoveLog(log_id)
                stats["logs_removed"] += 1
            elif live / total < self.config.compaction_threshold:
                data = yield ReadLog(log_id)
                seen = copied = 0
                for offset, ledger, entry, body in self.entry_log.scan(log_id, data):
                    # (checked at the copy: between steps an entry may have been deleted or written again)
                    if self._live(ledger) and self.index.get(ledger, entry) == (log_id, offset):
                        self.index.put(ledger, entry, self.entry_log.append(ledger, entry, body))
                        copied += len(body)
                    seen += 1
                    if seen >= COMPACTION_STEP_ENTRIES or copied >= COMPACTION_STEP_BYTES:
                        yield STEP
                        seen = copied = 0
                yield CHECKPOINT
                yield RemoveLog(log_id)
                stats["logs_compacted"] += 1

    def _live(self, ledger_id: int) -> bool:
        st = self.index.state(ledger_id)
        return st is not None and not st.deleted

    def close(self) -> None:
        self.journal.close()
        self.checkpoint_after_close()

    def checkpoint_after_close(self) -> None:
        self.entry_log.flush()
        self.index.commit(self.journal.durable)
        self.entry_log.close()
        self.index.close()
