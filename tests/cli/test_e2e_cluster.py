"""End to end through the `quorumlog` command: real node processes on loopback, started by `cluster up`.

Each test stops what it started (cluster down, then SIGKILL of any pid left in cluster.json) in `finally`.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

import quorumlog
from quorumlog.cli.cluster import pid_alive
from quorumlog.local_ports import free_base_port

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

CLI = [sys.executable, "-m", "quorumlog.cli"]
CONVERGE_S = 10.0  # followers learn the commit point on the next push/heartbeat: well under this


def cli(*args: str, timeout_s: float = 60, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout_s)
    if check and r.returncode != 0:
        raise AssertionError(f"quorumlog {' '.join(args)} → {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr}")
    return r


def cli_json(*args: str, timeout_s: float = 60):
    r = cli(*args, "--json", timeout_s=timeout_s)
    return json.loads(r.stdout)  # exactly one document, or this fails


def kill_leftovers(data_dir: str) -> None:
    try:
        with open(os.path.join(data_dir, "cluster.json")) as f:
            nodes = json.load(f)["nodes"]
    except (OSError, ValueError, KeyError):
        return
    for n in nodes:
        try:
            os.kill(n["pid"], signal.SIGKILL)
        except (ProcessLookupError, TypeError):
            pass


@pytest.fixture
def cluster(tmp_path):
    d = str(tmp_path / "cluster")
    base = free_base_port(3)
    try:
        up = cli_json("cluster", "up", "--nodes", "3", "--data-dir", d, "--base-port", str(base),
                      "--timeout-s", "60", timeout_s=90)
        yield d, up
    finally:
        try:
            cli("cluster", "down", "--data-dir", d, "--grace-s", "5", timeout_s=30, check=False)
        finally:
            kill_leftovers(d)


def read_all(d: str, node: str) -> list[dict]:
    """A node's entries as `read` prints them (a new leader's no-op entry is never among them)."""
    entries = cli_json("read", "--cluster", d, "--from", "0", "--node", node)
    assert all(e.get("body") != "" for e in entries), "a no-op entry reached a reader"
    return entries


def wait_converged(d: str, ids: list[str], expected: list[str]) -> None:
    """Every node serves exactly `expected` (bodies in order), within CONVERGE_S."""
    deadline = time.monotonic() + CONVERGE_S
    while True:
        got = {nid: [e["body"] for e in read_all(d, nid)] for nid in ids}
        if all(v == expected for v in got.values()):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"nodes did not converge on {expected}: {got}")
        time.sleep(0.1)


def test_cluster_up_append_read_status_transfer_down(cluster):
    d, up = cluster
    with open(os.path.join(d, "cluster.json")) as f:
        doc = json.load(f)
    ids = [n["id"] for n in doc["nodes"]]
    assert ids == ["n0", "n1", "n2"] and doc["group"] == "default" and doc["flush"] == "sync"
    for n in doc["nodes"]:
        assert {"id", "address", "pid", "data_dir", "log_file", "argv", "http_port"} <= set(n)
        assert n["argv"][:3] == CLI and "--id" in n["argv"] and os.path.exists(n["log_file"])
    assert up["leader_id"] in ids
    # the status page is on by default, and `up` names it
    assert up["status_page"] == f"http://127.0.0.1:{doc['nodes'][0]['http_port']}/"
    with urllib.request.urlopen(up["status_page"] + "status", timeout=10) as r:
        assert json.loads(r.read())["id"] == "n0"

    appended = cli_json("append", "--cluster", d, "a", "b", "c")
    assert [x["index"] for x in appended] == [0, 1, 2] and len({x["term"] for x in appended}) == 1
    wait_converged(d, ids, ["a", "b", "c"])
    entry = read_all(d, ids[0])[1]
    assert entry["index"] == 1 and entry["body"] == "b" and entry["timestamp"].endswith("+00:00")

    status = cli_json("status", "--cluster", d)
    assert [s["id"] for s in status] == ids
    leaders = [s for s in status if s["role"] == "leader"]
    assert len(leaders) == 1 and all(s["leader_id"] == leaders[0]["id"] for s in status)
    assert all(s["committed_index"] >= 2 for s in leaders)

    target = next(i for i in ids if i != leaders[0]["id"])
    assert cli_json("transfer-leader", "--cluster", d, "--to", target)["leader_id"] == target
    deadline = time.monotonic() + CONVERGE_S
    while True:
        status = cli_json("status", "--cluster", d)
        roles = {s["id"]: s["role"] for s in status}
        if roles[target] == "leader" and list(roles.values()).count("leader") == 1:
            break
        assert time.monotonic() < deadline, roles
        time.sleep(0.1)
    more = cli_json("append", "--cluster", d, "d")
    assert more[0]["index"] >= 3 and more[0]["term"] > appended[0]["term"]
    wait_converged(d, ids, ["a", "b", "c", "d"])

    with quorumlog.connect(doc["peers"]) as c:  # the Python client against the same cluster
        r = c.append(b"e")
        assert c.get(r.index).body == b"e"
        assert [e.body for e in c.read(more[0]["index"]) if e.body] == [b"d", b"e"]

    # read --follow --json streams one object per line as entries commit (long-poll on a follower)
    follower = next(i for i in ids if i != target)
    proc = subprocess.Popen([*CLI, "read", "--cluster", d, "--from", str(more[0]["index"]), "--node", follower,
                             "--follow", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(json.loads(line)) for line in proc.stdout if '"body":""' not in line],
                     daemon=True).start()
    try:
        assert [lines.get(timeout=CONVERGE_S)["body"] for _ in range(2)] == ["d", "e"]
        f = cli_json("append", "--cluster", d, "f")[0]
        assert lines.get(timeout=CONVERGE_S) | {"timestamp": None} == {
            "index": f["index"], "term": f["term"], "timestamp": None, "body": "f"}
    finally:
        proc.kill()
        proc.wait(10)

    down = cli_json("cluster", "down", "--data-dir", d)
    assert sorted(down["stopped"] + down["killed"]) == ids
    assert not any(pid_alive(n["pid"]) for n in doc["nodes"])  # gone, or a zombie left to init
    again = cli_json("cluster", "down", "--data-dir", d)
    assert again["not_running"] == ids

    # `cluster up` on the stopped cluster's directory starts the same nodes again from cluster.json (their log,
    # `_meta` and groups are in their data; nothing is created anew), and refuses while they run
    back = cli_json("cluster", "up", "--data-dir", d, "--timeout-s", "60", timeout_s=90)
    assert [n["id"] for n in back["nodes"]] == ids and back["leader_id"] in ids
    assert [n["argv"] for n in back["nodes"]] == [n["argv"] for n in doc["nodes"]]
    wait_converged(d, ids, ["a", "b", "c", "d", "e", "f"])
    assert cli_json("append", "--cluster", d, "g")[0]["index"] > f["index"]
    refused = cli("cluster", "up", "--data-dir", d, check=False)
    assert refused.returncode != 0 and "already running" in refused.stderr


def test_client_survives_kill_9_of_the_leader_without_loss_or_duplicates(cluster):
    d, up = cluster
    with open(os.path.join(d, "cluster.json")) as f:
        doc = json.load(f)
    pids = {n["id"]: n["pid"] for n in doc["nodes"]}
    acked: list[tuple[int, bytes]] = []
    with quorumlog.connect(doc["peers"], timeout_ms=15_000) as c:
        for i in range(50):
            acked.append((c.append(b"before-%d" % i).index, b"before-%d" % i))
        leader = c.leader_id
        os.kill(pids[leader], signal.SIGKILL)
        t0 = time.monotonic()
        r = c.append(b"after-0")  # retried until a new leader takes it
        failover_s = time.monotonic() - t0
        acked.append((r.index, b"after-0"))
        for i in range(1, 50):
            acked.append((c.append(b"after-%d" % i).index, b"after-%d" % i))
        assert c.leader_id != leader
        entries = list(c.read(0))
    bodies = [e.body for e in entries if e.body]  # without new leaders' empty no-op entries
    assert len(bodies) == len(set(bodies)), "an entry was stored twice"
    by_index = {e.index: e.body for e in entries}
    for index, body in acked:
        assert by_index.get(index) == body
    assert failover_s < 5, failover_s

    # cluster.json's argv restarts the killed node by hand; it catches up and serves the same entries
    node = next(n for n in doc["nodes"] if n["id"] == leader)
    with open(node["log_file"], "ab") as log:
        proc = subprocess.Popen(node["argv"], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + CONVERGE_S * 2
        while True:
            try:
                got = {e["index"]: e.get("body") for e in cli_json("read", "--cluster", d, "--from", "0",
                                                                      "--node", leader, "--timeout-ms", "2000")}
            except AssertionError:
                got = {}
            if all(got.get(i) == b.decode() for i, b in acked):
                break
            assert time.monotonic() < deadline, f"restarted {leader} did not catch up: {len(got)} entries"
            time.sleep(0.2)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def test_bench_failover_kills_the_leader_and_restarts_it_from_argv(cluster):
    d, up = cluster
    with open(os.path.join(d, "cluster.json")) as f:
        before = {n["id"]: n["pid"] for n in json.load(f)["nodes"]}
    r = cli_json("bench", "--cluster", d, "--failover-kills", "1", "--writers", "2", timeout_s=120)
    assert r["mode"] == "failover" and r["flush"] == "sync" and r["errors"] == 0
    assert len(r["failover_ms"]) == 1 and 0 < r["failover_ms"][0] < 5_000
    with open(os.path.join(d, "cluster.json")) as f:
        after = {n["id"]: n["pid"] for n in json.load(f)["nodes"]}
    changed = [nid for nid in before if before[nid] != after[nid]]
    assert len(changed) == 1  # the killed leader (whoever led then), restarted with a new pid
    assert pid_alive(after[changed[0]]) and not pid_alive(before[changed[0]])
    status = cli_json("status", "--cluster", d)
    assert all(s["role"] != "unreachable" for s in status)


def test_groups_create_list_describe_write_grow_and_delete(cluster):
    d, _ = cluster
    made = [cli_json("group", "create", f"g{i}", "--cluster", d) for i in range(3)]
    assert all(sorted(m["members"]) == ["n0", "n1", "n2"] and m["mode"] == "raft" for m in made)
    leaders = [g["leader"] for g in cli_json("group", "list", "--cluster", d)]  # default, _meta, g0..g2
    per_node = [leaders.count(n) for n in ("n0", "n1", "n2")]
    assert max(per_node) - min(per_node) <= 1, leaders  # leaders spread: new groups go to the least busy
    small = cli_json("group", "create", "two", "--replicas", "2", "--nodes", "n1,n2", "--cluster", d)
    assert small["members"] == ["n1", "n2"] and small["leader"] in ("n1", "n2")
    listed = {g["group"]: g for g in cli_json("group", "list", "--cluster", d)}
    assert set(listed) == {"default", "_meta", "g0", "g1", "g2", "two"}
    # refused, each with its code, and nothing changes
    for args, code in ((("create", "g0"), "GROUP_EXISTS"), (("create", "bad/name"), "BAD_REQUEST"),
                       (("create", "g9", "--replicas", "4"), "BAD_REQUEST"),
                       (("create", "g9", "--nodes", "n0,n7"), "UNKNOWN_MEMBER"),
                       (("describe", "nope"), "UNKNOWN_GROUP"), (("delete", "nope"), "UNKNOWN_GROUP")):
        r = cli("group", *args, "--cluster", d, check=False)
        assert r.returncode == 1 and code in r.stderr, (args, r.stderr)
    assert {g["group"] for g in cli_json("group", "list", "--cluster", d)} == set(listed)
    # a group is written and read like `default`; a node not hosting it answers UNKNOWN_GROUP
    assert [a["index"] for a in cli_json("append", "--cluster", d, "--group", "two", "a", "b")] == [0, 1]
    r = cli("read", "--cluster", d, "--group", "two", "--from", "0", "--node", "n0", check=False)
    assert r.returncode == 1 and "UNKNOWN_GROUP" in r.stderr
    rows = cli_json("status", "--cluster", d, "--all-groups")
    assert sorted((r["id"], r["group"]) for r in rows if r["group"] == "two") == [("n1", "two"), ("n2", "two")]
    assert sum(1 for r in rows if r["group"] == "g0" and r["role"] == "leader") == 1
    # grow it onto a new node, then shrink it off n1: the data follows, n1's copy is deleted
    cli_json("cluster", "add-node", "--data-dir", d)
    grown = cli_json("member", "add", "--cluster", d, "--group", "two", "--node", "n3")
    assert sorted(grown["voters"]) == ["n1", "n2", "n3"]
    cli_json("member", "remove", "--cluster", d, "--group", "two", "--node", "n1")
    described = cli_json("group", "describe", "two", "--cluster", d)
    assert described["members"] == ["n2", "n3"] and sorted(r["id"] for r in described["nodes"]) == ["n2", "n3"]
    assert [e["body"] for e in cli_json("read", "--cluster", d, "--group", "two", "--from", "0", "--node", "n3")] \
        == ["a", "b"]
    assert cli_json("group", "delete", "g1", "--cluster", d)["deleted_on"] == ["n0", "n1", "n2"]
    assert {g["group"] for g in cli_json("group", "list", "--cluster", d)} == {"default", "_meta", "g0", "g2", "two"}
    # the `_meta` record follows: members of `two` after the changes, g1 gone, n3 known
    record = {k["key"]: json.loads(k["value"]) for k in cli_json("kv", "list", "--cluster", d)["keys"]}
    assert record["groups/two"]["members"] == ["n2", "n3"] and "groups/g1" not in record
    assert record["nodes/n3"]["address"] and record["groups/default"]["members"] == ["n0", "n1", "n2"]
    assert not any(os.path.exists(os.path.join(d, n, "groups", "g1")) for n in ("n0", "n1", "n2"))
    # a node down: delete is refused (the node may host a copy), --force deletes on the others
    with open(os.path.join(d, "cluster.json")) as f:
        pids = {n["id"]: n["pid"] for n in json.load(f)["nodes"]}
    os.kill(pids["n0"], signal.SIGKILL)
    r = cli("group", "delete", "g2", "--cluster", d, check=False)
    assert r.returncode == 1 and "NETWORK_ERROR" in r.stderr, r.stderr
    assert cli_json("group", "delete", "g2", "--cluster", d, "--force")["deleted_on"] == ["n1", "n2"]


def test_kv_commands_put_compare_and_set_get_list_delete_watch(cluster):
    d, _ = cluster
    assert cli_json("kv", "put", "--cluster", d, "cfg/a", "one", "--expected-version", "0")["version"] == 1
    r = cli("kv", "put", "--cluster", d, "cfg/a", "two", "--expected-version", "0", "--json", check=False)
    assert r.returncode == 1 and r.stdout == "" and "METADATA_VERSION_CONFLICT" in r.stderr  # nothing changed
    got = cli_json("kv", "get", "--cluster", d, "cfg/a")
    assert (got["value"], got["version"]) == ("one", 1)
    assert cli("kv", "get", "--cluster", d, "cfg/a").stdout.strip() == "one"
    r = cli("kv", "get", "--cluster", d, "cfg/missing", "--json", check=False)
    assert r.returncode == 1 and r.stdout == "" and "no key" in r.stderr
    since = cli_json("kv", "list", "--cluster", d, "cfg/")["revision"]  # the watch resumes after it
    watcher = subprocess.Popen([*CLI, "kv", "watch", "--cluster", d, "cfg/", "--revision", str(since), "--count",
                                "2", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        cli_json("kv", "put", "--cluster", d, "cfg/b", "bee")
        cli_json("kv", "delete", "--cluster", d, "cfg/a", "--expected-version", "1")
        out, err = watcher.communicate(timeout=30)
    finally:
        watcher.kill()
    changes = [json.loads(line) for line in out.splitlines()]
    assert [(c["type"], c["key"]) for c in changes] == [("put", "cfg/b"), ("delete", "cfg/a")], err
    assert changes[0]["revision"] < changes[1]["revision"]
    listed = cli_json("kv", "list", "--cluster", d, "cfg/")
    assert [k["key"] for k in listed["keys"]] == ["cfg/b"] and listed["revision"] == changes[1]["revision"]
    nodes = [k["key"] for k in cli_json("kv", "list", "--cluster", d, "nodes/")["keys"]]
    assert nodes == ["nodes/n0", "nodes/n1", "nodes/n2"]  # recorded by `cluster up`


def test_remove_node_is_refused_while_in_use_and_drain_moves_every_replica_first(cluster):
    """... and its bookie's ledger fragments: --drain decommissions it and waits for auto-recovery."""
    d, _ = cluster
    cli_json("group", "create", "g0", "--cluster", d)
    deadline = time.monotonic() + 30
    while not all(b.get("limbo_known") for b in cli_json("bookie", "list", "--cluster", d)["bookies"]):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    lid = cli_json("ledger", "write", "--cluster", d, "--ensemble", "3", "--write-quorum", "2", "--ack-quorum", "2",
                   "a", "b", "c", "d")["ledger_id"]  # on n0, n1, n2: the only three bookies yet
    assert cli_json("cluster", "add-node", "--data-dir", d)["meta_member"] is False  # (_meta keeps 3 of 4 nodes)
    r = cli("cluster", "remove-node", "--data-dir", d, "--id", "n1", "--json", check=False)
    assert r.returncode == 1 and "NODE_IN_USE" in r.stderr and r.stdout == ""
    assert all(f"member remove --cluster {d} --group {g} --node n1" in r.stderr for g in ("default", "_meta", "g0"))
    assert "--drain" in r.stderr and "--group G" not in r.stderr, r.stderr
    # by hand: n1 leaves `_meta`, and n3 takes its place (it keeps its size)
    removed = cli_json("member", "remove", "--cluster", d, "--group", "_meta", "--node", "n1")
    assert removed["replaced_by"] == "n3"
    assert sorted(cli_json("group", "describe", "_meta", "--cluster", d)["members"]) == ["n0", "n2", "n3"]
    out = cli_json("cluster", "remove-node", "--data-dir", d, "--id", "n1", "--drain", timeout_s=240)
    assert out["moved"] == {"default": "n3", "g0": "n3"} and out["stopped"]
    for g in cli_json("group", "list", "--cluster", d):
        assert sorted(g["members"]) == ["n0", "n2", "n3"], g
    assert cli_json("append", "--cluster", d, "--group", "g0", "after")[0]["index"] >= 0
    assert cli_json("kv", "put", "--cluster", d, "after/drain", "x")["version"] == 1  # _meta on its new members
    keys = {k["key"] for k in cli_json("kv", "list", "--cluster", d)["keys"]}
    assert "nodes/n1" not in keys and "nodes/n3" in keys
    md = cli_json("ledger", "describe", "--cluster", d, "--id", str(lid))
    assert all("n1" not in seg["bookies"] for seg in md["ensembles"]), md  # its fragment was copied to n3
    got = cli_json("ledger", "read", "--cluster", d, "--id", str(lid))
    assert [e["body"] for e in got["entries"]] == ["a", "b", "c", "d"]


