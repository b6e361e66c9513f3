"""The link proxy really cuts, cuts one way, and heals (on a plain echo server, no nodes)."""

from __future__ import annotations

import asyncio

import pytest

from quorumlog.soak.nemesis import LinkProxy, Net
from quorumlog.local_ports import free_ports

pytestmark = pytest.mark.timeout(30)


async def _echo(reader, writer):
    while data := await reader.read(1024):
        writer.write(data)
        await writer.drain()
    writer.close()


async def _roundtrip(port: int, timeout_s: float = 0.5) -> bytes | None:
    try:
        r, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout_s)
    except (OSError, asyncio.TimeoutError):
        return None
    try:
        w.write(b"ping")
        await w.drain()
        return await asyncio.wait_for(r.read(4), timeout_s) or None
    except (OSError, asyncio.TimeoutError):
        return None
    finally:
        w.close()


def test_cut_one_way_cut_and_heal():
    async def main():
        echo_port, proxy_port = free_ports(2)
        server = await asyncio.start_server(_echo, "127.0.0.1", echo_port)
        net = Net()
        net.add(LinkProxy("a", "b", proxy_port, echo_port, net.state))
        await net.start()
        try:
            assert await _roundtrip(proxy_port) == b"ping"
            net.cut([("b", "a")])  # answers lost, requests arrive
            assert await _roundtrip(proxy_port) is None
            net.heal()
            assert await _roundtrip(proxy_port) == b"ping"
            net.isolate(["a"], ["a", "b"])
            assert await _roundtrip(proxy_port) is None
            net.heal()
            net.delay(100)
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            assert await _roundtrip(proxy_port, 2.0) == b"ping"
            assert loop.time() - t0 >= 0.2  # held 100 ms each way
        finally:
            await net.close()
            server.close()
    asyncio.run(main())


def test_tcp_level_loss_stalls_or_resets_and_jitter_delays_but_keeps_bytes_in_order():
    async def main():
        echo_port, proxy_port = free_ports(2)
        server = await asyncio.start_server(_echo, "127.0.0.1", echo_port)
        net = Net(seed=3)
        proxy = LinkProxy("a", "b", proxy_port, echo_port, net.state)
        net.add(proxy)
        await net.start()
        loop = asyncio.get_running_loop()
        try:
            net.loss(1.0, 0.0)  # every chunk stalls one RTO each way, nothing is lost from the stream
            t0 = loop.time()
            assert await _roundtrip(proxy_port, 3.0) == b"ping"
            assert loop.time() - t0 >= 0.4 and proxy.stalls >= 2
            net.heal()
            net.loss(0.0, 1.0)  # every chunk resets: the connection dies, no byte comes back
            assert await _roundtrip(proxy_port, 1.0) is None
            assert proxy.loss_resets >= 1
            net.heal()
            net.jitter(50)
            r, w = await asyncio.open_connection("127.0.0.1", proxy_port)
            sent = b"".join(b"%06d" % i for i in range(2_000))
            w.write(sent)
            await w.drain()
            got = await asyncio.wait_for(r.readexactly(len(sent)), 10)
            assert got == sent  # in order, once
            w.close()
            net.heal()
            assert await _roundtrip(proxy_port) == b"ping"
        finally:
            await net.close()
            server.close()
    asyncio.run(main())
