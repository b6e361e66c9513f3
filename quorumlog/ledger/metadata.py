"""Ledger metadata (BookKeeper's LedgerMetadata), kept in `_meta` under `ledgers/ID` and changed only by
compare-and-set on its version: ensemble size E, write quorum W, ack quorum A (E ≥ W ≥ A ≥ 1), state OPEN /
IN_RECOVERY / CLOSED, the ensembles as segments {first_entry_id, bookies}, and once closed last_entry_id and
length.

Striping is round-robin (BookKeeper's RoundRobinDistributionSchedule): entry e goes to the bookies at
positions (e + i) mod E, i < W, of the ensemble in force at e.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from enum import Enum


class State(str, Enum):
    OPEN = "OPEN"
    IN_RECOVERY = "IN_RECOVERY"
    CLOSED = "CLOSED"


@dataclass(frozen=True, slots=True)
class Segment:
    first_entry_id: int
    bookies: tuple[str, ...]


def write_set_positions(entry_id: int, ensemble_size: int, write_quorum: int) -> list[int]:
    return [(entry_id + i) % ensemble_size for i in range(write_quorum)]


@dataclass(frozen=True, slots=True)
class LedgerMetadata:
    ledger_id: int
    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    ensembles: tuple[Segment, ...]
    state: State = State.OPEN
    last_entry_id: int = -1
    length: int = 0
    version: int = 0  # the `_meta` key's version this was read at (compare-and-set)

    def __post_init__(self) -> None:
        e, w, a = self.ensemble_size, self.write_quorum, self.ack_quorum
        if not e >= w >= a >= 1:
            raise ValueError(f"need ensemble >= write quorum >= ack quorum >= 1, got E={e} W={w} A={a}")
        for seg in self.ensembles:
            if len(seg.bookies) != e or len(set(seg.bookies)) != e:
                raise ValueError(f"segment from {seg.first_entry_id}: {len(seg.bookies)} bookies, want {e} distinct")

    def ensemble_at(self, entry_id: int) -> tuple[str, ...]:
        found = self.ensembles[0].bookies
        for seg in self.ensembles:
            if seg.first_entry_id <= entry_id:
                found = seg.bookies
        return found

    def write_set(self, entry_id: int) -> tuple[str, ...]:
        last = self.ensembles[-1]  # (the hot path: a writer's entries are in the last segment)
        ens = last.bookies if entry_id >= last.first_entry_id else self.ensemble_at(entry_id)
        e = self.ensemble_size
        return tuple(ens[(entry_id + i) % e] for i in range(self.write_quorum))

    @property
    def last_ensemble(self) -> tuple[str, ...]:
        return self.ensembles[-1].bookies

    def with_ensemble(self, first_entry_id: int, bookies: tuple[str, ...]) -> "LedgerMetadata":
        """A new segment from first_entry_id (an ensemble change); replaces a last segment that begins there."""
        kept = tuple(s for s in self.ensembles if s.first_entry_id < first_entry_id)
        return replace(self, ensembles=kept + (Segment(first_entry_id, tuple(bookies)),))

    def to_json(self) -> bytes:
        return json.dumps({"ledger_id": self.ledger_id, "ensemble_size": self.ensemble_size,
                           "write_quorum": self.write_quorum, "ack_quorum": self.ack_quorum,
                           "state": self.state.value, "last_entry_id": self.last_entry_id, "length": self.length,
                           "ensembles": [{"first_entry_id": s.first_entry_id, "bookies": list(s.bookies)}
                                         for s in self.ensembles]}, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes, version: int = 0) -> "LedgerMetadata":
        d = json.loads(data)
        return cls(d["ledger_id"], d["ensemble_size"], d["write_quorum"], d["ack_quorum"],
                   tuple(Segment(s["first_entry_id"], tuple(s["bookies"])) for s in d["ensembles"]),
                   State(d["state"]), d["last_entry_id"], d["length"], version)
