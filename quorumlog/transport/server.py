"""The node's listener: accepted peer and client connections (TransportServer).

After the handshake a PEER connection is a one-way stream of peer messages, each handed to `on_peer_message`
synchronously and in order with the group it belongs to (a GROUP_SELECT frame switches the connection's
current group: one link between two nodes carries every group they share); a CLIENT connection carries
pipelined requests of the group named in its Hello, each handed to `on_client_request` with a ClientSession to
answer on (in any order).

asyncio Protocols rather than streams: the server parses frames straight out of buffer_updated and writes
with writelines, so a 100-byte append costs no extra task switch and a 1 MiB push no extra copy.
Bad input closes only the connection that sent it (logged at INFO as key=value, counted in stats).
"""

from __future__ import annotations

import asyncio
import inspect
from asyncio import sslproto
import logging
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Iterable

from ..codes import ResponseCode
from ..errors import ProtocolError, RemoteProtocolError
from ..wire.client import ClientRequest, ClientResponse
from ..wire.messages import Message
from . import codec
from ._io import (
    _WRITE_HIGH_WATER_BYTES, _WRITE_LOW_WATER_BYTES, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_IN_FLIGHT, _nodelay,
    _peername, _WriteCork,
)
from .frames import MAX_FRAME_BYTES, NEED_DATA, SCRATCH_BYTES, FrameDecoder
from .handshake import (
    DEFAULT_HANDSHAKE_TIMEOUT_MS, MAX_HELLO_FRAME_BYTES, NODE_LINK, HelloError, HelloOk, Role, check_hello,
    decode_group_select, decode_hello, encode_hello_error, encode_hello_ok,
)
from .kinds import CLIENT_REQUEST_KINDS, PEER_KINDS, Kind
from .tls import peer_names

log = logging.getLogger(__name__)

OnPeerMessage = Callable[[str, Message], None]  # (group, message)
OnClientRequest = Callable[[ClientRequest, "ClientSession"], "Awaitable[None] | None"]
OnConnectionClosed = Callable[[str, str], None]  # (stats counter name, reason)
GroupMembers = Callable[[str], "frozenset[str] | None"]  # group -> its members here, None if not hosted


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
    closed_tls_errors: int = 0  # a TLS handshake that failed (plain TCP on a TLS port, a certificate refused)
    frames_in: int = 0
    bytes_in: int = 0
    frames_out: int = 0
    bytes_out: int = 0

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__slots__}


class ClientSession:
    """The client connection a request came on; `send` answers it (responses carry the request_id)."""

    __slots__ = ("_conn", "client_name", "remote", "group")

    def __init__(self, conn: "_ServerConnection", client_name: str, remote: str, group: str) -> None:
        self._conn = conn
        self.client_name = client_name
        self.remote = remote
        self.group = group  # the group named in the client's Hello: its requests are for that group

    @property
    def closed(self) -> bool:
        return self._conn.state == _CLOSED

    def send(self, response: ClientResponse) -> bool:
        """Write one response frame now. Returns False (and drops it) if the connection is gone."""
        return self._conn.send_response(response)

    def __repr__(self) -> str:
        return f"ClientSession(client={self.client_name!r}, remote={self.remote})"


_HANDSHAKE, _PEER, _CLIENT, _CLOSED = "handshake", "peer", "client", "closed"


