"""The node runtime: one asyncio loop drives the sans-I/O raft core with real time and executes its Readys.

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
import shutil
import time
from dataclasses import dataclass
from typing import Any, Callable

from ..codes import ResponseCode
from ..config import NodeConfig
from ..errors import QuorumLogError
from ..format.log_entry import HEADER_SIZE, MEMBERSHIP_PRODUCER_ID, PRODUCER_TAG_SIZE
from ..peers import parse_address
from ..raft.types import (
    AppendBatch, AppendRecords, ChangeMembership, ClientAppend, Durable, Ready, Receive, Role, StoreFailed, Stored,
    Tick, TransferLeadership,
)
from ..wire.client import (
    AppendRequest, AppendResponse, MemberChangeRequest, MemberChangeResponse, ReadRequest, ReadResponse,
    StatusRequest, StatusResponse, TransferLeaderRequest, TransferLeaderResponse,
)
from .flush_thread import ThreadedGroupCommitter
from .group_commit import GroupCommitter
from .hard_state import load_hard_state, save_hard_state
from .metrics import NodeMetrics
from .reads import CommitNotifier, serve_read

log = logging.getLogger(__name__)

DISK_CHECK_INTERVAL_MS = 250
DISK_FULL_REPORT_INTERVAL_MS = 2_000  # while full, tell the core again (a leader's hand-over may have failed)
STATUS_DISK_BYTES_INTERVAL_MS = 2_000
LOOP_STALL_WARN_MS = 100
PUSH_FRAME_HEADROOM_BYTES = 64 * 1024  # a push's own fields beside its records (config checks the same margin)


def now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


@dataclass(slots=True)
class _Pending:
    """A client request handed to the core, waiting for its Completion."""

    session: Any
    client_request_id: int
    kind: str  # "append" | "transfer" | "member"
    received_s: float
    count: int = 0
    size_bytes: int = 0


class Node:
    """One quorumlog node. `store`, `core_factory` and `transport` are injectable for tests."""

    def __init__(self, config: NodeConfig, *, store: Any = None,
                 core_factory: Callable[..., Any] | None = None, transport: Any = None) -> None:
        self.config = config
        self._store = store
        self._core_factory = core_factory
        self._transport = transport
        self._core: Any = None
        self._committer: GroupCommitter | None = None
        self._flush_transport: Callable[[], None] | None = None
        self.metrics = NodeMetrics(config.node_id, config.group)
        self.notifier = CommitNotifier()
        self._events: collections.deque = collections.deque()
        self._stepping = False
        self._pending: dict[int, _Pending] = {}
        self._next_request_id = 1
        self._tasks: list[asyncio.Task] = []
        self._stopping = asyncio.Event()
        self._stopped = asyncio.Event()
        self.fatal = asyncio.Event()  # set on fail-stop: the process should exit non-zero
        self._disk_error: str | None = None  # the first DISK_ERROR: fail-stop once the core has handled it
        # The largest client batch: its records must fit one push frame beside the push's own header.
        self.max_batch_stored_bytes = config.max_frame_bytes - PUSH_FRAME_HEADROOM_BYTES
        self.failed: str | None = None
        self._disk_full = False
        self._disk_usage = (0, 0)  # used, total bytes of the data_dir filesystem
        self._disk_full_reported_s = 0.0
        self._store_bytes = 0
        self._store_bytes_at_ms = 0
        self._role: Role | None = None
        self._term = -1
        self._http = None
        self._checkpointed: tuple[int, int, int] | None = None
        self._membership: Any = None  # (configuration, committed?) the transport was last told about
        self.started_at = time.time()
        self.sync_flush = config.flush == "sync"

    # -- lifecycle -----------------------------------------------------------------------------------------
    async def start(self) -> None:
        cfg = self.config
        os.makedirs(cfg.data_dir, exist_ok=True)
        if self._store is None:
            self._store = open_store(cfg)
        hard_state = load_hard_state(cfg.data_dir)
        factory = self._core_factory or _default_core_factory
        self._core = factory(cfg.raft_config(), self._store, hard_state, random.Random(os.urandom(16)), now_ms())
        log.info("node starting node=%s group=%s term=%d voted_for=%s begin=%d end=%d committed=%d flush=%s%s",
                 cfg.node_id, cfg.group, hard_state.term, hard_state.voted_for, self._store.begin_index,
                 self._store.end_index, self._store.committed_index, cfg.flush,
                 " (async: acks before fsync, like DLedger's default; a power loss can lose acked entries)"
                 if not self.sync_flush else "")
        self.notifier.advance(self._store.committed_index)
        # sync mode: a dedicated fsync thread (flush_thread.py) instead of a flusher task + asyncio.to_thread
        self._committer = ThreadedGroupCommitter(
            self._store, sync=self.sync_flush, on_durable=lambda i: self._step(Durable(i)),
            on_failed=self._store_failed, observe_fsync_s=self.metrics.fsync_seconds.observe)
        self._check_disk()
        if self._transport is None:
            from .transport_adapter import RealTransport
            self._transport = RealTransport(cfg, self.metrics)
        await self._transport.start(self._on_peer_message, self._on_client_request)
        self._flush_transport = getattr(self._transport, "flush", None)
        if cfg.http_port:
            from .http import HttpServer
            self._http = HttpServer({"/status": self._http_status, "/metrics": self._http_metrics})
            await self._http.start(cfg.listen_host, cfg.http_port)
        self._tasks = [
            asyncio.create_task(self._committer.run(), name="flusher"),
            asyncio.create_task(self._ticker(), name="ticker"),
            asyncio.create_task(self._periodic(DISK_CHECK_INTERVAL_MS, self._check_disk), name="disk-guard"),
            asyncio.create_task(self._periodic(cfg.checkpoint_interval_ms, self._checkpoint), name="checkpoint"),
            asyncio.create_task(self._periodic(cfg.retention_interval_ms, self._retention), name="retention"),
        ]
        self._step(Tick(now_ms()))

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    def request_stop(self) -> None:
        self._stopping.set()

    async def hand_over_leadership(self, timeout_s: float | None = None) -> str | None:
        """Before a graceful stop: if this node leads, transfer leadership to the most caught-up follower
        and wait (bounded) until it leads, so a rolling restart costs no election timeout. Returns the new
        leader's id, or None when nothing was handed over."""
        st = self._core.status()
        connected = getattr(self._transport, "connected", lambda peer: True)
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
        log.info("handing over leadership node=%s to=%s", self.config.node_id, to)
        self._step(TransferLeadership(rid, to))
        timeout_s = timeout_s if timeout_s is not None else 2 * self.config.election_timeout_max_ms / 1000
        try:
            response = await asyncio.wait_for(done, timeout_s)
        except asyncio.TimeoutError:
            self._pending.pop(rid, None)
            log.warning("leadership hand-over timed out node=%s to=%s", self.config.node_id, to)
            return None
        if response.code != ResponseCode.SUCCESS:
            log.warning("leadership hand-over failed node=%s to=%s code=%s", self.config.node_id, to,
                        response.code.name)
            return None
        return response.leader_id or to

    async def stop(self) -> None:
        """Graceful: stop accepting, answer parked reads, flush, checkpoint, close. Idempotent."""
        if self._stopped.is_set():
            return
        self._stopping.set()
        log.info("node stopping node=%s", self.config.node_id)
        if self._transport is not None:
            await self._transport.stop_accepting()
        self.notifier.wake_all()
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        if self._committer is not None:
            self._committer.close()  # stops the fsync thread (after a running fsync, which io_lock waits for)
        if self._store is not None and self._committer is not None:
            try:
                async with self._committer.io_lock:
                    await asyncio.to_thread(self._store.flush)
                    await asyncio.to_thread(self._store.checkpoint)
            except Exception as e:  # noqa: BLE001 - a failing disk must not block shutdown
                log.error("final flush/checkpoint failed: %s", e)
        for p in self._pending.values():
            self._answer_pending(p, ResponseCode.TERM_CHANGED if p.kind == "append" else ResponseCode.TIMEOUT,
                                 message="node shutting down")
        self._pending.clear()
        if self._transport is not None:
            await self._transport.close()
        if self._http is not None:
            await self._http.close()
        if self._store is not None:
            self._store.close()
        self._stopped.set()
        log.info("node stopped node=%s", self.config.node_id)

    # -- the core loop -------------------------------------------------------------------------------------
    def _fail_stop(self, reason: str) -> None:
        log.critical("fail-stop node=%s reason=%s", self.config.node_id, reason)
        self.failed = reason
        self._events.clear()
        self._stopping.set()
        self.fatal.set()

    def _step(self, event: Any) -> None:
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
                    ready = self._core.step(event)
                except Exception as e:  # a bug: the core may be half-stepped, so nothing it holds is trusted
                    log.exception("core.step raised node=%s event=%r", self.config.node_id, event)
                    self._fail_stop(f"core.step raised {type(e).__name__}: {e}")
                    break
                if ready:
                    self._execute(ready)
        finally:
            self._stepping = False
        # Everything this step decided goes out now, one write per socket, answers to clients first: not one
        # loop turn later through call_soon and the peer links' writer tasks.
        m = getattr(self._core, "membership", None)  # (test doubles of the core have none)
        if m is not None and (m, m.index <= self._core.committed_index) != self._membership:
            self._on_membership(m)
        if self._flush_transport is not None:
            self._flush_transport()
        if self._disk_error is not None and not self.failed:
            self._fail_stop(f"disk error (DISK_ERROR is final until a restart): {self._disk_error}")

    def _execute(self, ready: Ready) -> None:
        store = self._store
        try:
            if ready.hard_state is not None:
                save_hard_state(self.config.data_dir, ready.hard_state)  # fsync before any vote goes out
            if ready.truncate_after is not None:
                store.truncate_after(ready.truncate_after)
                self._committer.truncated(ready.truncate_after)
                log.info("truncated node=%s after=%d", self.config.node_id, ready.truncate_after)
            if ready.reset_to is not None:
                store.reset(ready.reset_to, ready.reset_producers)
                self._committer.truncated(ready.reset_to - 1)
        except (OSError, QuorumLogError) as e:
            # The core already counts on this state; carrying on could grant a vote twice or serve a log
            # the core thinks is cut. Fail-stop: nothing of this Ready goes out, and the node exits.
            self._fail_stop(f"cannot persist hard state / truncate: {e}")
            return
        if ready.appends:
            stored = self._write(ready.appends)
            if stored is not None:
                self._committer.written(stored)
                # Stored (and, in async mode, Durable) go next, before any later event.
                if not self.sync_flush:
                    self._events.appendleft(Durable(stored))
                self._events.appendleft(Stored(stored))
        send = self._transport.send
        for msg in ready.messages:
            send(msg)
        for c in ready.completions:
            p = self._pending.pop(c.request_id, None)
            if p is not None:
                self._complete(p, c)
        if ready.committed_index is not None:
            committed = min(ready.committed_index, store.end_index)
            store.set_committed_index(committed)
            self.notifier.advance(committed)

    def _write(self, appends) -> int | None:
        """Write the Ready's appends to the store (page cache); None if the store refused."""
        store = self._store
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
        log.error("store failed node=%s code=%s reason=%s", self.config.node_id, code.name, reason)
        self.metrics.store_failed(code.name)
        if code == ResponseCode.DISK_FULL:
            self._disk_full = True
        elif code == ResponseCode.DISK_ERROR and self._disk_error is None:
            # EIO is final in this process (see the core's _on_store_failed). The core first answers its clients
            # and, as leader, hands over; then the node fail-stops, leader or follower alike, so the failure is
            # visible (the process exits 1) and the node is replaced or restarted on a healed disk instead of
            # sitting in the group refusing every write.
            self._disk_error = reason
        self._step(StoreFailed(code, reason))

    def _on_membership(self, m: Any) -> None:
        """Tell the transport who the members are now and where they listen: bootstrap members from our own
        `peers`, members added later from the configuration itself (raft/membership.py)."""
        committed = m.index <= self._core.committed_index
        self._membership = (m, committed)
        set_members = getattr(self._transport, "set_members", None)
        if set_members is None:
            return
        addresses = dict(self.config.peers)
        for node_id, address in m.addresses:
            try:
                addresses[node_id] = parse_address(address, what=f"member {node_id!r}")
            except ValueError as e:
                log.error("membership names a bad address node=%s member=%s: %s", self.config.node_id, node_id, e)
        # Our own peers stay linked too (unless removed): a joining node answers a leader its empty bootstrap
        # configuration does not name, and a node that missed its own addition still hears from the group.
        # Removed members are dropped once their removal is committed: a leader that removed itself needs the
        # others' acknowledgements of that very entry.
        wanted = m.members | set(self.config.peers) | {self.config.node_id}
        if committed:
            wanted -= m.retired
        members = {p: addresses[p] for p in wanted if p in addresses}
        missing = sorted(m.members - members.keys())
        if missing:
            log.error("no address for members %s node=%s: not linked", missing, self.config.node_id)
        log.info("members node=%s %s", self.config.node_id, m.describe())
        set_members(members)

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
            self._send(p.session, MemberChangeResponse(p.client_request_id, c.code, c.leader_id, c.first_index))
        else:
            self._send(p.session, TransferLeaderResponse(p.client_request_id, c.code, c.leader_id))

    def _answer_pending(self, p: _Pending, code: ResponseCode, message: str = "") -> None:
        if p.kind == "append":
            self._send(p.session, AppendResponse(p.client_request_id, code, message=message))
        elif p.kind == "member":
            self._send(p.session, MemberChangeResponse(p.client_request_id, code, message=message))
        else:
            self._send(p.session, TransferLeaderResponse(p.client_request_id, code, message=message))

    @staticmethod
    def _send(session: Any, response: Any) -> None:
        try:
            session.send(response)
        except Exception as e:  # noqa: BLE001 - the client went away; nothing to answer
            log.debug("could not answer a closed session: %s", e)

    # -- inputs --------------------------------------------------------------------------------------------
    def _on_peer_message(self, msg: Any) -> None:
        if not self._stopping.is_set():  # once stopping, nothing new reaches the store after the final flush
            self._step(Receive(msg))

    def _on_client_request(self, session: Any, request: Any) -> Any:
        """One client request; returns a coroutine for the transport to run when the answer must wait."""
        if isinstance(request, AppendRequest):
            self._client_append(session, request)
        elif isinstance(request, ReadRequest):
            return self._client_read(session, request)  # the transport tracks it (and cancels it on close)
        elif isinstance(request, StatusRequest):
            self._send(session, StatusResponse(request.request_id, ResponseCode.SUCCESS,
                                               json.dumps(self.status()).encode()))
        elif isinstance(request, MemberChangeRequest):
            if request.address:
                try:
                    parse_address(request.address, what=f"member {request.node_id!r}")
                except ValueError as e:
                    self._send(session, MemberChangeResponse(request.request_id, ResponseCode.BAD_REQUEST,
                                                             message=str(e)))
                    return
            rid = self._new_request_id()
            self._pending[rid] = _Pending(session, request.request_id, "member", time.perf_counter())
            self._step(ChangeMembership(rid, request.change, request.node_id, request.address))
        elif isinstance(request, TransferLeaderRequest):
            m = getattr(self._core, "membership", None)
            if request.to not in (m.voters if m is not None else self.config.peers):
                self._send(session, TransferLeaderResponse(request.request_id, ResponseCode.UNKNOWN_MEMBER,
                                                           message=f"{request.to!r} is not a member"))
                return
            rid = self._new_request_id()
            self._pending[rid] = _Pending(session, request.request_id, "transfer", time.perf_counter())
            self._step(TransferLeadership(rid, request.to))
        else:
            log.warning("unknown client request type=%s", type(request).__name__)

    def _client_append(self, session: Any, request: AppendRequest) -> None:
        def refuse(code: ResponseCode, message: str, leader_id: str | None = None) -> None:
            self.metrics.count_request(code.name)
            self._send(session, AppendResponse(request.request_id, code, leader_id, message=message))

        if self._stopping.is_set():
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
        if self._disk_full:
            st = self._core.status()
            if st.role == Role.LEADER:
                return refuse(ResponseCode.DISK_FULL, f"disk of {self.config.data_dir} is full "
                                                      f"(disk_full_ratio {self.config.disk_full_ratio})")
        rid = self._new_request_id()
        self._pending[rid] = _Pending(session, request.request_id, "append", time.perf_counter(), len(bodies), size)
        self._step(ClientAppend(rid, bodies, request.client_id, request.seq))

    async def _client_read(self, session: Any, request: ReadRequest) -> None:
        response: ReadResponse = await serve_read(self._store, request, self.notifier, self._stopping)
        self._send(session, response)

    def _new_request_id(self) -> int:
        rid = self._next_request_id
        self._next_request_id += 1
        return rid

    # -- periodic work -------------------------------------------------------------------------------------
    async def _ticker(self) -> None:
        interval_ms = self.config.tick_interval_ms
        last = now_ms()
        while True:
            await asyncio.sleep(interval_ms / 1000)
            t = now_ms()
            if t - last > interval_ms + LOOP_STALL_WARN_MS:
                # Peers see a stalled node as dead: a stall near the election timeout costs leadership.
                self.metrics.loop_stalls.inc()
                log.warning("event loop stalled node=%s stall_ms=%d", self.config.node_id, t - last - interval_ms)
            last = t
            self._step(Tick(t))
            self._observe_role()

    async def _periodic(self, interval_ms: int, fn: Callable[[], Any]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                result = fn()
                if asyncio.iscoroutine(result):
                    await result
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - periodic housekeeping must not kill the node
                log.exception("periodic task failed fn=%s", getattr(fn, "__name__", fn))

    def _observe_role(self) -> None:
        st = self._core.status()
        if st.role != self._role or st.term != self._term:
            if st.role != self._role:
                log.info("role change node=%s role=%s term=%d leader=%s", self.config.node_id, st.role.value,
                         st.term, st.leader_id)
            self._role, self._term = st.role, st.term
            self.metrics.set_role(st.role.value)
            self.metrics.term.set(st.term)

    def _check_disk(self) -> None:
        try:
            usage = shutil.disk_usage(self.config.data_dir)
        except OSError as e:
            log.warning("disk usage unavailable: %s", e)
            return
        self._disk_usage = (usage.used, usage.total)
        ratio = usage.used / usage.total if usage.total else 0.0
        full = ratio >= self.config.disk_full_ratio
        if full != self._disk_full:
            log.warning("disk guard node=%s full=%s used_ratio=%.3f limit=%.3f", self.config.node_id, full, ratio,
                        self.config.disk_full_ratio)
        was_full, self._disk_full = self._disk_full, full
        # Appends are refused here before they reach the core, so no write would tell it: a full leader must
        # hear it from the guard to hand leadership to a follower that can still store entries.
        now = time.monotonic()
        if full and self._tasks and (not was_full or
                                     now - self._disk_full_reported_s >= DISK_FULL_REPORT_INTERVAL_MS / 1000):
            self._disk_full_reported_s = now
            self._step(StoreFailed(ResponseCode.DISK_FULL, f"disk of {self.config.data_dir} above "
                                                           f"disk_full_ratio {self.config.disk_full_ratio}"))

    async def _checkpoint(self) -> None:
        """Persist (end, committed) when either moved; the store also checkpoints from flush() under load."""
        mark = (self._store.end_index, self._store.committed_index, self._committer.durable_index)
        if mark == self._checkpointed:
            return
        async with self._committer.io_lock:
            await asyncio.to_thread(self._store.checkpoint)
        self._checkpointed = mark

    async def _retention(self) -> None:
        """Delete old segments below what every replica holds (leader) or below the commit point."""
        delete_expired = getattr(self._store, "delete_expired", None)
        if delete_expired is None:
            return
        st = self._core.status()
        safe = st.committed_index
        if st.role == Role.LEADER and st.watermarks:
            safe = min(safe, *st.watermarks.values())
        async with self._committer.io_lock:
            removed = await asyncio.to_thread(delete_expired, int(time.time() * 1000), safe)
        if removed:
            log.info("retention node=%s safe_index=%d segments_removed=%d begin=%d", self.config.node_id, safe,
                     removed, self._store.begin_index)

    # -- status and metrics --------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        st = self._core.status()
        used, total = self._disk_usage
        return {
            "id": st.node_id,
            "group": self.config.group,
            "address": "%s:%d" % self.config.address,
            "role": st.role.value,
            "term": st.term,
            "leader_id": st.leader_id,
            "begin_index": self._store.begin_index,
            "end_index": self._store.end_index,
            "committed_index": st.committed_index,
            "durable_index": self._committer.durable_index if self._committer else -1,
            "watermarks": dict(st.watermarks),
            "transferring_to": st.transferring_to,
            "voters": list(st.voters),
            "learners": list(st.learners),
            "membership_index": st.membership_index,
            "flush": self.config.flush,
            "disk": {"used_bytes": used, "total_bytes": total, "used_ratio": round(used / total, 4) if total else 0,
                     "full": self._disk_full, "store_bytes": self._dir_bytes()},
            "pending_requests": sum(1 for p in self._pending.values() if p.kind == "append"),
            "waiting_reads": self.notifier.waiting,
            "fsyncs": self._committer.fsyncs if self._committer else 0,
            "pid": os.getpid(),
            "uptime_s": round(time.time() - self.started_at, 3),
        }

    def _dir_bytes(self) -> int:
        t = now_ms()
        if t - self._store_bytes_at_ms >= STATUS_DISK_BYTES_INTERVAL_MS:
            self._store_bytes_at_ms = t
            total = 0
            for root, _dirs, files in os.walk(self.config.data_dir):
                for f in files:
                    try:
                        total += os.stat(os.path.join(root, f)).st_blocks * 512
                    except OSError:
                        pass
            self._store_bytes = total
        return self._store_bytes

    def _http_status(self) -> tuple[str, bytes]:
        return "application/json", json.dumps(self.status(), indent=1).encode() + b"\n"

    def _http_metrics(self) -> tuple[str, bytes]:
        st = self._core.status()
        m = self.metrics
        m.set_role(st.role.value)
        m.term.set(st.term)
        m.end_index.set(self._store.end_index)
        m.committed_index.set(st.committed_index)
        for peer in self.config.peers:
            if peer != self.config.node_id:
                lag = self._store.end_index - st.watermarks[peer] if st.role == Role.LEADER and peer in st.watermarks else 0
                m.set_peer_lag(peer, lag)
        m.pending_requests.set(sum(1 for p in self._pending.values() if p.kind == "append"))
        m.waiting_reads.set(self.notifier.waiting)
        used, total = self._disk_usage
        m.disk_used_bytes.set(used)
        m.disk_total_bytes.set(total)
        m.disk_used_ratio.set(used / total if total else 0)
        m.store_bytes.set(self._dir_bytes())
        return m.content_type, m.render()


def _default_core_factory(raft_config, log_view, hard_state, rng, start_ms):
    from ..raft.core import RaftCore
    return RaftCore(raft_config, log_view, hard_state, rng, start_ms)


def open_store(cfg: NodeConfig):
    from ..store.file_store import FileStore
    return FileStore(os.path.join(cfg.data_dir, "store"), cfg.store_config())
