"""Master epochs and the consistent point (RocketMQ 5's EpochFileCache and AutoSwitchHAClient's truncation).

Each member keeps, beside its log, the entries `<epoch, start_offset>`: the epoch of every master whose bytes
it holds and the offset where that master's first byte is. A master under epoch E appends
`EpochEntry(E, its max offset when it became master)` before its first byte. When a slave connects to a new
master it compares the two lists: the last epoch both hold, and in it the lower of the two ends, is the
**consistent point** — every byte below it is the same on both; the slave truncates its log there (a tail
the old master wrote and nobody else kept is dropped), then pulls from it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class EpochEntry:
    epoch: int
    start_offset: int


class EpochCache:
    def __init__(self, entries: list[EpochEntry] | None = None) -> None:
        self.entries: list[EpochEntry] = list(entries or [])

    @property
    def last_epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else 0

    def begin(self, epoch: int, start_offset: int) -> None:
        """A master's first write under `epoch` (or a slave copying that master's entry)."""
        if self.entries and epoch <= self.entries[-1].epoch:
            if self.entries[-1] == EpochEntry(epoch, start_offset):
                return
            raise ValueError(f"epoch {epoch} after {self.entries[-1]}: epochs only grow")
        if self.entries and start_offset < self.entries[-1].start_offset:
            raise ValueError(f"epoch {epoch} starts at {start_offset}, before {self.entries[-1]}")
        self.entries.append(EpochEntry(epoch, start_offset))

    def end_of(self, epoch: int, max_offset: int) -> int | None:
        """Where `epoch`'s bytes end in this log (the next epoch's start, or the log's end); None if absent."""
        for i, e in enumerate(self.entries):
            if e.epoch == epoch:
                nxt = self.entries[i + 1].start_offset if i + 1 < len(self.entries) else max_offset
                return min(nxt, max_offset)
        return None

    def truncate(self, offset: int) -> None:
        """Forget the epochs that begin at or after `offset` (the log was cut there: they hold no byte)."""
        self.entries = [e for e in self.entries if e.start_offset < offset]


def consistent_point(slave: EpochCache, slave_max: int, master: EpochCache, master_max: int) -> int:
    """The offset below which the slave's log equals the master's: the end, in both logs, of the last
    epoch they share (the lower end of the two). 0 when they share none."""
    common = {e.epoch for e in slave.entries} & {e.epoch for e in master.entries}
    if not common:
        return 0
    epoch = max(common)
    start_s = next(e.start_offset for e in slave.entries if e.epoch == epoch)
    start_m = next(e.start_offset for e in master.entries if e.epoch == epoch)
    if start_s != start_m:  # (one epoch, one master: it cannot start at two offsets)
        return min(start_s, start_m)
    end_s = slave.end_of(epoch, slave_max)
    end_m = master.end_of(epoch, master_max)
    assert end_s is not None and end_m is not None
    return min(end_s, end_m)
