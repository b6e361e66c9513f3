"""Listen ports for local clusters come from below the kernel's ephemeral range, never from it: outgoing
connections take those, and a node restarted on its port after kill -9 found it held (CI, 2026-11-27)."""

from __future__ import annotations

import socket

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