class _ServerConnection(asyncio.BufferedProtocol):
    __slots__ = ("server", "transport", "cork", "decoder", "state", "remote", "node_id", "group", "session",
                 "in_flight", "reading_paused", "writing_paused", "handshake_timer")

    def __init__(self, server: "TransportServer") -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.cork: _WriteCork | None = None
        self.decoder = FrameDecoder(MAX_HELLO_FRAME_BYTES, server.scratch)
        self.state = _HANDSHAKE
        self.remote = "?"
        self.node_id = ""
        self.group = ""  # a peer connection's current group (its Hello's, then each GroupSelect's)
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
        loop = asyncio.get_running_loop()
        # (the handshake timeout covers the TLS handshake too: a peer that never finishes it is closed)
        self.handshake_timer = loop.call_later(srv.handshake_timeout_ms / 1000, self._handshake_timed_out)
        if srv.ssl_context is not None:
            # TLS is layered here rather than by the listener, so a failed TLS handshake reaches our log with
            # its reason (the listener's fails silently) and counts like any refused handshake. Synchronously:
            # from now on every byte goes through the TLS layer, none can reach buffer_updated in clear.
            waiter = loop.create_future()
            tls = _ssl_protocol_class(loop)(loop, self, srv.ssl_context, waiter, server_side=True,
                                            call_connection_made=False,
                                            ssl_handshake_timeout=srv.handshake_timeout_ms / 1000)
            transport.set_protocol(tls)
            tls.connection_made(transport)
            # Write through the TLS layer from now on, not once the handshake's waiter callback runs: with TLS
            # 1.3 the client's Hello arrives with its Finished, so the TLS layer hands it to buffer_updated in
            # the same call that completes the handshake, before that callback, and a HelloOk written to the
            # raw transport went out in clear (the client saw WRONG_VERSION_NUMBER, 2-5% of connections).
            # Writes made before the handshake completes wait in the TLS layer's backlog.
            app = tls._get_app_transport()
            self.transport = app  # type: ignore[assignment]
            self.cork = _WriteCork(app, srv.dirty_corks)
            waiter.add_done_callback(self._tls_done)

    def _tls_done(self, f: asyncio.Future) -> None:
        """The TLS handshake ended: a failure closes the connection with its reason."""
        e = None if f.cancelled() else f.exception()
        if f.cancelled() or e is not None:
            reason = f"TLS handshake failed: {e!r}"
            if self.state != _CLOSED:
                self._close(reason, count="closed_tls_errors", abort=True)
            else:  # the TLS layer closed the connection first (its connection_lost came before this)
                self.server.stats.closed_tls_errors += 1
                log.info("closed connection node=%s remote=%s state=tls peer=- reason=%s", self.server.node_id,
                         self.remote, reason)

    # A BufferedProtocol: the socket (or the TLS layer, which decrypts straight into it) writes into the
    # decoder's buffer, a big frame into a buffer of its own size, so a 1 MiB batch is not copied again.
    def get_buffer(self, sizehint: int) -> memoryview:
        return self.decoder.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        if self.state == _CLOSED:
            return
        self.server.stats.bytes_in += nbytes
        try:
            self.decoder.buffer_updated(nbytes)
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
        if self.state != _CLOSED:
            self._forget()
        if self.handshake_timer is not None:
            self.handshake_timer.cancel()
            self.handshake_timer = None

    def _forget(self) -> None:
        """The server's bookkeeping of a connection that ends (state _CLOSED after it); a peer whose last link
        to us this was is reported gone."""
        was, srv = self.state, self.server
        self.state = _CLOSED
        srv.connections.discard(self)
        srv.handshaking.pop(self, None)
        srv.stats.connections_active = len(srv.connections)
        if was == _PEER:
            srv.stats.peer_connections_active -= 1
            if srv.on_peer_gone is not None and not srv.closing \
                    and not any(c.state == _PEER and c.node_id == self.node_id for c in srv.connections):
                try:  # (not if the peer has linked again already)
                    srv.on_peer_gone(self.node_id)
                except Exception:  # noqa: BLE001 - the connection's bookkeeping is done whatever the listener did
                    log.exception("on_peer_gone failed node=%s peer=%s", srv.node_id, self.node_id)
        elif was == _CLIENT:
            srv.stats.client_connections_active -= 1

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
        err = check_hello(hello, members_of=srv.members_of, token=srv.token)
        if err is None and hello.role == Role.PEER and srv.verify_peers \
                and hello.node_id not in peer_names(self.transport):
            err = HelloError(ResponseCode.UNAUTHORIZED, f"peer {hello.node_id!r} presented no certificate of the "
                                                        f"cluster CA naming it")
        if err is not None:
            self._reject(err)
            return
        if self.handshake_timer is not None:
            self.handshake_timer.cancel()
            self.handshake_timer = None
        self.node_id = hello.node_id
        self.group = hello.group
        srv.handshaking.pop(self, None)
        self.decoder.max_frame_bytes = srv.max_frame_bytes
        self._write([encode_hello_ok(HelloOk(hello.group, srv.node_id))])
        if hello.role == Role.PEER:
            self.state = _PEER
            if hello.address and srv.on_peer_hello is not None:
                srv.on_peer_hello(hello.node_id, hello.address)
            srv.stats.peer_connections_active += 1
            log.info("peer connected node=%s peer=%s remote=%s", srv.node_id, hello.node_id, self.remote)
        else:
            self.state = _CLIENT
            srv.stats.client_connections_active += 1
            self.session = ClientSession(self, hello.node_id, self.remote, hello.group)
            log.debug("client connected client=%s remote=%s", hello.node_id, self.remote)

    def _on_peer_frame(self, kind: int, payload: memoryview) -> None:
        if kind == Kind.GROUP_SELECT:
            self.group = decode_group_select(payload)
            return
        if kind not in PEER_KINDS:
            raise RemoteProtocolError(f"frame kind {kind} on a peer connection")
        msg = codec.decode(kind, payload)
        if msg.frm != self.node_id:
            raise RemoteProtocolError(f"message from {msg.frm!r} on the link of {self.node_id!r}")
        self.server.on_peer_message(self.group, msg)

    def _on_client_frame(self, kind: int, payload: memoryview) -> None:
        if kind not in CLIENT_REQUEST_KINDS:
            raise RemoteProtocolError(f"frame kind {kind} on a client connection")
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
        self._forget()
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


