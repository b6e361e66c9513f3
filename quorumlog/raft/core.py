"""RaftCore: the sans-I/O replication core (DLedger's election and push replication, etcd's Ready).

    core = RaftCore(config, log, hard_state, rng, now_ms)
    ready = core.step(event)        # execute ready in field order (types.py), then step the next event

The core only reads the LogView; the caller performs the writes a Ready asks for, in order, before the next
step, so at the start of every step the LogView is current. Nothing here reads a clock, sleeps, does I/O or
uses the global random module.

A new leader whose log holds entries beyond its commit point appends one entry with an empty body (Raft's
no-op, §8): previous-term entries can only commit with a current-term entry, and without it an idempotent
retry of such a batch would wait for unrelated traffic.
"""

from __future__ import annotations

import dataclasses
import logging
import random
from bisect import bisect_left, bisect_right

from ..codes import ResponseCode
from ..format import log_entry
from ..store.base import LogView
from ..wire.messages import (HeartbeatRequest, HeartbeatResponse, Message, PushRequest, PushResponse, PushType,
                             TakeLeadershipRequest, VoteRequest, VoteResponse, VoteResult)
from .election import LeaderElector
from .entry_dispatcher import EntryDispatcher
from .entry_handler import EntryHandler
from .member_state import MemberState
from .membership import Membership
from .membership_change import MembershipChanger, membership_producer
from .pending import PendingRequests
from .quiescence import Quiescence
from .quorum_ack_checker import check_quorum_ack
from .read_index import ReadIndex
from .transfer import LeadershipTransfer
from .types import (EMPTY_READY, AppendBatch, AppendRecords, ChangeMembership, ClientAppend, ClientRead, Completion, Durable,
                    Event, HardState, NodeStatus, PeerSilent, RaftConfig, Ready, Receive, Role, Stored, StoreFailed,
                    SnapshotNeeded, StoreRecovered, Tick, TransferLeadership)

log = logging.getLogger(__name__)

NOOP_BODY = b""  # the body of a new leader's no-op entry

_LEADER = Role.LEADER
_SUCCESS = ResponseCode.SUCCESS


