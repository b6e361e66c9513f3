"""Load generator for the peers (etcd, NATS JetStream), one process; bench/peers.py runs one or two of them.

    python bench/peers_load.py --target etcd --endpoints http://127.0.0.1:2379 --writers 64 --batch 1 \
        --value-bytes 100 --duration-s 5 --warmup-s 1

Prints one JSON document: acked entries, calls, errors, and the HdrHistogram of per-call latency (encoded,
so the parent can add the histograms of several processes). Latency is the client's view: from the call
until the peer acknowledges (etcd: the put/txn response; JetStream: the PubAck).
etcd: a writer is one keep-alive HTTP/1.1 connection to the JSON gateway (POST /v3/kv/put; a batch is one
/v3/kv/txn of puts). JetStream: one nats-py connection per process, each writer awaits its own PubAck;
a batch is `batch` publish_async calls in flight whose acks are all awaited.

--window N (JetStream only; the fair in-flight rows): JetStream's own clients' best mode, async publish with a
window of N PubAcks outstanding (publish_async, one future per message, the next publish as soon as an ack
frees a slot); latency is per message, publish -> PubAck. etcd's equivalent of N in flight is N writers on N
keep-alive connections (what etcd's `benchmark` tool does: many clients, many connections), since its JSON
gateway serves one request at a time per HTTP/1.1 connection.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import time

from hdrh.histogram import HdrHistogram

US_MAX = 60_000_000


class EtcdHttp:
    """A minimal keep-alive HTTP/1.1 client for etcd's gRPC gateway (stdlib only; no per-call handshake)."""

    def __init__(self, endpoint: str) -> None:
        hostport = endpoint.split("//", 1)[-1].rstrip("/")
        self.host, port = hostport.rsplit(":", 1)
        self.port = int(port)
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def connect(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        if self.writer is None:
            await self.connect()
        head = (f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        self.writer.write(head + body)
        raw = await self.reader.readuntil(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:] if ":" in ln)}
        if "content-length" in headers:
            data = await self.reader.readexactly(int(headers["content-length"]))
        else:  # chunked
            parts = []
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).strip(), 16)
                chunk = await self.reader.readexactly(size + 2)
                if size == 0:
                    break
                parts.append(chunk[:-2])
            data = b"".join(parts)
        return status, data

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


def etcd_put_body(key: bytes, value: bytes) -> bytes:
    return json.dumps({"key": b64(key), "value": b64(value)}).encode()


def etcd_txn_body(keys: list[bytes], value: bytes) -> bytes:
    v = b64(value)
    return json.dumps({"success": [{"requestPut": {"key": b64(k), "value": v}} for k in keys]}).encode()


async def run_etcd(a, hist, stats, measuring, stop) -> None:
    value = os.urandom(a.value_bytes)
    eps = a.endpoints.split(",")

    async def writer(w: int) -> None:
        cli = EtcdHttp(eps[w % len(eps)] if a.spread else eps[0])
        await cli.connect()
        keys = [f"bench/{os.getpid()}/{w}/{i}".encode() for i in range(a.batch)]
        if a.batch == 1:
            path, body = "/v3/kv/put", etcd_put_body(keys[0], value)
        else:  # keys distinct within a txn (etcd rejects duplicate keys in one txn)
            path, body = "/v3/kv/txn", etcd_txn_body(keys, value)
        try:
            while not stop.is_set():
                t0 = time.perf_counter()
                try:
                    status, _ = await cli.post(path, body)
                except (OSError, asyncio.IncompleteReadError):
                    stats["errors"] += 1
                    cli.close()
                    await asyncio.sleep(0.01)
                    continue
                dt_us = int((time.perf_counter() - t0) * 1e6)
                if status != 200:
                    stats["errors"] += 1
                    continue
                if measuring[0]:
                    hist.record_value(min(dt_us, US_MAX))
                    stats["entries"] += a.batch
                    stats["calls"] += 1
        finally:
            cli.close()

    await _drive(a, [writer(w) for w in range(a.writers)], measuring, stop)


async def run_nats(a, hist, stats, measuring, stop) -> None:
    import nats

    nc = await nats.connect(servers=a.endpoints.split(","), max_reconnect_attempts=-1, reconnect_time_wait=0.05)
    js = nc.jetstream(publish_async_max_pending=max(a.writers * max(a.batch, 1), a.window) + 1)
    value = os.urandom(a.value_bytes)
    subject = f"bench.{os.getpid()}"

    async def writer(w: int) -> None:
        while not stop.is_set():
            t0 = time.perf_counter()
            try:
                if a.batch == 1:
                    await js.publish(subject, value, timeout=5)
                else:  # the whole batch in flight (publish_async: no per-message request/inbox round trip)
                    futs = [await js.publish_async(subject, value) for _ in range(a.batch)]
                    await asyncio.wait_for(asyncio.gather(*futs), 10)
            except Exception:  # noqa: BLE001 -- timeouts/no responders count as errors
                stats["errors"] += 1
                continue
            dt_us = int((time.perf_counter() - t0) * 1e6)
            if measuring[0]:
                hist.record_value(min(dt_us, US_MAX))
                stats["entries"] += a.batch
                stats["calls"] += 1

    async def windowed() -> None:
        slots = asyncio.Semaphore(a.window)

        def acked(fut: asyncio.Future, t0: float) -> None:
            slots.release()
            if fut.cancelled() or fut.exception() is not None:
                stats["errors"] += 1
                return
            if measuring[0]:
                hist.record_value(min(int((time.perf_counter() - t0) * 1e6), US_MAX))
                stats["entries"] += 1
                stats["calls"] += 1

        while not stop.is_set():
            await slots.acquire()
            t0 = time.perf_counter()
            try:
                fut = await js.publish_async(subject, value)
            except Exception:  # noqa: BLE001 -- stalled / reconnecting
                slots.release()
                stats["errors"] += 1
                continue
            fut.add_done_callback(lambda f, t0=t0: acked(f, t0))

    try:
        await _drive(a, [windowed()] if a.window else [writer(w) for w in range(a.writers)], measuring, stop)
    finally:
        await nc.close()


async def _drive(a, coros, measuring, stop) -> None:
    tasks = [asyncio.create_task(c) for c in coros]
    await asyncio.sleep(a.warmup_s)
    measuring[0] = True
    t0 = time.perf_counter()
    await asyncio.sleep(a.duration_s)
    measuring[0] = False
    a.elapsed_s = time.perf_counter() - t0
    stop.set()
    done, pending = await asyncio.wait(tasks, timeout=15)
    for t in pending:
        t.cancel()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--target", choices=["etcd", "nats"], required=True)
    p.add_argument("--endpoints", required=True)
    p.add_argument("--writers", type=int, default=1)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--value-bytes", type=int, default=100)
    p.add_argument("--duration-s", type=float, default=5.0)
    p.add_argument("--warmup-s", type=float, default=1.0)
    p.add_argument("--spread", action="store_true", help="etcd: writers spread over all endpoints")
    p.add_argument("--window", type=int, default=0, help="nats: async publish with this many acks in flight")
    a = p.parse_args()
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    hist = HdrHistogram(1, US_MAX, 3)
    stats = {"entries": 0, "calls": 0, "errors": 0}
    measuring = [False]

    async def go() -> None:
        stop = asyncio.Event()
        await (run_etcd if a.target == "etcd" else run_nats)(a, hist, stats, measuring, stop)

    asyncio.run(go())
    print(json.dumps({**stats, "elapsed_s": a.elapsed_s, "hist": hist.encode().decode()}))


if __name__ == "__main__":
    main()
