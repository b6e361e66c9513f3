"""Membership: who votes, who only receives the log, and which ids may never come back.

A configuration is an entry of the log (a no-op tagged by log_entry.MEMBERSHIP_PRODUCER_ID, seq = `version`), and
every node uses the latest one its log holds, committed or not (Raft thesis §4.1). Changes go one server at a
time (§4.2) — add a learner, promote a learner, remove a member — rather than through joint consensus: any two
consecutive configurations then share a majority, one change needs one entry and one commit, and learners
(§4.2.1) take away the availability gap a slow new voter would open. The traps of single-server changes are
guarded where the core proposes them (core.RaftCore.change_membership): no change until an entry of the
leader's own term is committed (the bug Ongaro reported on raft-dev in 2015), one change in flight at most,
a learner is promoted only once it holds everything committed, a change is refused when the new majority is
not live right now (so a 2-voter group is never left waiting on a dead node), and ids, once removed, are
retired for good.

Body: b"QLCF" + JSON {"version", "voters", "learners", "retired", "addresses"} (sorted): rare, small, readable.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum

from ..errors import CorruptEntry

MAGIC = b"QLCF"


class Change(str, Enum):
    ADD_LEARNER = "add_learner"
    PROMOTE = "promote"
    REMOVE = "remove"


@dataclass(frozen=True, slots=True)
class Membership:
    voters: frozenset[str]
    learners: frozenset[str] = frozenset()
    retired: frozenset[str] = frozenset()  # removed ids: never members again
    version: int = 0  # 0: the bootstrap configuration (from the node's peers), in no log entry
    index: int = -1  # the log index of its entry (-1: bootstrap)
    # (node id, host:port) of members added by a change: every node learns where a new member listens from the
    # log itself (bootstrap members' addresses are in each node's own configuration). Opaque to the core.
    addresses: tuple[tuple[str, str], ...] = ()

    @property
    def members(self) -> frozenset[str]:
        return self.voters | self.learners

    @property
    def quorum(self) -> int:
        return len(self.voters) // 2 + 1

    def is_quorum(self, nodes) -> bool:
        return len(self.voters.intersection(nodes)) >= self.quorum

    def changed(self, change: Change, node_id: str, address: str = "") -> "Membership":
        """The next configuration (index unset); the caller validated the change."""
        voters, learners, retired = set(self.voters), set(self.learners), set(self.retired)
        addresses = dict(self.addresses)
        if change is Change.ADD_LEARNER:
            learners.add(node_id)
            if address:
                addresses[node_id] = address
        elif change is Change.PROMOTE:
            learners.discard(node_id)
            voters.add(node_id)
        else:
            voters.discard(node_id)
            learners.discard(node_id)
            retired.add(node_id)
            addresses.pop(node_id, None)
        return Membership(frozenset(voters), frozenset(learners), frozenset(retired), self.version + 1,
                          addresses=tuple(sorted(addresses.items())))

    def encode(self) -> bytes:
        doc = {"version": self.version, "voters": sorted(self.voters), "learners": sorted(self.learners),
               "retired": sorted(self.retired), "addresses": dict(self.addresses)}
        return MAGIC + json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, body: bytes, index: int) -> "Membership":
        if not body.startswith(MAGIC):
            raise CorruptEntry(f"membership entry {index} does not start with {MAGIC!r}")
        try:
            doc = json.loads(body[len(MAGIC):])
            return cls(frozenset(doc["voters"]), frozenset(doc["learners"]), frozenset(doc["retired"]),
                       int(doc["version"]), index, tuple(sorted(doc.get("addresses", {}).items())))
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptEntry(f"membership entry {index} does not decode: {e}") from None

    def describe(self) -> str:
        learners = f" learners={sorted(self.learners)}" if self.learners else ""
        return f"v{self.version}@{self.index} voters={sorted(self.voters)}{learners}"


def is_membership_body(body: bytes) -> bool:
    return body.startswith(MAGIC)


def majorities_overlap(a: frozenset[str], b: frozenset[str]) -> bool:
    """Whether every majority of `a` meets every majority of `b` (two configurations that could each decide
    alone must not be able to decide differently). Disjoint majorities exist iff the shared members are too few
    to fill what each side's own members cannot."""
    qa, qb = len(a) // 2 + 1, len(b) // 2 + 1
    shared = len(a & b)
    return max(0, qa - len(a - b)) + max(0, qb - len(b - a)) > shared
