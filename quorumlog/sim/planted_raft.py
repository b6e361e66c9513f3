"""Bugs the simulator plants in the Raft core to prove its checker can fail. Each replaces one of the core's
rule methods with a broken copy for the length of a run (`with planted(bugs): ...`) and puts it back after:
the shipped core has no "is this bug planted" branch, and what the seeds break is the code the runtime runs.

    commit_previous_term_by_count  commit whatever a majority holds, whatever its term (Raft's Figure 8)
    double_vote                    grant a second candidate of the same term
    skip_compare                   a new leader appends without COMPARE, a follower without checking prev
    ack_before_quorum              answer clients once the leader alone stored their batch
    change_before_term_commit      change the membership before an entry of the leader's term committed
    promote_lagging_learner        promote a learner that does not hold every committed entry
    read_before_term_commit        answer a linearizable read before the leader's term committed an entry
    read_without_quorum            answer a linearizable read without a quorum's heartbeat (a lease without a clock)
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator

from ..raft.core import RaftCore
from ..raft.election import LeaderElector
from ..raft.entry_dispatcher import EntryDispatcher
from ..raft.entry_handler import EntryHandler
from ..raft.membership_change import MembershipChanger
from ..raft.quorum_ack_checker import quorum_index
from ..raft.read_index import ReadIndex
from ..raft.types import Role


def _commit_by_count(_original: Callable) -> Callable:
    def commit_point(self: RaftCore) -> int:
        voters = self.membership.voters
        own = (self.durable_index,) if self.is_voter else ()
        marks = [*own, *(d.watermark for p, d in self.dispatchers.items() if p in voters)]
        return max(self.committed_index, quorum_index(marks, self.quorum))
    return commit_point


def _ack_before_quorum(original: Callable) -> Callable:
    def after_leader_step(self: RaftCore) -> None:
        original(self)
        if self.member.role is Role.LEADER:
            self.pending.complete_up_to(self.log.end_index, self._completions)
    return after_leader_step


def _always(value: Any) -> Callable[[Callable], Callable]:
    return lambda _original: (lambda *_args: value)


def _append_at_once(_original: Callable) -> Callable:
    def first_push(self: EntryDispatcher) -> None:
        self._enter_append(self.core.log_end + 1)
    return first_push


# bug -> the (class, method, broken copy of the method) it replaces
RAFT_BUGS: dict[str, list[tuple[type, str, Callable[[Callable], Callable]]]] = {
    "commit_previous_term_by_count": [(RaftCore, "_commit_point", _commit_by_count)],
    "double_vote": [(LeaderElector, "_voted_for_another", lambda _o: staticmethod(lambda _voted, _candidate: False))],
    "skip_compare": [(EntryDispatcher, "_first_push", _append_at_once),
                     (EntryHandler, "_append_follows", _always(True))],
    "ack_before_quorum": [(RaftCore, "_after_leader_step", _ack_before_quorum)],
    "change_before_term_commit": [(MembershipChanger, "_own_term_committed", _always(True))],
    "promote_lagging_learner": [(MembershipChanger, "_caught_up", _always(True))],
    "read_before_term_commit": [(ReadIndex, "_own_term_committed", _always(True))],
    "read_without_quorum": [(ReadIndex, "_alone", _always(True))],
}


@contextmanager
def planted(bugs: Iterable[str]) -> Iterator[None]:
    """The Raft core with `bugs` planted, until the block ends (single-threaded: a simulator run, a test)."""
    saved: list[tuple[type, str, Any]] = []
    try:
        for bug in sorted(set(bugs)):
            for cls, name, broken in RAFT_BUGS[bug]:
                original = cls.__dict__[name]
                saved.append((cls, name, original))
                setattr(cls, name, broken(original.__func__ if isinstance(original, staticmethod) else original))
        yield
    finally:
        for cls, name, original in reversed(saved):
            setattr(cls, name, original)
