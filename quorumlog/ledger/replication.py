"""Re-replication of a lost bookie's fragments (BookKeeper's auto-recovery: Auditor + ReplicationWorker), the
pure part: which fragments a ledger has on lost bookies, which entries of a fragment the replacement must
receive, and the metadata once it has them.

A fragment is one segment of the ensembles as one bookie of it holds it: entries first..last of that segment
whose write set includes the bookie's position. The last segment of an OPEN ledger has no last entry yet:
it is re-replicated only once the ledger is fenced and closed (server/services/auto_recovery.py waits
`open_ledger_rereplication_grace_period_ms` for the writer's own ensemble change first).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable

from .metadata import LedgerMetadata, State, write_set_positions


@dataclass(frozen=True, slots=True)
class Fragment:
    ledger_id: int
    segment: int  # index into md.ensembles
    first_entry_id: int
    last_entry_id: int | None  # None: the open last segment
    bookie: str
    position: int


def fragments_on(md: LedgerMetadata, lost: set[str] | frozenset[str]) -> list[Fragment]:
    out = []
    for i, seg in enumerate(md.ensembles):
        if i + 1 < len(md.ensembles):
            last: int | None = md.ensembles[i + 1].first_entry_id - 1
        else:
            last = md.last_entry_id if md.state is State.CLOSED else None
        for pos, b in enumerate(seg.bookies):
            if b in lost:
                out.append(Fragment(md.ledger_id, i, seg.first_entry_id, last, b, pos))
    return out


def marker_lost(marked: Iterable[str], on_lost: Iterable[str], back: Iterable[str]) -> list[str]:
    """The bookies a ledger's under-replication marker names after an audit: those it named that are not back
    with their copy of the ledger, and those the audit finds its fragments on now. A bookie back with its data
    leaves the marker: nothing of it needs copying, and it may take another's fragment (a marker that kept
    every bookie it ever named could leave no target at all: E=3 on five bookies, two lost in turn)."""
    return sorted((set(marked) - set(back)) | set(on_lost))


def entries_to_copy(md: LedgerMetadata, f: Fragment) -> list[int]:
    """The entries of fragment f its bookie held (its position is in their write set)."""
    assert f.last_entry_id is not None, "an open fragment is closed before it is copied"
    e, w = md.ensemble_size, md.write_quorum
    return [entry for entry in range(f.first_entry_id, f.last_entry_id + 1)
            if f.position in write_set_positions(entry, e, w)]


def with_replacement(md: LedgerMetadata, f: Fragment, bookie: str) -> LedgerMetadata:
    """md with f's bookie replaced in its segment (same position: striping is by position). Raises ValueError
    if the segment no longer names f's bookie there (the metadata moved: plan again)."""
    seg = md.ensembles[f.segment]
    if seg.first_entry_id != f.first_entry_id or seg.bookies[f.position] != f.bookie:
        raise ValueError(f"ledger {md.ledger_id}: segment {f.segment} changed since it was planned")
    bookies = list(seg.bookies)
    bookies[f.position] = bookie
    segments = list(md.ensembles)
    segments[f.segment] = replace(seg, bookies=tuple(bookies))
    return replace(md, ensembles=tuple(segments))
