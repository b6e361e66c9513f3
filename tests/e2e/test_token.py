"""The shared token (docs/interfaces.md "Security") with real node processes: every connection's handshake
and every HTTP request must carry it; a client with none or a wrong one is refused with UNAUTHORIZED and a
clear message, the node logs the reason and serves everyone else; a node holding another token cannot join
its peers; the token is never in a log, `status` or `/metrics`; hundreds of refused handshakes do not grow
the node's memory."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from quorumlog import Client
from quorumlog.errors import Unauthorized
from quorumlog.soak.processes import Cluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

TOKEN = "correct-horse-battery-staple-7f3a"
CLI = [sys.executable, "-m", "quorumlog.cli"]



def _http(url: str, headers: dict | None = None) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    monkeypatch.setenv("QUORUMLOG_TOKEN", TOKEN)
    c = Cluster(str(tmp_path), n=3)  # the nodes get the token through their environment
    monkeypatch.delenv("QUORUMLOG_TOKEN")  # this process's clients carry only what a test gives them
    c.start()
    try:
        yield c
    finally:
        c.stop()


def test_a_token_is_required_on_every_connection_and_http_request(cluster, tmp_path):
    async def main() -> None:
        async with Client(cluster.peers, token=TOKEN) as good:
            await cluster.wait_leader(good, timeout_s=30)
            assert (await good.append(b"with the token")).index >= 0
            for token in (None, "wrong-token"):
                async with Client(cluster.peers, token=token, timeout_ms=3_000) as bad:
                    with pytest.raises(Unauthorized, match="refused the handshake: bad or missing token"):
                        await bad.append(b"no")
            # the node serves the good client meanwhile, and after hundreds of refused handshakes
            leader = next(s.id for s in await good.status() if s.role == "leader")
            node = cluster.nodes[leader]
            rss_before = node.rss_kb()
            for i in range(300):
                async with Client({leader: _addr(cluster, leader)}, token=f"bad-{i}", timeout_ms=2_000,
                                  max_retries=0) as bad:
                    with pytest.raises(Unauthorized):
                        await bad.append(b"no")
                if i % 50 == 0:
                    assert (await good.append(b"still served %d" % i)).index >= 0
            grown = node.rss_kb() - rss_before
            assert grown < 16 * 1024, f"node grew {grown} kB over 300 refused handshakes"
            statuses = [s.raw for s in await good.status()]
        assert TOKEN not in json.dumps(statuses)

    asyncio.run(main())
    node = cluster.nodes["n0"]
    base = f"http://127.0.0.1:{node.http_port}"
    assert _http(base + "/status")[0] == 401
    assert _http(base + "/status", {"Authorization": "Bearer nope"})[0] == 401
    code, body = _http(base + "/status", {"Authorization": f"Bearer {TOKEN}"})
    assert code == 200 and json.loads(body)["id"] == "n0" and TOKEN.encode() not in body
    code, metrics = _http(base + f"/metrics?token={TOKEN}")
    assert code == 200 and b"quorumlog_" in metrics and TOKEN.encode() not in metrics
    # the CLI takes it from a file (never from its command line)
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    env = {k: v for k, v in os.environ.items() if k != "QUORUMLOG_TOKEN"}
    ok = subprocess.run([*CLI, "--token-file", str(token_file), "status", "--peers", cluster.peers, "--json"],
                        capture_output=True, text=True, timeout=60, env=env)
    assert ok.returncode == 0, ok.stderr
    refused = subprocess.run([*CLI, "append", "--peers", cluster.peers, "x", "--json"], capture_output=True,
                             text=True, timeout=60, env=env)
    assert refused.returncode == 1 and "UNAUTHORIZED" in refused.stderr and refused.stdout == ""
    logs = "".join(open(n.log_path, errors="replace").read() for n in cluster.nodes.values())
    assert "handshake refused code=UNAUTHORIZED" in logs
    assert TOKEN not in logs


def _addr(cluster: Cluster, nid: str) -> tuple[str, int]:
    host, port = next(p.split("=", 1)[1] for p in cluster.peers.split(",") if p.startswith(nid + "=")).rsplit(":", 1)
    return host, int(port)


def test_a_node_with_another_token_cannot_join_its_peers(tmp_path, monkeypatch):
    monkeypatch.setenv("QUORUMLOG_TOKEN", TOKEN)
    cluster = Cluster(str(tmp_path), n=3)
    monkeypatch.delenv("QUORUMLOG_TOKEN")
    cluster.nodes["n2"].env = dict(cluster.nodes["n2"].env, QUORUMLOG_TOKEN="not-the-cluster-token")
    cluster.start()
    try:
        async def main() -> None:
            async with Client(cluster.peers, token=TOKEN, timeout_ms=20_000) as good:
                leader = await cluster.wait_leader(good, timeout_s=30, exclude=("n2",))
                assert leader in ("n0", "n1")
                for i in range(20):
                    await good.append(b"x%d" % i)
            async with Client({"n2": _addr(cluster, "n2")}, token="not-the-cluster-token") as odd:
                st = {s.id: s for s in await odd.status()}
            assert st["n2"].role != "leader" and st["n2"].end_index < 19  # it never received the log

        asyncio.run(main())
        cluster.nodes["n0"].wait_log("handshake refused code=UNAUTHORIZED")  # n2's refused peer link
    finally:
        cluster.stop()