def _ssl_protocol_class(loop: asyncio.AbstractEventLoop) -> Any:
    """The TLS layer of the running loop: uvloop's (compiled; its listener's native TLS uses it too) on a uvloop
    loop, asyncio's otherwise. Both take the same arguments."""
    if type(loop).__module__.startswith("uvloop"):
        from uvloop.loop import SSLProtocol

        return SSLProtocol
    return sslproto.SSLProtocol


class TransportServer:
    """Accepts peer and client connections for one node: of one group (`group`, `members`), or of every group
    `members_of` knows (a node hosting many groups)."""

    def __init__(self, *, node_id: str, on_peer_message: OnPeerMessage, on_client_request: OnClientRequest,
                 group: str = "", members: Iterable[str] = (), members_of: GroupMembers | None = None,
                 max_frame_bytes: int = MAX_FRAME_BYTES,
                 handshake_timeout_ms: int = DEFAULT_HANDSHAKE_TIMEOUT_MS,
                 max_connections: int = DEFAULT_MAX_CONNECTIONS, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
                 token: str | None = None, on_protocol_error: OnConnectionClosed | None = None,
                 on_peer_hello: Callable[[str, str], None] | None = None,
                 on_peer_gone: Callable[[str], None] | None = None) -> None:
        assert max_frame_bytes >= MAX_HELLO_FRAME_BYTES and max_connections > 0 and max_in_flight > 1
        self.group = group
        self.node_id = node_id
        self.members = frozenset(members)
        self.members_of: GroupMembers = members_of or self._members_of_own_group
        self.on_peer_message = on_peer_message
        self.on_client_request = on_client_request
        self.max_frame_bytes = max_frame_bytes
        self.handshake_timeout_ms = handshake_timeout_ms
        self.max_connections = max_connections
        self.max_in_flight = max_in_flight
        self.token = token
        self.on_protocol_error = on_protocol_error
        self.on_peer_hello = on_peer_hello  # (node id, address) of every accepted peer that said where it listens
        self.on_peer_gone = on_peer_gone  # (node id) when a peer's last link to us ends: its process or link died
        self.scratch = bytearray(SCRATCH_BYTES)  # every connection's read buffer outside big frames (frames.py)
        self.stats = TransportStats()
        self.connections: set[_ServerConnection] = set()
        self.handshaking: dict[_ServerConnection, None] = {}  # insertion order: oldest first
        self.closing = False
        self.ssl_context: Any = None
        self.verify_peers = False
        self.dirty_corks: list[_WriteCork] = []  # corks holding responses not yet written (see flush)
        self._server: asyncio.AbstractServer | None = None
        # Request handlers the runtime returned; kept so they are not garbage-collected mid-flight and are
        # cancelled on close (a Protocol callback cannot use a TaskGroup).
        self._tasks: set[asyncio.Future] = set()

    def _members_of_own_group(self, group: str) -> frozenset[str] | None:
        return self.members if group in (self.group, NODE_LINK) else None

    @classmethod
    async def start(cls, host: str, port: int, *, node_id: str, on_peer_message: OnPeerMessage,
                    on_client_request: OnClientRequest, group: str = "", members: Iterable[str] = (),
                    members_of: GroupMembers | None = None, max_frame_bytes: int = MAX_FRAME_BYTES,
                    handshake_timeout_ms: int = DEFAULT_HANDSHAKE_TIMEOUT_MS,
                    max_connections: int = DEFAULT_MAX_CONNECTIONS, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
                    token: str | None = None, on_protocol_error: OnConnectionClosed | None = None,
                    backlog: int = 1024, ssl_context: Any = None, verify_peers: bool = False,
                    on_peer_hello: Callable[[str, str], None] | None = None,
                    on_peer_gone: Callable[[str], None] | None = None) -> "TransportServer":
        """Listen on host:port (port 0: any free port, see `.port`). `members` are the group's member ids
        (a dict of id → address works too). `on_protocol_error(counter, reason)` is called for every
        connection closed for bad input (counter names the TransportStats field it incremented)."""
        self = cls(group=group, node_id=node_id, members=members, members_of=members_of,
                   on_peer_message=on_peer_message,
                   on_client_request=on_client_request, max_frame_bytes=max_frame_bytes,
                   handshake_timeout_ms=handshake_timeout_ms, max_connections=max_connections,
                   max_in_flight=max_in_flight, token=token, on_protocol_error=on_protocol_error,
                   on_peer_hello=on_peer_hello, on_peer_gone=on_peer_gone)
        self.ssl_context = ssl_context  # each connection starts TLS itself (_ServerConnection._start_tls)
        self.verify_peers = verify_peers  # a PEER Hello needs a CA-issued certificate naming its node id
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