class RaftCore:
    def __init__(self, config: RaftConfig, log: LogView, hard_state: HardState, rng: random.Random,
                 now_ms: int) -> None:
        self.config = config
        self.log = log
        self.rng = rng
        self.now_ms = now_ms

        self.member = MemberState(config.node_id, hard_state)
        self.committed_index = log.committed_index
        self.end_index = log.end_index  # log end including appends emitted in the current step
        self.durable_index = log.end_index  # what a restart reads back is on disk
        assert self.committed_index <= self.end_index

        # leader state
        self.dispatchers: dict[str, EntryDispatcher] = {}
        self.pending = PendingRequests()
        self.last_heard_ms: dict[str, int] = {}
        self.leader_since_ms = 0
        self._next_heartbeat_ms = 0
        self._disk_full_until_ms = -(1 << 62)
        # Until then this node's store was full (any role): it does not take leadership it would hand straight
        # back — else a leader handing leadership to its preferred leader, whose disk is full, ping-pongs with it
        # every few ms and neither commits anything (the master/slave soak, `_meta` on a full disk).
        self._store_full_until_ms = -(1 << 62)
        self.needs_snapshot = False  # our state machine waits for a snapshot: we take no leadership (SnapshotNeeded)
        self._watermarks_moved = False
        # Batch boundaries a push may end at (pushes never split a client batch, so no node ever holds a torn
        # one that a later leader could commit half of): our own term's batch ends, and the end of the
        # uncommitted tail we inherited (pushed as one piece, since we do not know its batches).
        self._batch_ends: list[int] = []
        self._inherited_end = -1

        # outputs of the current step
        self._messages: list[Message] = []
        self._appends: list[AppendBatch | AppendRecords] = []
        self._completions: list[Completion] = []
        self._truncate_after: int | None = None
        self._reset_to: int | None = None
        self._reset_producers: bytes | None = None
        self._commit_changed = False

        self.elector = LeaderElector(self)
        self.handler = EntryHandler(self)
        self.transfer = LeadershipTransfer(self)
        self.membership_changer = MembershipChanger(self)
        self.quiescence = Quiescence(self)
        self.read_index = ReadIndex(self)
        # membership (raft/membership.py): the latest configuration in our log, in force as soon as it is there
        bootstrap = Membership(frozenset() if config.join else frozenset(config.peers))
        self.membership = bootstrap
        self._bootstrap_membership = bootstrap
        self._membership_entry: tuple[int, bytes] | None = None  # the (index, body) self.membership came from
        self.others: tuple[str, ...] = ()  # every other member: who a leader sends heartbeats and the log to
        self.voting_others: tuple[str, ...] = ()  # every other voter: who a candidate asks for votes
        self.quorum = 1
        self._use_membership(self._membership_in_log())

    # -- public properties ---------------------------------------------------------------------------
    @property
    def role(self) -> Role:
        return self.member.role

    @property
    def quiet(self) -> bool:
        """Quiescent (raft/quiescence.py): needs no ticks; the runtime ticks it once before any other event."""
        return self.quiescence.quiet

    @property
    def term(self) -> int:
        return self.member.term

    @property
    def leader_id(self) -> str | None:
        return self.member.leader_id

    @property
    def log_end(self) -> int:
        """The end of the stored log as it stands once this step's truncate (if any) is done: what may be
        read and pushed now (entries appended in this step are not in the log yet)."""
        if self._reset_to is not None:
            return self._reset_to - 1
        end = self.log.end_index
        return end if self._truncate_after is None or self._truncate_after >= end else self._truncate_after

    def status(self) -> NodeStatus:
        watermarks = {}
        if self.member.role is _LEADER:
            watermarks = {p: d.watermark for p, d in self.dispatchers.items()}
            watermarks[self.config.node_id] = self.durable_index
        m = self.membership
        return NodeStatus(self.config.node_id, self.member.role, self.member.term, self.member.leader_id,
                          self.log.begin_index, self.log.end_index, self.committed_index, watermarks,
                          self.transfer.to, tuple(sorted(m.voters)), tuple(sorted(m.learners)), m.index,
                          self.quiescence.quiet)

    # -- membership ----------------------------------------------------------------------------------
    def _membership_in_log(self) -> Membership:
        latest = self.log.membership()
        if latest is None:
            self._membership_entry = None
            return self._bootstrap_membership
        if latest == self._membership_entry:
            return self.membership
        # (the index alone does not name it: a truncate may replace an uncommitted configuration by another one
        # at the same index)
        self._membership_entry = latest
        return Membership.decode(latest[1], latest[0])

    def _use_membership(self, m: Membership) -> None:
        """Put configuration `m` in force: who we send to, who votes, how many make a quorum."""
        me = self.config.node_id
        old = self.membership
        self.membership = m
        self.others = tuple(sorted(m.members - {me}))
        self.voting_others = tuple(sorted(m.voters - {me}))
        self.quorum = m.quorum
        if m is not old:
            log.info("membership node=%s %s", me, m.describe())
        if self.member.role is _LEADER:
            for p in self.others:
                if p not in self.dispatchers:
                    self.dispatchers[p] = EntryDispatcher(self, p)
                    self.last_heard_ms[p] = self.now_ms
            for p in [p for p in self.dispatchers if p not in m.members]:
                del self.dispatchers[p]
                self.last_heard_ms.pop(p, None)
            if self.transfer.active and self.transfer.to not in m.voters:
                self.transfer.cancel()

    @property
    def is_voter(self) -> bool:
        return self.config.node_id in self.membership.voters

    @property
    def may_campaign(self) -> bool:
        """A voter may; so may a node whose removal is in its log but not committed: a leader that removed itself
        and crashed before the removal committed may hold the longest log, which the remaining voters then
        cannot elect anyone without. It campaigns for the configuration that removes it (votes of its voters
        only, never its own), commits the removal, and steps down."""
        m = self.membership
        me = self.config.node_id
        return me in m.voters or (me in m.retired and m.index > self.committed_index)

    def live_voters(self, voters) -> set[str]:
        """Of `voters`: ourselves and those we heard from within the minimum election timeout (leader only)."""
        horizon = self.now_ms - self.config.election_timeout_min_ms
        me = self.config.node_id
        return {p for p in voters if p == me or self.last_heard_ms.get(p, -(1 << 62)) > horizon}

    def append_membership(self, m: Membership) -> tuple[int, int]:
        """Leader: write configuration `m` as the next entry and put it in force at once (Raft §4.1)."""
        body = m.encode()
        first, last = self._append_batch((body,), membership_producer(m.version), noop=True)
        self._membership_entry = (first, body)
        self._use_membership(dataclasses.replace(m, index=first))
        return first, last

    def ensure_own_term_entry(self) -> None:
        """Leader: make sure an entry of our term is in the log, so one can commit (a no-op if none is)."""
        if self.log.end_term != self.member.term and self.end_index == self.log.end_index:
            self._append_batch((NOOP_BODY,), None, noop=True)

    # -- output helpers (used by the parts) ------------------------------------------------------------
    def send(self, message: Message) -> None:
        self._messages.append(message)

    def complete(self, completion: Completion) -> None:
        self._completions.append(completion)

    def append_records(self, action: AppendRecords) -> None:
        assert action.first_index == self.end_index + 1, (action.first_index, self.end_index)
        assert action.last_index >= action.first_index
        self._appends.append(action)
        self.end_index = action.last_index

    def truncate_after(self, index: int) -> None:
        assert not self._appends and self._truncate_after is None, "truncate must precede this step's appends"
        assert index >= self.committed_index, f"truncate_after({index}) would drop committed {self.committed_index}"
        assert index < self.end_index
        log.info("truncate node=%s after=%d end=%d", self.config.node_id, index, self.end_index)
        self._truncate_after = index
        self.end_index = index
        del self._batch_ends[bisect_right(self._batch_ends, index):]
        self.durable_index = min(self.durable_index, index)

    def reset_log(self, begin_index: int, producers: bytes | None) -> None:
        """Start our log empty at `begin_index` (the leader's begin): our log ends below it, or differs from the
        leader's before it, and the leader no longer holds those entries (retention). All below is committed."""
        assert not self._appends and self._truncate_after is None and self._reset_to is None
        assert self.committed_index < begin_index
        log.warning("reset node=%s to begin_index=%d (log ended at %d)", self.config.node_id, begin_index,
                    self.end_index)
        self._reset_to = begin_index
        self._reset_producers = producers
        self.end_index = self.durable_index = begin_index - 1
        self._set_committed(begin_index - 1)

    def _set_committed(self, index: int) -> None:
        assert index >= self.committed_index, f"commit went back {self.committed_index} -> {index}"
        assert index <= self.end_index, f"commit {index} beyond end {self.end_index}"
        if index > self.committed_index:
            self.committed_index = index
            self._commit_changed = True

    def follower_commit(self, leader_committed: int, matched_end: int) -> None:
        target = min(leader_committed, matched_end)
        if target > self.committed_index:
            self._set_committed(target)

    # -- step ----------------------------------------------------------------------------------------
    def step(self, event: Event) -> Ready:
        end = self.end_index = self.log.end_index
        if self.log.membership() is not None or self.membership.index >= 0:
            latest = self._membership_in_log()
            if latest is not self.membership:
                self._use_membership(latest)  # our log's latest changed: a push, a truncate, a failed write
        ends = self._batch_ends
        if ends and ends[-1] > end:
            # The log is shorter than the batches we emitted: a write failed (StoreFailed follows or came) or the
            # log was cut. A boundary of a batch that is not in the log would cut pushes and commits inside
            # whatever is written at those indexes next.
            del ends[bisect_right(ends, end):]
        t = type(event)
        quiescence = self.quiescence
        if quiescence.quiet and not quiescence.keeps_quiet(event):
            quiescence.wake(event)
        if t is Receive:
            self._on_message(event.message)
        elif t is Durable:
            self._on_durable(event.index)
        elif t is ClientAppend:
            self.on_client_append(event)
        elif t is Stored:
            pass  # the leader pushes whatever the log holds after every step
        elif t is Tick:
            self._on_tick(event.now_ms)
        elif t is StoreFailed:
            self._on_store_failed(event)
        elif t is StoreRecovered:
            # (a member refusing a TimeoutNow on a hold its disk no longer justifies kept a full leader leading
            # past the master/slave soak's grace)
            self._disk_full_until_ms = self._store_full_until_ms = -(1 << 62)
        elif t is TransferLeadership:
            self.transfer.start(event.request_id, event.to)
        elif t is ChangeMembership:
            self.membership_changer.start(event)
        elif t is ClientRead:
            self.read_index.start(event.request_id)
        elif t is SnapshotNeeded:
            self._on_snapshot_needed(event.needed)
        elif t is PeerSilent:
            quiescence.on_peer_silent(event.node_id)  # (and it woke a quiet core that needs to hear it, above)
        else:
            raise TypeError(f"unknown event {event!r}")
        if self.member.role is _LEADER and t is not ClientAppend:
            # Not after a ClientAppend: its entries are not in the log before the runtime executes the Ready,
            # and a runtime taking many appends per loop turn steps Stored once after them, so waiting for
            # that step lets one push carry them all.
            self._after_leader_step()
        return self._ready()

    def _ready(self) -> Ready:
        member = self.member
        if not (self._messages or self._appends or self._completions or self._commit_changed
                or member.hard_state_dirty or self._truncate_after is not None or self._reset_to is not None):
            return EMPTY_READY
        hs = None
        if member.hard_state_dirty:
            hs = HardState(member.term, member.voted_for)
            member.hard_state_dirty = False
        ready = Ready(hs, self._truncate_after, tuple(self._appends), tuple(self._messages),
                      tuple(self._completions), self.committed_index if self._commit_changed else None,
                      self._reset_to, self._reset_producers)
        self._reset_to = self._reset_producers = None
        self._messages.clear()
        self._appends.clear()
        self._completions.clear()
        self._truncate_after = None
        self._commit_changed = False
        return ready

    # -- role changes ----------------------------------------------------------------------------------
    def become_leader(self) -> None:
        member = self.member
        member.become_leader()
        self.quiescence.awake()
        now = self.now_ms
        self.leader_since_ms = now
        self.last_heard_ms = {p: now for p in self.others}
        self._drop_partial_batch()
        self.dispatchers = {p: EntryDispatcher(self, p) for p in self.others}
        self.handler.reset()
        self._next_heartbeat_ms = now
        self._disk_full_until_ms = -(1 << 62)
        self._batch_ends = []
        self._inherited_end = self.end_index
        self.send_heartbeats()
        if self.end_index > self.committed_index:
            self._append_batch((NOOP_BODY,), None, noop=True)

    def _drop_partial_batch(self) -> None:
        """A batch is atomic: if our log ends inside one (a crash kept part of an unflushed write), drop that
        part before leading, rather than commit half a batch (an idempotent retry would then write its
        first half twice). Safe: commits only ever end at a batch's last entry (see _after_leader_step),
        so no entry of a partial batch is committed anywhere."""
        log_view = self.log
        index = self.end_index
        first_kept = max(log_view.begin_index, self.committed_index + 1)
        while index >= first_kept and self._channel_at(index) & log_entry.CHANNEL_BATCH_CONTINUES:
            index -= 1
        if index < self.end_index:
            assert self._channel_at(self.end_index) & log_entry.CHANNEL_BATCH_CONTINUES
            log.info("dropping a partial batch node=%s after=%d end=%d", self.config.node_id, index, self.end_index)
            self.truncate_after(index)

    def _channel_at(self, index: int) -> int:
        records = self.log.read(index, 1, index)
        return log_entry.HEADER.unpack_from(records.chunks[0], 0)[5]

    def step_down(self, term: int, leader_id: str | None) -> None:
        """Leave leadership or candidacy (or follow a new term); fails every waiting client request."""
        member = self.member
        was_leader = member.role is _LEADER
        new_term = term > member.term
        member.become_follower(term, leader_id)
        self.quiescence.awake()
        if was_leader:
            self.pending.fail_all(ResponseCode.TERM_CHANGED, leader_id, self._completions)
            self.read_index.reset()
            self.membership_changer.reset()
            self.dispatchers = {}
        if new_term or was_leader:
            self.handler.reset()
        self.elector.pre_candidate = False
        if was_leader:
            self.elector.reset_timer()

    def _follow(self, m) -> None:
        """A leader's message of our term (or higher): follow it."""
        member = self.member
        if m.term > member.term or member.role is not Role.FOLLOWER or member.leader_id != m.frm:
            if member.role is _LEADER and m.term == member.term:
                log.error("two leaders in term %d: %s and %s", m.term, member.node_id, m.frm)
                return
            # (the EntryHandler's state survives a same-term re-follow: a term has one leader)
            self.step_down(m.term, m.frm)
            self.transfer.observe_leader(m.term, m.frm)
            self.elector.reset_timer()
        self.elector.heard_from_leader()

    # -- messages --------------------------------------------------------------------------------------
    def _on_message(self, m: Message) -> None:
        # Any sender is heard: a node we do not know yet may be the leader of a configuration our log does not
        # hold yet (we were just added), and ids are never reused, so an unknown id is never an old member.
        if m.to != self.config.node_id or m.frm == self.config.node_id:
            log.warning("dropping misaddressed message %r", m)
            return
        member = self.member
        t = type(m)
        self.quiescence.heard_from(m.frm)
        if m.term > member.term:
            if t is VoteRequest:
                if m.pre_vote:
                    self.elector.on_pre_vote_request(m)
                    return
                if self.config.check_quorum and self.elector.in_lease() and not m.leadership_transfer:
                    # etcd: a voter that hears from a live leader ignores a disruptive candidate.
                    self.send(VoteResponse(member.node_id, m.frm, member.term, VoteResult.REJECT_ALREADY_HAS_LEADER))
                    return
                self.step_down(m.term, None)
            elif t is VoteResponse and m.pre_vote and m.granted:
                pass  # a granted pre-vote carries the term we would campaign in
            elif t is HeartbeatRequest or t is PushRequest or t is TakeLeadershipRequest:
                self._follow(m)
            else:
                self.step_down(m.term, None)
        elif m.term < member.term:
            # Tell a stale leader or candidate about the newer term; ignore stale answers.
            if t is HeartbeatRequest:
                self.send(HeartbeatResponse(member.node_id, m.frm, member.term, ResponseCode.EXPIRED_TERM))
            elif t is PushRequest:
                self.send(PushResponse(member.node_id, m.frm, member.term, m.push_type, ResponseCode.EXPIRED_TERM,
                                       m.prev_index, self.end_index, self.log.begin_index))
            elif t is VoteRequest:
                self.send(VoteResponse(member.node_id, m.frm, member.term, VoteResult.REJECT_EXPIRED_VOTE_TERM,
                                       pre_vote=m.pre_vote))
            return

        if t is PushResponse:
            if member.role is _LEADER and m.frm in self.dispatchers:
                self.last_heard_ms[m.frm] = self.now_ms
                if self.dispatchers[m.frm].on_response(m):
                    self._watermarks_moved = True
        elif t is PushRequest:
            self._follow(m)
            if member.role is not _LEADER:
                self.handler.for_current_term().on_push(m)
        elif t is HeartbeatRequest:
            self._follow(m)
            if member.role is not _LEADER:
                self.follower_commit(m.committed_index, self.handler.for_current_term().matched_end)
                self.send(HeartbeatResponse(member.node_id, m.frm, member.term, _SUCCESS, m.read_seq))
                if m.quiesce:
                    self.quiescence.on_quiesce_heartbeat(m)
        elif t is HeartbeatResponse:
            if member.role is _LEADER and m.code == ResponseCode.TAKE_LEADERSHIP_FAILED:
                self.transfer.refused(m.frm)
            if member.role is _LEADER and m.frm in self.dispatchers:
                prev_heard_ms = self.last_heard_ms[m.frm]
                self.last_heard_ms[m.frm] = self.now_ms
                self.dispatchers[m.frm].on_heartbeat_response(prev_heard_ms)
                if m.read_seq and m.code == _SUCCESS:
                    self.read_index.on_heartbeat_response(m.frm, m.read_seq)
        elif t is VoteRequest:
            if m.pre_vote:
                self.elector.on_pre_vote_request(m)
            else:
                self.elector.on_vote_request(m)
        elif t is VoteResponse:
            self.elector.on_vote_response(m)
        elif t is TakeLeadershipRequest:
            self._follow(m)  # only a leader sends it
            if member.role is Role.FOLLOWER and member.leader_id == m.frm:
                if not self.may_campaign:
                    log.warning("refusing to take leadership node=%s: not a voter", member.node_id)
                    return
                if self.now_ms < self.elector.no_campaign_until_ms:
                    # our store failed (DISK_ERROR): we could not store what we would lead
                    log.warning("refusing to take leadership node=%s term=%d from=%s: store failed",
                                member.node_id, member.term, m.frm)
                    return
                if self.now_ms < self._store_full_until_ms:
                    log.warning("refusing to take leadership node=%s term=%d from=%s: disk full",
                                member.node_id, member.term, m.frm)
                    return
                if self.needs_snapshot:
                    # we could serve nothing (and would ask ourselves for the snapshot we lack): say so at once,
                    # so the leader's transfer fails now rather than holding appends for an election timeout
                    log.warning("refusing to take leadership node=%s term=%d from=%s: needs a snapshot",
                                member.node_id, member.term, m.frm)
                    self.send(HeartbeatResponse(member.node_id, m.frm, member.term,
                                                ResponseCode.TAKE_LEADERSHIP_FAILED))
                    return
                log.info("taking leadership node=%s term=%d from=%s", member.node_id, member.term, m.frm)
                self.transfer.taken_from(m.frm)
                self.elector.campaign(leadership_transfer=True)
        else:
            raise TypeError(f"unknown message {m!r}")

    # -- time ------------------------------------------------------------------------------------------
    def _on_tick(self, now_ms: int) -> None:
        assert now_ms >= self.now_ms, f"time went back {self.now_ms} -> {now_ms}"
        self.now_ms = now_ms
        if self.quiescence.quiet:
            self.quiescence.on_quiet_tick()
            return
        self.elector.on_tick()
        self.transfer.on_tick()
        if self.member.role is _LEADER:
            self.pending.expire(now_ms, self._completions)
            self.read_index.expire(now_ms)
            if (self.end_index > self.committed_index and now_ms >= self._disk_full_until_ms
                    and not self.transfer.active and self.end_index == self.log.end_index
                    and self.log.end_term != self.member.term):
                # Our no-op (Raft §8) was refused by the disk: without an entry of our term nothing before it
                # can commit, and a client retrying an inherited batch would wait forever. Write it again.
                self._append_batch((NOOP_BODY,), None, noop=True)
            for d in self.dispatchers.values():
                d.on_tick(now_ms)
            if now_ms >= self._next_heartbeat_ms:
                quiesce = self.quiescence.leader_may_quiesce()
                self.send_heartbeats(quiesce)
                if quiesce:
                    self.quiescence.go_quiet()
        else:
            self.handler.for_current_term().on_tick(now_ms)

    def send_heartbeats(self, quiesce: bool = False) -> None:
        self._next_heartbeat_ms = self.now_ms + self.config.heartbeat_interval_ms
        node, term, committed = self.config.node_id, self.member.term, self.committed_index
        read_seq = self.read_index.round_to_send()
        for p in self.others:
            self.send(HeartbeatRequest(node, p, term, committed, quiesce, read_seq))

    def schedule_heartbeat_now(self) -> None:
        self._next_heartbeat_ms = self.now_ms

    # -- store reports ---------------------------------------------------------------------------------
    def _on_durable(self, index: int) -> None:
        index = min(index, self.log.end_index)
        if index <= self.durable_index:
            return
        self.durable_index = index
        if self.member.role is _LEADER:
            self._watermarks_moved = True
        else:
            self.handler.for_current_term().on_durable()

    def _on_store_failed(self, event: StoreFailed) -> None:
        """A write or fsync failed.

        DISK_ERROR (EIO) is final until a restart: after a failed write or fsync the page cache no longer tells
        what is on the disk (fsyncgate: a retried fsync may "succeed" over dropped pages), so the store refuses
        every write from then on and only a restart, which re-reads and CRC-checks the files, makes it usable.
        The node therefore hands its leadership straight to its most caught-up follower (TakeLeadership, no
        waiting: it cannot store the entries a transfer would wait for), steps down, and never campaigns again
        in this process; it can still vote (a vote is persisted first, and a node that cannot persist it
        fail-stops in the runtime).

        DISK_FULL is not final (space comes back): the leader refuses appends for a while and hands over to a
        caught-up follower, whose disk can still take the writes; without one it keeps leading (and refusing),
        and tries again on the next report.
        """
        log.warning("store failed node=%s code=%s reason=%s", self.config.node_id, event.code.name, event.reason)
        self.end_index = self.log.end_index
        self.durable_index = min(self.durable_index, self.end_index)
        if self.committed_index > self.end_index:
            # A follower learns a commit point up to the entries of the same push, before they are written; the
            # runtime stored min(commit, end) when their write was refused, and so do we (only a follower's
            # commit can lie beyond its log: it knows the group's, it does not hold those entries yet).
            self.committed_index = self.end_index
        self.handler.matched_end = min(self.handler.matched_end, self.end_index)
        self.handler.buffer.clear()
        if event.code == ResponseCode.DISK_ERROR:
            self.elector.no_campaign_until_ms = 1 << 62  # until restart (see above)
        else:
            self._store_full_until_ms = self.now_ms + 2 * self.config.election_timeout_max_ms
        member = self.member
        if member.role is not _LEADER:
            if event.code == ResponseCode.DISK_FULL and member.role is Role.FOLLOWER and member.leader_id is not None:
                # The pushes this write held are dropped and will never be answered: tell the leader, which
                # probes again shortly instead of waiting max_push_timeout_ms (entry_dispatcher.py).
                self.send(PushResponse(member.node_id, member.leader_id, member.term, PushType.APPEND,
                                       ResponseCode.DISK_FULL, self.handler.watermark(), self.end_index,
                                       self.log.begin_index))
            return
        self.pending.fail_all(event.code, self.member.leader_id, self._completions, written_up_to=self.end_index)
        successor = self._store_failed_successor()
        if event.code == ResponseCode.DISK_ERROR:
            if successor is not None:
                log.info("disk error: handing leadership over node=%s term=%d to=%s", self.config.node_id,
                         self.member.term, successor)
                self.send(TakeLeadershipRequest(self.config.node_id, successor, self.member.term))
            self.step_down(self.member.term, None)
            self.member.leader_id = None
        else:
            self._disk_full_until_ms = self.now_ms + self.config.election_timeout_min_ms
            if successor is not None and not self.transfer.active:
                log.info("disk full: transferring leadership node=%s term=%d to=%s", self.config.node_id,
                         self.member.term, successor)
                self.transfer.start(None, successor)

    def _on_snapshot_needed(self, needed: bool) -> None:
        self.needs_snapshot = needed
        if needed and self.member.role is _LEADER:
            self.transfer.hand_over_for_snapshot()

    def _store_failed_successor(self) -> str | None:
        """The follower with the most of our log, if it holds everything committed (else it cannot win)."""
        voters = sorted(self.membership.voters & self.dispatchers.keys())
        if not voters:
            return None
        best = max(voters, key=lambda p: self.dispatchers[p].match_index)
        return best if self.dispatchers[best].match_index >= self.committed_index else None

    # -- client appends --------------------------------------------------------------------------------
    def on_client_append(self, e: ClientAppend) -> None:
        member = self.member
        code = None
        if not e.bodies:
            code = ResponseCode.REQUEST_WITH_EMPTY_BODYS
        elif member.role is not _LEADER:
            code = ResponseCode.NOT_LEADER
        elif self.transfer.active:
            code = ResponseCode.LEADER_TRANSFERRING
        elif self.now_ms < self._disk_full_until_ms:
            code = ResponseCode.DISK_FULL
        elif len(self.pending) + self.membership_changer.held >= self.config.max_pending_requests:
            code = ResponseCode.LEADER_PENDING_FULL
        if code is not None:
            self._completions.append(Completion(e.request_id, code, leader_id=member.leader_id))
            return
        if self.membership_changer.holding:
            self.membership_changer.hold(e)  # a promotion's final round (raft/membership_change.py)
            return
        deadline = self.now_ms + self.config.max_wait_ack_ms
        producer = None
        if e.client_id != 0:
            producer = (e.client_id, e.seq)
            pa = self.pending.by_producer(producer)
            if pa is not None:  # a retry of a batch still in flight: wait with it
                self.pending.wait(pa, e.request_id, deadline)
                return
            hit = self.log.find_producer_batch(e.client_id, e.seq)
            if hit is not None:  # already in our log: answer with the original indexes
                log_view = self.log
                if hit.last_index <= self.committed_index or hit.last_index < log_view.begin_index:
                    # Committed (below our begin index it is, even while a new leader's commit point lags). A
                    # batch has one term; retention may have deleted the batch since (its term is then
                    # unknown: -1), and a retry that old is still a duplicate, never appended again.
                    term = log_view.term_at(hit.last_index) if hit.last_index >= log_view.begin_index else -1
                    self._completions.append(Completion(e.request_id, _SUCCESS, hit.first_index, hit.last_index,
                                                        term))
                else:
                    pa = self.pending.add(hit.first_index, hit.last_index, self.log.term_at(hit.last_index), producer)
                    self.pending.wait(pa, e.request_id, deadline)
                return
            floor = self.log.producer_window_floor(e.client_id)
            if floor is not None and e.seq < floor:
                self._completions.append(Completion(e.request_id, ResponseCode.DUPLICATE_SEQUENCE_TOO_OLD,
                                                    leader_id=member.leader_id))
                return
        first, last = self._append_batch(e.bodies, producer)
        pa = self.pending.add(first, last, member.term, producer)
        self.pending.wait(pa, e.request_id, deadline)

    def _append_batch(self, bodies, producer: tuple[int, int] | None, noop: bool = False) -> tuple[int, int]:
        first = self.end_index + 1
        self._appends.append(AppendBatch(first, self.member.term, bodies, self.now_ms, producer, noop))
        self.end_index = first + len(bodies) - 1
        assert not self._batch_ends or self._batch_ends[-1] < first, (self._batch_ends[-1], first)
        self._batch_ends.append(self.end_index)
        return first, self.end_index

    def batch_end_at_or_after(self, index: int) -> int:
        """The first index ≥ `index` a push may end at without splitting a batch."""
        if index <= self._inherited_end:
            return self._inherited_batch_end(index)
        ends = self._batch_ends
        k = bisect_left(ends, index)
        return ends[k] if k < len(ends) else self.log_end

    def _inherited_batch_end(self, index: int) -> int:
        """In the tail we inherited, batches are known only by their channel bits (every entry of a batch but
        its last is CHANNEL_BATCH_CONTINUES): walk the headers from `index` to the first batch end, a budget's
        worth of records at a time, so a long inherited tail is pushed in pieces, not in one frame over the cap."""
        end, log_view, budget = self._inherited_end, self.log, self.config.max_push_batch_bytes
        while index < end:
            records = log_view.read(index, budget, end)
            for chunk in records.chunks:
                for header, _body in log_entry.iter_records(chunk):
                    if not header.channel & log_entry.CHANNEL_BATCH_CONTINUES:
                        return header.index
            index = records.last_index + 1
        return end

    # -- leader bookkeeping after each step --------------------------------------------------------------
    def _commit_point(self) -> int:
        """What the voters' watermarks commit now (QuorumAckChecker), cut back to a whole batch: `new` is in our
        term, whose batches we wrote ourselves."""
        voters = self.membership.voters
        new = check_quorum_ack([d.watermark for p, d in self.dispatchers.items() if p in voters],
                               self.durable_index if self.is_voter else None, self.quorum, self.member.term,
                               self.log.term_at, self.committed_index)
        if new > self.committed_index:
            ends = self._batch_ends
            k = bisect_right(ends, new) - 1
            new = ends[k] if k >= 0 else self.committed_index
        return new

    def _after_leader_step(self) -> None:
        if self._watermarks_moved:
            self._watermarks_moved = False
            new = self._commit_point()
            if new > self.committed_index:
                self._set_committed(new)
                self.pending.complete_up_to(new, self._completions)
                ends = self._batch_ends
                if ends and ends[0] <= new:  # a push ending at or below the commit point needs no boundary
                    del ends[:bisect_left(ends, new + 1)]
                self.membership_changer.after_commit()
                if self.member.role is not _LEADER:
                    return
        self.membership_changer.after_leader_step()  # (a promotion it applies goes out in the pumps below)
        for d in self.dispatchers.values():
            d.pump()
        self.transfer.pump()
        self.read_index.after_leader_step()