def test_ledger_and_bookie_commands_write_read_describe_recover_list_delete(cluster):
    d, _ = cluster
    deadline = time.monotonic() + 30
    while True:  # every node's bookie answers once it compared its instance id with `_meta`
        bookies = cli_json("bookie", "list", "--cluster", d)["bookies"]
        if all(b.get("limbo_known") for b in bookies):
            break
        assert time.monotonic() < deadline, bookies
        time.sleep(0.2)
    assert sorted(b["bookie_id"] for b in bookies) == ["n0", "n1", "n2"]
    assert {b["state"] for b in bookies} == {"read_write"}
    w = cli_json("ledger", "write", "--cluster", d, "--ensemble", "3", "--write-quorum", "2", "--ack-quorum", "2",
                 "a", "bb", "ccc")
    lid = w["ledger_id"]
    assert w["last_entry_id"] == 2
    got = cli_json("ledger", "read", "--cluster", d, "--id", str(lid), "--from", "1")
    assert [(e["entry_id"], e["body"]) for e in got["entries"]] == [(1, "bb"), (2, "ccc")]
    md = cli_json("ledger", "describe", "--cluster", d, "--id", str(lid))
    assert (md["state"], md["last_entry_id"], md["length"], md["ensemble_size"], md["write_quorum"],
            md["ack_quorum"]) == ("CLOSED", 2, 6, 3, 2, 2)
    assert sorted(md["ensembles"][0]["bookies"]) == ["n0", "n1", "n2"]
    assert cli_json("ledger", "recover", "--cluster", d, "--id", str(lid))["version"] == md["version"]  # closed
    r = cli("ledger", "write", "--cluster", d, "--ensemble", "4", "x", "--json", check=False)
    assert r.returncode == 1 and "NOT_ENOUGH_BOOKIES" in r.stderr and r.stdout == ""
    r = cli("ledger", "write", "--cluster", d, "--ensemble", "2", "--write-quorum", "3", "x", "--json", check=False)
    assert r.returncode != 0 and r.stdout == ""
    assert [x["ledger_id"] for x in cli_json("ledger", "list", "--cluster", d)["ledgers"]] == [lid]
    os.kill(next(n["pid"] for n in json.load(open(os.path.join(d, "cluster.json")))["nodes"] if n["id"] == "n2"),
            signal.SIGKILL)
    under = cli_json("ledger", "underreplicated", "--cluster", d)
    assert under["down_bookies"] == ["n2"] and [x["ledger_id"] for x in under["ledgers"]] == [lid]
    cli_json("ledger", "delete", "--cluster", d, "--id", str(lid))
    assert cli_json("ledger", "list", "--cluster", d)["ledgers"] == []
    # nothing under-replicated is said, not an empty screen
    assert cli("ledger", "underreplicated", "--cluster", d).stdout == \
        "every ledger is fully replicated (bookies down: n2, holding no fragment)\n"
    r = cli("ledger", "describe", "--cluster", d, "--id", str(lid), "--json", check=False)
    assert r.returncode == 1 and "NO_SUCH_LEDGER" in r.stderr


