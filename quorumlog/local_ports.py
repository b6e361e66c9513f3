"""Free loopback ports for the local clusters of the soak, the tests, the benchmarks and Spark's helpers.

Ports are taken below the kernel's ephemeral range (`ip_local_port_range`, 32768-60999 by default), never
from it: a port the kernel hands out with bind(("127.0.0.1", 0)) is one it also hands to outgoing connections,
so a node restarted after kill -9 on such a port found it held by some client's socket (CI: "address already
in use" on a master/slave slave's HTTP port, and the test waited a minute for a node that had exited).
"""

from __future__ import annotations

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


def free_ports(n: int) -> list[int]:
    """n distinct ports free on loopback now (each bound while the next is chosen), at random in
    listen_port_range() so parallel test workers rarely meet."""
    pool = listen_port_range()
    socks: list[socket.socket] = []
    try:
        for _ in range(200 * n):
            if len(socks) == n:
                break
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", random.choice(pool)))
            except OSError:
                s.close()
                continue
            socks.append(s)
        if len(socks) < n:
            raise RuntimeError(f"no {n} free ports in {pool.start}-{pool.stop - 1}")
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_base_port(n: int) -> int:
    """A base port with n consecutive free ports (`cluster up --base-port` takes consecutive ones)."""
    pool = listen_port_range()
    for _ in range(200):
        base = random.randrange(pool.start, pool.stop - n)
        ok = True
        for p in range(base, base + n):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise RuntimeError(f"no {n} consecutive free ports in {pool.start}-{pool.stop - 1}")
