"""The log store's interface, shared by FileStore (disk) and MemoryStore (tests, simulator).

Indexes are 0-based. An empty store has begin_index 0 and end_index -1 (DLedger's ledgerEndIndex).
The raft core only *reads* a store (LogView); the runtime or the simulator performs the writes the core
asks for, in the order the core's Ready gives.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

from ..format.log_entry import Entry, Records

DEFAULT_MAX_ENTRY_BYTES = 4 * 1024 * 1024  # DLedger's 4 MiB entry buffer
PRODUCER_WINDOW_BATCHES = 256  # idempotent batches remembered per client


@dataclass(frozen=True, slots=True)
class ProducerBatch:
    client_id: int
    seq: int
    first_index: int
    last_index: int


class LogView(Protocol):
    """What the raft core may read."""

    @property
    def begin_index(self) -> int: ...
    @property
    def end_index(self) -> int: ...
    @property
    def end_term(self) -> int: ...
    @property
    def committed_index(self) -> int: ...

    def term_at(self, index: int) -> int:
        """Term of entry `index`; raises IndexOutOfRange outside [begin_index, end_index]."""

    def end_for_bytes(self, start: int, max_bytes: int, max_count: int) -> int:
        """Last index L ≥ start so that records start..L fit in max_bytes (at least one record)."""

    def bytes_between(self, start: int, end: int) -> int:
        """Stored size in bytes of records start..end inclusive (0 if end < start)."""

    def find_producer_batch(self, client_id: int, seq: int) -> ProducerBatch | None: ...

    def producer_last_seq(self, client_id: int) -> int | None: ...

    def producer_window_floor(self, client_id: int) -> int | None:
        """Lowest seq still judged for this client: a seq below it may have been appended and forgotten
        (DUPLICATE_SEQUENCE_TOO_OLD); None when nothing was forgotten."""

    def producer_state(self) -> bytes:
        """The producer table and the membership configurations as a snapshot (quorumlog/format/producer_state.py),
        for a follower being reset."""

    def membership(self) -> tuple[int, bytes] | None:
        """(index, body) of the latest membership entry in the log, or of the last one below begin_index that
        retention deleted or a reset brought; None when the log never held one (quorumlog/store/membership.py)."""


class LogStore(LogView, Protocol):
    """The full store: reads for anyone, writes for the runtime/simulator."""

    def append_batch(self, term: int, bodies: Sequence[bytes], timestamp_ms: int,
                     producer: tuple[int, int] | None = None, noop: bool = False) -> int:
        """Leader path: encode and write entries end_index+1.. in one write; returns the new end_index.

        The batch is atomic: every entry but the last carries CHANNEL_BATCH_CONTINUES. `noop` marks a new
        leader's no-op entry (CHANNEL_NOOP), which readers skip.

        Raises EmptyBatch, EntryTooLarge, DiskFull, DiskError. Not durable until flush().
        """

    def append_records(self, data: bytes | memoryview) -> int:
        """Follower path: store the leader's raw records (contiguous, starting at end_index+1).

        Validates every record (magic, sizes, body CRC, index continuity, chain CRC) and rewrites `pos`
        for this node's layout; returns the new end_index. Raises CorruptEntry, DiskFull, DiskError.
        """

    def truncate_after(self, index: int) -> None:
        """Drop every entry after `index` (index ≥ committed_index; index may be begin_index - 1)."""

    def reset(self, begin_index: int, producers: bytes | None = None) -> None:
        """Drop the whole log and start it empty at `begin_index` (> committed_index), with the leader's producer
        table (`producers`, a producer_state() snapshot) for the batches below it. Raises CorruptEntry on a
        snapshot that does not decode, before anything changed."""

    def flush(self) -> int:
        """Make everything written so far durable (fdatasync); returns the highest durable index."""

    @property
    def durable_index(self) -> int: ...

    def set_committed_index(self, index: int) -> None:
        """Record the commit point; persisted by the next checkpoint()."""

    def checkpoint(self) -> None:
        """Persist end and committed index atomically (write, fsync, rename, fsync dir)."""

    def get(self, index: int) -> Entry:
        """One entry, producer tag stripped; raises IndexOutOfRange or CorruptEntry."""

    def read(self, start: int, max_bytes: int, end: int | None = None) -> Records:
        """Raw records from `start` (≤ end if given), at most max_bytes but at least one record."""

    def records_at(self, indexes: bytes) -> list[tuple[memoryview, tuple]] | None:
        """Chosen entries (`indexes` ascending, native int64s) read in place, without walking the range they
        span: per segment touched, (its bytes, record_positions-like columns). None where the store cannot
        vouch for them that way: the caller reads the range."""

    def chain_crc_at(self, index: int) -> int: ...

    def close(self) -> None: ...
