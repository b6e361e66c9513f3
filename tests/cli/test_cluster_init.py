"""docs/deploy.md, step by step, on three hosts: each node in its own network namespace with its own address
(quorumlog/soak/netns.py), its node.toml written as the guide writes it, certificates from `quorumlog certs`, a
token file, `quorumlog cluster init`; then, through the CLI only, a Raft group, a master/slave group, a ledger,
a topic with a consumer group, and a lost host replaced by a new node in a fourth namespace. Needs root and `ip`
(as the soak's partitions do): without them the test fails and says so."""

from __future__ import annotations

import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from quorumlog.soak import netns
from quorumlog.spark.local import wait_until  # (no Spark in it: a poll with a deadline)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]
CLI = [sys.executable, "-m", "quorumlog.cli"]
PORT = 7001  # every host's own address: the guide's ports, unchanged
TOKEN = "deploy-token-5e07"


def cli(*args: str, check: bool = True, timeout_s: float = 90) -> subprocess.CompletedProcess:
    r = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout_s)
    if check and r.returncode != 0:
        raise AssertionError(f"quorumlog {' '.join(args)} → {r.returncode}\n{r.stdout}\n{r.stderr}")
    return r


def cli_json(*args: str, **kw):
    return json.loads(cli(*args, "--json", **kw).stdout)


