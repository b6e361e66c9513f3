"""The `quorumlog` command: argument validation (exit 2, nothing written) and --json output shapes."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import subprocess
import sys
import threading
import time

import pytest
from typer.testing import CliRunner

from quorumlog.cli.main import full_app as app

from client.fake_cluster import FakeCluster  # tests/ is on sys.path (rootdir-relative packages)

pytestmark = pytest.mark.timeout(60)
runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


@pytest.fixture
def fake():
    """A fake group served from a background thread, so CliRunner's commands run their own loops."""
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    ready = loop.create_future()

    async def serve():
        async with FakeCluster() as fc:
            ready.set_result(fc)
            await stop.wait()

    t = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    t.start()
    deadline = time.monotonic() + 10
    while not ready.done() and time.monotonic() < deadline:
        time.sleep(0.01)
    yield ready.result()
    loop.call_soon_threadsafe(stop.set)
    t.join(10)


# -- bad input: exit 2, one message naming the value, nothing on stdout ----------------------------------
@pytest.mark.parametrize("command", [["status"], ["append", "x"], ["read", "--from", "0"],
                                     ["transfer-leader", "--to", "n0"], ["bench", "--duration-s", "0.1"]])
@pytest.mark.parametrize("peers", ["n0=127.0.0.1", "n0=127.0.0.1:99999", "n0=h:1,n0=h:2", "bad id=h:1", ""])
def test_bad_peers_exit_2_naming_the_value(command, peers):
    r = invoke(*command, "--peers", peers, "--json")
    assert r.exit_code == 2, r.output
    assert r.stdout == ""
    assert "peers" in r.stderr and r.stderr.count("\n") == 1


# -- every failure is one stderr line `quorumlog: error: CODE: ...` (INTERFACES.md) ------------------------
def test_a_refusal_by_the_cluster_is_one_line_naming_its_code(capsys):
    import typer

    from quorumlog.cli.common import run
    from quorumlog.errors import NoSuchLedger, UnknownMember

    async def refused(error):
        raise error

    for error, line in ((NoSuchLedger("ledger 7 does not exist"), "NO_SUCH_LEDGER: ledger 7 does not exist"),
                        (UnknownMember(""), "UNKNOWN_MEMBER: refused by the cluster (no detail given)")):
        with pytest.raises(typer.Exit) as e:
            run(refused(error))
        assert e.value.exit_code == 1
        assert capsys.readouterr() == ("", f"quorumlog: error: {line}\n")


@pytest.mark.parametrize("args", [["status", "--nope"], ["read", "--peers", "n0=127.0.0.1:1"], ["ledger", "frob"],
                                  ["topic", "create", "t", "--queues", "0", "--peers", "n0=127.0.0.1:1"]])