def test_topic_commands_create_produce_consume_describe(cluster):
    d, _ = cluster
    # the first topic of a cluster without a topic group makes one, as a Kafka or RocketMQ user expects
    assert cli_json("topic", "create", "first", "--cluster", d, "--queues", "2") == \
        {"topic": "first", "queues": ["topics", "topics"], "message_type": "NORMAL"}
    assert cli_json("group", "describe", "topics", "--cluster", d)["members"] == ["n0", "n1", "n2"]
    assert cli_json("topic", "delete", "first", "--cluster", d) == {"topic": "first", "deleted": True}
    cli_json("group", "delete", "topics", "--cluster", d)
    cli_json("group", "create", "t1", "--cluster", d, "--state-machine", "topics")
    assert cli_json("topic", "create", "orders", "--cluster", d, "--queues", "4", "--spread") == \
        {"topic": "orders", "queues": ["t1"] * 4, "message_type": "NORMAL"}
    r = cli("topic", "create", "x", "--cluster", d, "--groups", "t1", "--spread", check=False)
    assert r.returncode == 2 and "--spread" in r.stderr
    r = cli("produce", "--cluster", d, "--topic", "orders", "--key", "k", "a", "b", "c", "--json")
    sent = [json.loads(line) for line in r.stdout.splitlines()]
    assert [s["queue_offset"] for s in sent] == [0, 1, 2] and len({s["queue_id"] for s in sent}) == 1
    r = cli("produce", "--cluster", d, "--topic", "nope", "x", check=False)
    assert r.returncode == 1 and "TOPIC_NOT_EXIST" in r.stderr
    r = cli("consume", "--cluster", d, "--topic", "orders", "--consumer-group", "cg", "--max", "3", "--json")
    got = [json.loads(line) for line in r.stdout.splitlines()]
    assert [(m["body"], m["key"], m["queue_offset"]) for m in got] == [("a", "k", 0), ("b", "k", 1), ("c", "k", 2)]
    rows = cli_json("topic", "describe", "orders", "--cluster", d)["queues"]
    assert sorted((q["max_offset"] for q in rows), reverse=True) == [3, 0, 0, 0]
    assert cli_json("topic", "describe", "orders", "--cluster", d)["message_type"] == "NORMAL"
    q = sent[0]["queue_id"]
    doc = cli_json("consumer-group", "describe", "cg", "--cluster", d)
    assert doc["members"] == []  # (the consumer left when the command ended, committing what it printed)
    assert {(x["queue_id"], x["committed_offset"], x["lag"]) for x in doc["queues"] if x["queue_id"] == q} == \
        {(q, 3, 0)}
    assert list(cli_json("topic", "list", "--cluster", d)) == ["orders"]
    assert cli_json("topic", "delete", "orders", "--cluster", d) == {"topic": "orders", "deleted": True}
    assert cli_json("topic", "list", "--cluster", d) == {}
    r = cli("topic", "delete", "orders", "--cluster", d, "--json", check=False)
    assert (r.returncode, r.stdout) == (1, "") and r.stderr.startswith("quorumlog: error: TOPIC_NOT_EXIST: ")


