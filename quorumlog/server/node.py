"""The node runtime: one process, one asyncio loop, one listener and one set of peer links hosting many groups.

Each group is a HostedGroup (host.py): a Raft group's replica (raft_group/) or a master/slave group's member
(master_slave/), each with its own store and group commit; the node drives both through that one interface and
asks none of them its kind. The node owns what they share: the transport (a peer link between two nodes carries
every group they both host, each message tagged with its group), one fsync thread for every group's store, the
disk guard, the ticker and the HTTP port. It routes a peer message to its group and a client request to the
handler registered for its type: the node's own (group ops, the bookie), else the group its connection named.

On disk the group of the node's own configuration (`group`, `peers`, normally `default`) lives in `data_dir`
as before; every group created later lives in `data_dir/groups/NAME/` with its definition in `group.json`
(its bootstrap members and their addresses; later membership changes are in its log). A node restarting
opens every group it finds there.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import re
import shutil
import ssl
import time
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Callable, Protocol

from ..clock import monotonic_ms
from ..codes import ResponseCode
from ..config import ConfigError, NodeConfig
from ..errors import QuorumLogError
from ..peers import parse_address
from ..raft.peer_liveness import PeerLiveness
from ..transport.handshake import ANY_MEMBER, NODE_LINK
from ..wire.client import ClientRequest, GroupRequest, GroupResponse, KvItem, StatusRequest, StatusResponse
from ..wire.ledger import BookieOpRequest
from ..wire.messages import HeartbeatRequest, Message
from .durable_file import write_json_durably
from .flush_thread import FsyncWorker
from .host import Address, Handled, Handler, HostedGroup, Session, refusal, send_response
from .loop_lag import LoopLagMonitor
from .master_slave.member import MODE as MASTER_SLAVE, MasterSlaveReplica
from .metrics import NodeMetrics
from .raft_group.replica import Replica
from .services.auto_recovery import AutoRecovery
from .services.bookie import GC_INTERVAL_MS, BookieService
from .services.cluster_calls import META_GROUP, ClusterCalls
from .status_page import status_page

if TYPE_CHECKING:
    from ..raft.core import RaftCore
    from ..store.file_store import FileStore

log = logging.getLogger(__name__)

DISK_CHECK_INTERVAL_MS = 250
DISK_FULL_REPORT_INTERVAL_MS = 2_000  # while full, tell the cores again (a leader's hand-over may have failed)
LOOP_STALL_WARN_MS = 100
GROUPS_DIR = "groups"
GROUP_FILE = "group.json"
GROUP_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,63}$")
# A created group's segments, unless its definition says otherwise: many groups share one disk, so each
# gets smaller segments than the node's default group (1 GiB, DLedger's), and sparse ones unless it asks for
# preallocation: a thousand idle groups must not reserve 72 GiB of blocks.
CREATED_GROUP_SEGMENT_BYTES = 64 * 1024 * 1024
CREATED_GROUP_INDEX_SEGMENT_BYTES = 8 * 1024 * 1024
CREATED_GROUP_PREALLOCATE = False


class NodeTransport(Protocol):
    """The node's listener and peer links (transport_adapter.py RealTransport; tests inject their own). A transport
    may also offer set_peers, connected, flush, peer_ids and dead_links: the node uses them when it does."""

    async def start(self, on_peer_message: Callable[[str, Message], None],
                    on_client_request: Callable[[Session, ClientRequest], Handled],
                    members_of: Callable[[str], frozenset[str] | None], on_peer_hello: Callable[[str, str], None],
                    on_peer_gone: Callable[[str], None]) -> None: ...

    def send(self, group: str, msg: Message) -> None: ...

    async def stop_accepting(self) -> None: ...

    async def close(self) -> None: ...


class Node:
    """One quorumlog node. `store` and `core_factory` (for the group of `config`) and `transport` are injectable
    for tests."""

    def __init__(self, config: NodeConfig, *, store: FileStore | None = None,
                 core_factory: Callable[..., RaftCore] | None = None, transport: NodeTransport | None = None) -> None:
        self.config = config
        self._transport = transport
        self._core_factory = core_factory
        self.metrics = NodeMetrics(config.node_id)
        self.loop_lag = LoopLagMonitor(self._loop_lag_sample, self.metrics.loop_paused.inc)
        self.groups: dict[str, HostedGroup] = {}
        self.default = Replica(self, config, store=store, core_factory=core_factory)
        self.fsync_worker: FsyncWorker | None = None
        self._flush_transport: Callable[[], None] | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._stopping = asyncio.Event()
        self._stopped = asyncio.Event()
        self.fatal = asyncio.Event()  # set on fail-stop: the process should exit non-zero
        self.failed: str | None = None
        self.disk_full = False
        self._disk_usage = (0, 0)  # used, total bytes of the data_dir filesystem
        self._down_since_ms: dict[str, int] = {}  # the status page: when a node first failed to answer here
        self._disk_full_reported_s = 0.0
        # node-level liveness (_node_liveness): when we last heard each node, and those reported silent
        self._now_ms = monotonic_ms()
        self._liveness = PeerLiveness(config.election_timeout_min_ms)
        self._next_node_heartbeat_ms = 0
        self._members_cache: frozenset[str] | None = None
        self.heard_addresses: dict[str, Address] = {}  # where peers that linked to us said they listen
        self._http = None
        self.started_at = time.time()
        # More of node_status, from parts the composition root adds (its front doors): name -> fields.
        self.status_sources: dict[str, Callable[[], Any]] = {}
        self._client_tls: ssl.SSLContext | None = None
        self.calls = ClusterCalls(config, self.known_addresses, self.client_tls)
        self.bookie = BookieService(config, self.calls, self._stopping)
        self.auto_recovery = AutoRecovery(config, self.calls, self._leads_meta)
        # Client requests the node serves itself, whatever group their connection named; the rest go to that group.
        self.handlers: dict[type, Handler] = {GroupRequest: self._on_group, BookieOpRequest: self.bookie.on_request}

    # -- what groups use (host.py GroupHost) ---------------------------------------------------------------
    @property
    def stopping_event(self) -> asyncio.Event:
        return self._stopping

    def send(self, group: str, msg: Message) -> None:
        self._transport.send(group, msg)

    def flush_transport(self) -> None:
        if self._flush_transport is not None:
            self._flush_transport()

    def connected(self, peer_id: str) -> bool:
        connected = getattr(self._transport, "connected", None)
        return True if connected is None else connected(peer_id)

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.append(task)
        return task

    def fail_stop(self, reason: str) -> None:
        if self.failed:
            return
        log.critical("fail-stop node=%s reason=%s", self.config.node_id, reason)
        self.failed = reason
        self._stopping.set()
        self.fatal.set()

    def _on_peer_hello(self, node_id: str, address: str) -> None:
        """A peer linked to us and said where it listens: a group still joining links back to it (raft_group/replica.py
        `members`), as it may be the leader that added us, unknown to our bootstrap peers."""
        try:
            parsed = parse_address(address, what=f"peer {node_id!r}")
        except ValueError as e:
            log.warning("peer gave a bad address node=%s peer=%s: %s", self.config.node_id, node_id, e)
            return
        if self.heard_addresses.get(node_id) != parsed:
            self.heard_addresses[node_id] = parsed
            for r in self.groups.values():
                r.peer_heard(node_id)

    def _on_peer_gone(self, node_id: str) -> None:
        """A link between a peer and this node broke, either way (its process died, or the connection did):
        what a replica keeps per peer connection ends now, not after its silence timeout (a master's HA session
        with that slave, as RocketMQ's HAConnection ends with its socket)."""
        for r in self.groups.values():
            r.peer_gone(node_id)

    def links_changed(self) -> None:
        """Some group's members changed: link to every node any group here needs, accept links from them."""
        self._members_cache = None
        if not self._tasks:
            return  # starting: start() links once every group is open
        set_peers = getattr(self._transport, "set_peers", None)
        if set_peers is not None:
            peers: dict[str, Address] = {}
            for r in self.groups.values():
                peers.update(r.links)
            peers.pop(self.config.node_id, None)
            set_peers(peers)

    def client_tls(self) -> ssl.SSLContext | bool:
        """The context of this node's own connections to other nodes (kv calls, bookie calls, snapshot
        fetches): TLS with its certificate when the cluster runs TLS, False (plain TCP) otherwise."""
        cfg = self.config
        if not cfg.tls:
            return False
        if self._client_tls is None:
            from ..transport.tls import client_context
            self._client_tls = client_context(cfg.tls_ca, cfg.tls_cert, cfg.tls_key)
        return self._client_tls

    def _leads_meta(self) -> bool:
        """Whether this node leads the `_meta` group (where auto-recovery's auditor runs)."""
        meta = self.groups.get(META_GROUP)
        return meta is not None and meta.leads()

    def dead_links(self) -> dict[str, BaseException]:
        """Peer link tasks that ended with an error (a diagnosis at a stuck stop, runtime.py)."""
        dead_links = getattr(self._transport, "dead_links", None)
        return {} if dead_links is None else dead_links()

    def known_addresses(self) -> dict[str, Address]:
        """Every node this node knows an address of: its own config's peers and every hosted group's members."""
        out = dict(self.config.peers)
        for r in self.groups.values():
            out.update(r.links)
        return out

    def members_of(self, group: str) -> frozenset[str] | None:
        """The transport's question (handshake.py): who may send messages of `group` here; None if not hosted."""
        if group == NODE_LINK:
            if self._members_cache is None:
                members = [r.members for r in self.groups.values()]
                self._members_cache = (ANY_MEMBER if any(m is ANY_MEMBER for m in members)
                                       else frozenset().union(*members))
            return self._members_cache
        r = self.groups.get(group)
        return None if r is None else r.members

    # -- lifecycle -----------------------------------------------------------------------------------------
    async def start(self) -> None:
        """Open every group's store, listen, start the groups. A failure part way closes what was opened."""
        try:
            await self._start()
        except BaseException:
            await self.stop()
            raise

    async def _start(self) -> None:
        cfg = self.config
        os.makedirs(cfg.data_dir, exist_ok=True)
        self.default.open()
        self.groups[self.default.group] = self.default
        for name, definition in self._stored_groups():
            replica = self._replica_for(self._group_config(name, definition), definition)
            replica.open()
            self.groups[name] = replica
        self.fsync_worker = FsyncWorker()
        self.bookie.open()
        self._check_disk()
        if self._transport is None:
            from .transport_adapter import RealTransport
            self._transport = RealTransport(cfg, self.metrics)
        await self._transport.start(self._on_peer_message, self._on_client_request, self.members_of,
                                    self._on_peer_hello, self._on_peer_gone)
        self._flush_transport = getattr(self._transport, "flush", None)
        if cfg.http_port:
            from .http import HttpServer
            self._http = HttpServer({"/status": self._http_status, "/metrics": self._http_metrics,
                                     "/": status_page, "/cluster": self._http_cluster}, token=cfg.auth_token())
            if cfg.tls:
                from ..transport.tls import http_context
                await self._http.start(cfg.listen_host, cfg.http_port, ssl_context=http_context(cfg.tls_cert,
                                                                                                  cfg.tls_key))
            else:
                await self._http.start(cfg.listen_host, cfg.http_port)
        self._tasks = [
            asyncio.create_task(self._ticker(), name="ticker"),
            asyncio.create_task(self.loop_lag.run(), name="loop-lag"),
            asyncio.create_task(self._periodic(DISK_CHECK_INTERVAL_MS, self._check_disk), name="disk-guard"),
            asyncio.create_task(self._periodic(cfg.checkpoint_interval_ms, self._checkpoint), name="checkpoint"),
            asyncio.create_task(self._periodic(cfg.retention_interval_ms, self._retention), name="retention"),
            asyncio.create_task(self._periodic(GC_INTERVAL_MS, self.bookie.gc), name="bookie-gc"),
            asyncio.create_task(self.bookie.register(), name="bookie-register"),
            asyncio.create_task(self._periodic(cfg.auditor_period_ms, self.auto_recovery.run_once),
                                name="auto-recovery"),
        ]
        for r in self.groups.values():
            r.start()
        self.links_changed()
        self.metrics.groups.set(len(self.groups))
        log.info("node started node=%s groups=%d", cfg.node_id, len(self.groups))

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    def request_stop(self) -> None:
        self._stopping.set()

    async def hand_over_leadership(self, timeout_s: float | None = None) -> str | None:
        """Before a graceful stop: every group this node leads hands its leadership to its most caught-up
        follower. Returns the default group's new leader (None if it was not led here)."""
        replicas = list(self.groups.values())
        results = await asyncio.gather(*(r.hand_over_leadership(timeout_s) for r in replicas))
        return dict(zip((r.group for r in replicas), results)).get(self.default.group)

    async def stop(self) -> None:
        """Graceful: stop accepting, answer parked reads, flush, checkpoint, close. Idempotent."""
        if self._stopped.is_set():
            return
        self._stopping.set()
        log.info("node stopping node=%s", self.config.node_id)
        if self._transport is not None:
            await self._transport.stop_accepting()
        for r in self.groups.values():
            r.begin_stop()
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        for r in self.groups.values():
            await r.close()
        self.bookie.close()
        await self.calls.close()
        if self.fsync_worker is not None:
            self.fsync_worker.close()
        if self._transport is not None:
            await self._transport.close()
        if self._http is not None:
            await self._http.close()
        self._stopped.set()
        log.info("node stopped node=%s", self.config.node_id)

    # -- groups --------------------------------------------------------------------------------------------
    def _groups_dir(self) -> str:
        return os.path.join(self.config.data_dir, GROUPS_DIR)

    def _stored_groups(self) -> list[tuple[str, dict]]:
        root = self._groups_dir()
        out = []
        if not os.path.isdir(root):
            return out
        for name in sorted(os.listdir(root)):
            path = os.path.join(root, name, GROUP_FILE)
            if not os.path.exists(path):
                continue  # a create that crashed before its definition was durable, or a delete under way
            with open(path) as f:
                out.append((name, json.load(f)))
        return out

    def _group_config(self, name: str, d: dict) -> NodeConfig:
        """A created group's config: the node's settings, its own members, directory and segment sizes."""
        peers = {p: parse_address(a, what=f"member {p!r}") for p, a in d["peers"].items()}
        return dataclasses.replace(
            self.config, group=name, peers=peers, data_dir=os.path.join(self._groups_dir(), name),
            join=bool(d.get("join", False)), preferred_leader_id=d.get("preferred_leader_id") or "",
            data_segment_size=int(d.get("segment_bytes", CREATED_GROUP_SEGMENT_BYTES)),
            index_segment_size=int(d.get("index_segment_bytes", CREATED_GROUP_INDEX_SEGMENT_BYTES)),
            preallocate=bool(d.get("preallocate", CREATED_GROUP_PREALLOCATE)))

    def create_group(self, definition: dict) -> HostedGroup:
        """Host a new group here (raises QuorumLogError-coded ValueError for bad definitions, see _on_group)."""
        name = definition.get("group")
        if not isinstance(name, str) or not GROUP_NAME.match(name):
            raise _Refused(ResponseCode.BAD_REQUEST, f"bad group name {name!r} (letters, digits, . _ -; at most 64)")
        peers = definition.get("peers")
        if not isinstance(peers, dict) or self.config.node_id not in peers:
            raise _Refused(ResponseCode.BAD_REQUEST, f"peers must be a map of id to address naming this node "
                                                     f"({self.config.node_id})")
        existing = self.groups.get(name)
        if existing is not None or os.path.exists(os.path.join(self._groups_dir(), name)):
            if existing is not None and existing.config.group != self.config.group and \
                    self._definition_of(name) == _canonical(definition):
                return existing  # the same create again (a retry): done already
            raise _Refused(ResponseCode.GROUP_EXISTS, f"group {name!r} exists on {self.config.node_id}")
        try:
            config = self._group_config(name, definition)
            replica = self._replica_for(config, definition)
        except (ValueError, KeyError, TypeError, ConfigError) as e:
            raise _Refused(ResponseCode.BAD_REQUEST, f"bad group definition: {e}") from None
        os.makedirs(config.data_dir)
        write_json_durably(os.path.join(config.data_dir, GROUP_FILE), _canonical(definition))
        replica.open()
        self.groups[name] = replica
        replica.start()
        self.links_changed()
        self.metrics.groups.set(len(self.groups))
        log.info("group created node=%s group=%s peers=%s", self.config.node_id, name, sorted(peers))
        return replica

    def _replica_for(self, config: NodeConfig, definition: dict) -> HostedGroup:
        """A Raft replica, or a master/slave group's member (master_slave/member.py) when the definition says so."""
        mode = definition.get("mode", "raft")
        if mode == MASTER_SLAVE:
            return MasterSlaveReplica(self, config, definition)
        if mode != "raft":
            raise ValueError(f"unknown mode {mode!r} (raft, {MASTER_SLAVE})")
        return Replica(self, config, state_machine=definition.get("state_machine"))

    def _definition_of(self, name: str) -> dict | None:
        try:
            with open(os.path.join(self._groups_dir(), name, GROUP_FILE)) as f:
                return json.load(f)
        except OSError:
            return None

    async def delete_group(self, name: str) -> None:
        replica = self.groups.get(name)
        if replica is None:
            raise _Refused(ResponseCode.UNKNOWN_GROUP, f"group {name!r} is not hosted on {self.config.node_id}")
        if replica is self.default:
            raise _Refused(ResponseCode.BAD_REQUEST, f"group {name!r} is this node's own group (its config)")
        del self.groups[name]
        replica.begin_stop()
        await replica.close()
        # The definition goes first: a crash in the middle leaves a directory that is not opened again.
        os.unlink(os.path.join(replica.config.data_dir, GROUP_FILE))
        await asyncio.to_thread(shutil.rmtree, replica.config.data_dir, True)
        self.metrics.forget_group(name)
        self.metrics.groups.set(len(self.groups))
        self.links_changed()
        log.info("group deleted node=%s group=%s", self.config.node_id, name)

    # -- inputs --------------------------------------------------------------------------------------------
    def _on_peer_message(self, group: str, msg: Message) -> None:
        if self._stopping.is_set():
            return
        frm = msg.frm
        if self._liveness.heard(frm, self._now_ms):
            log.info("node heard again node=%s peer=%s", self.config.node_id, frm)
        if group == NODE_LINK:
            return  # a node heartbeat: liveness only
        r = self.groups.get(group)
        if r is None:
            return  # a group created on the sender first, or deleted here: dropped like a lost message
        try:
            r.on_peer_message(msg)
        except Exception:  # noqa: BLE001 - one group's failure must not cut the link every group shares
            # (raised into the transport, it closed the connection: uvloop does so silently for an OSError, and
            # a full slave's failed epochs write cut its link — `_meta`'s messages too — at every hello)
            log.exception("peer message failed node=%s group=%s from=%s kind=%s", self.config.node_id, group,
                          msg.frm, type(msg).__name__)

    def _on_client_request(self, session: Session, request: ClientRequest) -> Handled:
        handler = self.handlers.get(type(request))
        if handler is not None:
            return handler(session, request)
        group = getattr(session, "group", self.default.group)
        if group == NODE_LINK and isinstance(request, StatusRequest):
            send_response(session, StatusResponse(request.request_id, ResponseCode.SUCCESS,
                                          json.dumps(self.node_status()).encode()))
            return None
        r = self.groups.get(group)
        if r is None:
            send_response(session, refusal(request, ResponseCode.UNKNOWN_GROUP,
                                           f"group {group!r} is not hosted on {self.config.node_id}"))
            return None
        return r.on_client_request(session, request)

    async def _on_group(self, session: Session, request: GroupRequest) -> None:
        def answer(code: ResponseCode, body: dict | None = None, message: str = "") -> None:
            send_response(session, GroupResponse(request.request_id, code, json.dumps(body or {}).encode(), message))

        try:
            body = json.loads(request.body or b"{}")
            if not isinstance(body, dict):
                raise ValueError("body must be a JSON object")
        except ValueError as e:
            return answer(ResponseCode.BAD_REQUEST, message=f"bad body: {e}")
        if self._stopping.is_set():
            return answer(ResponseCode.LEADER_NOT_READY, message="node shutting down")
        try:
            if request.op == "create":
                existed = body.get("group") in self.groups
                r = self.create_group(body)
                return answer(ResponseCode.SUCCESS, {"group": r.group, "members": sorted(r.members),
                                                     "created": not existed})
            if request.op == "delete":
                await self.delete_group(str(body.get("group")))
                return answer(ResponseCode.SUCCESS, {"group": body.get("group")})
            if request.op == "list":
                return answer(ResponseCode.SUCCESS, self.node_status())
            return answer(ResponseCode.BAD_REQUEST, message=f"unknown group op {request.op!r}")
        except _Refused as e:
            return answer(e.code, message=str(e))
        except OSError as e:
            log.error("group %s failed node=%s: %s", request.op, self.config.node_id, e)
            return answer(ResponseCode.DISK_ERROR, message=f"{request.op}: {e}")

    # -- periodic work -------------------------------------------------------------------------------------
    async def _ticker(self) -> None:
        interval_ms = self.config.tick_interval_ms
        last = monotonic_ms()
        while True:
            await asyncio.sleep(interval_ms / 1000)
            t = self._now_ms = monotonic_ms()
            if t - last > interval_ms + LOOP_STALL_WARN_MS:
                # Peers see a stalled node as dead: a stall near the election timeout costs leadership.
                self.metrics.loop_stalls.inc()
                log.warning("event loop stalled node=%s stall_ms=%d", self.config.node_id, t - last - interval_ms)
                self._liveness.restart(t)  # we heard nothing because we did not listen
            last = t
            for r in list(self.groups.values()):
                if not r.quiet:
                    try:
                        r.tick(t)
                    except Exception:  # noqa: BLE001 - one group's bug must not stop every group's clock
                        log.exception("tick failed node=%s group=%s", self.config.node_id, r.group)
            if self.config.quiesce:
                self._node_liveness(t)

    def _loop_lag_sample(self, lag_s: float) -> None:
        m = self.metrics
        m.loop_lag_seconds.observe(lag_s)
        if lag_s * 1000 >= self.loop_lag.lag.max_ms:
            m.loop_lag_max_seconds.set(lag_s)

    def _node_liveness(self, t: int) -> None:
        """One heartbeat per linked node per heartbeat interval, whatever the number of groups; a node silent
        for the minimum election timeout is reported (PeerSilent) to every group: quiet ones that need to know
        wake, leaders may go quiet past it (raft/quiescence.py). Any message from a node counts as hearing it."""
        cfg = self.config
        peers = getattr(self._transport, "peer_ids", ())
        if t >= self._next_node_heartbeat_ms:
            self._next_node_heartbeat_ms = t + cfg.heartbeat_interval_ms
            for p in peers:
                self._transport.send(NODE_LINK, HeartbeatRequest(cfg.node_id, p, 0, -1))
        for p in self._liveness.newly_silent(peers, t):
            log.info("node silent node=%s peer=%s", cfg.node_id, p)
            for r in list(self.groups.values()):
                r.peer_silent(p)

    async def _periodic(self, interval_ms: int, fn: Callable[[], object]) -> None:
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

    def _check_disk(self) -> None:
        try:
            usage = shutil.disk_usage(self.config.data_dir)
        except OSError as e:
            log.warning("disk usage unavailable: %s", e)
            return
        self._disk_usage = (usage.used, usage.total)
        self.bookie.check_disk()
        ratio = usage.used / usage.total if usage.total else 0.0
        full = ratio >= self.config.disk_full_ratio
        if full != self.disk_full:
            log.warning("disk guard node=%s full=%s used_ratio=%.3f limit=%.3f", self.config.node_id, full, ratio,
                        self.config.disk_full_ratio)
        was_full, self.disk_full = self.disk_full, full
        if was_full and not full:
            for r in list(self.groups.values()):
                r.report_disk_ok()
        # Appends are refused before they reach the cores, so no write would tell them: a full leader must
        # hear it from the guard to hand leadership to a follower that can still store entries.
        now_s = time.monotonic()
        if full and self._tasks and (not was_full or
                                     now_s - self._disk_full_reported_s >= DISK_FULL_REPORT_INTERVAL_MS / 1000):
            self._disk_full_reported_s = now_s
            for r in list(self.groups.values()):
                r.report_disk_full(f"disk of {self.config.data_dir} above disk_full_ratio "
                                   f"{self.config.disk_full_ratio}")

    async def _checkpoint(self) -> None:
        for r in list(self.groups.values()):
            await r.checkpoint()
        for r in list(self.groups.values()):
            r.release_read_pages()
        await self.bookie.checkpoint()

    async def _retention(self) -> None:
        for r in list(self.groups.values()):
            await r.retention()

    # -- status and metrics --------------------------------------------------------------------------------
    def _node_fields(self) -> dict[str, Any]:
        used, total = self._disk_usage
        return {
            "address": "%s:%d" % self.config.address,
            "flush": self.config.flush,
            "disk": {"used_bytes": used, "total_bytes": total, "used_ratio": round(used / total, 4) if total else 0,
                     "full": self.disk_full},
            "pid": os.getpid(),
            "uptime_s": round(time.time() - self.started_at, 3),
            "loop_lag": self.loop_lag.summary(),
        }

    def status(self, group: HostedGroup | None = None) -> dict[str, Any]:
        """One group's status on this node (the node's own group by default), with the node's fields."""
        r = group or self.default
        doc = r.status()
        doc.update(self._node_fields())
        doc["disk"]["store_bytes"] = doc.pop("store_bytes")
        return doc

    def node_status(self) -> dict[str, Any]:
        """The node and every group it hosts (`status --all-groups`, `group list`)."""
        doc = {"id": self.config.node_id, **self._node_fields()}
        doc["groups"] = [r.status() for r in self.groups.values()]
        doc["metrics"] = self.metrics.summary()
        if self.bookie.storage is not None:
            doc["bookie"] = {**self.bookie.info(), "fragments_replicated": self.auto_recovery.replicated}
        for name, source in self.status_sources.items():
            try:
                doc[name] = source()
            except Exception as e:  # noqa: BLE001 - a part's status failing leaves the node's status standing
                log.exception("status of %s failed", name)
                doc[name] = {"error": f"{type(e).__name__}: {e}"}
        return doc

    def _http_status(self) -> tuple[str, bytes]:
        return "application/json", json.dumps(self.status(), indent=1).encode() + b"\n"

    async def _http_cluster(self) -> tuple[str, bytes]:
        """The status page's data: every node this node knows, as each reports itself (this one directly),
        the ledgers auto-recovery is re-replicating, the topics and the consumer groups' lag."""
        others = [n for n in self.known_addresses() if n != self.config.node_id]
        docs = await asyncio.gather(*(self.calls.node_status(n) for n in others))
        now_ms = int(time.time() * 1000)
        for d in docs:  # a node that stopped answering stays on the page, with since when (as this node saw it)
            if "error" in d:
                d["down_since_ms"] = self._down_since_ms.setdefault(d["id"], now_ms)
            else:
                self._down_since_ms.pop(d.get("id"), None)
        nodes = [self.node_status(), *docs]
        under = topics = consumer_groups = None  # (no `_meta` group, or it has no leader now)
        try:
            under_items, topic_items, offset_items = await asyncio.wait_for(asyncio.gather(
                self.calls.meta_list("underreplicated/"), self.calls.meta_list("topics/"),
                self.calls.meta_list("offsets/")), 2)
            under = [json.loads(it.value or b"{}") for it in under_items]
            topics, consumer_groups = self._topics_doc(topic_items, offset_items)
        except (QuorumLogError, OSError, asyncio.TimeoutError, ValueError):
            pass
        doc = {"served_by": self.config.node_id, "time_ms": now_ms, "nodes": nodes,
               "ledgers_underreplicated": under, "topics": topics, "consumer_groups": consumer_groups}
        return "application/json", json.dumps(doc).encode()

    def _topics_doc(self, topic_items: list[KvItem], offset_items: list[KvItem]) -> tuple[list[dict], list[dict]]:
        """Topics with their message counts, and per consumer group its committed queues and lag, as far as
        the topic groups hosted here know their queues' ends (`None` for a queue on a group hosted elsewhere)."""
        def queue_end(topic: str, queue_id: int, group: str) -> int | None:
            r = self.groups.get(group)
            return None if r is None else r.queue_end(topic, queue_id)

        placement = {it.key[len("topics/"):]: json.loads(it.value or b"{}").get("queues", []) for it in topic_items}
        topics = []
        for name, groups in sorted(placement.items()):
            ends = [queue_end(name, q, g) for q, g in enumerate(groups)]
            topics.append({"topic": name, "queues": len(groups), "groups": sorted(set(groups)),
                           "messages": sum(e for e in ends if e is not None),
                           "complete": all(e is not None for e in ends)})
        lag: dict[str, dict] = {}
        for it in offset_items:
            group, _, rest = it.key[len("offsets/"):].partition("/")
            topic, _, queue = rest.rpartition("/")
            row = lag.setdefault(group, {"group": group, "topics": set(), "queues": 0, "lag": 0, "complete": True})
            row["topics"].add(topic)
            row["queues"] += 1
            groups = placement.get(topic, [])
            end = queue_end(topic, int(queue), groups[int(queue)]) if int(queue) < len(groups) else None
            if end is None:
                row["complete"] = False
            else:
                row["lag"] += max(0, end - int(it.value or b"0"))
        return topics, [{**r, "topics": sorted(r["topics"])} for _, r in sorted(lag.items())]

    def _http_metrics(self) -> tuple[str, bytes]:
        for r in self.groups.values():
            r.refresh_metrics()
        m = self.metrics
        used, total = self._disk_usage
        m.disk_used_bytes.set(used)
        m.disk_total_bytes.set(total)
        m.disk_used_ratio.set(used / total if total else 0)
        return m.content_type, m.render()


class _Refused(Exception):
    def __init__(self, code: ResponseCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def _canonical(definition: dict) -> dict:
    keys = ("group", "mode", "master_slave", "peers", "preferred_leader_id", "join", "segment_bytes",
            "index_segment_bytes", "preallocate", "state_machine")
    return {k: definition[k] for k in keys if k in definition}
