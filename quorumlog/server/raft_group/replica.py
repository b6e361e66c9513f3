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
import json
import logging
import os
import random
import time
from dataclasses import dataclass
from typing import Any, Callable

from ...codes import ResponseCode
from ...config import Flush, NodeConfig
from ...errors import QuorumLogError
from ...format.log_entry import HEADER_SIZE, MEMBERSHIP_PRODUCER_ID, PRODUCER_TAG_SIZE
from ...peers import parse_address
from ...topic.dispatcher import TopicDispatcher
from ...transport.handshake import ANY_MEMBER
from ...raft.types import (
    AppendBatch, AppendRecords, ChangeMembership, ClientAppend, Completion, Durable, Ready, Receive, Role,
    SnapshotNeeded, StoreFailed, Stored, StoreRecovered, Tick, TransferLeadership,
)
from ...wire.client import (
    AppendRequest, AppendResponse, ConsumerGroupRequest, ConsumerGroupResponse, HaControllerRequest, KvRequest,
    KvResponse,
    MemberChangeRequest, MemberChangeResponse, ReadRequest, ReadResponse, StatusRequest, StatusResponse,
    TopicRequest, TopicResponse, TransferLeaderRequest, TransferLeaderResponse,
)
from ..services import kv as kv_service
from ..services.consumer_groups import ConsumerGroupService
from ..services.ha_controller import HAControllerService
from ..services.topics import TopicService
from ..flush_thread import ThreadedGroupCommitter
from ..group_commit import GroupCommitter
from .hard_state import open_hard_state, save_hard_state
from ..metrics import GroupMetrics
from ..reads import CommitNotifier, serve_read
from ..repeated_log import RepeatedLog

log = logging.getLogger(__name__)

STATUS_DISK_BYTES_INTERVAL_MS = 2_000
PUSH_FRAME_HEADROOM_BYTES = 64 * 1024  # a push's own fields beside its records (config checks the same margin)


def now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


@dataclass(slots=True)
class _Pending:
    """A client request handed to the core, waiting for its Completion."""

    session: Any
    client_request_id: int
    # "append" | "transfer" | "member" | "kv_read" | "kv_write" | "topic_send" | "cg_commit" | "ha_put" | "ha_confirm"
    kind: str
    received_s: float
    count: int = 0
    size_bytes: int = 0
    request: Any = None  # the KvRequest / TopicRequest of a kv or topic kind