def test_the_command_lines_own_checks_give_the_same_one_line(args):
    """typer's checks (unknown option, missing option, unknown command, a value out of range) print a box of
    their own; the `quorumlog` command turns them into the error line every other failure prints."""
    r = subprocess.run([sys.executable, "-m", "quorumlog.cli", *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stdout == "", r.stderr
    assert re.fullmatch(r"quorumlog: error: BAD_REQUEST: quorumlog [a-z -]+: \S.* \(see --help\)\n", r.stderr), r.stderr


def test_global_options_are_taken_anywhere_on_the_command_line(tmp_path):
    """`--token`, `--token-file` and `--tls-ca` after the command, as etcdctl and kubectl take theirs."""
    from quorumlog.cli.main import hoist_global_options

    assert hoist_global_options(["append", "--peers", "P", "--token", "T", "x", "--tls-ca=ca.pem"]) == \
        ["--token", "T", "--tls-ca=ca.pem", "append", "--peers", "P", "x"]
    assert hoist_global_options(["append", "--", "--token", "x"]) == ["append", "--", "--token", "x"]
    node = ["node", "--id", "n0", "--tls-ca", "ca.pem", "--token-file", "t"]  # the node's own settings
    assert hoist_global_options(node) == node
    assert hoist_global_options(["--token", "T", *node]) == ["--token", "T", *node]
    # through the real command: the callback sees them (its own checks answer), typer no "No such option"
    for args in (["status", "--peers", "n0=127.0.0.1:1", "--tls-ca", str(tmp_path / "no.pem")],
                 ["append", "x", "--peers", "n0=127.0.0.1:1", "--token-file", str(tmp_path / "no-token")],
                 ["append", "x", "--token", "a", "--token-file", "b", "--peers", "n0=127.0.0.1:1"]):
        r = subprocess.run([sys.executable, "-m", "quorumlog.cli", *args], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 2 and "No such option" not in r.stderr, r.stderr
        assert re.search(r"--tls-ca|--token-file|--token and --token-file", r.stderr), r.stderr


@pytest.mark.parametrize("name", ["_meta", "_nodes", "_mine"])
def test_group_names_beginning_with_an_underscore_are_the_clusters_own(name):
    r = invoke("group", "create", name, "--peers", "n0=127.0.0.1:1", "--json")
    assert r.exit_code == 2 and r.stdout == "" and "reserved" in r.stderr, r.output


def test_the_client_refuses_reserved_group_names_too():
    from quorumlog.client.groups import GroupAdmin
    from quorumlog.errors import BadRequest

    async def create():
        async with GroupAdmin({"n0": ("127.0.0.1", 1)}, timeout_ms=100) as admin:
            await admin.create("_meta")

    with pytest.raises(BadRequest, match="reserved"):
        asyncio.run(create())


def test_cluster_up_on_ports_in_use_is_bad_input(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = invoke("cluster", "up", "--nodes", "1", "--data-dir", str(tmp_path / "c"), "--base-port", str(port))
    assert r.exit_code == 2 and "ports already in use" in r.stderr, r.output
    assert not (tmp_path / "c" / "cluster.json").exists()


def test_peers_and_cluster_are_exclusive_and_one_is_required(tmp_path):
    r = invoke("status", "--peers", "n0=127.0.0.1:7001", "--cluster", str(tmp_path))
    assert r.exit_code == 2 and "exactly one" in r.stderr
    r = invoke("status")
    assert r.exit_code == 2 and "exactly one" in r.stderr
    r = invoke("status", "--cluster", str(tmp_path / "nope"))
    assert r.exit_code == 2 and "cluster.json" in r.stderr


def test_node_bad_config_exits_2_naming_the_key(tmp_path):
    data = tmp_path / "d"
    r = invoke("node", "--id", "n5", "--peers", "n0=127.0.0.1:7001", "--data-dir", str(data))
    assert r.exit_code == 2 and "node_id='n5'" in r.stderr
    r = invoke("node", "--id", "n0", "--peers", "n0=127.0.0.1:7001", "--data-dir", str(data), "--flush", "maybe")
    assert r.exit_code == 2 and "flush='maybe'" in r.stderr
    r = invoke("node", "--id", "n0", "--peers", "n0=127.0.0.1:x", "--data-dir", str(data))
    assert r.exit_code == 2 and "bad port 'x'" in r.stderr
    r = invoke("node", "--id", "n0", "--peers", "n0=127.0.0.1:7001", "--data-dir", str(data),
               "--max-wait-ack-ms", "soon")
    assert r.exit_code == 2 and "max_wait_ack_ms='soon'" in r.stderr
    assert not data.exists()


def test_node_bad_environment_variable_exits_2_naming_it(tmp_path):
    data = tmp_path / "d"
    r = runner.invoke(app, ["node", "--id", "n0", "--peers", "n0=127.0.0.1:7001", "--data-dir", str(data)],
                      env={"QUORUMLOG_FLUSH": "sometimes"}, catch_exceptions=False)
    assert r.exit_code == 2 and "flush='sometimes'" in r.stderr
    assert not data.exists()


def test_node_has_a_flag_for_every_config_key():
    from quorumlog.config import CONFIG_KEYS

    # wide enough that rich prints the longest flag whole (at 80 columns it cuts them with an ellipsis)
    r = runner.invoke(app, ["node", "--help"], catch_exceptions=False, env={"COLUMNS": "300"})
    assert r.exit_code == 0
    text = r.stdout.replace("\n", " ")
    for k in CONFIG_KEYS:
        assert k.flag in text, k.flag


def test_cluster_up_rejects_bad_input_before_writing_anything(tmp_path):
    d = tmp_path / "c"
    for args, needle in ((["--flush", "later"], "--flush 'later'"),
                         (["--set", "max_wait_ack_ms=0"], "max_wait_ack_ms=0"),
                         (["--set", "no_such_key=1"], "no_such_key"),
                         (["--set", "junk"], "KEY=VALUE"),
                         (["--base-port", "65535"], "65535")):
        r = invoke("cluster", "up", "--nodes", "3", "--data-dir", str(d), *args)
        assert r.exit_code == 2, (args, r.output)
        assert needle in r.stderr, (needle, r.stderr)
        assert not d.exists()
    r = invoke("cluster", "down", "--data-dir", str(d))
    assert r.exit_code == 2 and "cluster.json" in r.stderr


def test_append_needs_values_or_a_file():
    r = invoke("append", "--peers", "n0=127.0.0.1:7001")
    assert r.exit_code == 2
    r = invoke("append", "x", "--file", "f", "--peers", "n0=127.0.0.1:7001")
    assert r.exit_code == 2


# -- JSON output: exactly one document on stdout -------------------------------------------------------
def test_json_documents_of_append_read_status_transfer(fake, tmp_path):
    p = fake.peers_text
    r = invoke("append", "a", "b", "--peers", p, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == [{"index": 0, "term": 1}, {"index": 1, "term": 1}]
    f = tmp_path / "lines"
    f.write_bytes(b"c\n\xff\xfe\n")
    r = invoke("append", "--file", str(f), "--peers", p, "--json")
    assert [d["index"] for d in json.loads(r.stdout)] == [2, 3]

    r = invoke("read", "--from", "1", "--peers", p, "--json")
    docs = json.loads(r.stdout)
    assert [d["index"] for d in docs] == [1, 2, 3]
    assert docs[0]["body"] == "b" and docs[1]["body"] == "c"
    assert "body" not in docs[2] and base64.b64decode(docs[2]["body_b64"]) == b"\xff\xfe"
    assert set(docs[0]) == {"index", "term", "timestamp", "body"} and docs[0]["timestamp"].endswith("+00:00")
    r = invoke("read", "--from", "0", "--to", "0", "--node", "n2", "--peers", p, "--json")
    assert [d["body"] for d in json.loads(r.stdout)] == ["a"]
    r = invoke("read", "--from", "0", "--node", "n7", "--peers", p)
    assert r.exit_code == 2 and "n7" in r.stderr

    r = invoke("status", "--peers", p, "--json")
    nodes = json.loads(r.stdout)
    assert [n["id"] for n in nodes] == ["n0", "n1", "n2"]
    for n in nodes:
        assert {"id", "role", "term", "leader_id", "begin_index", "end_index", "committed_index",
                "watermarks"} <= set(n)
    assert [n["role"] for n in nodes] == ["leader", "follower", "follower"]

    r = invoke("transfer-leader", "--to", "n1", "--peers", p, "--json")
    assert json.loads(r.stdout) == {"leader_id": "n1", "requested": "n1"}
    assert fake.group.leader_id == "n1"


def test_cluster_dir_is_read_for_peers_and_group(fake, tmp_path):
    (tmp_path / "cluster.json").write_text(json.dumps({"group": "default", "peers": fake.peers_text,
                                                       "flush": "sync", "nodes": []}))
    r = invoke("status", "--cluster", str(tmp_path), "--json")
    assert r.exit_code == 0 and len(json.loads(r.stdout)) == 3
    r = invoke("status", "--cluster", str(tmp_path))  # the human table
    assert r.exit_code == 0 and "leader" in r.stdout and "n2" in r.stdout


def test_bench_json_reports_rates_latency_and_flush_mode(fake):
    r = invoke("bench", "--peers", fake.peers_text, "--writers", "4", "--duration-s", "0.5", "--warmup-s", "0.1",
               "--value-bytes", "64", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["flush"] == "sync" and doc["writers"] == 4 and doc["errors"] == 0
    assert doc["appends"] > 0 and doc["appends_per_s"] > 0 and doc["mb_per_s"] >= 0
    lat = doc["latency_ms"]
    assert 0 < lat["p50"] <= lat["p99"] <= lat["p999"] <= lat["max"]
    # everything the bench appended is in the log (warm-up and measured), nothing twice
    assert len(fake.group.bodies) >= doc["appends"]


def test_status_of_a_cluster_nobody_answers_exits_1_with_json(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = invoke("status", "--peers", f"n0=127.0.0.1:{port}", "--json", "--timeout-ms", "500")
    assert r.exit_code == 1
    # the documented exception to "a failed --json command prints nothing on stdout": the rows are the diagnosis
    assert json.loads(r.stdout)[0]["role"] == "unreachable"
    assert r.stderr.strip() == "quorumlog: error: NETWORK_ERROR: no member of group default answered"


def test_status_names_the_code_every_node_refused_with():
    """No token (or a wrong one): every node says UNAUTHORIZED, and so does `status`, not NETWORK_ERROR."""
    from quorumlog.cli.data import _why_none_answered
    from quorumlog.client.types import NodeStatus
    from quorumlog.codes import ResponseCode

    refused = [NodeStatus.unreachable(n, "h:1", "UNAUTHORIZED: status of " + n) for n in ("n0", "n1")]
    assert _why_none_answered(refused, "none") == (ResponseCode.UNAUTHORIZED, "none: UNAUTHORIZED: status of n0")
    mixed = [refused[0], NodeStatus.unreachable("n1", "h:1", "NETWORK_ERROR: cannot connect")]
    assert _why_none_answered(mixed, "none") == (ResponseCode.NETWORK_ERROR, "none")


def test_json_output_is_written_whole_to_a_slow_non_blocking_pipe():
    """`read --json` of ~1 MB through a pipe with PYTHONUNBUFFERED=1 stopped after one short write
    (64 KiB of a non-blocking pipe) and exited 0. print_json loops until everything is written."""
    code = ("import os, fcntl; fcntl.fcntl(1, fcntl.F_SETFL, fcntl.fcntl(1, fcntl.F_GETFL) | os.O_NONBLOCK);"
            "from quorumlog.cli.common import print_json; print_json(['x' * 1000] * 1000)")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                         env={**os.environ, "PYTHONUNBUFFERED": "1"})
    time.sleep(0.3)  # let the writer fill the pipe before anyone reads (the short write happened here)
    out = p.stdout.read()
    assert p.wait(10) == 0
    assert json.loads(out) == ["x" * 1000] * 1000


def test_a_consumer_generation_reads_as_term_and_number():
    from quorumlog.cli.topics import generation_text

    assert [generation_text(g) for g in (0, 7, 3 << 32, (3 << 32) + 2)] == ["0", "7", "3.0", "3.2"]


def test_a_command_imports_only_what_it_runs():
    """Start-up is import time: `status` must not load the other commands, the store, the node, the
    certificate library (together they were two thirds of its start-up), nor the peer and bookie frame classes,
    the `crc32c` package (its import reads its installed metadata) or hashlib (the rest of it but a third), nor
    what only --all-groups, a table or a long-running command uses."""
    code = ("import sys; from quorumlog.cli.main import register; register({'status'}); "
            "print(' '.join(sorted(sys.modules)))")
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                                check=True).stdout.split())
    assert "quorumlog.cli.data" in loaded and "quorumlog.client.client" in loaded
    for heavy in ("quorumlog.cli.cluster", "quorumlog.cli.ledgers", "quorumlog.cli.topics", "quorumlog.cli.bench",
                  "quorumlog.store.file_store", "quorumlog.server.node", "quorumlog.transport.server",
                  "quorumlog.client.ledgers", "cryptography", "pyspark", "quorumlog.wire.messages",
                  "quorumlog.wire.ledger", "quorumlog.meta.state_machine", "crc32c", "importlib.metadata",
                  "hashlib", "quorumlog.client.groups", "rich", "uvloop"):
        assert heavy not in loaded, heavy


def _modules_after(argv: list[str]) -> set[str]:
    """The modules a `quorumlog` run (in a process of its own) had loaded when it exited."""
    code = ("import atexit, sys; "
            "atexit.register(lambda: sys.__stderr__.write('\\nMODULES ' + ' '.join(sorted(sys.modules)))); "
            f"from quorumlog.cli.main import main; main({argv!r})")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    return set(p.stderr.rsplit("\nMODULES ", 1)[1].split())


def test_a_short_command_runs_without_uvloop_and_its_json_without_rich():
    """Start-up again: a command of a few round trips runs on asyncio's own loop (importing uvloop cost more
    than it gains there), and rich is imported for a table, never for --json output or an error line."""
    unreachable = ["status", "--peers", "n0=127.0.0.1:1", "--timeout-ms", "300"]  # (nothing listens on port 1)
    as_json = _modules_after(unreachable + ["--json"])
    assert "quorumlog.client.client" in as_json
    assert not {m for m in as_json if m.split(".")[0] in ("uvloop", "rich")}
    as_table = _modules_after(unreachable)
    assert "rich.table" in as_table and "uvloop" not in as_table
