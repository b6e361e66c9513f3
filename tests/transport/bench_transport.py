"""Transport micro-benchmark (not a test): frames/s and MB/s over loopback.

    .venv/bin/python -m tests.transport.bench_transport [--pushes 300] [--appends 200000] [--concurrency 64]
                                                        [--split]

1. APPEND pushes of 1 MiB of records from PeerLinks to a TransportServer (the leader → follower path).
2. 100-byte client appends on one pipelined ClientConnection, answered at once by the server (the client →
   leader path, without the log behind it): requests/s with `concurrency` callers, and the round-trip
   latency of one caller at a time.
By default client and server share one event loop (one core): per-core lower bounds. With --split the
server runs in its own process, as in a cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import time

from quorumlog.codes import ResponseCode
from quorumlog.format.log_entry import Records, encode_batch
from quorumlog.transport import ClientConnection, PeerLinks, TransportServer
from quorumlog.transport.loop import run, uvloop_available
from quorumlog.wire.client import AppendRequest, AppendResponse
from quorumlog.wire.messages import PushRequest, PushType

MiB = 1024 * 1024


async def bench_pushes(n: int) -> dict:
    bodies = [b"x" * 1024] * 1000  # ~1 MiB of stored records (1000 entries of 1 KiB + headers)
    buf, _, _ = encode_batch(0, 1, bodies, 0, 0, 0)
    view = memoryview(bytes(buf))
    received = 0
    record_bytes = 0
    done = asyncio.Event()

    def on_peer(m):
        nonlocal received, record_bytes
        received += 1
        record_bytes += m.records.size_bytes
        if received == n:
            done.set()

    server = await TransportServer.start("127.0.0.1", 0, group="b", node_id="n0", members={"n0", "n1"},
                                         on_peer_message=lambda g, m: on_peer(m), on_client_request=lambda r, s: None)
    links = PeerLinks(group="b", node_id="n1", peers={"n0": ("127.0.0.1", server.port)},
                      max_queue_bytes=4096 * MiB)
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(n):
        first = i * 1000
        rec = Records(first, first + 999, (view,), len(view))
        links.send(PushRequest("n1", "n0", 1, PushType.APPEND, first - 1, first - 1, 1, first, first + 999, rec))
    await asyncio.wait_for(done.wait(), 120)
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    dropped = links.stats()["n0"].dropped_messages
    await links.close()
    await server.close()
    return {"pushes": n, "push_bytes": len(view), "seconds": round(dt, 3), "frames_per_s": round(n / dt),
            "MB_per_s": round(record_bytes / dt / 1e6, 1),
            "MB_per_cpu_s": round(record_bytes / cpu / 1e6, 1), "dropped": dropped}


async def bench_client_appends(n: int, concurrency: int, latency_samples: int) -> dict:
    def on_client(req, session):
        session.send(AppendResponse(req.request_id, ResponseCode.SUCCESS, first_index=0, last_index=0, term=1))

    server = await TransportServer.start("127.0.0.1", 0, group="b", node_id="n0", members={"n0"},
                                         on_peer_message=lambda g, m: None, on_client_request=on_client)
    conn = await ClientConnection.open("127.0.0.1", server.port, group="b", client_name="bench",
                                       max_in_flight=concurrency)
    body = b"v" * 100

    async def caller(k: int):
        for _ in range(k):
            await conn.call(AppendRequest(conn.next_request_id(), (body,)), 10_000)

    per = n // concurrency
    t0, c0 = time.perf_counter(), time.process_time()
    await asyncio.gather(*[caller(per) for _ in range(concurrency)])
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    total = per * concurrency

    lat = []
    for _ in range(latency_samples):
        t = time.perf_counter()
        await conn.call(AppendRequest(conn.next_request_id(), (body,)), 10_000)
        lat.append((time.perf_counter() - t) * 1e6)
    lat.sort()
    await conn.close()
    await server.close()
    return {"appends": total, "concurrency": concurrency, "seconds": round(dt, 3),
            "requests_per_s": round(total / dt), "requests_per_cpu_s": round(total / cpu), "MB_per_s": round(total * len(body) / dt / 1e6, 2),
            "single_caller_rtt_us_p50": round(lat[len(lat) // 2]), "single_caller_rtt_us_p99":
            round(lat[int(len(lat) * 0.99)])}


def _server_process(port_q, n_pushes: int, pushes_done) -> None:
    """A node's transport in its own process: counts pushes, answers appends at once."""
    async def serve():
        received = 0

        def on_peer(m):
            nonlocal received
            received += 1
            if received == n_pushes:
                pushes_done.set()

        def on_client(req, session):
            session.send(AppendResponse(req.request_id, ResponseCode.SUCCESS, first_index=0, last_index=0, term=1))

        server = await TransportServer.start("127.0.0.1", 0, group="b", node_id="n0", members={"n0", "n1"},
                                             on_peer_message=lambda g, m: on_peer(m), on_client_request=on_client)
        port_q.put(server.port)
        await asyncio.Event().wait()  # until terminated

    run(serve())


