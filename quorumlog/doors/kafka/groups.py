"""Kafka's classic consumer group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup), as its coordinator
keeps it: in memory, on the one door that coordinates the group (docs/kafka.md "Consumer groups").

States as Kafka's GroupCoordinator names them: Empty → PreparingRebalance (members (re)join; completes once every
known member rejoined, or at the rebalance timeout without the late ones) → CompletingRebalance (the leader
computes the assignment; the others wait in SyncGroup) → Stable. A generation number fences zombies: a heartbeat,
sync or commit of an older generation gets ILLEGAL_GENERATION, an unknown member UNKNOWN_MEMBER_ID, and while
a rebalance runs heartbeats answer REBALANCE_IN_PROGRESS so members rejoin.

Only membership lives here; committed offsets are in `_meta` (the door writes them), so a coordinator that moves
(the `_meta` leader changed) loses the members, who rejoin at the new one, and never an offset.

Time is passed in (`now_s`); the door's ticker calls `tick` to expire sessions and end rebalances.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from typing import Any

from .protocol import (ILLEGAL_GENERATION, INCONSISTENT_GROUP_PROTOCOL, NONE, REBALANCE_IN_PROGRESS,
                       UNKNOWN_MEMBER_ID)

EMPTY, PREPARING, COMPLETING, STABLE = "Empty", "PreparingRebalance", "CompletingRebalance", "Stable"
INITIAL_REBALANCE_DELAY_S = 0.3  # Kafka's group.initial.rebalance.delay.ms (3 s there): let a starting group gather
MAX_GROUPS = 10_000


@dataclass(slots=True)
class Member:
    member_id: str
    client_id: str
    session_timeout_s: float
    rebalance_timeout_s: float
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    last_heartbeat_s: float
    join: asyncio.Future | None = None
    sync: asyncio.Future | None = None
    assignment: bytes = b""


@dataclass(slots=True)
class Group:
    group_id: str
    state: str = EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    rebalance_deadline_s: float = 0.0
    earliest_complete_s: float = 0.0


class GroupCoordinator:
    def __init__(self) -> None:
        self.groups: dict[str, Group] = {}

    def clear(self) -> None:
        """This door no longer coordinates: every waiting member gets NOT_COORDINATOR-like rejoin errors."""
        for g in self.groups.values():
            for m in g.members.values():
                _resolve(m.join, {"error_code": UNKNOWN_MEMBER_ID})
                _resolve(m.sync, {"error_code": UNKNOWN_MEMBER_ID})
        self.groups.clear()

    def describe(self) -> dict[str, Any]:
        return {gid: {"state": g.state, "generation": g.generation, "members": sorted(g.members),
                      "leader": g.leader, "protocol": g.protocol_name} for gid, g in self.groups.items()}

    # -- JoinGroup ---------------------------------------------------------------------------------------------
    def join(self, group_id: str, member_id: str, client_id: str, session_timeout_ms: int, rebalance_timeout_ms: int,
             protocol_type: str, protocols: list[tuple[str, bytes]], now_s: float) -> asyncio.Future | dict:
        """A JoinGroup: a dict to answer at once, or a future of it (answered when the rebalance completes)."""
        g = self.groups.get(group_id)
        if g is None:
            if len(self.groups) >= MAX_GROUPS:
                self._forget_empty()
            g = self.groups[group_id] = Group(group_id)
        if member_id and member_id not in g.members:
            return {"error_code": UNKNOWN_MEMBER_ID, "member_id": member_id}
        names = {p[0] for p in protocols}
        common = self._common(g, member_id)
        if not protocols or (common is not None and (protocol_type != g.protocol_type or not names & common)):
            return {"error_code": INCONSISTENT_GROUP_PROTOCOL, "member_id": member_id}
        if not member_id:
            member_id = f"{client_id or 'member'}-{uuid.uuid4()}"
        m = g.members.get(member_id)
        if m is None:
            m = g.members[member_id] = Member(member_id, client_id, session_timeout_ms / 1000,
                                              (rebalance_timeout_ms if rebalance_timeout_ms > 0 else session_timeout_ms)
                                              / 1000, protocol_type, list(protocols), now_s)
        else:
            m.protocols, m.last_heartbeat_s = list(protocols), now_s
            m.session_timeout_s = session_timeout_ms / 1000
        g.protocol_type = protocol_type
        _resolve(m.join, {"error_code": REBALANCE_IN_PROGRESS, "member_id": member_id})  # a superseded join
        m.join = asyncio.get_running_loop().create_future()
        fut = m.join
        self._prepare(g, now_s)
        self._maybe_complete(g, now_s)
        return fut

    @staticmethod
    def _common(g: Group, except_member: str) -> set[str] | None:
        """The protocols every other member supports (None: there is no other member)."""
        sets = [{p[0] for p in m.protocols} for mid, m in g.members.items() if mid != except_member]
        return set.intersection(*sets) if sets else None

    def _prepare(self, g: Group, now_s: float) -> None:
        if g.state == PREPARING:
            return
        if g.state == COMPLETING:
            for m in g.members.values():
                _resolve(m.sync, {"error_code": REBALANCE_IN_PROGRESS})
                m.sync = None
        was_empty = g.state == EMPTY
        g.state = PREPARING
        timeout = max((m.rebalance_timeout_s for m in g.members.values()), default=1.0)
        g.rebalance_deadline_s = now_s + timeout
        g.earliest_complete_s = now_s + (INITIAL_REBALANCE_DELAY_S if was_empty else 0.0)

    def _maybe_complete(self, g: Group, now_s: float) -> None:
        if g.state != PREPARING:
            return
        if now_s < g.earliest_complete_s and now_s < g.rebalance_deadline_s:
            return
        everyone = all(m.join is not None and not m.join.done() for m in g.members.values())
        if not everyone and now_s < g.rebalance_deadline_s:
            return
        for mid in [mid for mid, m in g.members.items() if m.join is None or m.join.done()]:
            del g.members[mid]  # did not rejoin in time
        if not g.members:
            g.state, g.leader, g.protocol_name, g.protocol_type = EMPTY, None, None, None
            g.generation += 1
            return
        if g.leader not in g.members:
            g.leader = next(iter(g.members))
        leader = g.members[g.leader]
        common = set.intersection(*[{p[0] for p in m.protocols} for m in g.members.values()])
        g.protocol_name = next((name for name, _ in leader.protocols if name in common), leader.protocols[0][0])
        g.generation += 1
        g.state = COMPLETING
        member_list = [{"member_id": mid, "group_instance_id": None,
                        "metadata": dict(m.protocols).get(g.protocol_name, b"")} for mid, m in g.members.items()]
        for mid, m in g.members.items():
            m.assignment = b""
            m.last_heartbeat_s = now_s
            _resolve(m.join, {"error_code": NONE, "generation_id": g.generation, "protocol_type": g.protocol_type,
                              "protocol_name": g.protocol_name, "leader": g.leader, "member_id": mid,
                              "members": member_list if mid == g.leader else []})
            m.join = None

    # -- SyncGroup ---------------------------------------------------------------------------------------------
    def sync(self, group_id: str, member_id: str, generation: int, assignments: list[tuple[str, bytes]],
             now_s: float) -> asyncio.Future | dict:
        g = self.groups.get(group_id)
        if g is None or member_id not in g.members:
            return {"error_code": UNKNOWN_MEMBER_ID}
        if generation != g.generation:
            return {"error_code": ILLEGAL_GENERATION}
        if g.state == PREPARING:
            return {"error_code": REBALANCE_IN_PROGRESS}
        m = g.members[member_id]
        m.last_heartbeat_s = now_s
        if g.state == STABLE:
            return self._sync_answer(g, m)
        # COMPLETING
        if member_id == g.leader:
            given = dict(assignments)
            for mid, other in g.members.items():
                other.assignment = given.get(mid, b"")
            g.state = STABLE
            for other in g.members.values():
                if other.sync is not None:
                    _resolve(other.sync, self._sync_answer(g, other))
                    other.sync = None
            return self._sync_answer(g, m)
        _resolve(m.sync, {"error_code": REBALANCE_IN_PROGRESS})
        m.sync = asyncio.get_running_loop().create_future()
        return m.sync

    @staticmethod
    def _sync_answer(g: Group, m: Member) -> dict:
        return {"error_code": NONE, "protocol_type": g.protocol_type, "protocol_name": g.protocol_name,
                "assignment": m.assignment}

    # -- Heartbeat, LeaveGroup, commits --------------------------------------------------------------------------
    def heartbeat(self, group_id: str, member_id: str, generation: int, now_s: float) -> int:
        g = self.groups.get(group_id)
        if g is None or member_id not in g.members:
            return UNKNOWN_MEMBER_ID
        g.members[member_id].last_heartbeat_s = now_s
        if g.state == PREPARING:
            return REBALANCE_IN_PROGRESS
        if generation != g.generation:
            return ILLEGAL_GENERATION
        return NONE

    def leave(self, group_id: str, member_id: str, now_s: float) -> int:
        g = self.groups.get(group_id)
        if g is None or member_id not in g.members:
            return UNKNOWN_MEMBER_ID
        self._remove(g, member_id, now_s)
        return NONE

    def _remove(self, g: Group, member_id: str, now_s: float) -> None:
        m = g.members.pop(member_id)
        _resolve(m.join, {"error_code": UNKNOWN_MEMBER_ID})
        _resolve(m.sync, {"error_code": UNKNOWN_MEMBER_ID})
        if not g.members:
            g.state, g.leader, g.protocol_name, g.protocol_type = EMPTY, None, None, None
            g.generation += 1  # an old generation's commit is fenced even once the group is empty
            return
        self._prepare(g, now_s)
        self._maybe_complete(g, now_s)

    def check_commit(self, group_id: str, member_id: str, generation: int) -> int:
        """May this OffsetCommit write? A standalone consumer (generation -1, no member id) may while the group
        has no members, as in Kafka."""
        g = self.groups.get(group_id)
        if generation < 0 and not member_id:
            return NONE if g is None or not g.members else UNKNOWN_MEMBER_ID
        if g is None or member_id not in g.members:
            return UNKNOWN_MEMBER_ID
        if generation != g.generation:
            return ILLEGAL_GENERATION
        if g.state == COMPLETING:
            return REBALANCE_IN_PROGRESS
        return NONE

    def tick(self, now_s: float) -> None:
        """Expire members whose session ran out (not while they wait in a join), end rebalances."""
        for g in list(self.groups.values()):
            for mid, m in list(g.members.items()):
                if mid not in g.members:
                    continue  # (removed meanwhile: a rebalance the last removal completed dropped it)
                waiting = m.join is not None and not m.join.done()
                if not waiting and now_s - m.last_heartbeat_s > m.session_timeout_s:
                    self._remove(g, mid, now_s)
            self._maybe_complete(g, now_s)

    def _forget_empty(self) -> None:
        for gid in [gid for gid, g in self.groups.items() if not g.members]:
            del self.groups[gid]


def _resolve(fut: asyncio.Future | None, value: dict) -> None:
    if fut is not None and not fut.done():
        fut.set_result(value)
