"""PeerLinks: this node's outbound connection to every other node it shares a group with.

Every peer message this node sends (requests and responses alike, of every group) goes out here; inbound
connections only receive. One link per peer node, whatever the number of groups: a message of another group
than the previous one on that connection is preceded by a GROUP_SELECT frame. `send` never blocks: a bounded
queue per peer drops its oldest messages when full (Raft retries; a stale message is harmless).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from ..errors import NetworkError, ProtocolError, QuorumLogError, RemoteProtocolError
from ..wire.messages import Message
from . import codec
from ._io import (
    _WRITE_HIGH_WATER_BYTES, _WRITE_LOW_WATER_BYTES, DEFAULT_CONNECT_TIMEOUT_MS, DEFAULT_MAX_QUEUE_BYTES,
    DEFAULT_MAX_QUEUE_MESSAGES, DEFAULT_RECONNECT_BACKOFF_MAX_MS, DEFAULT_RECONNECT_BACKOFF_MIN_MS,
    DEFAULT_WRITE_TIMEOUT_MS, MAX_WRITE_BATCH_BYTES, _nodelay, is_tls, tls_pieces,
)
from .frames import MAX_FRAME_BYTES, NEED_DATA, FrameDecoder
from .handshake import (
    MAX_HELLO_FRAME_BYTES, Hello, HelloError, HelloOk, Role, decode_hello_error, decode_hello_ok, encode_group_select,
    encode_hello,
)
from .kinds import Kind

log = logging.getLogger(__name__)


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
                    raise RemoteProtocolError("unexpected data on an outbound peer link")
                kind, payload = frame
                if kind == Kind.HELLO_OK:
                    self.hello_reply.set_result(decode_hello_ok(payload))
                elif kind == Kind.HELLO_ERROR:
                    self.hello_reply.set_result(decode_hello_error(payload))
                else:
                    raise RemoteProtocolError(f"expected a handshake reply, got frame kind {kind}")
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
        self.queue: deque[tuple[str, list, int]] = deque()  # (group, frame buffers, bytes)
        self.wire_group = links.group  # the group the peer reads the next frame as (the Hello's, then selected)
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

    def enqueue(self, group: str, buffers: list, size: int) -> None:
        q = self.queue
        q.append((group, buffers, size))
        self.queued_bytes += size
        links = self.links
        while len(q) > 1 and (len(q) > links.max_queue_messages or self.queued_bytes > links.max_queue_bytes):
            _, _, dropped = q.popleft()
            self.queued_bytes -= dropped
            self.stats.dropped_messages += 1
        if self.idle:
            links._mark_dirty(self)
        else:
            self.wakeup.set()

    def _write_batch(self, transport) -> None:
        """Hand up to MAX_WRITE_BATCH_BYTES of queued frames to the socket in one writelines(). A frame of
        another group than the one written before it goes after a GroupSelect (decided here, at write time:
        the queue may have dropped the message that came with an earlier switch)."""
        q = self.queue
        out: list = []
        batch_bytes = 0
        select_bytes = 0
        frames = 0
        wire_group = self.wire_group
        while q and batch_bytes < MAX_WRITE_BATCH_BYTES:
            group, buffers, size = q.popleft()
            if group != wire_group:
                select = encode_group_select(group)
                out.append(select)
                select_bytes += len(select)
                wire_group = group
            out.extend(buffers)
            batch_bytes += size
            frames += 1
        self.wire_group = wire_group
        self.queued_bytes -= batch_bytes
        transport.writelines(tls_pieces(out) if is_tls(transport) else out)
        self.stats.frames_out += frames
        self.stats.bytes_out += batch_bytes + select_bytes

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
                    if links.on_link_down is not None:
                        try:
                            links.on_link_down(self.peer_id)
                        except Exception:  # noqa: BLE001 - the link reconnects whatever its listener did
                            log.exception("on_link_down failed node=%s peer=%s", links.node_id, self.peer_id)
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
                                   self.host, self.port,
                                   **({"ssl": links.ssl_context, "server_hostname": self.peer_id}
                                      if links.ssl_context is not None else {})), timeout_s)
        self.protocol = proto
        self.wire_group = links.group  # a new connection reads frames as the Hello's group
        assert proto.transport is not None
        proto.transport.write(encode_hello(Hello(links.group, links.node_id, Role.PEER, links.token,
                                                 address=links.advertise)))
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
            raise RemoteProtocolError(f"expected {self.peer_id}@{links.group}, reached {reply.node_id}@{reply.group}")
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

    `group` is the one the links' Hello names: a group (one-group nodes, tests) or NODE_LINK for a node whose
    links carry many groups; `send(msg, group)` tags each message with its group.

    Made inside a running loop it starts its writers at once; otherwise call start() from inside the loop.
    `peers` (alias `members`) maps every member id to (host, port); this node's own entry is ignored.
    """

    def __init__(self, *, group: str, node_id: str, peers: Mapping[str, tuple[str, int]] | None = None,
                 members: Mapping[str, tuple[str, int]] | None = None, token: str | None = None,
                 ssl_context: Any = None, max_queue_messages: int = DEFAULT_MAX_QUEUE_MESSAGES,
                 max_queue_bytes: int = DEFAULT_MAX_QUEUE_BYTES,
                 connect_timeout_ms: int = DEFAULT_CONNECT_TIMEOUT_MS,
                 write_timeout_ms: int = DEFAULT_WRITE_TIMEOUT_MS,
                 reconnect_backoff_min_ms: int = DEFAULT_RECONNECT_BACKOFF_MIN_MS,
                 reconnect_backoff_max_ms: int = DEFAULT_RECONNECT_BACKOFF_MAX_MS,
                 max_frame_bytes: int = MAX_FRAME_BYTES, advertise: str | None = None) -> None:
        if peers is None:
            peers = members  # the same thing under the server's parameter name
        assert peers is not None, "PeerLinks needs peers={id: (host, port)}"
        assert max_queue_messages >= 1 and max_queue_bytes >= 1
        assert 0 < reconnect_backoff_min_ms <= reconnect_backoff_max_ms
        self.group = group
        self.node_id = node_id
        self.advertise = advertise  # where we listen (host:port), told to every peer in the Hello
        self.token = token
        self.ssl_context = ssl_context  # mutual TLS: ours is presented, the peer's must name the node dialled
        self.max_queue_messages = max_queue_messages
        self.max_queue_bytes = max_queue_bytes
        self.connect_timeout_ms = connect_timeout_ms
        self.write_timeout_ms = write_timeout_ms
        self.reconnect_backoff_min_ms = reconnect_backoff_min_ms
        self.reconnect_backoff_max_ms = reconnect_backoff_max_ms
        self.max_frame_bytes = max_frame_bytes
        self.closing = False
        self.unknown_peer_drops = 0
        self.on_link_down: Callable[[str], None] | None = None  # (peer id) a connected link broke; it reconnects
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

    def send(self, msg: Message, group: str | None = None) -> None:
        """Queue msg (of `group`, by default the links' own) for msg.to. Never blocks; when the peer's queue is
        full its oldest messages are dropped."""
        if not self._started:
            self.start()
        link = self._links.get(msg.to)
        if link is None or self.closing:
            self.unknown_peer_drops += 1
            if link is None:
                log.warning("no link for message node=%s to=%s type=%s", self.node_id, msg.to, type(msg).__name__)
            return
        buffers = codec.encode(msg)
        link.enqueue(self.group if group is None else group, buffers, codec.encoded_size(buffers))

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
