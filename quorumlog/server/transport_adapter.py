"""The node's view of the transport: start listening, send peer messages, stop accepting, close.

Kept apart from node.py so that the runtime's tests can plug in an in-memory transport, and so that the one
place that knows the transport's constructor arguments is here.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from ..config import NodeConfig

log = logging.getLogger(__name__)


class RealTransport:
    def __init__(self, config: NodeConfig, metrics: Any) -> None:
        self._config = config
        self._metrics = metrics
        self._server: Any = None
        self._links: Any = None

    async def start(self, on_peer_message: Callable[[Any], None],
                    on_client_request: Callable[[Any, Any], None]) -> None:
        from ..transport import PeerLinks, TransportServer

        cfg = self._config
        common = dict(group=cfg.group, node_id=cfg.node_id, members=tuple(cfg.peers))
        self._links = PeerLinks(group=cfg.group, node_id=cfg.node_id, peers=cfg.peers,
                                 max_frame_bytes=cfg.max_frame_bytes)
        self._server = await TransportServer.start(
            cfg.listen_host, cfg.listen_port, **common, on_peer_message=on_peer_message,
            on_client_request=lambda request, session: on_client_request(session, request), max_frame_bytes=cfg.max_frame_bytes,
            max_connections=cfg.max_connections, handshake_timeout_ms=cfg.handshake_timeout_ms,
            on_protocol_error=lambda *a: self._metrics.protocol_error_closes.inc())
        log.info("listening node=%s address=%s:%d", cfg.node_id, cfg.listen_host, cfg.listen_port)

    def send(self, msg: Any) -> None:
        self._links.send(msg)

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
        if self._links is not None:
            await self._links.close()
        if self._server is not None:
            await self._server.close()
