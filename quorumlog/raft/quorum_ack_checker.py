"""QuorumAckChecker: the commit index from peer watermarks (DLedger's QuorumAckChecker, as a pure function).

DLedger's checker is a thread that sorts each term's watermarks and takes the median. Ours is the same
arithmetic called by the core whenever a watermark moves. Raft's rule (§5.4.2, Figure 8): a leader commits
only entries of its *current* term by counting replicas; earlier entries commit indirectly with them.
"""

from __future__ import annotations

from typing import Callable, Iterable


def quorum_index(watermarks: Iterable[int], quorum: int) -> int:
    """Highest index that at least `quorum` of the given watermarks reach (-1 if none)."""
    ordered = sorted(watermarks, reverse=True)
    assert 0 < quorum <= len(ordered), (quorum, ordered)
    return ordered[quorum - 1]


def check_quorum_ack(peer_watermarks: Iterable[int], leader_durable_index: int | None, quorum: int,
                     current_term: int, term_at: Callable[[int], int], committed_index: int) -> int:
    """New committed index (never below `committed_index`).

    `peer_watermarks`: each voting follower's acknowledged durable index in this term; the leader counts itself
    only up to its own durable index, and not at all (None) while it leads a configuration that removed it.
    """
    own = () if leader_durable_index is None else (leader_durable_index,)
    candidate = quorum_index([*own, *peer_watermarks], quorum)
    if candidate <= committed_index:
        return committed_index
    # Terms never decrease along the log, so if entry `candidate` is of an earlier term, so is every entry
    # before it: nothing may be committed by counting until a current-term entry reaches the quorum.
    if term_at(candidate) != current_term:
        return committed_index
    return candidate
