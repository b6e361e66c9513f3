"""Nodes started by hand, one `quorumlog node` process each as an operator starts them on their hosts, then
`quorumlog cluster init`: the metadata group exists, and what needs it (kv, topics, ledgers) works."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from quorumlog.local_ports import free_ports

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]
CLI = [sys.executable, "-m", "quorumlog.cli"]


def cli(*args: str, check: bool = True, timeout_s: float = 90) -> subprocess.CompletedProcess:
    r = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout_s)
    if check and r.returncode != 0:
        raise AssertionError(f"quorumlog {' '.join(args)} → {r.returncode}\n{r.stdout}\n{r.stderr}")
    return r


@pytest.fixture
def hand_started(tmp_path):
    """Three nodes, each started with only its id, the peers and its data directory."""
    ports = free_ports(3)
    peers = ",".join(f"n{i}=127.0.0.1:{p}" for i, p in enumerate(ports))
    procs = []
    try:
        for i in range(3):
            log = open(tmp_path / f"n{i}.log", "wb")
            procs.append(subprocess.Popen([*CLI, "node", "--id", f"n{i}", "--peers", peers,
                                           "--data-dir", str(tmp_path / f"n{i}")], stdout=log, stderr=log))
        yield peers, procs
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
            p.wait(10)


def test_cluster_init_bootstraps_nodes_started_by_hand(hand_started):
    peers, _procs = hand_started
    deadline = time.monotonic() + 60
    while cli("status", "--peers", peers, "--json", check=False).returncode != 0:  # every node up, a leader
        assert time.monotonic() < deadline, "the nodes did not come up"
        time.sleep(0.2)
    # before: what needs `_meta` is refused with its code, and says so
    r = cli("kv", "get", "x", "--peers", peers, "--timeout-ms", "2000", check=False)
    assert r.returncode == 1 and "UNKNOWN_GROUP" in r.stderr, r.stderr
    made = json.loads(cli("cluster", "init", "--peers", peers, "--json").stdout)
    assert made == {"meta": ["n0", "n1", "n2"], "created": True, "nodes": ["n0", "n1", "n2"]}
    assert cli("kv", "put", "--peers", peers, "config/x", "1").returncode == 0
    listed = cli("kv", "list", "--peers", peers, "nodes/").stdout
    assert all(f"nodes/n{i}" in listed for i in range(3)), listed
    assert json.loads(cli("topic", "create", "t", "--queues", "2", "--peers", peers, "--json").stdout)["queues"] == \
        ["topics", "topics"]
    assert cli("produce", "--topic", "t", "--peers", peers, "m").returncode == 0
    assert "last_entry_id 1" in cli("ledger", "write", "--peers", peers, "a", "b").stdout
    # again: nothing is made twice, the nodes are recorded again
    again = json.loads(cli("cluster", "init", "--peers", peers, "--json").stdout)
    assert again == {"meta": ["n0", "n1", "n2"], "created": False, "nodes": ["n0", "n1", "n2"]}
