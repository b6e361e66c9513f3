"""quorumlog.connect: the blocking client — the asyncio Client on a private event loop in a daemon thread.

Every method submits the coroutine to that loop and waits for it, so blocking callers in many threads
still share one connection per member and have their appends coalesced.
"""

from __future__ import annotations

import asyncio
import threading
import warnings
from concurrent.futures import Future
from typing import Any, Iterable, Iterator

from ..errors import NetworkError
from .client import Client
from .types import AppendResult, Entry, NodeStatus


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop when installed (faster I/O), else asyncio's default loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class BlockingClient:
    """Same methods as Client, blocking. Use as `with quorumlog.connect(peers) as client:`."""

    def __init__(self, peers: str | dict, **kwargs: Any) -> None:
        self._closed = True
        self._loop = new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="quorumlog-client", daemon=True)
        self._thread.start()
        try:
            self._client: Client = self._run(_make_client(peers, kwargs))
        except BaseException:
            self._stop_loop()
            raise
        self._closed = False

    def _run(self, coro, timeout_s: float | None = None):
        if not self._thread.is_alive():
            coro.close()
            raise NetworkError("client is closed")
        fut: Future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return fut.result(timeout_s)
        except KeyboardInterrupt:
            fut.cancel()
            raise

    # -- the Client's methods, blocking ----------------------------------------------------------
    @property
    def client_id(self) -> int:
        return self._client.client_id

    @property
    def peers(self) -> dict:
        return self._client.peers

    @property
    def leader_id(self) -> str | None:
        return self._client.leader_id

    def append(self, body: bytes) -> AppendResult:
        return self._run(self._client.append(body))

    def append_batch(self, bodies: Iterable[bytes], *, client_id: int | None = None,
                     seq: int | None = None) -> list[AppendResult]:
        return self._run(self._client.append_batch(list(bodies), client_id=client_id, seq=seq))

    def get(self, index: int) -> Entry:
        return self._run(self._client.get(index))

    def read_records(self, start: int, **kwargs: Any):
        return self._run(self._client.read_records(start, **kwargs))

    def read(self, start: int = 0, end: int | None = None, follow: bool = False,
             node: str | None = None, **kwargs: Any) -> Iterator[Entry]:
        """A blocking iterator; closing it (or breaking out of a for loop) stops the read."""
        agen = self._client.read(start, end, follow, node, **kwargs)
        try:
            while True:
                try:
                    yield self._run(agen.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            if self._thread.is_alive():
                self._run(agen.aclose())

    def status(self) -> list[NodeStatus]:
        return self._run(self._client.status())

    def transfer_leader(self, to: str) -> str:
        return self._run(self._client.transfer_leader(to))

    def kv_get(self, key: str):
        return self._run(self._client.kv_get(key))

    def kv_put(self, key: str, value: bytes, expected_version: int | None = None) -> int:
        return self._run(self._client.kv_put(key, value, expected_version))

    def kv_list(self, prefix: str = ""):
        return self._run(self._client.kv_list(prefix))

    def kv_delete(self, key: str, expected_version: int | None = None) -> int:
        return self._run(self._client.kv_delete(key, expected_version))

    # -- lifecycle ---------------------------------------------------------------------------------
    def close(self) -> None:
        """Flush pending appends, close connections, stop the private loop. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self._run(self._client.close())
        finally:
            self._stop_loop()

    def _stop_loop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        if not self._loop.is_running():
            self._loop.close()

    def __enter__(self) -> "BlockingClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            warnings.warn("quorumlog.connect() client was never closed", ResourceWarning, stacklevel=2)


async def _make_client(peers, kwargs) -> Client:
    return Client(peers, **kwargs)


def connect(peers: str | dict, **kwargs: Any) -> BlockingClient:
    """A blocking client for the group at `peers` (same keyword arguments as Client)."""
    return BlockingClient(peers, **kwargs)
