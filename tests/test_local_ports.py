"""Listen ports for local clusters come from below the kernel's ephemeral range, never from it: outgoing
connections take those, and a node restarted on its port after kill -9 found it held (CI, 2026-11-27)."""

from __future__ import annotations

import socket

from quorumlog import local_ports
from quorumlog.local_ports import _ephemeral_range, free_base_port, free_ports, listen_port_range


def test_ports_are_distinct_free_and_outside_the_ephemeral_range():
    lo, hi = _ephemeral_range()
    ports = free_ports(50)
    assert len(set(ports)) == 50
    assert all(p in listen_port_range() and not lo <= p <= hi for p in ports)
    base = free_base_port(6)
    assert all(p in listen_port_range() and not lo <= p <= hi for p in range(base, base + 6))
    for p in ports[:5] + list(range(base, base + 6)):
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))  # (free: the chooser released them)


def test_an_outgoing_connection_never_takes_a_port_we_listen_on():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(64)
        clients = [socket.create_connection(server.getsockname()) for _ in range(50)]
        try:
            taken = {c.getsockname()[1] for c in clients}
            assert not taken & set(listen_port_range())
        finally:
            for c in clients:
                c.close()


def test_parallel_workers_draw_from_disjoint_slices_and_a_port_is_not_handed_out_twice(monkeypatch):
    """A node killed for a test leaves its ports free until it starts again: no other cluster may take them
    meanwhile, from this worker (no port handed out twice) or from the other (disjoint slices). CI, 2026-11-27:
    a failover test's restarted node never answered again."""
    drawn = {}
    for k in range(2):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{k}")
        monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
        monkeypatch.setattr(local_ports, "_handed_out", set())
        ports = [p for _ in range(40) for p in free_ports(10)] + [free_base_port(6) + i for _ in range(20)
                                                                   for i in range(6)]
        assert len(set(ports)) == len(ports)  # (400 + 120: none twice)
        drawn[k] = set(ports)
    assert not drawn[0] & drawn[1]
    half = len(listen_port_range()) // 2
    assert max(drawn[0]) < listen_port_range().start + half <= min(drawn[1])