def test_cluster_up_in_master_slave_mode_makes_the_group_a_master_slave_one(tmp_path):
    """`cluster up --mode master-slave --ack sync`: the cluster's group is RocketMQ's HA kind on every node
    (master n0, slaves the rest), its controller's state in `_meta`; the commands given --cluster use it."""
    d = str(tmp_path / "ms")
    base = free_base_port(3)
    try:
        up = cli_json("cluster", "up", "--nodes", "3", "--data-dir", d, "--base-port", str(base), "--mode",
                      "master-slave", "--ack", "sync", "--slave-read-enable", "--timeout-s", "60", timeout_s=90)
        assert (up["mode"], up["group"], up["node_group"]) == ("master-slave", "default", "_nodes")
        master = up["leader_id"]
        r = cli_json("append", "--cluster", d, "a", "b")
        assert [x["index"] for x in r] == [0, 1]
        assert r[0]["offset"] == 0 < r[1]["offset"]  # (physical offsets, where each record begins)
        rows = cli_json("status", "--cluster", d)
        assert next(x["max_offset"] for x in rows if x["id"] == master) > r[1]["offset"]
        assert sorted((x["id"], x["role"]) for x in rows) == \
            sorted((n, "master" if n == master else "slave") for n in ("n0", "n1", "n2"))
        assert [e["body"] for e in cli_json("read", "--cluster", d, "--from", "0")] == ["a", "b"]
        deadline = time.monotonic() + 15  # (the master grows its SyncStateSet by slaves caught up, every 0.5 s)
        while not all(x.get("in_sync") for x in cli_json("status", "--cluster", d)):
            assert time.monotonic() < deadline, cli_json("status", "--cluster", d)
            time.sleep(0.2)
        slave = next(n for n in ("n0", "n1", "n2") if n != master)  # --slave-read-enable: a slave serves reads
        deadline = time.monotonic() + 15  # (up to the confirm offset it has heard of)
        while [e["body"] for e in cli_json("read", "--cluster", d, "--from", "0", "--node", slave)] != ["a", "b"]:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        r = cli("cluster", "up", "--nodes", "3", "--data-dir", str(tmp_path / "x"), "--mode", "paxos", check=False)
        assert r.returncode == 2 and "--mode" in r.stderr
        # stopped and started again from cluster.json: the same master/slave group, its master the one `up` names
        cli("cluster", "down", "--data-dir", d, "--grace-s", "5", timeout_s=30)
        back = cli_json("cluster", "up", "--data-dir", d, "--timeout-s", "60", timeout_s=90)
        assert (back["mode"], back["group"]) == ("master-slave", "default")
        rows = cli_json("status", "--cluster", d)
        assert next(x["role"] for x in rows if x["id"] == back["leader_id"]) == "master"
        assert cli_json("append", "--cluster", d, "c")[0]["index"] == 2
        assert [e["body"] for e in cli_json("read", "--cluster", d, "--from", "0")] == ["a", "b", "c"]
    finally:
        try:
            cli("cluster", "down", "--data-dir", d, "--grace-s", "5", timeout_s=30, check=False)
        finally:
            kill_leftovers(d)


