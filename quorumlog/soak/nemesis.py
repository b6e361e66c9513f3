"""A fault-injecting TCP proxy between nodes (asyncio, in the soak's own event loop).

Every ordered pair (src, dst) gets a LinkProxy: src's peers string names dst at the proxy's port, which
forwards to dst's real port. A connection dialed by src carries src→dst bytes forward and dst→src bytes
back, so a one-way cut of (a, b) drops a→b bytes on both proxies that join a and b.

Faults per direction (a, b): cut (bytes discarded, new connections still accepted unless both ways are cut),
delay (each chunk held delay_ms, order kept), rate (bytes per second), jitter and loss. `reset()` drops every
connection.

A TCP proxy sees a byte stream, not packets, so packet faults have only TCP-level equivalents here:
- random loss → `loss`: a chunk now and then stalls for a retransmission timeout (TCP hides a lost segment
  by resending it, the stream waits), and with a smaller chance the connection is reset (a loss burst that
  kills it); bytes are never silently dropped from a live stream.
- duplication and reordering → `jitter`: TCP delivers once and in order, so a duplicated or reordered
  packet only delays the bytes behind it; each chunk waits a random 0..jitter_ms, order kept.
Real packet loss, duplication and reordering need netem (or nft for loss) in the namespaces (netns.py).
Every change of the fault state resets connections, so a stream that lost bytes mid-frame is never reused.
No namespaces are needed: this is the mechanism that runs on machines without root.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

CHUNK_BYTES = 16 * 1024


@dataclass
class LinkState:
    cut: set[tuple[str, str]] = field(default_factory=set)
    delay_ms: dict[tuple[str, str], float] = field(default_factory=dict)
    rate_bytes_s: dict[tuple[str, str], float] = field(default_factory=dict)
    jitter_ms: dict[tuple[str, str], float] = field(default_factory=dict)
    loss: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)  # (stall p, reset p)/chunk
    rng: random.Random = field(default_factory=lambda: random.Random(0))

LOSS_STALL_MS = (200, 400)  # Linux's minimum RTO is 200 ms: a lost segment costs at least that


class LinkProxy:
    """Forwards listen_port → target_port for the link src → dst, applying the shared LinkState."""

    def __init__(self, src: str, dst: str, listen_port: int, target_port: int, state: LinkState, *,
                 listen_host: str = "127.0.0.1", target_host: str = "127.0.0.1") -> None:
        self.src, self.dst = src, dst
        self.listen_host, self.target_host = listen_host, target_host
        self.listen_port = listen_port
        self.target_port = target_port
        self.state = state
        self.accepted = 0
        self.dropped_bytes = 0
        self.stalls = 0
        self.loss_resets = 0
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> "LinkProxy":
        self._server = await asyncio.start_server(self._handle, self.listen_host, self.listen_port)
        return self

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        fwd, back = (self.src, self.dst), (self.dst, self.src)
        if fwd in self.state.cut and back in self.state.cut:
            writer.close()  # a full cut: nothing gets through, not even the handshake
            return
        try:
            up_r, up_w = await asyncio.open_connection(self.target_host, self.target_port)
        except OSError:
            writer.close()
            return
        self._writers.update((writer, up_w))
        for t in (asyncio.create_task(self._pump(reader, up_w, fwd)),
                  asyncio.create_task(self._pump(up_r, writer, back))):
            self._tasks.add(t)
            t.add_done_callback(self._tasks.discard)

    async def _pump(self, r: asyncio.StreamReader, w: asyncio.StreamWriter, direction: tuple[str, str]) -> None:
        try:
            while True:
                data = await r.read(CHUNK_BYTES)
                if not data:
                    break
                if direction in self.state.cut:
                    self.dropped_bytes += len(data)
                    continue
                delay_ms = self.state.delay_ms.get(direction)
                if delay_ms:
                    await asyncio.sleep(delay_ms / 1000)
                jitter = self.state.jitter_ms.get(direction)
                if jitter:
                    await asyncio.sleep(self.state.rng.uniform(0, jitter) / 1000)
                loss = self.state.loss.get(direction)
                if loss:
                    x = self.state.rng.random()
                    if x < loss[1]:
                        self.loss_resets += 1
                        break  # the finally closes this side; the other pump ends on EOF
                    if x < loss[0] + loss[1]:
                        self.stalls += 1
                        await asyncio.sleep(self.state.rng.uniform(*LOSS_STALL_MS) / 1000)
                w.write(data)
                await w.drain()
                rate = self.state.rate_bytes_s.get(direction)
                if rate:
                    await asyncio.sleep(len(data) / rate)
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            w.close()
            self._writers.discard(w)

    def reset(self) -> None:
        for w in list(self._writers):
            w.close()
        for t in list(self._tasks):
            t.cancel()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        self.reset()
        await asyncio.gather(*self._tasks, return_exceptions=True)


class Net:
    """All links of a cluster; the runner changes faults through these methods only."""

    def __init__(self, seed: int = 0) -> None:
        self.state = LinkState(rng=random.Random(seed))
        self.proxies: dict[tuple[str, str], LinkProxy] = {}
        self.events: list[tuple[float, str]] = []

    def add(self, proxy: LinkProxy) -> None:
        self.proxies[(proxy.src, proxy.dst)] = proxy

    async def start(self) -> None:
        for p in self.proxies.values():
            await p.start()

    async def close(self) -> None:
        for p in self.proxies.values():
            await p.close()

    def _changed(self, what: str) -> None:
        self.events.append((time.monotonic(), what))
        log.info("net: %s", what)
        self.reset()

    def reset(self) -> None:
        for p in self.proxies.values():
            p.reset()

    def cut(self, pairs: list[tuple[str, str]]) -> None:
        self.state.cut.update(pairs)
        self._changed(f"cut {sorted(pairs)}")

    def isolate(self, nodes: list[str], members: list[str]) -> None:
        """Cut every link between `nodes` and the rest, both ways."""
        rest = [m for m in members if m not in nodes]
        self.cut([(a, b) for a in nodes for b in rest] + [(b, a) for a in nodes for b in rest])

    def delay(self, delay_ms: float) -> None:
        for pair in self.proxies:
            self.state.delay_ms[pair] = delay_ms
            self.state.delay_ms[pair[::-1]] = delay_ms
        self._changed(f"delay {delay_ms} ms on every link")

    def slow(self, pairs: list[tuple[str, str]], rate_bytes_s: float) -> None:
        for pair in pairs:
            self.state.rate_bytes_s[pair] = rate_bytes_s
        self._changed(f"rate {rate_bytes_s} B/s on {sorted(pairs)}")

    def jitter(self, jitter_ms: float) -> None:
        """TCP-level stand-in for packet duplication and reordering on every link (see the module doc)."""
        for pair in self.proxies:
            self.state.jitter_ms[pair] = jitter_ms
            self.state.jitter_ms[pair[::-1]] = jitter_ms
        self._changed(f"jitter 0..{jitter_ms} ms on every link")

    def loss(self, stall_p: float, reset_p: float) -> None:
        """TCP-level stand-in for random packet loss on every link: per chunk, a stall of one RTO with
        probability stall_p, a connection reset with probability reset_p (see the module doc)."""
        for pair in self.proxies:
            self.state.loss[pair] = (stall_p, reset_p)
            self.state.loss[pair[::-1]] = (stall_p, reset_p)
        self._changed(f"loss: stall p={stall_p} reset p={reset_p} per chunk on every link")

    def heal(self) -> None:
        st = self.state
        if not (st.cut or st.delay_ms or st.rate_bytes_s or st.jitter_ms or st.loss):
            # nothing was faulted through the proxies (a kill, a disk fault, a namespace partition): no stream
            # lost bytes, so the connections stay (a reset would cost the writers ~1 s for nothing)
            self.events.append((time.monotonic(), "heal (proxies clean: no reset)"))
            return
        self.state.cut.clear()
        self.state.delay_ms.clear()
        self.state.rate_bytes_s.clear()
        self.state.jitter_ms.clear()
        self.state.loss.clear()
        self._changed("heal")
