"""ClientConnection: one pipelined client connection to a node for one group: request_id -> Future, one
reader, a bound on in-flight requests."""

from __future__ import annotations


import asyncio
import logging
import os
import ssl
from typing import Any

from ..errors import NetworkError, ProtocolError, QuorumLogError, RemoteProtocolError, Timeout
from ..wire.client import ClientRequest, ClientResponse
from . import codec
from ._io import _WRITE_HIGH_WATER_BYTES, _WRITE_LOW_WATER_BYTES, _nodelay, _WriteCork
from .frames import MAX_FRAME_BYTES, NEED_DATA, FrameDecoder
from .handshake import (
    DEFAULT_HANDSHAKE_TIMEOUT_MS, Hello, HelloError, HelloOk, Role, decode_hello_error, decode_hello_ok, encode_hello,
)
from .kinds import CLIENT_RESPONSE_KINDS, Kind
from .tls import default_client_context, describe_ssl_error

log = logging.getLogger(__name__)


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
                        raise RemoteProtocolError(f"expected a handshake reply, got frame kind {kind}")
                    continue
                if kind not in CLIENT_RESPONSE_KINDS:
                    raise RemoteProtocolError(f"frame kind {kind} on a client connection")
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


TOKEN_ENV = "QUORUMLOG_TOKEN"  # the shared token (docs/interfaces.md "Security"), when not given


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
                   max_in_flight: int = 1024, token: str | None = None, ssl_context: Any = None,
                   server_hostname: str | None = None) -> "ClientConnection":
        """Connect and handshake. Raises NetworkError/Timeout, or the server's refusal (UnknownGroup,
        Unauthorized, ...). token None: the QUORUMLOG_TOKEN environment variable, if set. ssl_context None: TLS
        if QUORUMLOG_TLS_CA is set (transport/tls.py), False: plain TCP; server_hostname is the name the
        node's certificate must carry (its node id; default the host)."""
        if token is None:
            token = os.environ.get(TOKEN_ENV) or None
        if ssl_context is None:
            ssl_context = default_client_context()
        tls = {"ssl": ssl_context, "server_hostname": server_hostname or host} if ssl_context else {}
        self = cls(group=group, client_name=client_name, max_in_flight=max_in_flight)
        self.host, self.port, self.default_timeout_ms = host, port, timeout_ms
        loop = asyncio.get_running_loop()
        timeout_s = timeout_ms / 1000
        try:
            _, proto = await asyncio.wait_for(
                loop.create_connection(lambda: _ClientProtocol(self, max_frame_bytes), host, port, **tls), timeout_s)
        except asyncio.TimeoutError:
            raise Timeout(f"connect to {host}:{port} timed out after {timeout_ms} ms") from None
        except ssl.SSLError as e:
            raise NetworkError(describe_ssl_error(e, host, port)) from None
        except OSError as e:
            # (by errno: asyncio's own message names the address again, uvloop's does not)
            why = f"[Errno {e.errno}] {os.strerror(e.errno)}" if e.errno else str(e)
            raise NetworkError(f"cannot connect to {host}:{port}: {why}") from None
        self._protocol = proto
        assert proto.transport is not None
        proto.transport.write(encode_hello(Hello(group, client_name, Role.CLIENT, token)))
        try:
            reply = await asyncio.wait_for(asyncio.shield(proto.hello_reply), timeout_s)
        except asyncio.TimeoutError:
            self._abort()
            raise Timeout(f"handshake with {host}:{port} timed out after {timeout_ms} ms") from None
        except NetworkError as e:
            self._abort()
            if not tls:  # a TLS port drops a plain Hello without a word
                raise NetworkError(f"{host}:{port} closed the connection during the handshake ({e}): a TLS "
                                   f"port? (give tls_ca / --tls-ca / QUORUMLOG_TLS_CA)") from None
            raise
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
