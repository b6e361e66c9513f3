"""One group's replica on a node: its raft core, store and group commit, and the client requests of that group.

The node (node.py) hosts any number of replicas on one asyncio loop, one listener and one set of peer links;
a replica drives its sans-I/O raft core with real time and executes its Readys.

Order of work for every Ready (quorumlog/raft/types.py): hard state (fsync) → truncate → appends (store
writes, then Stored) → messages → completions → committed index. Durability of appends comes from the group
committer (one fsync in a worker thread for everything written meanwhile), which steps Durable; in flush
mode `async` the runtime steps Durable as soon as a write reached the OS, as DLedger does by default.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import random
import time
from typing import TYPE_CHECKING, Any, Callable

from ...clock import monotonic_ms
from ...codes import ResponseCode
from ...config import Flush, NodeConfig
from ...errors import QuorumLogError
from ...format.log_entry import HEADER_SIZE, MEMBERSHIP_PRODUCER_ID, PRODUCER_TAG_SIZE
from ...peers import parse_address
from ...topic.dispatcher import TopicDispatcher
from ...transport.handshake import ANY_MEMBER
from ...raft.membership import Membership
from ...raft.types import (
    AppendBatch, AppendRecords, ChangeMembership, ClientAppend, ClientRead, Completion, Durable, Event, PeerSilent,
    Ready,
    Receive, Role, SnapshotNeeded, StoreFailed, Stored, StoreRecovered, Tick, TransferLeadership,
)
from ...wire.client import (
    AppendRequest, AppendResponse, MemberChangeRequest, MemberChangeResponse, ReadRequest, ReadResponse,
    StatusRequest, TopicRequest, TransferLeaderRequest, TransferLeaderResponse,
)
from ...wire.messages import Message
from ..flush_thread import ThreadedGroupCommitter
from ..group_files import DirectoryBytes, final_flush, open_store
from ..group_runtime import GroupRuntime
from ..host import GroupHost, Handler, Pending, Session, handlers_of, send_response
from ..metrics import GroupMetrics
from ..reads import CommitNotifier, serve_read
from ..repeated_log import RepeatedLog
from ..services.consumer_groups import ConsumerGroupService
from ..services.ha_controller import HAControllerService
from ..services.kv import KvService
from ..services.topics import TopicService
from .hard_state import open_hard_state, save_hard_state

if TYPE_CHECKING:
    from ...raft.core import RaftCore
    from ...store.file_store import FileStore
    from ..state_machine_host import StateMachineHost

log = logging.getLogger(__name__)
READ_INDEX_WAIT_S = 5.0  # a linearizable read waits this long for its read index to commit here

PUSH_FRAME_HEADROOM_BYTES = 64 * 1024  # a push's own fields beside its records (config checks the same margin)


class Replica(GroupRuntime):
    """One Raft group on this node (a HostedGroup, host.py). `host` is its node: the transport, the disk guard and
    fail-stop are its. `store` and `core_factory` are injectable for tests."""

    def __init__(self, host: GroupHost, config: NodeConfig, *, store: FileStore | None = None,
                 core_factory: Callable[..., RaftCore] | None = None, state_machine: str | None = None) -> None:
        if state_machine not in (None, "kv", "topics"):
            raise ValueError(f"unknown state machine {state_machine!r} (known: kv, topics)")
        self.host = host
        self.state_machine = state_machine
        self.sm: StateMachineHost | None = None  # when the group runs a state machine
        self.kv = KvService(self)  # (also applies and snapshots a topic group's dispatcher)
        self.topics = TopicService(self)
        self.consumer_groups = ConsumerGroupService(self)  # (served by the `_meta` group's leader)
        self.ha_controller = HAControllerService(self)  # (likewise: master/slave groups' controller)
        self.config = config
        self.group = config.group
        self.store = store
        self._core_factory = core_factory
        self.core: RaftCore = None  # type: ignore[assignment]  (from open() on)
        self.committer: GroupCommitter | None = None
        self.metrics: GroupMetrics = host.metrics.group(config.group)
        self.notifier = CommitNotifier()
        self._events: collections.deque[Event] = collections.deque()
        self._stepping = False
        self.quiet = False  # quiescent (raft/quiescence.py): the node skips its ticks
        self._pending: dict[int, Pending] = {}
        self._next_request_id = 1
        # The largest client batch: its records must fit one push frame beside the push's own header.
        self.max_batch_stored_bytes = config.max_frame_bytes - PUSH_FRAME_HEADROOM_BYTES
        self.failed: str | None = None
        self._disk_error: str | None = None  # the first DISK_ERROR: the node fail-stops once the core handled it
        self._store_failed_log = RepeatedLog(log)
        self._store_bytes = DirectoryBytes(config.data_dir)
        self._role: Role | None = None
        self._term = -1
        self._checkpointed: tuple[int, int, int] | None = None
        self._membership: tuple[Membership, bool] | None = None  # (configuration, committed?) last turned into `links`
        self.links: dict[str, tuple[str, int]] = {}  # the peers this replica needs linked, with addresses
        self.sync_flush = config.flush is Flush.SYNC
        self.stopping = False
        self.handlers: dict[type, Handler] = {
            AppendRequest: self._client_append, ReadRequest: self._client_read, StatusRequest: self._status,
            MemberChangeRequest: self._member_change, TransferLeaderRequest: self._transfer_leader,
            **handlers_of(self.kv, self.topics, self.consumer_groups, self.ha_controller)}

    # -- lifecycle -----------------------------------------------------------------------------------------
    def open(self) -> None:
        """Open the store and the core (blocking file I/O: a node opens its replicas before it serves)."""
        cfg = self.config
        os.makedirs(cfg.data_dir, exist_ok=True)
        if self.store is None:
            self.store = open_store(cfg)
        hard_state = open_hard_state(cfg.data_dir)
        factory = self._core_factory or _default_core_factory
        self.core = factory(cfg.raft_config(), self.store, hard_state, random.Random(os.urandom(16)), monotonic_ms())
        log.info("replica opening node=%s group=%s term=%d voted_for=%s begin=%d end=%d committed=%d flush=%s%s",
                 cfg.node_id, cfg.group, hard_state.term, hard_state.voted_for, self.store.begin_index,
                 self.store.end_index, self.store.committed_index, cfg.flush,
                 " (async: acks before fsync, like DLedger's default; a power loss can lose acked entries)"
                 if not self.sync_flush else "")
        self.notifier.advance(self.store.committed_index)
        if self.state_machine is not None:
            from ..state_machine_host import StateMachineHost
            kind = {"kv": {}, "topics": {"machine_type": TopicDispatcher, "suffix": "topics"}}[self.state_machine]
            self.sm = StateMachineHost(cfg.data_dir, self.store, snapshot_every=cfg.snapshot_every, **kind)
            self.sm.on_commit(self.store.committed_index)  # replay what the newest snapshot does not hold
        self._links_from_peers()

    def start(self) -> None:
        """Start group commit and the first tick (inside the running loop, after open())."""
        # sync mode: a dedicated fsync thread (flush_thread.py) instead of a flusher task + asyncio.to_thread
        self.committer = ThreadedGroupCommitter(
            self.store, sync=self.sync_flush, on_durable=lambda i: self.step(Durable(i)),
            on_failed=self._store_failed, observe_fsync_s=self.metrics.fsync_seconds.observe,
            fsync_worker=self.host.fsync_worker)
        self.host.spawn(self.committer.run(), f"flusher-{self.group}")
        self.step(Tick(monotonic_ms()))

    async def hand_over_leadership(self, timeout_s: float | None = None) -> str | None:
        """Before a graceful stop: if this replica leads, transfer leadership to the most caught-up follower
        and wait (bounded) until it leads, so a rolling restart costs no election timeout. Returns the new
        leader's id, or None when nothing was handed over."""
        st = self.core.status()
        connected = self.host.connected
        others = {p: w for p, w in st.watermarks.items() if p != self.config.node_id and connected(p)}
        if st.role != Role.LEADER or not others or self.failed:
            return None
        to = max(others, key=lambda p: others[p])
        done: asyncio.Future[Completion] = asyncio.get_running_loop().create_future()
        log.info("handing over leadership node=%s to=%s group=%s", self.config.node_id, to, self.group)
        rid = self.submit(lambda rid: TransferLeadership(rid, to),
                          Pending(lambda c: None if done.done() else done.set_result(c)))
        timeout_s = timeout_s if timeout_s is not None else 2 * self.config.election_timeout_max_ms / 1000
        try:
            response = await asyncio.wait_for(done, timeout_s)
        except asyncio.TimeoutError:
            self._pending.pop(rid, None)
            log.warning("leadership hand-over timed out node=%s group=%s to=%s", self.config.node_id, self.group,
                        to)
            return None
        if response.code != ResponseCode.SUCCESS:
            log.warning("leadership hand-over failed node=%s group=%s to=%s code=%s", self.config.node_id,
                        self.group, to, response.code.name)
            return None
        return response.leader_id or to

    async def close(self) -> None:
        """Final flush and checkpoint, answer what is pending, close the store. After begin_stop()."""
        if self.core is None:
            return  # (never opened)
        if self.committer is not None:
            self.committer.close()  # stops its fsync work (after a running fsync, which io_lock waits for)
        if self.store is not None and self.committer is not None and not self.failed:
            await final_flush(self.store, self.committer, self.group)
        pending, self._pending = self._pending, {}
        for p in pending.values():
            p.on_done(Completion(0, p.shutdown_code, message="node shutting down"))
        self.kv.close()
        self.topics.close()
        self.consumer_groups.close()
        self.ha_controller.close()
        if self.store is not None:
            self.store.close()

    # -- the core loop -------------------------------------------------------------------------------------
    def _fail_stop(self, reason: str) -> None:
        self.failed = reason
        self._events.clear()
        self.host.fail_stop(f"group {self.group}: {reason}")

    def step(self, event: Event) -> None:
        """Feed one event to the core and execute the Readys it causes, to quiescence, in order."""
        if self.failed:
            return
        self._events.append(event)
        if self._stepping:
            return  # the outer call drains the queue: no reentrancy into the core
        self._stepping = True
        try:
            while self._events and not self.failed:
                event = self._events.popleft()
                try:
                    if type(event) is not Tick and getattr(self.core, "quiet", False):
                        # A quiet core is not ticked (node.py): tell it the time first. Its timers stand still
                        # while quiet, so this fires none of them.
                        ready = self.core.step(Tick(monotonic_ms()))
                        if ready:
                            self._execute(ready)
                    ready = self.core.step(event)
                except Exception as e:  # a bug: the core may be half-stepped, so nothing it holds is trusted
                    log.exception("core.step raised node=%s group=%s event=%r", self.config.node_id, self.group,
                                  event)
                    self._fail_stop(f"core.step raised {type(e).__name__}: {e}")
                    break
                if ready:
                    self._execute(ready)
        finally:
            self._stepping = False
            # Read once per step, not per tick: the node's tick loop looks at a thousand of these.
            self.quiet = getattr(self.core, "quiet", False)
        # Everything this step decided goes out now, one write per socket, answers to clients first: not one
        # loop turn later through call_soon and the peer links' writer tasks.
        m = getattr(self.core, "membership", None)  # (test doubles of the core have none)
        if m is not None and (m, m.index <= self.core.committed_index) != self._membership:
            self._on_membership(m)
        self.host.flush_transport()
        if self._disk_error is not None and not self.failed:
            self._fail_stop(f"disk error (DISK_ERROR is final until a restart): {self._disk_error}")

    def _execute(self, ready: Ready) -> None:
        store = self.store
        try:
            if ready.hard_state is not None:
                save_hard_state(self.config.data_dir, ready.hard_state)  # fsync before any vote goes out
            if ready.truncate_after is not None:
                store.truncate_after(ready.truncate_after)
                self.committer.truncated(ready.truncate_after)
                log.info("truncated node=%s group=%s after=%d", self.config.node_id, self.group,
                         ready.truncate_after)
            if ready.reset_to is not None:
                store.reset(ready.reset_to, ready.reset_producers)
                self.committer.truncated(ready.reset_to - 1)
        except (OSError, QuorumLogError) as e:
            # The core already counts on this state; carrying on could grant a vote twice or serve a log
            # the core thinks is cut. Fail-stop: nothing of this Ready goes out, and the node exits.
            self._fail_stop(f"cannot persist hard state / truncate: {e}")
            return
        if ready.appends:
            stored = self._write(ready.appends)
            if stored is not None:
                self.committer.written(stored)
                # Stored (and, in async mode, Durable) go next, before any later event.
                if not self.sync_flush:
                    self._events.appendleft(Durable(stored))
                self._events.appendleft(Stored(stored))
        if ready.messages:
            send = self.host.send
            group = self.group
            for msg in ready.messages:
                send(group, msg)
        if ready.committed_index is not None:
            # (before the completions: an answered write is then already applied, and readable here)
            committed = min(ready.committed_index, store.end_index)
            store.set_committed_index(committed)
            self.notifier.advance(committed)
            if self.sm is not None:
                self.kv.on_commit(committed)
        for c in ready.completions:
            p = self._pending.pop(c.request_id, None)
            if p is not None:
                p.on_done(c)

    def _write(self, appends) -> int | None:
        """Write the Ready's appends to the store (page cache); None if the store refused."""
        store = self.store
        end = None
        try:
            for a in appends:
                if isinstance(a, AppendBatch):
                    # The store timestamp is wall-clock ms (users and Spark read it as a date); the core's
                    # own clock is monotonic and only drives its timers.
                    end = store.append_batch(a.term, a.bodies, time.time_ns() // 1_000_000, a.producer,
                                             a.noop)
                else:
                    assert isinstance(a, AppendRecords)
                    assert a.first_index == store.end_index + 1, (a.first_index, store.end_index)
                    end = store.append_records(a.data)
                    assert end == a.last_index, (end, a.last_index)
        except QuorumLogError as e:
            if e.code in (ResponseCode.DISK_FULL, ResponseCode.DISK_ERROR):
                self._store_failed(e.code, str(e))
            else:  # a corrupt push: drop it; the leader's dispatcher resends after max_push_timeout_ms
                log.warning("store refused append node=%s code=%s reason=%s", self.config.node_id, e.code.name, e)
        except OSError as e:
            self._store_failed(ResponseCode.DISK_ERROR, str(e))
        return end

    def _store_failed(self, code: ResponseCode, reason: str) -> None:
        # (a full follower's every probe fails its write: once per period, the rest at DEBUG)
        self._store_failed_log.log(code, logging.ERROR, "store failed node=%s group=%s code=%s reason=%s",
                                   self.config.node_id, self.group, code.name, reason)
        self.metrics.store_failed(code.name)
        if code == ResponseCode.DISK_FULL:
            self.host.disk_full = True
        elif code == ResponseCode.DISK_ERROR and self._disk_error is None:
            # EIO is final in this process (see the core's _on_store_failed). The core first answers its clients
            # and, as leader, hands over; then the node fail-stops, leader or follower alike, so the failure is
            # visible (the process exits 1) and the node is replaced or restarted on a healed disk instead of
            # sitting in the group refusing every write.
            self._disk_error = reason
        self.step(StoreFailed(code, reason))

    def _links_from_peers(self) -> None:
        self.links = {p: a for p, a in self.config.peers.items() if p != self.config.node_id}

    def _on_membership(self, m: Membership) -> None:
        """Work out which nodes this group needs linked now and where they listen: bootstrap members from our own
        `peers`, members added later from the configuration itself (raft/membership.py); the node links to the
        union over its groups."""
        committed = m.index <= self.core.committed_index
        self._membership = (m, committed)
        addresses = dict(self.config.peers)
        for node_id, address in m.addresses:
            try:
                addresses[node_id] = parse_address(address, what=f"member {node_id!r}")
            except ValueError as e:
                log.error("membership names a bad address node=%s group=%s member=%s: %s", self.config.node_id,
                          self.group, node_id, e)
        # Our own peers stay linked too (unless removed): a joining node answers a leader its empty bootstrap
        # configuration does not name, and a node that missed its own addition still hears from the group.
        # Removed members are dropped once their removal is committed: a leader that removed itself needs the
        # others' acknowledgements of that very entry.
        wanted = set(m.members) | set(self.config.peers)
        if self._joining(m):
            # Whoever linked to us may be the leader that added us: answer it (node.py _on_peer_hello).
            heard = self.host.heard_addresses
            wanted |= heard.keys()
            addresses = {**heard, **addresses}
        if committed:
            wanted -= m.retired
        wanted.discard(self.config.node_id)
        missing = sorted(wanted - addresses.keys())
        if missing:
            log.error("no address for members %s node=%s group=%s: not linked", missing, self.config.node_id,
                      self.group)
        log.info("members node=%s group=%s %s", self.config.node_id, self.group, m.describe())
        self.links = {p: addresses[p] for p in wanted if p in addresses}
        self.host.links_changed()

    @property
    def members(self) -> frozenset[str]:
        """Who may open a peer link for this group's messages: its configuration's members and our peers; anyone
        while we joined (`--join`) and our log has not yet reached the configuration that adds us (ANY_MEMBER)."""
        m = getattr(self.core, "membership", None)
        if m is not None and self._joining(m):
            return ANY_MEMBER
        ids = set(self.links) | {self.config.node_id}
        if m is not None:
            ids |= m.members
        return frozenset(ids)

    def _joining(self, m: Membership) -> bool:
        me = self.config.node_id
        return self.config.join and me not in m.members and me not in m.retired

    def peer_heard(self, node_id: str) -> None:
        """The node heard where `node_id` listens: a joining group links to it."""
        if self._membership is not None and self._joining(self._membership[0]) and node_id not in self.links:
            self._on_membership(self._membership[0])

    def peer_gone(self, node_id: str) -> None:
        pass  # (Raft keeps no per-connection session: lost messages are sent again, silence is PeerSilent)

    # -- inputs --------------------------------------------------------------------------------------------
    def on_peer_message(self, msg: Message) -> None:
        if not self.stopping:  # once stopping, nothing new reaches the store after the final flush
            self.step(Receive(msg))

    def peer_silent(self, node_id: str) -> None:
        self.step(PeerSilent(node_id))

    def submit(self, event_for: Callable[[int], Event], pending: Pending) -> int:
        """Hand the core a client request (the event `event_for(request_id)`); `pending` answers it once the
        core completes it. Returns the request id."""
        rid = self._next_request_id
        self._next_request_id += 1
        self._pending[rid] = pending
        self.step(event_for(rid))
        return rid

    def _member_change(self, session: Session, request: MemberChangeRequest) -> None:
        if request.address:
            try:
                parse_address(request.address, what=f"member {request.node_id!r}")
            except ValueError as e:
                send_response(session, MemberChangeResponse(request.request_id, ResponseCode.BAD_REQUEST,
                                                            message=str(e)))
                return

        def done(c: Completion) -> None:
            send_response(session, MemberChangeResponse(request.request_id, c.code, c.leader_id, c.first_index,
                                                        message=c.message))

        self.submit(lambda rid: ChangeMembership(rid, request.change, request.node_id, request.address),
                    Pending(done))

    def _transfer_leader(self, session: Session, request: TransferLeaderRequest) -> None:
        m = getattr(self.core, "membership", None)
        if request.to not in (m.voters if m is not None else self.config.peers):
            send_response(session, TransferLeaderResponse(request.request_id, ResponseCode.UNKNOWN_MEMBER,
                                                          message=f"{request.to!r} is not a member"))
            return

        def done(c: Completion) -> None:
            send_response(session, TransferLeaderResponse(request.request_id, c.code, c.leader_id, c.message))

        self.submit(lambda rid: TransferLeadership(rid, request.to), Pending(done))

    def _client_append(self, session: Session, request: AppendRequest) -> None:
        def refuse(code: ResponseCode, message: str, leader_id: str | None = None) -> None:
            self.metrics.count_request(code.name)
            send_response(session, AppendResponse(request.request_id, code, leader_id, message=message))

        if self.stopping:
            return refuse(ResponseCode.LEADER_NOT_READY, "node shutting down")
        if request.client_id == MEMBERSHIP_PRODUCER_ID:
            return refuse(ResponseCode.BAD_REQUEST, f"client_id {MEMBERSHIP_PRODUCER_ID} is reserved for membership "
                                                    f"entries")
        bodies = request.bodies
        if not bodies:
            return refuse(ResponseCode.REQUEST_WITH_EMPTY_BODYS, "empty batch")
        size = 0
        limit = self.config.max_entry_bytes
        for body in bodies:
            n = len(body)
            if n > limit:
                return refuse(ResponseCode.ENTRY_TOO_LARGE, f"entry of {n} bytes > max_entry_bytes {limit}")
            size += n
        stored = size + len(bodies) * HEADER_SIZE + PRODUCER_TAG_SIZE
        if stored > self.max_batch_stored_bytes:
            # A batch is pushed to followers whole (never split), in one frame: a bigger one could be stored
            # here but never replicated.
            return refuse(ResponseCode.ENTRY_TOO_LARGE,
                          f"batch of {len(bodies)} entries stores {stored} bytes > {self.max_batch_stored_bytes}, "
                          f"the most one push frame carries (max_frame_bytes {self.config.max_frame_bytes}): "
                          f"split it")
        if self.host.disk_full:
            st = self.core.status()
            if st.role == Role.LEADER:
                return refuse(ResponseCode.DISK_FULL, f"disk of {self.config.data_dir} is full "
                                                      f"(disk_full_ratio {self.config.disk_full_ratio})")
        received_s = time.perf_counter()

        def done(c: Completion) -> None:
            if c.code == ResponseCode.SUCCESS:
                self.metrics.commit_seconds.observe(time.perf_counter() - received_s)
                self.metrics.appends.inc(len(bodies))
                self.metrics.append_bytes.inc(size)
            self.metrics.count_request(c.code.name)
            send_response(session, AppendResponse(request.request_id, c.code, c.leader_id, c.first_index,
                                                  c.last_index, c.term, c.message))

        self.submit(lambda rid: ClientAppend(rid, bodies, request.client_id, request.seq),
                    Pending(done, ResponseCode.TERM_CHANGED, counted=True))

    def append_messages(self, session: Session, request: TopicRequest) -> None:
        """A topic send's batch (checked by services/topics.py): through the core like an append, with the client's
        producer id and sequence; the completion goes back to TopicService.sent."""
        def done(c: Completion) -> None:
            self.topics.sent(session, request.request_id, c.code, c.first_index, c.last_index, None, c.leader_id,
                             c.message)

        self.submit(lambda rid: ClientAppend(rid, request.bodies, request.client_id, request.seq), Pending(done))

    @property
    def leader_id(self) -> str | None:
        return self.core.leader_id

    def on_snapshot_needed(self, needed: bool) -> None:
        """The state machine waits for a snapshot (or installed it): the core takes no leadership meanwhile."""
        self.step(SnapshotNeeded(needed))

    def read_refusal(self) -> str | None:
        return None  # (every member of a Raft group serves reads up to what it knows committed)

    def suggested_slave(self, read_to: int) -> str | None:
        return None  # (a master/slave group's notion: master_slave/member.py)

    def holds_everything_committed(self) -> bool:
        """Leader, with an entry of its term committed (so it holds everything ever committed), all applied."""
        core, store = self.core, self.store
        committed = store.committed_index
        return (core.role is Role.LEADER and committed >= store.begin_index
                and store.term_at(committed) == core.term and self.sm.applied_index >= committed)

    def leads(self) -> bool:
        return self.core is not None and self.core.role is Role.LEADER

    async def _client_read(self, session: Session, request: ReadRequest) -> None:
        if request.linearizable:  # ReadIndex first: the core confirms with a quorum that it still leads
            done: asyncio.Future[Completion] = asyncio.get_running_loop().create_future()
            self.submit(ClientRead, Pending(lambda c: None if done.done() else done.set_result(c)))
            c = await done
            if c.code == ResponseCode.SUCCESS and self.store.committed_index < c.first_index:
                await self.notifier.wait_beyond(c.first_index - 1, READ_INDEX_WAIT_S)  # (the read index commits)
            if c.code != ResponseCode.SUCCESS or self.store.committed_index < c.first_index:
                send_response(session, ReadResponse(request.request_id, c.code if c.code != ResponseCode.SUCCESS
                                                    else ResponseCode.TIMEOUT, self.store.begin_index,
                                                    self.store.committed_index, message=c.message))
                return
        send_response(session, await serve_read(self.store, request, self.notifier, self.host.stopping_event))

    # -- periodic work (the node calls these for every replica) ----------------------------------------------
    def tick(self, now_ms: int) -> None:
        self.step(Tick(now_ms))
        self.observe_role()

    def observe_role(self) -> None:
        st = self.core.status()
        if st.role != self._role or st.term != self._term:
            if st.role != self._role:
                log.info("role change node=%s group=%s role=%s term=%d leader=%s", self.config.node_id, self.group,
                         st.role.value, st.term, st.leader_id)
            self._role, self._term = st.role, st.term
            self.metrics.set_role(st.role.value)
            self.metrics.term.set(st.term)

    def report_disk_full(self, reason: str) -> None:
        """The node's disk guard found the disk full: appends are refused before they reach the core, so no write
        would tell it; a full leader must hear it to hand leadership to a follower that can still store."""
        self.step(StoreFailed(ResponseCode.DISK_FULL, reason))

    def report_disk_ok(self) -> None:
        """The node's disk guard found room again after a full disk: the core's holds end now, and so does the
        flusher's backoff."""
        if self.committer is not None:
            self.committer.disk_has_room()
        self.step(StoreRecovered())

    async def checkpoint(self) -> None:
        """Persist (end, committed) when either moved (a quiet group's never do); the store also checkpoints from
        flush() under load."""
        mark = (self.store.end_index, self.store.committed_index, self.committer.durable_index)
        if mark == self._checkpointed or self.failed:
            return
        async with self.committer.io_lock:
            await asyncio.to_thread(self.store.checkpoint)
        self._checkpointed = mark

    async def retention(self) -> None:
        """Delete old segments below what every replica holds (leader) or below the commit point."""
        delete_expired = getattr(self.store, "delete_expired", None)
        if delete_expired is None or self.failed:
            return
        st = self.core.status()
        safe = st.committed_index
        if st.role == Role.LEADER and st.watermarks:
            safe = min(safe, *st.watermarks.values())
        if self.sm is not None:
            safe = self.sm.retention_limit(safe)  # a member that needs what was deleted gets the snapshot
        async with self.committer.io_lock:
            removed = await asyncio.to_thread(delete_expired, int(time.time() * 1000), safe)
        if removed:
            log.info("retention node=%s group=%s safe_index=%d segments_removed=%d begin=%d", self.config.node_id,
                     self.group, safe, removed, self.store.begin_index)

    # -- status and metrics --------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """This group's part of the node's status document."""
        st = self.core.status()
        return {
            "id": st.node_id,
            "group": self.group,
            "role": st.role.value,
            "term": st.term,
            "leader_id": st.leader_id,
            "begin_index": self.store.begin_index,
            "end_index": self.store.end_index,
            "committed_index": st.committed_index,
            "durable_index": self.committer.durable_index if self.committer else -1,
            "watermarks": dict(st.watermarks),
            "transferring_to": st.transferring_to,
            "voters": list(st.voters),
            "learners": list(st.learners),
            "membership_index": st.membership_index,
            "preferred_leader_id": self.config.preferred_leader_id or None,
            "quiet": st.quiet,
            "pending_requests": self._pending_appends(),
            "waiting_reads": self.notifier.waiting,
            "fsyncs": self.committer.fsyncs if self.committer else 0,
            "store_bytes": self.dir_bytes(),
            **({"state_machine": self.kv.status()} if self.sm is not None else {}),
        }

    def dir_bytes(self) -> int:
        return self._store_bytes.value()

    def _pending_appends(self) -> int:
        return sum(1 for p in self._pending.values() if p.counted)

    def refresh_metrics(self) -> None:
        st = self.core.status()
        m = self.metrics
        m.set_role(st.role.value)
        m.term.set(st.term)
        m.end_index.set(self.store.end_index)
        m.committed_index.set(st.committed_index)
        for peer in self.links:
            leading = st.role == Role.LEADER and peer in st.watermarks
            m.set_peer_lag(peer, self.store.end_index - st.watermarks[peer] if leading else 0)
        m.pending_requests.set(self._pending_appends())
        m.waiting_reads.set(self.notifier.waiting)
        m.store_bytes.set(self.dir_bytes())


def _default_core_factory(raft_config, log_view, hard_state, rng, start_ms):
    from ...raft.core import RaftCore
    return RaftCore(raft_config, log_view, hard_state, rng, start_ms)
