"""asyncio TCP transport: the node's server, its outbound peer links, and the client's connection.

Three pieces, one framing (frames.py), one handshake (handshake.py), one codec (codec.py):

* TransportServer — accepts connections. After the handshake a PEER connection is a one-way stream of peer
  messages, each handed to `on_peer_message` synchronously and in order; a CLIENT connection carries
  pipelined requests, each handed to `on_client_request` with a ClientSession to answer on (in any order).
* PeerLinks — this node's outbound connection to every other member. Every peer message this node sends
  (requests and responses alike) goes out here; inbound connections only receive. `send` never blocks: a
  bounded queue per peer drops its oldest messages when full (Raft retries; a stale message is harmless).
* ClientConnection — one pipelined client connection: request_id → Future, one reader, a bound on in-flight.

asyncio Protocols rather than streams: the server parses frames straight out of data_received and writes
with writelines, so a 100-byte append costs no extra task switch and a 1 MiB push no extra copy.
Bad input closes only the connection that sent it (logged at INFO as key=value, counted in stats).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import random
import socket
from collections import deque
from dataclasses import dataclass
from typing import Awaitable, Callable, Iterable, Mapping

from ..codes import ResponseCode
from ..errors import NetworkError, ProtocolError, QuorumLogError, Timeout
from ..wire.client import ClientRequest, ClientResponse
from ..wire.messages import Message
from . import codec
from .frames import MAX_FRAME_BYTES, NEED_DATA, FrameDecoder
from .handshake import (
    DEFAULT_HANDSHAKE_TIMEOUT_MS, MAX_HELLO_FRAME_BYTES, Hello, HelloError, HelloOk, Role, check_hello,
    decode_hello, decode_hello_error, decode_hello_ok, encode_hello, encode_hello_error, encode_hello_ok,
)
from .kinds import CLIENT_REQUEST_KINDS, CLIENT_RESPONSE_KINDS, PEER_KINDS, Kind

log = logging.getLogger(__name__)

DEFAULT_MAX_CONNECTIONS = 1024
DEFAULT_MAX_IN_FLIGHT = 4096  # requests a client may have unanswered on one connection before we stop reading
DEFAULT_CONNECT_TIMEOUT_MS = 1_000
DEFAULT_WRITE_TIMEOUT_MS = 5_000  # a peer that accepts no bytes for this long gets a fresh connection
DEFAULT_RECONNECT_BACKOFF_MIN_MS = 20
DEFAULT_RECONNECT_BACKOFF_MAX_MS = 1_000  # well under the election timeout's scale of failover
DEFAULT_MAX_QUEUE_MESSAGES = 8192
DEFAULT_MAX_QUEUE_BYTES = 64 * 1024 * 1024
MAX_WRITE_BATCH_BYTES = 8 * 1024 * 1024  # one writelines call: enough to amortise, small enough to interleave
_WRITE_HIGH_WATER_BYTES = 4 * 1024 * 1024
_WRITE_LOW_WATER_BYTES = 1 * 1024 * 1024
_CORK_FLUSH_BYTES = 256 * 1024
_MAX_DIRTY_CORKS = 4096
assert DEFAULT_RECONNECT_BACKOFF_MIN_MS < DEFAULT_RECONNECT_BACKOFF_MAX_MS

OnPeerMessage = Callable[[Message], None]
OnClientRequest = Callable[[ClientRequest, "ClientSession"], "Awaitable[None] | None"]
OnConnectionClosed = Callable[[str, str], None]  # (stats counter name, reason)


def _nodelay(transport: asyncio.BaseTransport) -> None:
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:  # pragma: no cover - a socket already closed
            pass


def _peername(transport: asyncio.BaseTransport) -> str:
    peer = transport.get_extra_info("peername")
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return str(peer)


class _WriteCork:
    """Coalesces the frames written during one loop iteration into one writelines (one syscall for many).

    Pipelined traffic is many small frames: one send() each would cost more than everything else per request.
    The cork is flushed by call_soon (so at most one loop iteration of added latency), at once when it holds
    more than _CORK_FLUSH_BYTES (so backpressure sees big writes), and before a graceful close.
    """

    __slots__ = ("transport", "pending", "pending_bytes", "scheduled", "dirty", "listed", "eager")

    def __init__(self, transport, dirty: list | None = None, eager: bool = False) -> None:
        self.transport = transport
        # eager (the client's side): the first frame of a loop turn is written at once, only the ones that
        # follow it in the same turn are corked; a lone caller waits for no loop turn.
        self.eager = eager
        self.pending: list = []
        self.pending_bytes = 0
        self.scheduled = False
        # The server's list of corks holding data: TransportServer.flush() empties them all at once when its
        # owner finished a unit of work (the node, after a step), before the call_soon would.
        self.dirty = dirty
        self.listed = False  # in `dirty` (at most once; the owner's flush clears it)

    def write(self, buffers: list, size: int) -> None:
        if self.eager and not self.scheduled:
            self.scheduled = True  # later frames of this turn are corked
            asyncio.get_running_loop().call_soon(self.flush)
            if not self.transport.is_closing():
                self.transport.writelines(buffers)
            return
        self.pending.extend(buffers)
        self.pending_bytes += size
        if self.pending_bytes >= _CORK_FLUSH_BYTES:
            self.flush()
        elif not self.scheduled:
            self.scheduled = True
            dirty = self.dirty
            if dirty is not None and not self.listed:
                if len(dirty) >= _MAX_DIRTY_CORKS:  # an owner that never flushes: the list is only a shortcut
                    for cork in dirty:
                        cork.listed = False
                    dirty.clear()
                self.listed = True
                dirty.append(self)
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        self.scheduled = False
        if not self.pending:
            return
        buffers, self.pending, self.pending_bytes = self.pending, [], 0
        if not self.transport.is_closing():
            self.transport.writelines(buffers)


# ==================================================================================================
# Server
# ==================================================================================================
@dataclass(slots=True)
class TransportStats:
    """Counters for /metrics. `closed_*` count connections we closed, by reason."""

    connections_accepted: int = 0
    connections_rejected: int = 0  # over max_connections: closed at once
    connections_active: int = 0
    peer_connections_active: int = 0
    client_connections_active: int = 0
    closed_protocol_errors: int = 0  # garbage, bad length, half frame, wrong magic/version, bad payload
    closed_handshake_errors: int = 0  # a readable Hello we refused: other group, unknown member, bad token
    closed_handshake_timeouts: int = 0
    closed_handshake_evictions: int = 0  # dropped mid-handshake to make room under max_connections
    frames_in: int = 0
    bytes_in: int = 0
    frames_out: int = 0
    bytes_out: int = 0

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__slots__}


class ClientSession:
    """The client connection a request came on; `send` answers it (responses carry the request_id)."""

    __slots__ = ("_conn", "client_name", "remote")

    def __init__(self, conn: "_ServerConnection", client_name: str, remote: str) -> None:
        self._conn = conn
        self.client_name = client_name
        self.remote = remote

    @property
    def closed(self) -> bool:
        return self._conn.state == _CLOSED

    def send(self, response: ClientResponse) -> bool:
        """Write one response frame now. Returns False (and drops it) if the connection is gone."""
        return self._conn.send_response(response)

    def __repr__(self) -> str:
        return f"ClientSession(client={self.client_name!r}, remote={self.remote})"


_HANDSHAKE, _PEER, _CLIENT, _CLOSED = "handshake", "peer", "client", "closed"


class _ServerConnection(asyncio.Protocol):
    __slots__ = ("server", "transport", "cork", "decoder", "state", "remote", "node_id", "session", "in_flight",
                 "reading_paused", "writing_paused", "handshake_timer")

    def __init__(self, server: "TransportServer") -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.cork: _WriteCork | None = None
        self.decoder = FrameDecoder(MAX_HELLO_FRAME_BYTES)
        self.state = _HANDSHAKE
        self.remote = "?"
        self.node_id = ""
        self.session: ClientSession | None = None
        self.in_flight = 0  # client requests handed over and not yet answered
        self.reading_paused = False
        self.writing_paused = False
        self.handshake_timer: asyncio.TimerHandle | None = None

    # -- asyncio callbacks ------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  (uvloop's is not an asyncio.Transport subclass)
        self.cork = _WriteCork(transport, self.server.dirty_corks)
        self.remote = _peername(transport)
        srv = self.server
        if not srv.closing and len(srv.connections) >= srv.max_connections and srv.handshaking:
            # Full: make room by dropping the oldest connection that has not finished its handshake, so a
            # storm of idle sockets cannot lock out peers and clients (a real handshake takes one round trip).
            victim = next(iter(srv.handshaking))
            victim._close("evicted: max_connections reached while still in handshake",
                          count="closed_handshake_evictions", abort=True)
        if srv.closing or len(srv.connections) >= srv.max_connections:
            srv.stats.connections_rejected += 1
            self.state = _CLOSED
            log.info("connection refused remote=%s reason=max_connections limit=%d", self.remote,
                     srv.max_connections)
            transport.abort()
            return
        srv.connections.add(self)
        srv.handshaking[self] = None
        srv.stats.connections_accepted += 1
        srv.stats.connections_active = len(srv.connections)
        _nodelay(transport)
        transport.set_write_buffer_limits(high=_WRITE_HIGH_WATER_BYTES, low=_WRITE_LOW_WATER_BYTES)
        self.handshake_timer = asyncio.get_running_loop().call_later(
            srv.handshake_timeout_ms / 1000, self._handshake_timed_out)

    def data_received(self, data: bytes) -> None:
        if self.state == _CLOSED:
            return
        self.server.stats.bytes_in += len(data)
        try:
            self.decoder.feed(data)
        except ProtocolError as e:
            self._fail(str(e))
            return
        self._process_frames()

    def _process_frames(self) -> None:
        """Handle buffered frames until none is complete, or until reading is paused: a chunk may hold
        thousands of small requests, and answering them all while the client reads nothing would buffer
        their responses without bound."""
        stats = self.server.stats
        try:
            while self.state != _CLOSED and not self.reading_paused:
                frame = self.decoder.next_frame()
                if frame is NEED_DATA:
                    break
                stats.frames_in += 1
                kind, payload = frame
                if self.state == _PEER:
                    self._on_peer_frame(kind, payload)
                elif self.state == _CLIENT:
                    self._on_client_frame(kind, payload)
                else:
                    self._on_hello_frame(kind, payload)
        except ProtocolError as e:
            self._fail(str(e))

    def eof_received(self) -> bool | None:
        self._process_frames()
        if self.state != _CLOSED and not self.decoder.at_frame_boundary and not self.decoder.has_complete_frame:
            self._fail(f"half frame at end of stream ({self.decoder.buffered_bytes} bytes)")
        else:
            self._close("eof", count=None)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        srv = self.server
        if self.state == _PEER:
            srv.stats.peer_connections_active -= 1
        elif self.state == _CLIENT:
            srv.stats.client_connections_active -= 1
        self.state = _CLOSED
        if self.handshake_timer is not None:
            self.handshake_timer.cancel()
            self.handshake_timer = None
        srv.connections.discard(self)
        srv.handshaking.pop(self, None)
        srv.stats.connections_active = len(srv.connections)

    def pause_writing(self) -> None:
        # A client that does not read its responses stops being read: memory stays bounded.
        self.writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self.writing_paused = False
        self._update_reading()

    # -- frames -----------------------------------------------------------------------------------
    def _on_hello_frame(self, kind: int, payload: memoryview) -> None:
        srv = self.server
        if kind != Kind.HELLO:
            self._reject(HelloError(ResponseCode.PROTOCOL_ERROR, f"expected Hello, got frame kind {kind}"))
            return
        hello = decode_hello(payload)
        err = check_hello(hello, group=srv.group, members=srv.members, token=srv.token)
        if err is not None:
            self._reject(err)
            return
        if self.handshake_timer is not None:
            self.handshake_timer.cancel()
            self.handshake_timer = None
        self.node_id = hello.node_id
        srv.handshaking.pop(self, None)
        self.decoder.max_frame_bytes = srv.max_frame_bytes
        self._write([encode_hello_ok(HelloOk(srv.group, srv.node_id))])
        if hello.role == Role.PEER:
            self.state = _PEER
            srv.stats.peer_connections_active += 1
            log.info("peer connected node=%s peer=%s remote=%s", srv.node_id, hello.node_id, self.remote)
        else:
            self.state = _CLIENT
            srv.stats.client_connections_active += 1
            self.session = ClientSession(self, hello.node_id, self.remote)
            log.debug("client connected client=%s remote=%s", hello.node_id, self.remote)

    def _on_peer_frame(self, kind: int, payload: memoryview) -> None:
        if kind not in PEER_KINDS:
            raise ProtocolError(f"frame kind {kind} on a peer connection")
        msg = codec.decode(kind, payload)
        if msg.frm != self.node_id:
            raise ProtocolError(f"message from {msg.frm!r} on the link of {self.node_id!r}")
        self.server.on_peer_message(msg)

    def _on_client_frame(self, kind: int, payload: memoryview) -> None:
        if kind not in CLIENT_REQUEST_KINDS:
            raise ProtocolError(f"frame kind {kind} on a client connection")
        request = codec.decode(kind, payload)
        assert self.session is not None
        self.in_flight += 1
        if self.in_flight >= self.server.max_in_flight:
            self._update_reading()
        result = self.server.on_client_request(request, self.session)
        if result is not None and inspect.isawaitable(result):
            self.server.track(result)

    def send_response(self, response: ClientResponse) -> bool:
        if self.state != _CLIENT:
            return False
        self._write(codec.encode(response))
        if self.in_flight > 0:
            self.in_flight -= 1
        if self.reading_paused:
            self._update_reading()
        return True

    # -- helpers ----------------------------------------------------------------------------------
    def _write(self, buffers: list) -> None:
        assert self.cork is not None
        size = codec.encoded_size(buffers)
        stats = self.server.stats
        stats.frames_out += 1
        stats.bytes_out += size
        self.cork.write(buffers, size)

    def _update_reading(self) -> None:
        t = self.transport
        if t is None or self.state == _CLOSED:
            return
        want_pause = self.writing_paused or self.in_flight >= self.server.max_in_flight
        if want_pause and not self.reading_paused:
            self.reading_paused = True
            t.pause_reading()
        elif not want_pause and self.reading_paused and self.in_flight <= self.server.max_in_flight // 2:
            self.reading_paused = False
            t.resume_reading()
            if not self.decoder.at_frame_boundary:
                # Frames read before the pause wait in the decoder; handle them outside the caller's stack.
                asyncio.get_running_loop().call_soon(self._resume_frames)

    def _resume_frames(self) -> None:
        if self.state != _CLOSED and not self.reading_paused:
            self._process_frames()

    def _handshake_timed_out(self) -> None:
        self.handshake_timer = None
        if self.state == _HANDSHAKE:
            self._close(f"no handshake within {self.server.handshake_timeout_ms} ms",
                        count="closed_handshake_timeouts", abort=True)

    def _reject(self, err: HelloError) -> None:
        """Answer a refused Hello with its code, then close (after the answer is flushed)."""
        self._write([encode_hello_error(err)])
        counter = "closed_protocol_errors" if err.code == ResponseCode.PROTOCOL_ERROR else "closed_handshake_errors"
        self._close(f"handshake refused code={err.code.name} detail={err.message!r}", count=counter)

    def _fail(self, reason: str) -> None:
        if self.state == _HANDSHAKE:
            # Maybe another protocol or a broken client: a one-frame answer costs nothing and helps debugging.
            try:
                self._write([encode_hello_error(HelloError(ResponseCode.PROTOCOL_ERROR, reason))])
            except Exception:  # pragma: no cover - transport already gone
                pass
        self._close(f"protocol error: {reason}", count="closed_protocol_errors", abort=self.state != _HANDSHAKE)

    def _close(self, reason: str, *, count: str | None, abort: bool = False) -> None:
        if self.state == _CLOSED:
            return
        was = self.state
        srv = self.server
        srv.connections.discard(self)
        srv.handshaking.pop(self, None)
        srv.stats.connections_active = len(srv.connections)
        if was == _PEER:
            self.server.stats.peer_connections_active -= 1
        elif was == _CLIENT:
            self.server.stats.client_connections_active -= 1
        self.state = _CLOSED
        if count is not None:
            setattr(self.server.stats, count, getattr(self.server.stats, count) + 1)
            log.info("closed connection node=%s remote=%s state=%s peer=%s reason=%s", self.server.node_id,
                     self.remote, was, self.node_id or "-", reason)
            if self.server.on_protocol_error is not None:
                self.server.on_protocol_error(count, reason)
        else:
            log.debug("connection ended remote=%s state=%s reason=%s", self.remote, was, reason)
        if self.handshake_timer is not None:
            self.handshake_timer.cancel()
            self.handshake_timer = None
        if self.transport is not None:
            if self.cork is not None:
                self.cork.flush()  # a HelloOk/HelloError still corked goes out first
            if abort:
                self.transport.abort()
            else:
                self.transport.close()


class TransportServer:
    """Accepts peer and client connections for one node of one group."""

    def __init__(self, *, group: str, node_id: str, members: Iterable[str], on_peer_message: OnPeerMessage,
                 on_client_request: OnClientRequest, max_frame_bytes: int = MAX_FRAME_BYTES,
                 handshake_timeout_ms: int = DEFAULT_HANDSHAKE_TIMEOUT_MS,
                 max_connections: int = DEFAULT_MAX_CONNECTIONS, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
                 token: str | None = None, on_protocol_error: OnConnectionClosed | None = None) -> None:
        assert max_frame_bytes >= MAX_HELLO_FRAME_BYTES and max_connections > 0 and max_in_flight > 1
        self.group = group
        self.node_id = node_id
        self.members = frozenset(members)
        self.on_peer_message = on_peer_message
        self.on_client_request = on_client_request
        self.max_frame_bytes = max_frame_bytes
        self.handshake_timeout_ms = handshake_timeout_ms
        self.max_connections = max_connections
        self.max_in_flight = max_in_flight
        self.token = token
        self.on_protocol_error = on_protocol_error
        self.stats = TransportStats()
        self.connections: set[_ServerConnection] = set()
        self.handshaking: dict[_ServerConnection, None] = {}  # insertion order: oldest first
        self.closing = False
        self.dirty_corks: list[_WriteCork] = []  # corks holding responses not yet written (see flush)
        self._server: asyncio.AbstractServer | None = None
        # Request handlers the runtime returned; kept so they are not garbage-collected mid-flight and are
        # cancelled on close (a Protocol callback cannot use a TaskGroup).
        self._tasks: set[asyncio.Future] = set()

    @classmethod
    async def start(cls, host: str, port: int, *, group: str, node_id: str, members: Iterable[str],
                    on_peer_message: OnPeerMessage, on_client_request: OnClientRequest,
                    max_frame_bytes: int = MAX_FRAME_BYTES,
                    handshake_timeout_ms: int = DEFAULT_HANDSHAKE_TIMEOUT_MS,
                    max_connections: int = DEFAULT_MAX_CONNECTIONS, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
                    token: str | None = None, on_protocol_error: OnConnectionClosed | None = None,
                    backlog: int = 1024) -> "TransportServer":
        """Listen on host:port (port 0: any free port, see `.port`). `members` are the group's member ids
        (a dict of id → address works too). `on_protocol_error(counter, reason)` is called for every
        connection closed for bad input (counter names the TransportStats field it incremented)."""
        self = cls(group=group, node_id=node_id, members=members, on_peer_message=on_peer_message,
                   on_client_request=on_client_request, max_frame_bytes=max_frame_bytes,
                   handshake_timeout_ms=handshake_timeout_ms, max_connections=max_connections,
                   max_in_flight=max_in_flight, token=token, on_protocol_error=on_protocol_error)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _ServerConnection(self), host, port, backlog=backlog,
                                                reuse_address=True)
        log.info("transport listening node=%s group=%s address=%s:%d", node_id, group, host, self.port)
        return self

    @property
    def port(self) -> int:
        assert self._server is not None and self._server.sockets
        return self._server.sockets[0].getsockname()[1]

    @property
    def host(self) -> str:
        assert self._server is not None and self._server.sockets
        return self._server.sockets[0].getsockname()[0]

    def flush(self) -> None:
        """Write every corked response now (one writelines per connection) instead of one loop turn later:
        the node calls this after each step, so an answer leaves in the same loop turn that decided it."""
        dirty = self.dirty_corks
        if dirty:
            corks = dirty[:]
            dirty.clear()
            for cork in corks:
                cork.listed = False
                cork.flush()

    def track(self, awaitable: Awaitable[None]) -> None:
        task = asyncio.ensure_future(awaitable)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Future) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            log.error("client request handler failed node=%s error=%r", self.node_id, exc, exc_info=exc)

    async def stop_accepting(self) -> None:
        """Close the listening socket; established connections keep working (graceful shutdown, step 1)."""
        if self._server is not None and self._server.is_serving():
            self._server.close()
            log.info("transport stopped accepting node=%s", self.node_id)

    async def close(self) -> None:
        """Stop accepting, drop every connection, cancel pending request handlers. Idempotent."""
        if self.closing:
            return
        self.closing = True
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn._close("server closing", count=None, abort=True)
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        log.info("transport closed node=%s", self.node_id)

    async def __aenter__(self) -> "TransportServer":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()


# ==================================================================================================
# Outbound peer links
# ==================================================================================================
@dataclass(slots=True)
class PeerLinkStats:
    connected: bool = False
    connects: int = 0  # successful handshakes
    connect_failures: int = 0
    dropped_messages: int = 0  # oldest messages dropped because the queue was full
    queued_messages: int = 0
    queued_bytes: int = 0
    frames_out: int = 0
    bytes_out: int = 0
    last_error: str = ""

    def as_dict(self) -> dict[str, int | bool | str]:
        return {name: getattr(self, name) for name in self.__slots__}


class _LinkProtocol(asyncio.Protocol):
    """One outbound connection: handshake reply in, then write-only. Any later inbound byte is an error."""

    def __init__(self, wake: Callable[[], None], max_frame_bytes: int) -> None:
        self.transport: asyncio.Transport | None = None
        self.decoder = FrameDecoder(MAX_HELLO_FRAME_BYTES)
        self.hello_reply: asyncio.Future = asyncio.get_running_loop().create_future()
        self.lost: asyncio.Future = asyncio.get_running_loop().create_future()
        self.drain_waiter: asyncio.Future | None = None
        self.paused = False
        self._wake = wake

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        _nodelay(transport)
        transport.set_write_buffer_limits(high=_WRITE_HIGH_WATER_BYTES, low=_WRITE_LOW_WATER_BYTES)

    def data_received(self, data: bytes) -> None:
        try:
            self.decoder.feed(data)
            while (frame := self.decoder.next_frame()) is not NEED_DATA:
                if self.hello_reply.done():
                    raise ProtocolError("unexpected data on an outbound peer link")
                kind, payload = frame
                if kind == Kind.HELLO_OK:
                    self.hello_reply.set_result(decode_hello_ok(payload))
                elif kind == Kind.HELLO_ERROR:
                    self.hello_reply.set_result(decode_hello_error(payload))
                else:
                    raise ProtocolError(f"expected a handshake reply, got frame kind {kind}")
        except ProtocolError as e:
            self._set_lost(e)
            assert self.transport is not None
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self._set_lost(exc or ConnectionResetError("connection closed by peer"))

    def _set_lost(self, exc: BaseException) -> None:
        if not self.lost.done():
            self.lost.set_result(exc)
        if not self.hello_reply.done():
            self.hello_reply.set_exception(NetworkError(f"connection lost during handshake: {exc}"))
            self.hello_reply.exception()  # mark retrieved
        if self.drain_waiter is not None and not self.drain_waiter.done():
            self.drain_waiter.set_result(None)
        self._wake()

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        if self.drain_waiter is not None and not self.drain_waiter.done():
            self.drain_waiter.set_result(None)

    async def drain(self, timeout_s: float) -> None:
        if not self.paused or self.lost.done():
            return
        self.drain_waiter = asyncio.get_running_loop().create_future()
        try:
            await asyncio.wait_for(self.drain_waiter, timeout_s)
        except asyncio.TimeoutError:
            raise NetworkError(f"peer accepted no bytes for {timeout_s * 1000:.0f} ms") from None
        finally:
            self.drain_waiter = None


class _PeerLink:
    def __init__(self, links: "PeerLinks", peer_id: str, host: str, port: int) -> None:
        self.links = links
        self.peer_id = peer_id
        self.host = host
        self.port = port
        self.queue: deque[tuple[list, int]] = deque()
        self.queued_bytes = 0
        self.stats = PeerLinkStats()
        self.wakeup = asyncio.Event()
        self.protocol: _LinkProtocol | None = None
        self.task: asyncio.Task | None = None
        # The writer task is parked on `wakeup` with a live connection: messages are then written by
        # PeerLinks.flush() (the node calls it after each step), not by waking the task (one task switch and
        # one loop turn less on every push and every ack).
        self.idle = False
        self.listed = False  # in PeerLinks._dirty

    def enqueue(self, buffers: list, size: int) -> None:
        q = self.queue
        q.append((buffers, size))
        self.queued_bytes += size
        links = self.links
        while len(q) > 1 and (len(q) > links.max_queue_messages or self.queued_bytes > links.max_queue_bytes):
            _, dropped = q.popleft()
            self.queued_bytes -= dropped
            self.stats.dropped_messages += 1
        if self.idle:
            links._mark_dirty(self)
        else:
            self.wakeup.set()

    def _write_batch(self, transport) -> None:
        """Hand up to MAX_WRITE_BATCH_BYTES of queued frames to the socket in one writelines()."""
        q = self.queue
        out: list = []
        batch_bytes = 0
        frames = 0
        while q and batch_bytes < MAX_WRITE_BATCH_BYTES:
            buffers, size = q.popleft()
            out.extend(buffers)
            batch_bytes += size
            frames += 1
        self.queued_bytes -= batch_bytes
        transport.writelines(out)
        self.stats.frames_out += frames
        self.stats.bytes_out += batch_bytes

    def write_now(self) -> None:
        """Write what is queued straight to the socket if the writer task is parked on a healthy connection;
        otherwise wake the task (connecting, draining a full socket buffer, or reconnecting)."""
        q = self.queue
        if not q:
            return
        proto = self.protocol
        if not self.idle or proto is None or proto.paused or proto.lost.done() or proto.transport is None \
                or proto.transport.is_closing():
            self.wakeup.set()
            return
        self._write_batch(proto.transport)
        if q or proto.paused:
            self.wakeup.set()  # the rest (or the drain) is the task's

    async def run(self) -> None:
        links = self.links
        backoff_ms = links.reconnect_backoff_min_ms
        while not links.closing:
            try:
                await self._connect()
                backoff_ms = links.reconnect_backoff_min_ms
                await self._write_loop()
            except asyncio.CancelledError:
                raise
            except (OSError, NetworkError, ProtocolError, asyncio.TimeoutError, QuorumLogError, RuntimeError) as e:
                # RuntimeError: uvloop's "handler is closed" when writing to a socket the peer already shut;
                # like any link error it means reconnect, never a link that stays down for good.
                self.stats.last_error = f"{type(e).__name__}: {e}"
                if self.stats.connected:
                    log.info("peer link down node=%s peer=%s error=%r", links.node_id, self.peer_id, e)
                else:
                    self.stats.connect_failures += 1
                    log.debug("peer link connect failed node=%s peer=%s error=%r", links.node_id, self.peer_id, e)
            finally:
                self.stats.connected = False
                if self.protocol is not None and self.protocol.transport is not None:
                    self.protocol.transport.abort()
                self.protocol = None
            if links.closing:
                break
            delay_ms = backoff_ms * random.uniform(0.5, 1.0)
            backoff_ms = min(backoff_ms * 2, links.reconnect_backoff_max_ms)
            await asyncio.sleep(delay_ms / 1000)

    async def _connect(self) -> None:
        links = self.links
        loop = asyncio.get_running_loop()
        timeout_s = links.connect_timeout_ms / 1000
        _, proto = await asyncio.wait_for(
            loop.create_connection(lambda: _LinkProtocol(self.wakeup.set, links.max_frame_bytes),
                                   self.host, self.port), timeout_s)
        self.protocol = proto
        assert proto.transport is not None
        proto.transport.write(encode_hello(Hello(links.group, links.node_id, Role.PEER, links.token)))
        reply = await asyncio.wait_for(asyncio.shield(proto.hello_reply), timeout_s)
        if isinstance(reply, HelloError):
            err = QuorumLogError.for_code(reply.code, reply.message)
            # Say it once per streak, not once per retry (a misconfigured member list retries every second).
            level = logging.DEBUG if self.stats.last_error.startswith(type(err).__name__) else logging.WARNING
            log.log(level, "peer refused our handshake node=%s peer=%s code=%s detail=%r", links.node_id,
                    self.peer_id, reply.code.name, reply.message)
            raise err
        assert isinstance(reply, HelloOk)
        if reply.node_id != self.peer_id or reply.group != links.group:
            raise ProtocolError(f"expected {self.peer_id}@{links.group}, reached {reply.node_id}@{reply.group}")
        self.stats.connected = True
        self.stats.connects += 1
        log.info("peer link up node=%s peer=%s address=%s:%d", links.node_id, self.peer_id, self.host, self.port)

    async def _write_loop(self) -> None:
        proto = self.protocol
        assert proto is not None and proto.transport is not None
        transport = proto.transport
        write_timeout_s = self.links.write_timeout_ms / 1000
        q = self.queue
        while True:
            if proto.lost.done():
                raise NetworkError(f"connection lost: {proto.lost.result()}")
            if not q:
                self.wakeup.clear()
                self.idle = True
                try:
                    await self.wakeup.wait()
                finally:
                    self.idle = False
                continue
            self._write_batch(transport)
            await proto.drain(write_timeout_s)


class PeerLinks:
    """Outbound links from node_id to every other member. `send` never blocks and never raises for the network.

    Made inside a running loop it starts its writers at once; otherwise call start() from inside the loop.
    `peers` (alias `members`) maps every member id to (host, port); this node's own entry is ignored.
    """

    def __init__(self, *, group: str, node_id: str, peers: Mapping[str, tuple[str, int]] | None = None,
                 members: Mapping[str, tuple[str, int]] | None = None, token: str | None = None, max_queue_messages: int = DEFAULT_MAX_QUEUE_MESSAGES,
                 max_queue_bytes: int = DEFAULT_MAX_QUEUE_BYTES,
                 connect_timeout_ms: int = DEFAULT_CONNECT_TIMEOUT_MS,
                 write_timeout_ms: int = DEFAULT_WRITE_TIMEOUT_MS,
                 reconnect_backoff_min_ms: int = DEFAULT_RECONNECT_BACKOFF_MIN_MS,
                 reconnect_backoff_max_ms: int = DEFAULT_RECONNECT_BACKOFF_MAX_MS,
                 max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        if peers is None:
            peers = members  # the same thing under the server's parameter name
        assert peers is not None, "PeerLinks needs peers={id: (host, port)}"
        assert max_queue_messages >= 1 and max_queue_bytes >= 1
        assert 0 < reconnect_backoff_min_ms <= reconnect_backoff_max_ms
        self.group = group
        self.node_id = node_id
        self.token = token
        self.max_queue_messages = max_queue_messages
        self.max_queue_bytes = max_queue_bytes
        self.connect_timeout_ms = connect_timeout_ms
        self.write_timeout_ms = write_timeout_ms
        self.reconnect_backoff_min_ms = reconnect_backoff_min_ms
        self.reconnect_backoff_max_ms = reconnect_backoff_max_ms
        self.max_frame_bytes = max_frame_bytes
        self.closing = False
        self.unknown_peer_drops = 0
        self._links = {pid: _PeerLink(self, pid, host, port) for pid, (host, port) in peers.items()
                       if pid != node_id}
        self._started = False
        self._dirty: list[_PeerLink] = []  # links with messages for flush() to write
        self._flush_scheduled = False
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass  # made outside a loop: start() later
        else:
            self.start()  # links come up before the first message needs them

    def start(self) -> None:
        """Start one writer task per peer (call from inside the running loop)."""
        if self._started:
            return
        self._started = True
        for link in self._links.values():
            link.task = asyncio.get_running_loop().create_task(link.run(), name=f"peer-link-{link.peer_id}")

    def send(self, msg: Message) -> None:
        """Queue msg for msg.to. Never blocks; when the peer's queue is full its oldest messages are dropped."""
        if not self._started:
            self.start()
        link = self._links.get(msg.to)
        if link is None or self.closing:
            self.unknown_peer_drops += 1
            if link is None:
                log.warning("no link for message node=%s to=%s type=%s", self.node_id, msg.to, type(msg).__name__)
            return
        buffers = codec.encode(msg)
        link.enqueue(buffers, codec.encoded_size(buffers))

    def send_all(self, messages: Iterable[Message]) -> None:
        for m in messages:
            self.send(m)

    def _mark_dirty(self, link: "_PeerLink") -> None:
        if not link.listed:
            link.listed = True
            self._dirty.append(link)
        if not self._flush_scheduled:
            # Whoever sent may not call flush(): write at the latest one loop turn later (as the task would).
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._scheduled_flush)

    def _scheduled_flush(self) -> None:
        self._flush_scheduled = False
        self.flush()

    def flush(self) -> None:
        """Write every message sent so far on links that are up and not backed up: one writelines per peer
        for everything queued since the last flush. Never blocks; links that cannot take it now get their
        writer task woken instead."""
        dirty = self._dirty
        if not dirty:
            return
        links = dirty[:]
        dirty.clear()
        for link in links:
            link.listed = False
            link.write_now()

    @property
    def peer_ids(self) -> tuple[str, ...]:
        return tuple(self._links)

    def connected(self, peer_id: str) -> bool:
        link = self._links.get(peer_id)
        return link is not None and link.stats.connected

    def set_peers(self, peers: Mapping[str, tuple[str, int]]) -> None:
        """The group's membership changed: links to new members start, links to removed ones stop (their queued
        messages are dropped, as a partition would drop them)."""
        for pid in [p for p in self._links if p not in peers]:
            link = self._links.pop(pid)
            if link.task is not None:
                link.task.cancel()
        for pid, (host, port) in peers.items():
            if pid == self.node_id or pid in self._links:
                continue
            link = self._links[pid] = _PeerLink(self, pid, host, port)
            if self._started:
                link.task = asyncio.get_running_loop().create_task(link.run(), name=f"peer-link-{pid}")

    def stats(self) -> dict[str, PeerLinkStats]:
        for link in self._links.values():
            link.stats.queued_messages = len(link.queue)
            link.stats.queued_bytes = link.queued_bytes
        return {pid: link.stats for pid, link in self._links.items()}

    async def close(self) -> None:
        """Stop every writer and drop queued messages. Idempotent."""
        if self.closing:
            return
        self.closing = True
        tasks = [link.task for link in self._links.values() if link.task is not None]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        for link in self._links.values():
            link.queue.clear()
            link.queued_bytes = 0

    async def __aenter__(self) -> "PeerLinks":
        self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()


