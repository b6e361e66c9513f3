"""A group's state machine over its committed entries (DLedger 0.3's StateMachine: apply, snapshot save,
snapshot load), and the runner that feeds it.

The runner reads committed entries from the group's log in index order and applies each exactly once; it
takes a snapshot every `snapshot_every` applied entries, and its `snapshot_index` is what retention must
stay below (a log segment may go only once a snapshot covers it, or a new member could get neither the
entries nor a snapshot holding them). Sans-I/O: the node runtime tells it the commit point and stores the
snapshots it hands out; the simulator can drive it the same way.
"""

from __future__ import annotations

from typing import Protocol

from ..format.log_entry import CHANNEL_NOOP, iter_records, record_columns, split_producer_tag
from ..store.base import LogView


class StateMachine(Protocol):
    applied_index: int

    def apply(self, index: int, body: bytes, timestamp_ms: int = 0):
        """Apply the committed entry at `index` (its body, and the leader's clock when it was appended, which
        is the same on every member: a machine may use it for time, deterministically)."""

    def snapshot(self) -> bytes: ...


class StateMachineRunner:
    def __init__(self, machine: StateMachine, log: LogView, snapshot_every: int = 10_000,
                 read_max_bytes: int = 1 << 20) -> None:
        assert snapshot_every >= 1 and read_max_bytes >= 1
        self.machine = machine
        self.log = log
        self.snapshot_every = snapshot_every
        self.read_max_bytes = read_max_bytes
        self.snapshot_index = machine.applied_index  # what the last snapshot (or the initial state) covers
        self._since_snapshot = 0

    def on_commit(self, committed_index: int) -> list[tuple[int, object]]:
        """Apply every committed entry not applied yet; returns (index, result) per applied command (no-op
        entries are skipped: they are the group's, not the machine's). Raises IndexOutOfRange if retention
        deleted entries the machine has not applied (the caller must install a snapshot first)."""
        out: list[tuple[int, object]] = []
        machine = self.machine
        while machine.applied_index < committed_index:
            records = self.log.read(machine.applied_index + 1, self.read_max_bytes, committed_index)
            for chunk in records.chunks:
                cols = record_columns(chunk)
                if cols is None:  # (no compiled codec, or a record it leaves to the reference walk)
                    for h, body in iter_records(chunk):
                        if h.channel & CHANNEL_NOOP:
                            machine.applied_index = h.index
                        else:
                            user_body, _ = split_producer_tag(h.channel, body)
                            out.append((h.index, machine.apply(h.index, bytes(user_body), h.timestamp_ms)))
                    continue
                # one C pass gives every record's index, timestamp and user body (tags stripped, no-ops left out)
                n, index_b, _, ts_b, offsets_b, data = cols
                indexes, ts_us = memoryview(index_b).cast("q"), memoryview(ts_b).cast("q")
                offsets = memoryview(offsets_b).cast("i")
                for k in range(n):
                    i = indexes[k]
                    out.append((i, machine.apply(i, data[offsets[k]:offsets[k + 1]], ts_us[k] // 1000)))
            # (no-op entries are the group's: applied by being passed, the last of the read's included)
            machine.applied_index = max(machine.applied_index, records.last_index)
            self._since_snapshot += records.count
        return out

    def snapshot_due(self) -> bool:
        return self._since_snapshot >= self.snapshot_every

    def take_snapshot(self) -> tuple[int, bytes]:
        """(applied index, snapshot bytes): the runtime stores them durably, then calls snapshot_stored."""
        return self.machine.applied_index, self.machine.snapshot()

    def snapshot_stored(self, index: int) -> None:
        """A snapshot covering entries up to `index` is durable: retention may delete below it."""
        self.snapshot_index = max(self.snapshot_index, index)
        self._since_snapshot = max(0, self.machine.applied_index - index)

    def retention_limit(self, safe_index: int) -> int:
        """The highest index retention may delete up to: what every replica has and a snapshot covers."""
        return min(safe_index, self.snapshot_index)
