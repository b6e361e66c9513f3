"""The node's view of the transport: start listening, send peer messages of any group, stop accepting, close.

Kept apart from node.py so that the runtime's tests can plug in an in-memory transport, and so that the one
place that knows the transport's constructor arguments is here.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Callable

from ..config import NodeConfig
from ..wire.client import ClientRequest
from ..wire.messages import Message, PushRequest, PushType
from .host import Handled, Session
from .metrics import NodeMetrics

if TYPE_CHECKING:
    from ..transport import PeerLinks, TransportServer

log = logging.getLogger(__name__)

COMMIT_HOLD_MS = 2  # how long a commit-only push may wait for an APPEND push to carry its index instead


class RealTransport:
    def __init__(self, config: NodeConfig, metrics: NodeMetrics) -> None:
        self._config = config
        self._metrics = metrics
        self._server: TransportServer | None = None
        self._links: PeerLinks | None = None
        self._watchdog: asyncio.Task | None = None
        # (group, peer) -> that group's latest commit-only push to the peer, not sent yet
        self._held_commits: dict[tuple[str, str], PushRequest] = {}
        self._hold_timer: asyncio.TimerHandle | None = None

    async def start(self, on_peer_message: Callable[[str, Message], None],
                    on_client_request: Callable[[Session, ClientRequest], Handled],
                    members_of: Callable[[str], frozenset[str] | None],
                    on_peer_hello: Callable[[str, str], None] | None = None,
                    on_peer_gone: Callable[[str], None] | None = None) -> None:
        """`on_peer_message(group, msg)`; `members_of(group)` says which groups are hosted here and who may
        send their messages (transport/handshake.py); `on_peer_hello(node_id, address)` where a peer that
        linked to us listens; `on_peer_gone(node_id)` when its link to us, or ours to it, broke."""
        from ..transport import NODE_LINK, PeerLinks, TransportServer

        from ..transport.tls import client_context, server_context

        cfg = self._config
        host, port = cfg.peers[cfg.node_id]
        self._links = PeerLinks(group=NODE_LINK, node_id=cfg.node_id, advertise=f"{host}:{port}",
                                peers={p: a for p, a in cfg.peers.items() if p != cfg.node_id},
                                max_frame_bytes=cfg.max_frame_bytes, token=cfg.auth_token(),
                                ssl_context=client_context(cfg.tls_ca, cfg.tls_cert, cfg.tls_key) if cfg.tls else None)
        self._links.on_link_down = on_peer_gone
        self._server = await TransportServer.start(
            cfg.listen_host, cfg.listen_port, node_id=cfg.node_id, members_of=members_of,
            on_peer_message=on_peer_message,
            on_client_request=lambda request, session: on_client_request(session, request), max_frame_bytes=cfg.max_frame_bytes,
            max_connections=cfg.max_connections, handshake_timeout_ms=cfg.handshake_timeout_ms,
            token=cfg.auth_token(), verify_peers=cfg.tls,
            ssl_context=server_context(cfg.tls_cert, cfg.tls_key, cfg.tls_ca,
                                       require_client_cert=cfg.tls_require_client_cert) if cfg.tls else None,
            on_protocol_error=lambda *a: self._metrics.protocol_error_closes.inc(), on_peer_hello=on_peer_hello,
            on_peer_gone=on_peer_gone)
        self._watchdog = asyncio.get_running_loop().create_task(self.watch_links(), name="peer-link-watchdog")
        log.info("listening node=%s address=%s:%d tls=%s", cfg.node_id, cfg.listen_host, cfg.listen_port, cfg.tls)

    def send(self, group: str, msg: Message) -> None:
        links = self._links
        if type(msg) is PushRequest:
            if msg.push_type is PushType.COMMIT:
                # A commit-only push is held for COMMIT_HOLD_MS: the next APPEND push to that peer carries
                # the same committed index, so under load it never needs a send of its own. (DLedger's
                # dispatcher sends idle commits only once a second.) Delay is safe: a commit notice is
                # only ever late, like one the network delayed.
                self._held_commits[group, msg.to] = msg
                if self._hold_timer is None:
                    self._hold_timer = asyncio.get_running_loop().call_later(COMMIT_HOLD_MS / 1000,
                                                                             self._send_held_commits)
                return
            held = self._held_commits.pop((group, msg.to), None) if self._held_commits else None
            if held is not None and (msg.term != held.term or msg.committed_index < held.committed_index):
                links.send(held, group)  # not superseded: it goes first, in order
        elif self._held_commits:
            held = self._held_commits.pop((group, msg.to), None)
            if held is not None:
                links.send(held, group)
        links.send(msg, group)

    def _send_held_commits(self) -> None:
        self._hold_timer = None
        held, self._held_commits = self._held_commits, {}
        if held and self._links is not None and not self._links.closing:
            for (group, _), msg in held.items():
                self._links.send(msg, group)
            self.flush()

    def flush(self) -> None:
        """Write what the last step produced: client answers first (they end a request's latency), then
        peer messages. Both would otherwise leave one loop turn later."""
        if self._server is not None:
            self._server.flush()
        if self._links is not None:
            self._links.flush()

    async def watch_links(self, interval_s: float = 0.5) -> None:
        """Restart a peer link whose writer task died. Works around a transport bug seen with uvloop: a peer
        that accepts and closes at once makes the handshake's transport.write raise RuntimeError ("handler
        is closed"), which _PeerLink.run does not catch, so that link stayed down for good."""
        while True:
            await asyncio.sleep(interval_s)
            for peer, exc in self.dead_links().items():
                link = self._links._links[peer]
                log.error("peer link task died; restarting it node=%s peer=%s error=%r", self._config.node_id,
                          peer, exc)
                link.task = asyncio.get_running_loop().create_task(link.run(), name=f"peer-link-{peer}")

    def dead_links(self) -> dict[str, BaseException | None]:
        """Peer links whose writer task ended although the links are open (a transport bug if any)."""
        out: dict[str, BaseException | None] = {}
        if self._links is None or self._links.closing:
            return out
        for peer, link in getattr(self._links, "_links", {}).items():
            task = getattr(link, "task", None)
            if task is not None and task.done():
                out[peer] = None if task.cancelled() else task.exception()
        return out

    @property
    def peer_ids(self) -> tuple[str, ...]:
        """The nodes linked now: those this node shares a group with."""
        return self._links.peer_ids if self._links is not None else ()

    def set_peers(self, peers: dict[str, tuple[str, int]]) -> None:
        """The nodes this node shares a group with changed: link to each of them (and to no one else)."""
        if self._links is not None:
            self._links.set_peers(peers)

    def connected(self, peer_id: str) -> bool:
        """Our outbound link to peer_id is up (a stopped peer is not a good transferee)."""
        return self._links is not None and self._links.connected(peer_id)

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self._server is not None:
            out["server"] = self._server.stats.as_dict()
        return out

    async def stop_accepting(self) -> None:
        if self._server is not None:
            await self._server.stop_accepting()

    async def close(self) -> None:
        if self._hold_timer is not None:
            self._hold_timer.cancel()
            self._hold_timer = None
        if self._watchdog is not None:
            self._watchdog.cancel()
            await asyncio.gather(self._watchdog, return_exceptions=True)
            self._watchdog = None
        if self._links is not None:
            await self._links.close()
        if self._server is not None:
            await self._server.close()
