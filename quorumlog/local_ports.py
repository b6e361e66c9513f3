"""Free loopback ports for the local clusters of the soak, the tests, the benchmarks and Spark's helpers.

Ports are taken below the kernel's ephemeral range (`ip_local_port_range`, 32768-60999 by default), never
from it: a port the kernel hands out with bind(("127.0.0.1", 0)) is one it also hands to outgoing connections,
so a node restarted after kill -9 on such a port found it held by some client's socket (CI: "address already
in use" on a master/slave slave's HTTP port, and the test waited a minute for a node that had exited).

A port is free only while nobody listens on it, and a node killed for a test leaves its ports free until it
starts again. So that no other cluster takes them meanwhile, parallel test workers (pytest-xdist's
PYTEST_XDIST_WORKER) draw from disjoint slices of the range, and one process never hands a port out twice
while its slice has others left.
"""

from __future__ import annotations

import os
import random
import socket

_DEFAULT_EPHEMERAL = (32768, 60999)


def _ephemeral_range() -> tuple[int, int]:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as f:
            lo, hi = (int(x) for x in f.read().split())
        return lo, hi
    except (OSError, ValueError):
        return _DEFAULT_EPHEMERAL


def listen_port_range() -> range:
    """Where our listeners go: from 20000 up to the ephemeral range, or above it when that starts lower."""
    lo, hi = _ephemeral_range()
    return range(20_000, lo) if lo - 20_000 >= 4_000 else range(hi + 1, 65_536)


def _worker_slice(pool: range) -> range:
    """This test worker's share of pool: gwK of N takes the K-th of N equal slices (all of it outside xdist)."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not (worker.startswith("gw") and worker[2:].isdigit() and count.isdigit() and int(count) > 1):
        return pool
    k, n = int(worker[2:]), int(count)
    size = len(pool) // n
    return pool[k * size:(k + 1) * size] if k < n else pool


_handed_out: set[int] = set()  # ports this process gave a caller (a stopped node's ports stay its own)


def _candidates(n: int) -> list[int]:
    """The slice's ports not handed out yet, shuffled; when under a quarter (or n) are left, the slice starts over."""
    pool = _worker_slice(listen_port_range())
    fresh = [p for p in pool if p not in _handed_out]
    if len(fresh) < max(n, len(pool) // 4):
        _handed_out.clear()
        fresh = list(pool)
    random.shuffle(fresh)
    return fresh


def free_ports(n: int) -> list[int]:
    """n distinct ports free on loopback now (each bound while the next is chosen), at random from this
    worker's slice of listen_port_range(), none handed out before by this process."""
    socks: list[socket.socket] = []
    try:
        for port in _candidates(n):
            if len(socks) == n:
                break
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                s.close()
                continue
            socks.append(s)
        if len(socks) < n:
            raise RuntimeError(f"no {n} free ports in {listen_port_range()}")
        ports = [s.getsockname()[1] for s in socks]
        _handed_out.update(ports)
        return ports
    finally:
        for s in socks:
            s.close()


def free_base_port(n: int) -> int:
    """A base port with n consecutive free ports (`cluster up --base-port` takes consecutive ones)."""
    for base in _candidates(n)[:200]:
        block = range(base, base + n)
        if block[-1] not in _worker_slice(listen_port_range()) or _handed_out.intersection(block):
            continue
        ok = True
        for p in block:
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
                    break
        if ok:
            _handed_out.update(block)
            return base
    raise RuntimeError(f"no {n} consecutive free ports in {listen_port_range()}")