class Replica:
    """One group on this node. `host` is the Node (node.py): the transport, the disk guard and fail-stop are its.
    `store` and `core_factory` are injectable for tests."""

    def __init__(self, host: Any, config: NodeConfig, *, store: Any = None,
                 core_factory: Callable[..., Any] | None = None, state_machine: str | None = None) -> None:
        if state_machine not in (None, "kv", "topics"):
            raise ValueError(f"unknown state machine {state_machine!r} (known: kv, topics)")
        self.host = host
        self.state_machine = state_machine
        self.sm: Any = None  # StateMachineHost (state_machine_host.py) when the group runs one
        self.kv = kv_service.KvService(self)  # (also applies and snapshots a topic group's dispatcher)
        self.topics = TopicService(self)
        self.consumer_groups = ConsumerGroupService(self)  # (served by the `_meta` group's leader)
        self.ha_controller = HAControllerService(self)  # (likewise: master/slave groups' controller)
        self.config = config
        self.group = config.group
        self.store = store
        self._core_factory = core_factory
        self.core: Any = None
        self.committer: GroupCommitter | None = None
        self.metrics: GroupMetrics = host.metrics.group(config.group)
        self.notifier = CommitNotifier()
        self._events: collections.deque = collections.deque()
        self._stepping = False
        self.quiet = False  # quiescent (raft/quiescence.py): the node skips its ticks
        self._pending: dict[int, _Pending] = {}
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
        self._membership: Any = None  # (configuration, committed?) last turned into `links`
        self.links: dict[str, tuple[str, int]] = {}  # the peers this replica needs linked, with addresses
        self.sync_flush = config.flush is Flush.SYNC
        self.stopping = False

    # -- lifecycle -----------------------------------------------------------------------------------------
    def open(self) -> None:
        """Open the store and the core (blocking file I/O: a node opens its replicas before it serves)."""
        cfg = self.config
        os.makedirs(cfg.data_dir, exist_ok=True)
        if self.store is None:
            self.store = open_store(cfg)
        hard_state = open_hard_state(cfg.data_dir)
        factory = self._core_factory or _default_core_factory
        self.core = factory(cfg.raft_config(), self.store, hard_state, random.Random(os.urandom(16)), now_ms())
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
        self.step(Tick(now_ms()))

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
        done = asyncio.get_running_loop().create_future()

        class _Waiter:
            def send(self, response: Any) -> None:
                if not done.done():
                    done.set_result(response)

        rid = self._new_request_id()
        self._pending[rid] = _Pending(_Waiter(), 0, "transfer", time.perf_counter())
        log.info("handing over leadership node=%s to=%s group=%s", self.config.node_id, to, self.group)
        self.step(TransferLeadership(rid, to))
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

    def begin_stop(self) -> None:
        """Stop taking peer messages (nothing new reaches the store after the final flush), wake parked reads."""
        self.stopping = True
        self.notifier.wake_all()

    async def close(self) -> None:
        """Final flush and checkpoint, answer what is pending, close the store. After begin_stop()."""
        if self.committer is not None:
            self.committer.close()  # stops its fsync work (after a running fsync, which io_lock waits for)
        if self.store is not None and self.committer is not None and not self.failed:
            await final_flush(self.store, self.committer, self.group)
        for p in self._pending.values():
            self._answer_pending(p, ResponseCode.TERM_CHANGED if p.kind == "append" else ResponseCode.TIMEOUT,
                                 message="node shutting down")
        self._pending.clear()
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

    def step(self, event: Any) -> None:
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
                        ready = self.core.step(Tick(now_ms()))
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
                self._complete(p, c)

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

    def _on_membership(self, m: Any) -> None:
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

    def _joining(self, m: Any) -> bool:
        me = self.config.node_id
        return self.config.join and me not in m.members and me not in m.retired

    def peer_heard(self, node_id: str) -> None:
        """The node heard where `node_id` listens: a joining group links to it."""
        if self._membership is not None and self._joining(self._membership[0]) and node_id not in self.links:
            self._on_membership(self._membership[0])

    def peer_gone(self, node_id: str) -> None:
        pass  # (Raft keeps no per-connection session: lost messages are sent again, silence is PeerSilent)

    def _complete(self, p: _Pending, c) -> None:
        if p.kind == "append":
            if c.code == ResponseCode.SUCCESS:
                self.metrics.commit_seconds.observe(time.perf_counter() - p.received_s)
                self.metrics.appends.inc(p.count)
                self.metrics.append_bytes.inc(p.size_bytes)
            self.metrics.count_request(c.code.name)
            self._send(p.session, AppendResponse(p.client_request_id, c.code, c.leader_id, c.first_index,
                                                 c.last_index, c.term))
        elif p.kind == "member":
            self._send(p.session, MemberChangeResponse(p.client_request_id, c.code, c.leader_id, c.first_index,
                                                       message=c.message))
        elif p.kind in ("kv_read", "kv_write"):
            self.kv.completed(p, c)
        elif p.kind == "topic_send":
            self.topics.sent(p.session, p.client_request_id, c.code, c.first_index, c.last_index, None, c.leader_id)
        elif p.kind == "cg_commit":
            self.consumer_groups.completed(p, c)
        elif p.kind == "ha_put":
            self.ha_controller.completed(p, c)
        elif p.kind == "ha_confirm":
            self.ha_controller.confirmed(p, c)
        else:
            self._send(p.session, TransferLeaderResponse(p.client_request_id, c.code, c.leader_id))

    def _answer_pending(self, p: _Pending, code: ResponseCode, message: str = "") -> None:
        if p.kind == "append":
            self._send(p.session, AppendResponse(p.client_request_id, code, message=message))
        elif p.kind == "member":
            self._send(p.session, MemberChangeResponse(p.client_request_id, code, message=message))
        elif p.kind in ("kv_read", "kv_write"):
            self._send(p.session, KvResponse(p.client_request_id, code, message=message))
        elif p.kind == "topic_send":
            self._send(p.session, TopicResponse(p.client_request_id, code, message=message))
        elif p.kind == "cg_commit":
            self._send(p.session, ConsumerGroupResponse(p.client_request_id, code, message=message))
        elif p.kind == "ha_put":
            self.ha_controller.completed(p, Completion(0, code))
        elif p.kind == "ha_confirm":
            self.ha_controller.confirmed(p, Completion(0, code))
        else:
            self._send(p.session, TransferLeaderResponse(p.client_request_id, code, message=message))

    @staticmethod
    def _send(session: Any, response: Any) -> None:
        try:
            session.send(response)
        except Exception as e:  # noqa: BLE001 - the client went away; nothing to answer
            log.debug("could not answer a closed session: %s", e)

    # -- inputs --------------------------------------------------------------------------------------------
    def on_peer_message(self, msg: Any) -> None:
        if not self.stopping:  # once stopping, nothing new reaches the store after the final flush
            self.step(Receive(msg))

    def on_client_request(self, session: Any, request: Any) -> Any:
        """One client request; returns a coroutine for the transport to run when the answer must wait."""
        if isinstance(request, AppendRequest):
            self._client_append(session, request)
        elif isinstance(request, ReadRequest):
            return self._client_read(session, request)  # the transport tracks it (and cancels it on close)
        elif isinstance(request, KvRequest):
            return self.kv.on_request(session, request)
        elif isinstance(request, TopicRequest):
            return self.topics.on_request(session, request)
        elif isinstance(request, ConsumerGroupRequest):
            return self.consumer_groups.on_request(session, request)
        elif isinstance(request, HaControllerRequest):
            return self.ha_controller.on_request(session, request)
        elif isinstance(request, StatusRequest):
            self._send(session, StatusResponse(request.request_id, ResponseCode.SUCCESS,
                                               json.dumps(self.host.status(self)).encode()))
        elif isinstance(request, MemberChangeRequest):
            if request.address:
                try:
                    parse_address(request.address, what=f"member {request.node_id!r}")
                except ValueError as e:
                    self._send(session, MemberChangeResponse(request.request_id, ResponseCode.BAD_REQUEST,
                                                             message=str(e)))
                    return None
            rid = self._new_request_id()
            self._pending[rid] = _Pending(session, request.request_id, "member", time.perf_counter())
            self.step(ChangeMembership(rid, request.change, request.node_id, request.address))
        elif isinstance(request, TransferLeaderRequest):
            m = getattr(self.core, "membership", None)
            if request.to not in (m.voters if m is not None else self.config.peers):
                self._send(session, TransferLeaderResponse(request.request_id, ResponseCode.UNKNOWN_MEMBER,
                                                           message=f"{request.to!r} is not a member"))
                return None
            rid = self._new_request_id()
            self._pending[rid] = _Pending(session, request.request_id, "transfer", time.perf_counter())
            self.step(TransferLeadership(rid, request.to))
        else:
            log.warning("unknown client request type=%s", type(request).__name__)
        return None

    def _client_append(self, session: Any, request: AppendRequest) -> None:
        def refuse(code: ResponseCode, message: str, leader_id: str | None = None) -> None:
            self.metrics.count_request(code.name)
            self._send(session, AppendResponse(request.request_id, code, leader_id, message=message))

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
        rid = self._new_request_id()
        self._pending[rid] = _Pending(session, request.request_id, "append", time.perf_counter(), len(bodies), size)
        self.step(ClientAppend(rid, bodies, request.client_id, request.seq))

    def append_messages(self, session: Any, request: TopicRequest) -> None:
        """A topic send's batch (checked by services/topics.py): through the core like an append, with the client's
        producer id and sequence; the completion goes back to TopicService.sent."""
        rid = self._new_request_id()
        self._pending[rid] = _Pending(session, request.request_id, "topic_send", time.perf_counter(), request=request)
        self.step(ClientAppend(rid, request.bodies, request.client_id, request.seq))

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

    async def _client_read(self, session: Any, request: ReadRequest) -> None:
        response: ReadResponse = await serve_read(self.store, request, self.notifier, self.host.stopping_event)
        self._send(session, response)

    def _new_request_id(self) -> int:
        rid = self._next_request_id
        self._next_request_id += 1
        return rid

    # -- periodic work (the node calls these for every replica) ----------------------------------------------
    def tick(self, t_ms: int) -> None:
        self.step(Tick(t_ms))
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

    def checkpoint_due(self) -> bool:
        """(end, committed, durable) moved since the last checkpoint: a quiet group's never does."""
        return not self.failed and (self.store.end_index, self.store.committed_index,
                                    self.committer.durable_index) != self._checkpointed

    async def checkpoint(self) -> None:
        """Persist (end, committed) when either moved; the store also checkpoints from flush() under load."""
        mark = (self.store.end_index, self.store.committed_index, self.committer.durable_index)
        if mark == self._checkpointed or self.failed:
            return
        async with self.committer.io_lock:
            await asyncio.to_thread(self.store.checkpoint)
        self._checkpointed = mark

    def release_read_pages(self) -> None:
        """Unmap the pages of the sealed segments read since the last call (a file store's; a quiet group's readers
        page them in too): FileStore.release_read_pages."""
        release = getattr(self.store, "release_read_pages", None)
        if release is not None:
            release()

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
            "pending_requests": sum(1 for p in self._pending.values() if p.kind == "append"),
            "waiting_reads": self.notifier.waiting,
            "fsyncs": self.committer.fsyncs if self.committer else 0,
            "store_bytes": self.dir_bytes(),
            **({"state_machine": self.kv.status()} if self.sm is not None else {}),
        }

    def dir_bytes(self) -> int:
        return self._store_bytes.value()

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
        m.pending_requests.set(sum(1 for p in self._pending.values() if p.kind == "append"))
        m.waiting_reads.set(self.notifier.waiting)
        m.store_bytes.set(self.dir_bytes())