def _start_up_and_wait(d: str, base: int, when: str) -> subprocess.Popen:
    argv = [*CLI, "cluster", "up", "--nodes", "3", "--data-dir", d, "--base-port", str(base), "--timeout-s", "60"]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not _interrupt_point_reached(d, when):
        assert p.poll() is None and time.monotonic() < deadline, p.communicate()
        time.sleep(0.02)
    return p


def test_an_interrupted_cluster_up_cleans_up_and_a_killed_one_is_finished_by_the_next(tmp_path):
    """Ctrl-C while the nodes elect: `cluster up` stops its nodes, removes the data they made, says so without a
    traceback or log dump, exits 130, and the same command then starts the cluster. A `cluster up` killed (-9)
    after `_meta` was begun cannot clean up: its cluster.json says it never finished, and after `cluster down`
    the next `cluster up` finishes the bootstrap (`_meta` and the nodes' record) on the same data."""
    d = str(tmp_path / "c")
    base = free_base_port(3)
    p = _start_up_and_wait(d, base, "electing")
    try:
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
        assert p.returncode == 130, (out, err)
        assert "interrupted" in err and "Traceback" not in err and "(tail)" not in err, err
        assert not os.path.exists(os.path.join(d, "cluster.json"))
        assert not any(os.path.isdir(os.path.join(d, n)) for n in ("n0", "n1", "n2"))

        p = _start_up_and_wait(d, base, "bootstrapping")
        p.kill()
        p.communicate(timeout=30)
        cli("cluster", "down", "--data-dir", d, "--grace-s", "5", timeout_s=30)
        with open(os.path.join(d, "cluster.json")) as f:
            assert json.load(f)["bootstrapped"] is False
        up = cli_json("cluster", "up", "--data-dir", d, "--timeout-s", "60", timeout_s=90)
        assert up["bootstrapped"] is True
        assert [x["index"] for x in cli_json("append", "--cluster", d, "x")] == [0]
        assert cli_json("kv", "put", "--cluster", d, "k", "v")["version"] == 1
        assert {x["key"] for x in cli_json("kv", "list", "--cluster", d, "nodes/")["keys"]} == {"nodes/n0", "nodes/n1",
                                                                                          "nodes/n2"}
    finally:
        if p.poll() is None:
            p.kill()
        try:
            cli("cluster", "down", "--data-dir", d, "--grace-s", "5", timeout_s=30, check=False)
        finally:
            kill_leftovers(d)


def _interrupt_point_reached(d: str, when: str) -> bool:
    """electing: cluster.json written (nodes started); bootstrapping: every node has created `_meta`'s directory."""
    if not os.path.exists(os.path.join(d, "cluster.json")):
        return False
    return when == "electing" or all(os.path.isdir(os.path.join(d, n, "groups", "_meta")) for n in ("n0", "n1", "n2"))