async def split_pushes(port: int, n: int, pushes_done) -> dict:
    buf, _, _ = encode_batch(0, 1, [b"x" * 1024] * 1000, 0, 0, 0)
    view = memoryview(bytes(buf))
    links = PeerLinks(group="b", node_id="n1", peers={"n0": ("127.0.0.1", port)}, max_queue_bytes=4096 * MiB)
    t0 = time.perf_counter()
    for i in range(n):
        first = i * 1000
        rec = Records(first, first + 999, (view,), len(view))
        links.send(PushRequest("n1", "n0", 1, PushType.APPEND, first - 1, first - 1, 1, first, first + 999, rec))
    loop = asyncio.get_running_loop()
    assert await loop.run_in_executor(None, pushes_done.wait, 120)
    dt = time.perf_counter() - t0
    await links.close()
    return {"pushes": n, "push_bytes": len(view), "seconds": round(dt, 3), "frames_per_s": round(n / dt),
            "MB_per_s": round(n * len(view) / dt / 1e6, 1)}


async def split_appends(port: int, n: int, concurrency: int) -> dict:
    conn = await ClientConnection.open("127.0.0.1", port, group="b", client_name="bench", max_in_flight=concurrency)
    body = b"v" * 100

    async def caller(k: int):
        for _ in range(k):
            await conn.call(AppendRequest(conn.next_request_id(), (body,)), 10_000)

    per = n // concurrency
    t0 = time.perf_counter()
    await asyncio.gather(*[caller(per) for _ in range(concurrency)])
    dt = time.perf_counter() - t0
    lat = []
    for _ in range(2000):
        t = time.perf_counter()
        await conn.call(AppendRequest(conn.next_request_id(), (body,)), 10_000)
        lat.append((time.perf_counter() - t) * 1e6)
    lat.sort()
    await conn.close()
    total = per * concurrency
    return {"appends": total, "concurrency": concurrency, "seconds": round(dt, 3),
            "requests_per_s": round(total / dt), "MB_per_s": round(total * len(body) / dt / 1e6, 2),
            "single_caller_rtt_us_p50": round(lat[len(lat) // 2]),
            "single_caller_rtt_us_p99": round(lat[int(len(lat) * 0.99)])}


def main_split(args) -> dict:
    ctx = mp.get_context("spawn")
    port_q, pushes_done = ctx.Queue(), ctx.Event()
    proc = ctx.Process(target=_server_process, args=(port_q, args.pushes, pushes_done), daemon=True)
    proc.start()
    try:
        port = port_q.get(timeout=30)
        out = {"event_loop": "uvloop" if uvloop_available() else "asyncio", "server": "separate process"}
        out["push_1MiB"] = run(split_pushes(port, args.pushes, pushes_done))
        out["client_append_100B"] = run(split_appends(port, args.appends, args.concurrency))
        return out
    finally:
        proc.terminate()
        proc.join(10)


async def main(args) -> None:
    out = {"event_loop": "uvloop" if uvloop_available() else "asyncio"}
    out["push_1MiB"] = await bench_pushes(args.pushes)
    out["client_append_100B"] = await bench_client_appends(args.appends, args.concurrency, 2000)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pushes", type=int, default=300)
    p.add_argument("--appends", type=int, default=200_000)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--split", action="store_true", help="run the server in its own process")
    a = p.parse_args()
    if a.split:
        print(json.dumps(main_split(a), indent=2))
    else:
        run(main(a))