# ==================================================================================================
# Client connection
# ==================================================================================================
class _ClientProtocol(asyncio.BufferedProtocol):
    """Reads into the decoder's buffers (FrameDecoder.get_buffer): big responses land in place."""

    def __init__(self, conn: "ClientConnection", max_frame_bytes: int) -> None:
        self.conn = conn
        self.transport: asyncio.Transport | None = None
        self.decoder = FrameDecoder(max_frame_bytes)
        self.hello_reply: asyncio.Future = asyncio.get_running_loop().create_future()
        self.cork: _WriteCork | None = None
        self.paused = False
        self.drain_waiters: list[asyncio.Future] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.cork = _WriteCork(transport, eager=True)
        _nodelay(transport)
        transport.set_write_buffer_limits(high=_WRITE_HIGH_WATER_BYTES, low=_WRITE_LOW_WATER_BYTES)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.decoder.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        conn = self.conn
        try:
            self.decoder.buffer_updated(nbytes)
            while True:
                frame = self.decoder.next_frame()
                if frame is NEED_DATA:
                    return
                kind, payload = frame
                if not self.hello_reply.done():
                    if kind == Kind.HELLO_OK:
                        self.hello_reply.set_result(decode_hello_ok(payload))
                    elif kind == Kind.HELLO_ERROR:
                        self.hello_reply.set_result(decode_hello_error(payload))
                    else:
                        raise ProtocolError(f"expected a handshake reply, got frame kind {kind}")
                    continue
                if kind not in CLIENT_RESPONSE_KINDS:
                    raise ProtocolError(f"frame kind {kind} on a client connection")
                conn._on_response(codec.decode(kind, payload))
        except ProtocolError as e:
            conn._broken(NetworkError(f"protocol error from server: {e}"))
            assert self.transport is not None
            self.transport.abort()

    def eof_received(self) -> bool | None:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        err = NetworkError(f"connection lost: {exc}" if exc else "connection closed by server")
        if not self.hello_reply.done():
            self.hello_reply.set_exception(err)
            self.hello_reply.exception()
        self.conn._broken(err)
        self._release_drain()

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self._release_drain()

    def _release_drain(self) -> None:
        waiters, self.drain_waiters = self.drain_waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)


