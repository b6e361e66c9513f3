"""Quiescence: a group with nothing to do goes quiet (CockroachDB's quiesced ranges), so a node hosting a
thousand idle groups is not sending twenty thousand heartbeats a second.

- A leader whose log is wholly committed, durable and matched by every member, with no client waiting, no
  transfer and no configuration change under way, and that heard from every member within two heartbeats,
  sends its next heartbeat marked `quiesce` and goes quiet: no more heartbeats, no check-quorum. Members
  the runtime reported silent (PeerSilent, not heard from since) are left out, as long as a majority is
  live: a node down does not keep every group it belongs to awake (CockroachDB quiesces past dead nodes).
- A follower that gets that heartbeat and holds exactly the leader's committed log goes quiet too: its
  election timer stands still (every tick re-arms it), and it keeps rejecting disruptive candidates as if it
  heard its leader a moment ago.
- Anything else wakes a core: a client's append, a transfer, a membership change, any message but a
  successful heartbeat answer (a leader) or another quiesce heartbeat of its leader (a follower). A woken
  leader heart-beats at once and counts its followers from that moment.
- The runtime keeps node-level liveness (one heartbeat per node pair, whatever the number of groups) and
  steps PeerSilent(node) when a node went silent for an election timeout: a quiet follower whose leader that
  is campaigns within the spread of the election timeout, so a dead leader is still replaced in about the time
  it would have been without quiescence; a quiet leader that lost a voter wakes to check its quorum.

Safety does not depend on any of this: quiet or not, a core votes, appends and commits by the same rules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..codes import ResponseCode
from ..wire.messages import HeartbeatRequest, HeartbeatResponse
from .types import Durable, PeerSilent, Receive, Role, Stored, Tick

if TYPE_CHECKING:
    from .core import RaftCore


class Quiescence:
    __slots__ = ("core", "quiet", "quiesced", "awake_since_ms", "silent")

    def __init__(self, core: "RaftCore") -> None:
        self.core = core
        self.quiet = False
        self.quiesced = 0  # how many times this core went quiet (status, tests)
        self.awake_since_ms = core.now_ms
        self.silent: set[str] = set()  # nodes reported silent and not heard from since

    def awake(self) -> None:
        """A role change or a wake: quiet again only once every member answered us after this moment."""
        self.quiet = False
        self.awake_since_ms = self.core.now_ms

    # -- leader ----------------------------------------------------------------------------------------
    def leader_may_quiesce(self) -> bool:
        core = self.core
        cfg = core.config
        if not cfg.quiesce or core.member.role is not Role.LEADER or core.transfer.active or len(core.pending) \
                or len(core.read_index):
            return False
        end = core.end_index
        if not (core.committed_index == end == core.durable_index == core.log.end_index):
            return False
        if core.membership.index > core.committed_index:
            return False
        horizon = max(core.now_ms - 2 * cfg.heartbeat_interval_ms, self.awake_since_ms + 1)
        live = 0
        for p, d in core.dispatchers.items():
            if p in self.silent:
                continue  # a dead member does not keep the group awake; back, it campaigns and wakes us
            if d.match_index != end or d.watermark != end or d.pending or d.in_flight_ms is not None:
                return False
            if core.last_heard_ms.get(p, -(1 << 62)) < horizon:
                return False
            if p in core.membership.voters:
                live += 1
        return live + 1 >= core.quorum  # never quiet without a live majority: check-quorum must run then

    def on_peer_silent(self, node_id: str) -> None:
        self.silent.add(node_id)

    def heard_from(self, node_id: str) -> None:
        if self.silent:
            self.silent.discard(node_id)

    def go_quiet(self) -> None:
        self.quiet = True
        self.quiesced += 1

    # -- follower --------------------------------------------------------------------------------------
    def on_quiesce_heartbeat(self, m: HeartbeatRequest) -> None:
        """After a follower handled its leader's quiesce heartbeat: go quiet if it holds the leader's log."""
        core = self.core
        if (core.config.quiesce and core.member.role is Role.FOLLOWER and core.member.leader_id == m.frm
                and core.committed_index == core.end_index == m.committed_index
                and core.handler.for_current_term().matched_end == core.end_index):
            self.go_quiet()

    # -- both ------------------------------------------------------------------------------------------
    def keeps_quiet(self, event) -> bool:
        """Whether `event` leaves a quiet core quiet (else it wakes before handling it)."""
        t = type(event)
        if t is Tick or t is Stored or t is Durable:
            return True
        if t is PeerSilent:
            core = self.core
            if core.member.role is Role.LEADER:
                return event.node_id not in core.membership.voters
            return event.node_id != core.member.leader_id
        if t is Receive:
            m = event.message
            core = self.core
            if type(m) is HeartbeatResponse:
                return m.code == ResponseCode.SUCCESS and m.term == core.member.term
            if type(m) is HeartbeatRequest:
                return m.quiesce and m.term == core.member.term and m.frm == core.member.leader_id
        return False

    def wake(self, event) -> None:
        core = self.core
        self.awake()
        now = core.now_ms
        if core.member.role is Role.LEADER:
            # Followers were silent because we were: count them from now, and tell them we are back.
            for p in core.last_heard_ms:
                core.last_heard_ms[p] = now
            core.schedule_heartbeat_now()
        elif type(event) is PeerSilent:
            # Our leader's node went silent: campaign within the spread of the election timeout (the silence
            # itself took the minimum timeout), out of lease so the others grant our pre-vote.
            elector = core.elector
            cfg = core.config
            elector.leader_contact_ms = -(1 << 62)
            elector.election_deadline_ms = now + core.rng.randint(
                0, cfg.election_timeout_max_ms - cfg.election_timeout_min_ms)
        else:
            core.elector.heard_from_leader()  # we were quiet because our leader was: it was alive till now

    def on_quiet_tick(self) -> None:
        """A quiet follower's timer stands still (and it stays in its leader's lease)."""
        core = self.core
        if core.member.role is not Role.LEADER:
            core.elector.heard_from_leader()
