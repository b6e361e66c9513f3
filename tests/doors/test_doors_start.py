"""A node whose front door cannot start (its port taken) says which door and why, stops what it started and
exits with a failure, instead of serving without the door it was configured with."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from quorumlog.local_ports import free_base_port

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


@pytest.mark.parametrize("kind", ["rocketmq", "kafka"])
def test_a_door_whose_port_is_taken_stops_the_node_with_the_reason(tmp_path, kind):
    base = free_base_port(2)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", base + 1))
        taken.listen()
        r = subprocess.run([sys.executable, "-m", "quorumlog.server", "--id", "n0", "--peers", f"n0=127.0.0.1:{base}",
                            "--data-dir", str(tmp_path / "n0"), f"--{kind}-port", str(base + 1)],
                           capture_output=True, text=True, timeout=90)
    assert r.returncode == 1, r.stderr[-2000:]
    assert f"its {kind} door" in r.stderr and "node stopped node=n0" in r.stderr, r.stderr[-2000:]
