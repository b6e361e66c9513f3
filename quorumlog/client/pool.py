"""One pipelined transport connection per member, opened on first use and dropped when it breaks."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ..errors import NetworkError, ProtocolError, QuorumLogError
from ..errors import Timeout as TimeoutErr
from ..peers import Address

log = logging.getLogger(__name__)

# Client side limit on a frame we accept: a read answers up to max_bytes but at least one entry, and an
# entry may be as large as the node's max_entry_bytes (4 MiB by default).
DEFAULT_MAX_FRAME_BYTES = 64 * 1024 * 1024


class ConnectionPool:
    def __init__(self, peers: dict[str, Address], *, group: str, client_name: str,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, token: str | None = None,
                 ssl_context: Any = None) -> None:
        self.peers = peers
        self.ssl_context = ssl_context  # None: TLS if QUORUMLOG_TLS_CA is set; a node's cert must name its id
        self.token = token  # None: QUORUMLOG_TOKEN, if set (transport/client_connection.py)
        self.group = group
        self.client_name = client_name
        self.max_frame_bytes = max_frame_bytes
        self._conns: dict[str, Any] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    async def get(self, node_id: str, timeout_ms: float) -> Any:
        conn = self._conns.get(node_id)
        if conn is not None:
            return conn
        if self._closed:
            raise NetworkError("client is closed")
        lock = self._locks.setdefault(node_id, asyncio.Lock())
        async with lock:  # many callers at once open one connection, not many
            conn = self._conns.get(node_id)
            if conn is None:
                from ..transport import ClientConnection  # imported late: the transport is a layer below

                host, port = self.peers[node_id]
                try:
                    conn = await ClientConnection.open(
                        host, port, group=self.group, client_name=self.client_name,
                        timeout_ms=max(1, int(timeout_ms)), max_frame_bytes=self.max_frame_bytes, token=self.token,
                        ssl_context=self.ssl_context, server_hostname=node_id)
                except QuorumLogError:
                    raise
                except (OSError, asyncio.TimeoutError) as e:
                    raise NetworkError(f"connect to {node_id} at {host}:{port}: {e!r}") from e
                if self._closed:
                    await _close_quietly(conn)
                    raise NetworkError("client is closed")
                self._conns[node_id] = conn
                log.debug("connected node=%s address=%s:%d", node_id, host, port)
            return conn

    async def call(self, node_id: str, request: Any, timeout_ms: float) -> Any:
        """One request/response on node_id's connection. A broken connection is dropped (reopened next time);
        a request that merely timed out leaves the connection in place for the others in flight."""
        conn = await self.get(node_id, timeout_ms)
        try:
            return await conn.call(request, max(1, int(timeout_ms)))
        except (NetworkError, ProtocolError, OSError, EOFError) as e:
            await self.drop(node_id, conn)
            if isinstance(e, QuorumLogError):
                raise
            raise NetworkError(f"{node_id}: {e!r}") from e
        except (asyncio.TimeoutError, TimeoutError) as e:
            raise TimeoutErr(f"{node_id}: no answer within {timeout_ms:.0f} ms") from e

    async def drop(self, node_id: str, conn: Any) -> None:
        if self._conns.get(node_id) is conn:
            del self._conns[node_id]
        await _close_quietly(conn)

    async def close(self) -> None:
        self._closed = True
        conns, self._conns = list(self._conns.values()), {}
        for conn in conns:
            await _close_quietly(conn)


async def _close_quietly(conn: Any) -> None:
    try:
        await conn.close()
    except Exception as e:  # closing a broken connection may fail again; nothing left to do
        log.debug("close failed: %r", e)