class ClientConnection:
    """One pipelined client connection to one node. Many `call`s may be in flight; responses match by request_id.

    Cancelling a `call` abandons its response; the request itself may still take effect on the server.
    """

    def __init__(self, *, group: str, client_name: str, max_in_flight: int) -> None:
        assert max_in_flight >= 1
        self.group = group
        self.client_name = client_name
        self.server_node_id = ""
        self.host = ""
        self.port = 0
        self.max_in_flight = max_in_flight
        self.default_timeout_ms = 0
        self._protocol: _ClientProtocol | None = None
        self._pending: dict[int, asyncio.Future] = {}
        self._slots = asyncio.Semaphore(max_in_flight)
        self._error: QuorumLogError | None = None
        self._next_request_id = 1
        self._closed_waiter: asyncio.Future = asyncio.get_running_loop().create_future()

    @classmethod
    async def open(cls, host: str, port: int, *, group: str, client_name: str,
                   timeout_ms: int = DEFAULT_HANDSHAKE_TIMEOUT_MS, max_frame_bytes: int = MAX_FRAME_BYTES,
                   max_in_flight: int = 1024, token: str | None = None) -> "ClientConnection":
        """Connect and handshake. Raises NetworkError/Timeout, or the server's refusal (UnknownGroup, ...)."""
        self = cls(group=group, client_name=client_name, max_in_flight=max_in_flight)
        self.host, self.port, self.default_timeout_ms = host, port, timeout_ms
        loop = asyncio.get_running_loop()
        timeout_s = timeout_ms / 1000
        try:
            _, proto = await asyncio.wait_for(
                loop.create_connection(lambda: _ClientProtocol(self, max_frame_bytes), host, port), timeout_s)
        except asyncio.TimeoutError:
            raise Timeout(f"connect to {host}:{port} timed out after {timeout_ms} ms") from None
        except OSError as e:
            raise NetworkError(f"cannot connect to {host}:{port}: {e}") from None
        self._protocol = proto
        assert proto.transport is not None
        proto.transport.write(encode_hello(Hello(group, client_name, Role.CLIENT, token)))
        try:
            reply = await asyncio.wait_for(asyncio.shield(proto.hello_reply), timeout_s)
        except asyncio.TimeoutError:
            self._abort()
            raise Timeout(f"handshake with {host}:{port} timed out after {timeout_ms} ms") from None
        except BaseException:
            self._abort()
            raise
        if isinstance(reply, HelloError):
            self._abort()
            raise QuorumLogError.for_code(reply.code, f"{host}:{port} refused the handshake: {reply.message}")
        assert isinstance(reply, HelloOk)
        self.server_node_id = reply.node_id
        return self

    @property
    def closed(self) -> bool:
        return self._error is not None

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def next_request_id(self) -> int:
        rid = self._next_request_id
        self._next_request_id += 1
        return rid

    async def call(self, request: ClientRequest, timeout_ms: int | None = None) -> ClientResponse:
        """Send request and await its response. Raises Timeout, or NetworkError if the connection breaks."""
        if self._error is not None:
            raise NetworkError(f"connection to {self.host}:{self.port} is closed: {self._error}")
        timeout_s = (timeout_ms if timeout_ms is not None else self.default_timeout_ms) / 1000
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        if self._slots.locked():
            try:
                await asyncio.wait_for(self._slots.acquire(), timeout_s)
            except asyncio.TimeoutError:
                raise Timeout(f"no in-flight slot within {timeout_s * 1000:.0f} ms") from None
        else:
            await self._slots.acquire()
        rid = request.request_id
        fut = loop.create_future()
        try:
            if self._error is not None:
                raise NetworkError(f"connection to {self.host}:{self.port} is closed: {self._error}")
            if rid in self._pending:
                raise ValueError(f"request_id {rid} already in flight")
            self._pending[rid] = fut
            proto = self._protocol
            assert proto is not None and proto.transport is not None
            buffers = codec.encode(request)
            assert proto.cork is not None
            proto.cork.write(buffers, codec.encoded_size(buffers))
            if proto.paused:  # the server is not reading: wait for room, but not past our deadline
                waiter = loop.create_future()
                proto.drain_waiters.append(waiter)
                try:
                    await asyncio.wait_for(waiter, max(0.0, deadline - loop.time()))
                except asyncio.TimeoutError:
                    raise Timeout(f"server at {self.host}:{self.port} accepted no bytes within "
                                  f"{timeout_s * 1000:.0f} ms") from None
            timer = loop.call_at(deadline, _expire, fut, rid, timeout_s)
            try:
                return await fut
            finally:
                timer.cancel()
        finally:
            if self._pending.get(rid) is fut:
                del self._pending[rid]
            self._slots.release()

    def _on_response(self, response: ClientResponse) -> None:
        fut = self._pending.get(response.request_id)
        if fut is not None and not fut.done():
            fut.set_result(response)
        # else: the caller timed out or gave up; the late response is dropped.

    def _broken(self, err: QuorumLogError) -> None:
        if self._error is None:
            self._error = err
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(err)
        if not self._closed_waiter.done():
            self._closed_waiter.set_result(None)

    def _abort(self) -> None:
        self._broken(NetworkError("connection closed"))
        if self._protocol is not None and self._protocol.transport is not None:
            self._protocol.transport.abort()

    async def close(self) -> None:
        """Close the connection; pending calls fail with NetworkError. Idempotent."""
        self._broken(NetworkError("connection closed by client"))
        if self._protocol is not None and self._protocol.transport is not None:
            self._protocol.transport.close()

    async def wait_closed(self) -> None:
        await self._closed_waiter

    async def __aenter__(self) -> "ClientConnection":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()


def _expire(fut: asyncio.Future, rid: int, timeout_s: float) -> None:
    if not fut.done():
        fut.set_exception(Timeout(f"no response to request {rid} within {timeout_s * 1000:.0f} ms"))