class Hosts:
    """One network namespace per host, and on each the files docs/deploy.md puts under /etc/quorumlog and
    /var/lib/quorumlog (here under tmp_path/<id>/)."""

    def __init__(self, tmp_path: Path, ids: list[str]) -> None:
        self.root = tmp_path
        self.links = netns.NetnsLinks(ids, os.getpid() * 7 + time.monotonic_ns() // 1000)
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs: list = []

    def setup(self) -> None:
        if not netns.available():
            pytest.fail("this test runs the nodes in network namespaces: it needs root and `ip` (iproute2)")
        try:
            self.links.setup()
        except (OSError, subprocess.SubprocessError) as e:
            detail = getattr(e, "stderr", b"") or b""
            pytest.fail(f"cannot make the hosts' network namespaces: {e} {detail.decode(errors='replace')}")

    def address(self, node_id: str) -> str:
        return f"{self.links.host[node_id]}:{PORT}"

    def peers(self, ids) -> str:
        return ",".join(f"{i}={self.address(i)}" for i in ids)

    def etc(self, node_id: str) -> Path:
        return self.root / node_id / "etc"

    def data_dir(self, node_id: str) -> Path:
        return self.root / node_id / "var"

    def install(self, node_id: str, peers: str, tls: Path, *, join: bool = False) -> None:
        """The guide's section 2 (certificate, key, CA, token copied to the host) and 3 (node.toml)."""
        etc = self.etc(node_id)
        etc.mkdir(parents=True)
        cli("certs", "node", "--dir", str(tls), "--id", node_id, "--host", self.links.host[node_id])
        for name in ("ca.pem", f"{node_id}.pem", f"{node_id}.key", "token"):
            shutil.copy(tls / name if name != "token" else self.root / "token", etc / name)
        (etc / "node.toml").write_text(
            f'node_id = "{node_id}"\n'
            f'peers = "{peers}"\n'
            f'data_dir = "{self.data_dir(node_id)}"\n'
            f'http_port = 8001\n'
            f'tls_cert = "{etc / (node_id + ".pem")}"\n'
            f'tls_key = "{etc / (node_id + ".key")}"\n'
            f'tls_ca = "{etc / "ca.pem"}"\n'
            + ("join = true\n" if join else ""))

    def start(self, node_id: str) -> None:
        etc = self.etc(node_id)
        env = {k: v for k, v in os.environ.items() if not k.startswith("QUORUMLOG_TOKEN")}  # the file only
        log = open(self.root / f"{node_id}.log", "wb")
        self.logs.append(log)
        self.procs[node_id] = subprocess.Popen(
            [*self.links.exec_prefix(node_id), *CLI, "node", "--config", str(etc / "node.toml"),
             "--token-file", str(etc / "token")], stdout=log, stderr=log, env=env)

    def kill(self, node_id: str) -> None:
        p = self.procs[node_id]
        p.send_signal(signal.SIGKILL)
        p.wait(10)

    def teardown(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait(10)
        for log in self.logs:
            log.close()
        self.links.teardown()

    def log_tails(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in self.root.glob("n*.log"))


@pytest.fixture
def hosts(tmp_path, monkeypatch):
    h = Hosts(tmp_path, ["n0", "n1", "n2", "n3"])  # n3: the host that replaces a lost one
    h.setup()
    # the operator's machine (the root namespace, on the hosts' network): the guide's exports
    monkeypatch.setenv("QUORUMLOG_TLS_CA", str(tmp_path / "tls" / "ca.pem"))
    monkeypatch.setenv("QUORUMLOG_TOKEN", TOKEN)
    try:
        yield h
    finally:
        print(h.log_tails())  # (shown when the test failed)
        h.teardown()


def test_the_deploy_guide_on_three_hosts(hosts, tmp_path):
    tls = tmp_path / "tls"
    first = ["n0", "n1", "n2"]
    P = hosts.peers(first)
    cli("certs", "ca", "--dir", str(tls))
    (tmp_path / "token").write_text(TOKEN + "\n")
    for n in first:
        hosts.install(n, P, tls)
        hosts.start(n)
    wait_until(lambda: cli("status", "--peers", P, "--json", check=False).returncode == 0, 60, interval_s=0.2,
               what="the three nodes up, with a leader")
    r = cli("kv", "get", "x", "--peers", P, "--timeout-ms", "2000", check=False)
    assert r.returncode == 1 and "UNKNOWN_GROUP" in r.stderr, r.stderr  # until `cluster init`
    assert cli_json("cluster", "init", "--peers", P) == {"meta": first, "created": True, "nodes": first}
    r = subprocess.run([*CLI, "status", "--peers", P, "--timeout-ms", "2000"], capture_output=True, text=True,
                       timeout=60, env={k: v for k, v in os.environ.items() if k != "QUORUMLOG_TOKEN"})
    assert r.returncode == 1 and "UNAUTHORIZED" in r.stderr, r.stderr  # no token, nothing served
    assert "quorumlog_role" in http_get(hosts.links.host["n0"], "/metrics", tls / "ca.pem", TOKEN)
    with pytest.raises(urllib.error.HTTPError, match="401"):
        http_get(hosts.links.host["n0"], "/metrics", tls / "ca.pem", None)

    # a Raft group, a master/slave group, a ledger, a topic with a consumer group
    assert cli_json("group", "create", "orders", "--peers", P)["members"] == first
    ms = cli_json("group", "create", "ms", "--mode", "master-slave", "--peers", P)
    assert ms["mode"] == "master-slave" and ms["members"] == first
    for g in ("orders", "ms"):
        cli("append", "--peers", P, "--group", g, f"{g}-1", f"{g}-2", f"{g}-3")
    ledger = cli_json("ledger", "write", "--peers", P, "l0", "l1", "l2")  # created, added to, closed
    assert ledger["last_entry_id"] == 2
    cli("topic", "create", "t", "--queues", "2", "--peers", P)
    cli("produce", "--topic", "t", "--peers", P, "m1", "m2", "m3")
    assert consumed(P, "--consumer-group", "cg", "--max", "3") == ["m1", "m2", "m3"]  # and committed

    # A host lost: the master/slave group's master (a switch too), its process killed and its disk gone. n3, a
    # new host, takes its place as the guide says.
    lost = ms["leader"]
    hosts.kill(lost)
    shutil.rmtree(hosts.data_dir(lost))
    live = [n for n in first if n != lost] + ["n3"]
    P2 = hosts.peers(live)
    hosts.install("n3", hosts.peers([*first, "n3"]), tls, join=True)
    hosts.start("n3")
    assert cli_json("cluster", "init", "--peers", P2)["nodes"] == live  # waits for n3 to answer
    groups = cli_json("group", "list", "--peers", P2)
    assert {g["group"] for g in groups} == {"_meta", "default", "orders", "ms", "topics"}
    for g in groups:
        if g["mode"] == "raft":  # (a master/slave group keeps its members: it serves from the two left)
            cli("member", "remove", "--peers", P2, "--group", g["group"], "--node", lost)
            cli("member", "add", "--peers", P2, "--group", g["group"], "--node", "n3")
    assert {g["group"]: g["members"] for g in cli_json("group", "list", "--peers", P2)} == {
        "_meta": live, "default": live, "orders": live, "topics": live, "ms": first}

    # everything written before is there, the new node holds its copy, and every kind still takes writes
    assert bodies(P2, "orders", "--node", "n3") == ["orders-1", "orders-2", "orders-3"]
    cli("append", "--peers", P2, "--group", "ms", "ms-4", "--timeout-ms", "30000")  # (once a slave is master)
    assert bodies(P2, "ms") == ["ms-1", "ms-2", "ms-3", "ms-4"]
    read = cli_json("ledger", "read", "--peers", P2, "--id", str(ledger["ledger_id"]))
    assert [e["body"] for e in read["entries"]] == ["l0", "l1", "l2"]
    cli("produce", "--topic", "t", "--peers", P2, "m4")
    assert consumed(P2, "--consumer-group", "cg", "--max", "1") == ["m4"]  # from the offsets committed before
    assert consumed(P2, "--max", "4") == ["m1", "m2", "m3", "m4"]
    # auto-recovery copies the lost bookie's fragments to n3 (the only bookie outside the ensemble)
    wait_until(lambda: all(lost not in s["bookies"] for s in cli_json(
        "ledger", "describe", "--peers", P2, "--id", str(ledger["ledger_id"]))["ensembles"]), 60, interval_s=1,
        what="the ledger re-replicated")


def http_get(host: str, path: str, ca: Path, token: str | None) -> str:
    """The guide's `http_port` 8001: TLS with the node's certificate, and the token."""
    req = urllib.request.Request(f"https://{host}:8001{path}",
                                 headers={"Authorization": f"Bearer {token}"} if token else {})
    with urllib.request.urlopen(req, context=ssl.create_default_context(cafile=str(ca)), timeout=10) as r:
        return r.read().decode()


def bodies(peers: str, group: str, *args: str) -> list[str]:
    """A group's entries (but a new leader's empty no-op entries)."""
    return [e["body"] for e in cli_json("read", "--peers", peers, "--group", group, "--from", "0", *args)
            if e["body"]]


def consumed(peers: str, *args: str) -> list[str]:
    r = cli("consume", "--topic", "t", "--peers", peers, "--json", *args)
    return sorted(json.loads(line)["body"] for line in r.stdout.splitlines())
