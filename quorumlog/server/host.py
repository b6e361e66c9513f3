"""What the node hosts and what it offers what it hosts: the two sides of one interface.

A group of any kind (a Raft group's replica, a master/slave group's member) is a HostedGroup: the node opens,
starts, ticks and stops it, hands it its peer messages and client requests, and asks it for its status, never
for its kind. A group and the services it runs reach their node only through GroupHost, so nothing here or
below imports node.py.

A client request handed to a core waits as a Pending until the core's Completion: the Pending carries the
callback that answers it, so whoever created it (the group itself or a service) decides the answer.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ..codes import ResponseCode
from ..config import NodeConfig
from ..raft.types import Completion, Event, Role
from ..wire.client import (
    AppendRequest, AppendResponse, ClientRequest, ClientResponse, ConsumerGroupRequest, ConsumerGroupResponse,
    GroupResponse, HaControllerRequest, HaControllerResponse, KvRequest, KvResponse, MemberChangeRequest,
    MemberChangeResponse, ReadRequest, ReadResponse, StatusRequest, StatusResponse, TopicRequest, TopicResponse,
    TransferLeaderRequest, TransferLeaderResponse,
)
from ..wire.ledger import BookieOpResponse
from ..wire.messages import Message

if TYPE_CHECKING:
    from ..raft.core import RaftCore
    from ..store.file_store import FileStore
    from .flush_thread import FsyncWorker
    from .metrics import GroupMetrics, NodeMetrics
    from .state_machine_host import StateMachineHost

log = logging.getLogger(__name__)

Address = tuple[str, int]
# What a request handler returns: None when it answered (or will, through a Pending), else the coroutine that
# answers it; the transport runs it and cancels it when the connection closes.
Handled = Awaitable[None] | None


class Session(Protocol):
    """A client connection, as far as an answer goes (transport/server.py ClientSession)."""

    def send(self, response: ClientResponse | BookieOpResponse) -> object: ...


Handler = Callable[[Session, Any], Handled]  # (Any: each handler takes its own request class)


def send_response(session: Session, response: ClientResponse | BookieOpResponse) -> None:
    """Answer a session that may have gone away meanwhile."""
    try:
        session.send(response)
    except Exception as e:  # noqa: BLE001 - the client went away; nothing to answer
        log.debug("could not answer a closed session: %s", e)


def refusal(request: ClientRequest, code: ResponseCode, message: str) -> ClientResponse:
    """The response of `request`'s type that refuses it with `code`."""
    rid = request.request_id
    if isinstance(request, StatusRequest):
        return StatusResponse(rid, code, json.dumps({"error": message}).encode())
    return _RESPONSE_OF.get(type(request), GroupResponse)(rid, code, message=message)  # type: ignore[no-any-return]


# (a caller reads a refusal as the answer it asked for: a KvRequest answered by a GroupResponse had no leader_id,
# and the `_meta` calls of every node's auto-recovery raised on it once the first node they asked left `_meta`)
_RESPONSE_OF: dict[type, type] = {
    AppendRequest: AppendResponse, ReadRequest: ReadResponse, MemberChangeRequest: MemberChangeResponse,
    TransferLeaderRequest: TransferLeaderResponse, KvRequest: KvResponse, TopicRequest: TopicResponse,
    ConsumerGroupRequest: ConsumerGroupResponse, HaControllerRequest: HaControllerResponse,
}


class Service(Protocol):
    """What serves client requests of the types in `serves` (a group's KV store, its topics, ...)."""

    serves: tuple[type, ...]

    def on_request(self, session: Session, request: Any) -> Handled: ...


def handlers_of(*services: Service) -> dict[type, Handler]:
    """The registry entries of `services`: each request type to the service that serves it."""
    out: dict[type, Handler] = {}
    for s in services:
        for t in s.serves:
            assert t not in out, f"{t.__name__} served twice"
            out[t] = s.on_request
    return out


def dispatch(handlers: dict[type, Handler], session: Session, request: ClientRequest, group: str) -> Handled:
    """A client request to the handler registered for its type; refused if this group serves no such type."""
    handler = handlers.get(type(request))
    if handler is None:
        send_response(session, refusal(request, ResponseCode.BAD_REQUEST,
                                       f"group {group} serves no {type(request).__name__}"))
        return None
    return handler(session, request)


@dataclass(slots=True)
class Pending:
    """A client request handed to a core, waiting for its Completion; `on_done` answers it. A group that stops
    first completes it with `shutdown_code` (an append's client retries on TERM_CHANGED)."""

    on_done: Callable[[Completion], None]
    shutdown_code: ResponseCode = ResponseCode.TIMEOUT
    counted: bool = False  # a client append: what status and metrics call pending requests