async def final_flush(store: Any, committer: GroupCommitter, group: str) -> None:
    """A closing group's last fsync and checkpoint, after any running fsync (io_lock)."""
    try:
        async with committer.io_lock:
            await asyncio.to_thread(store.flush)
            await asyncio.to_thread(store.checkpoint)
    except Exception as e:  # noqa: BLE001 - a failing disk must not block shutdown
        log.error("final flush/checkpoint failed group=%s: %s", group, e)


class DirectoryBytes:
    """The disk blocks under a group's directory for status and metrics, counted on a thread: the walk stats
    every file, and once the inode cache is cold (after drop_caches, or pushed out by heavy writes) each stat
    reads the disk behind everything queued there. On the loop it stalled every group of the node (204 ms
    measured under batched writes, at a status request). `value()` answers the last count at once and starts
    the next when that one is older than STATUS_DISK_BYTES_INTERVAL_MS."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._bytes = 0
        self._at_ms = -STATUS_DISK_BYTES_INTERVAL_MS
        self._counting: asyncio.Future | None = None

    def value(self) -> int:
        t = now_ms()
        if self._counting is None and t - self._at_ms >= STATUS_DISK_BYTES_INTERVAL_MS:
            self._at_ms = t
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # (no loop: a tool reading a status directly)
                self._bytes = directory_bytes(self._path)
                return self._bytes
            self._counting = loop.run_in_executor(None, directory_bytes, self._path)
            self._counting.add_done_callback(self._counted)
        return self._bytes

    def _counted(self, fut: asyncio.Future) -> None:
        self._counting = None
        if not fut.cancelled() and fut.exception() is None:
            self._bytes = fut.result()


def directory_bytes(data_dir: str) -> int:
    """Disk blocks used under a group's directory (a sparse segment counts what it holds)."""
    total = 0
    for root, dirs, files in os.walk(data_dir):
        if root == data_dir and "groups" in dirs:
            dirs.remove("groups")  # the default group's directory holds the others' (node.py)
        for f in files:
            try:
                total += os.stat(os.path.join(root, f)).st_blocks * 512
            except OSError:
                pass
    return total


def _default_core_factory(raft_config, log_view, hard_state, rng, start_ms):
    from ...raft.core import RaftCore
    return RaftCore(raft_config, log_view, hard_state, rng, start_ms)


def open_store(cfg: NodeConfig):
    from ...store.file_store import FileStore
    return FileStore(os.path.join(cfg.data_dir, "store"), cfg.store_config())
