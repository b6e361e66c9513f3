"""Bounded retries with exponential backoff: which failures to retry and how long to wait."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from ..codes import ResponseCode
from ..errors import QuorumLogError, Timeout

RETRY_BACKOFF_MS = 20  # first wait; an election on loopback takes a few hundred ms
RETRY_BACKOFF_MAX_MS = 1_000  # an overloaded leader (LEADER_PENDING_FULL, ...) gets room to drain
# While the group has no (reachable) leader, asking again is cheap (a status round to every member) and each
# wait adds straight to the failover time users see, so the search polls at this pace, not the full cap.
LEADER_SEARCH_BACKOFF_MAX_MS = 50
assert 0 < RETRY_BACKOFF_MS <= LEADER_SEARCH_BACKOFF_MAX_MS <= RETRY_BACKOFF_MAX_MS

# Codes that mean "this node cannot do it now, another try may work" beyond those errors.py marks retriable.
_ALSO_RETRIABLE = frozenset({
    ResponseCode.LEADER_NOT_READY, ResponseCode.TERM_NOT_READY, ResponseCode.EXPIRED_TERM,
    ResponseCode.TAKE_LEADERSHIP_FAILED, ResponseCode.INCONSISTENT_LEADER, ResponseCode.ILLEGAL_MEMBER_STATE,
})


def is_retriable(err: BaseException) -> bool:
    if isinstance(err, QuorumLogError):
        return err.retriable or err.code in _ALSO_RETRIABLE
    return isinstance(err, (OSError, TimeoutError))


def is_leader_search(err: BaseException | None) -> bool:
    """True for failures that mean "find the leader again" (no leader yet, it died, it moved)."""
    return isinstance(err, QuorumLogError) and err.code in _LEADER_SEARCH_CODES


def backoff_ms(attempt: int, rng: random.Random, err: BaseException | None = None) -> float:
    """Exponential backoff with jitter: attempt 1 waits 10–20 ms, doubling up to the cap for `err`."""
    top = LEADER_SEARCH_BACKOFF_MAX_MS if is_leader_search(err) else RETRY_BACKOFF_MAX_MS
    cap = min(top, RETRY_BACKOFF_MS * (2 ** max(0, min(attempt, 30) - 1)))
    return cap / 2 + rng.random() * cap / 2


# Failures that mean "find the leader again" rather than "the leader is busy".
_LEADER_SEARCH_CODES = frozenset({
    ResponseCode.NOT_LEADER, ResponseCode.NETWORK_ERROR, ResponseCode.TIMEOUT, ResponseCode.LEADER_NOT_READY,
    ResponseCode.TERM_CHANGED, ResponseCode.LEADER_TRANSFERRING,
    # a master/slave group's new master whose slaves are still joining its SyncStateSet: part of the switch
    ResponseCode.SLAVE_NOT_AVAILABLE, ResponseCode.IN_SYNC_REPLICAS_NOT_ENOUGH,
})


@dataclass(slots=True)
class Deadline:
    """An absolute monotonic deadline for one user call, covering all its retries."""

    at: float

    @classmethod
    def after_ms(cls, ms: float) -> "Deadline":
        return cls(time.monotonic() + ms / 1000)

    def remaining_ms(self) -> float:
        return max(0.0, (self.at - time.monotonic()) * 1000)

    @property
    def expired(self) -> bool:
        return time.monotonic() >= self.at


def timeout_error(what: str, last: BaseException | None) -> QuorumLogError:
    """The error a user sees when retries ran out: the last real error if there was one."""
    if isinstance(last, QuorumLogError):
        return last
    err = Timeout(f"{what}: gave up ({last!r})" if last else f"{what}: timed out")
    return err