class ControllerCalls(Protocol):
    """The node's calls to the HA controller on the `_meta` leader (services/cluster_calls.py)."""

    async def ha_controller(self, op: str, body: dict, *, timeout_ms: int = ...) -> dict: ...


class GroupHost(Protocol):
    """What a hosted group, and the services it runs, may ask of the node hosting it."""

    metrics: NodeMetrics
    fsync_worker: FsyncWorker | None
    disk_full: bool  # the node's disk guard's verdict; a group whose write hit ENOSPC sets it at once
    heard_addresses: dict[str, Address]  # where peers that linked to this node said they listen
    calls: ControllerCalls

    @property
    def stopping_event(self) -> asyncio.Event: ...

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task: ...

    def send(self, group: str, msg: Message) -> None: ...

    def flush_transport(self) -> None: ...

    def connected(self, peer_id: str) -> bool: ...

    def fail_stop(self, reason: str) -> None: ...

    def links_changed(self) -> None: ...

    def client_tls(self) -> ssl.SSLContext | bool: ...

    def status(self, group: HostedGroup) -> dict[str, Any]: ...


class HostedGroup(Protocol):
    """One group on a node, whatever its kind: the only face the node sees."""

    group: str
    config: NodeConfig
    quiet: bool  # (quiescent: the node skips its ticks)
    links: dict[str, Address]  # the nodes this group needs linked, with their addresses

    @property
    def members(self) -> frozenset[str]: ...  # who may send this group's peer messages here

    # lifecycle
    def open(self) -> None: ...  # blocking file I/O, before the node serves

    def start(self) -> None: ...  # inside the running loop, after open()

    async def hand_over_leadership(self, timeout_s: float | None = None) -> str | None: ...

    def begin_stop(self) -> None: ...

    async def close(self) -> None: ...  # after begin_stop(); closes only what open() opened

    # inputs
    def tick(self, now_ms: int) -> None: ...

    def on_peer_message(self, msg: Message) -> None: ...

    def on_client_request(self, session: Session, request: ClientRequest) -> Handled: ...

    def peer_heard(self, node_id: str) -> None: ...  # the node learned where node_id listens

    def peer_gone(self, node_id: str) -> None: ...  # a link with node_id broke

    def peer_silent(self, node_id: str) -> None: ...  # node_id was silent for an election timeout

    def report_disk_full(self, reason: str) -> None: ...

    def report_disk_ok(self) -> None: ...

    # periodic work
    async def checkpoint(self) -> None: ...

    def release_read_pages(self) -> None: ...

    async def retention(self) -> None: ...

    # status
    def status(self) -> dict[str, Any]: ...

    def refresh_metrics(self) -> None: ...

    def queue_end(self, topic: str, queue_id: int) -> int | None: ...  # None: no such topic group here


class ServedGroup(Protocol):
    """A group as the services it runs see it (services/): its state machine, its store, its leader, and the way
    a request goes through its log."""

    group: str
    config: NodeConfig
    host: GroupHost
    state_machine: str | None  # "kv", "topics" or None
    sm: StateMachineHost | None
    store: FileStore
    stopping: bool
    links: dict[str, Address]
    metrics: GroupMetrics

    @property
    def leader_id(self) -> str | None: ...

    def append_messages(self, session: Session, request: TopicRequest) -> None: ...  # a topic send's batch

    def read_refusal(self) -> str | None: ...  # why reads are not served here, if they are not

    def suggested_slave(self, read_to: int) -> str | None: ...

    def holds_everything_committed(self) -> bool: ...

    def on_snapshot_needed(self, needed: bool) -> None: ...


class ConsensusGroup(ServedGroup, Protocol):
    """A Raft group as the services of the `_meta` group see it: its core's role and term, and requests through
    the core, each answered by its Pending."""

    core: RaftCore

    def submit(self, event_for: Callable[[int], Event], pending: Pending) -> int: ...


def meta_leader_refusal(group: ConsensusGroup, serves: str) -> tuple[ResponseCode, str] | None:
    """Why `group` cannot serve a request of a `_meta` service now (None: it can): it is not `_meta`'s key/value
    group, it is stopping, or it does not lead. `serves`: what the service does, for the first refusal."""
    if group.state_machine != "kv":
        return ResponseCode.BAD_REQUEST, f"{serves} by the `_meta` group"
    if group.stopping:
        return ResponseCode.LEADER_NOT_READY, "node shutting down"
    if group.core.role is not Role.LEADER:
        return ResponseCode.NOT_LEADER, ""
    return None
