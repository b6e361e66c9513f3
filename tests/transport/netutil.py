"""Helpers for socket tests: run a coroutine on the real loop with a hard bound, wait for conditions."""

from __future__ import annotations

import asyncio
from typing import Callable

from quorumlog.local_ports import free_ports
from quorumlog.transport import TransportServer
from quorumlog.transport.frames import FrameDecoder, NEED_DATA
from quorumlog.transport.loop import run

GROUP = "g"
MEMBERS = {"n0", "n1", "n2"}


def run_bounded(coro, timeout_s: float = 30.0):
    """Run coro on uvloop (when installed); fail instead of hanging."""
    async def main():
        return await asyncio.wait_for(coro, timeout_s)
    return run(main())


async def wait_until(cond: Callable[[], bool], timeout_s: float = 5.0, what: str = "condition") -> None:
    """Wait for a state change we cannot subscribe to (stats, socket closes), up to a deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


def free_port() -> int:
    return free_ports(1)[0]


async def start_server(on_peer=None, on_client=None, port: int = 0, **kw) -> TransportServer:
    return await TransportServer.start(
        "127.0.0.1", port, group=GROUP, node_id="n0", members=MEMBERS,
        on_peer_message=(lambda g, m: on_peer(m)) if on_peer else (lambda g, m: None), on_client_request=on_client or (lambda r, s: None), **kw)


async def read_frames_until_eof(reader: asyncio.StreamReader, timeout_s: float = 5.0) -> list:
    """Every frame the server sends before closing (asserts that it does close)."""
    dec = FrameDecoder()
    frames = []
    async def loop():
        while True:
            try:
                data = await reader.read(65536)
            except ConnectionResetError:
                return
            if not data:
                return
            dec.feed(data)
            while (f := dec.next_frame()) is not NEED_DATA:
                frames.append((f.kind, bytes(f.payload)))
    await asyncio.wait_for(loop(), timeout_s)
    return frames
