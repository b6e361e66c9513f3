"""Nodes started by hand, one `quorumlog node` process each as an operator starts them on their hosts (TLS
certificates from `quorumlog certs`, a token file), then `quorumlog cluster init`: the metadata group exists, and
what needs it (kv, topics, ledgers) works."""

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
def hand_started(tmp_path, monkeypatch):
    """Three nodes as an operator starts them on three hosts: certificates from `quorumlog certs`, a token
    file, and each node given only its id, the peers, its data directory and those."""
    ports = free_ports(3)
    peers = ",".join(f"n{i}=127.0.0.1:{p}" for i, p in enumerate(ports))
    tls = str(tmp_path / "tls")
    cli("certs", "ca", "--dir", tls)
    token_file = tmp_path / "token"
    token_file.write_text("hand-token-93c1\n")
    monkeypatch.setenv("QUORUMLOG_TLS_CA", os.path.join(tls, "ca.pem"))  # every command below: TLS, this CA
    monkeypatch.setenv("QUORUMLOG_TOKEN", "hand-token-93c1")
    node_env = {k: v for k, v in os.environ.items() if k != "QUORUMLOG_TOKEN"}  # (the nodes: the file only)
    procs = []
    try:
        for i in range(3):
            node_tls = json.loads(cli("certs", "node", "--dir", tls, "--id", f"n{i}", "--host", "127.0.0.1",
                                      "--json").stdout)
            log = open(tmp_path / f"n{i}.log", "wb")
            procs.append(subprocess.Popen([*CLI, "node", "--id", f"n{i}", "--token-file", str(token_file),
                                           "--peers", peers, "--data-dir", str(tmp_path / f"n{i}"),
                                           *(a for k, v in node_tls.items() for a in ("--" + k.replace("_", "-"), v))],
                                          stdout=log, stderr=log, env=node_env))
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
    # without the token, or without TLS, nothing is served
    r = subprocess.run([*CLI, "kv", "get", "config/x", "--peers", peers, "--timeout-ms", "2000"], capture_output=True,
                       text=True, timeout=60, env={k: v for k, v in os.environ.items() if k != "QUORUMLOG_TOKEN"})
    assert r.returncode == 1 and "UNAUTHORIZED" in r.stderr, r.stderr
    # again: nothing is made twice, the nodes are recorded again
    again = json.loads(cli("cluster", "init", "--peers", peers, "--json").stdout)
    assert again == {"meta": ["n0", "n1", "n2"], "created": False, "nodes": ["n0", "n1", "n2"]}
