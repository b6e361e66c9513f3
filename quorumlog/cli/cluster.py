"""`quorumlog cluster up/down`: a local group of node processes, described by D/cluster.json.

cluster.json holds `group`, `peers`, `flush` and one object per node with `id`, `address`, `pid`, `data_dir`,
`log_file`, `argv` (the exact command line, so a node can be restarted by hand) and `http_port` (0 = off), and
`bootstrapped`: false until `_meta` and the first group exist (a later `cluster up` finishes the job).

An interrupted `cluster up` (Ctrl-C) or one that failed stops its nodes and removes the data they made (the
logs stay): nothing was acknowledged, and a half-made `_meta` would refuse every later start.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from typing import List, Optional

import typer

from ..client import Client
from ..client.groups import GroupAdmin
from ..client.kv import META_GROUP
from ..errors import GroupExists, QuorumLogError
from ..codes import ResponseCode
from ..config import ConfigError, Flush, load_config
from ..ha.master import Ack
from ..peers import format_address, format_peers
from ..transport.tls import TLS_CA_ENV
from .common import (CLUSTER_FILE, JsonOpt, Target, die, err_console, new_table, out_console, print_json,
                     resolve_target, run, setup_logging, usage)

cluster_app = typer.Typer(help="Start and stop a local group of nodes", no_args_is_help=True)

STOP_GRACE_S = 10.0  # SIGTERM lets a node flush and checkpoint; SIGKILL after this
POLL_INTERVAL_S = 0.05  # how often a waiting command re-checks processes or the election
NODE_GROUP = "_nodes"  # a master-slave cluster's nodes' own Raft group (a node process always runs one)
HTTP_PORT_OFFSET = 1000  # the status pages' default ports: node ports + this (7001 → 8001), when free


def _tls_settings(tls_dir: str, node_id: str) -> list[str]:
    # imported here: `cryptography` costs every other command a fifth of a second at start-up
    from ..transport.certs import node_tls_settings
    return node_tls_settings(tls_dir, node_id)


def node_argv(node_id: str, peers: str, data_dir: str, group: str, flush: str, http_port: int,
              config: str | None, settings: list[tuple[str, str]]) -> list[str]:
    argv = [sys.executable, "-m", "quorumlog.cli", "node", "--id", node_id, "--peers", peers,
            "--data-dir", data_dir, "--group", group, "--flush", flush]
    if http_port:
        argv += ["--http-port", str(http_port)]
    if config:
        argv += ["--config", config]
    for key, value in settings:
        argv += ["--" + key.replace("_", "-"), value]
    return argv


def _make_tls(data_dir: str, ids: list[str], host: str) -> str:
    """A CA and a certificate per node under data_dir/tls; this process's clients use the CA from now on.
    Returns the CA certificate's path."""
    from ..transport.certs import TLS_DIR, make_ca, make_node_cert

    directory = os.path.join(data_dir, TLS_DIR)
    ca_pem, _ = make_ca(directory)
    for nid in ids:
        make_node_cert(directory, nid, [host])
    os.environ[TLS_CA_ENV] = ca_pem
    return ca_pem


def _parse_settings(items: list[str]) -> list[tuple[str, str]]:
    out = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            usage(f"--set {item!r}: expected KEY=VALUE (a configuration key)")
        out.append((key.strip().replace("-", "_"), value.strip()))
    return out


def _port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (exited, not yet reaped) is as good as dead
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def _is_our_node(pid: int, node_id: str) -> bool:
    """Guard against a recycled pid: the process must still be `quorumlog ... node --id <node_id>`."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().split(b"\0")
    except OSError:
        return pid_alive(pid)  # no /proc: trust the pid
    return b"node" in args and node_id.encode() in args


def _write_json_atomic(path: str, doc: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _tail(path: str, lines: int = 15) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 8192))
            return "\n".join(f.read().decode("utf-8", "replace").splitlines()[-lines:])
    except OSError:
        return ""


def _stop_pids(nodes: list[dict], grace_s: float) -> tuple[list[str], list[str]]:
    """SIGTERM every live node, SIGKILL whoever is left after grace_s: (stopped ids, killed ids)."""
    live = {n["id"]: n["pid"] for n in nodes if pid_alive(n.get("pid")) and _is_our_node(n["pid"], n["id"])}
    for pid in live.values():
        try:
            os.kill(pid, signal.SIGTERM)
            os.kill(pid, signal.SIGCONT)  # a SIGSTOPped node (fault tests) must run to act on SIGTERM
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(pid_alive(p) for p in live.values()):
        _reap()
        time.sleep(POLL_INTERVAL_S)
    killed = []
    for nid, pid in live.items():
        if pid_alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(nid)
            except ProcessLookupError:
                pass
    _reap()
    return sorted(set(live) - set(killed)), killed


def _reap() -> None:
    """Collect exited children (when cluster up started them in this process)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _spawn_node(argv: list[str], log_file: str, cwd: str) -> subprocess.Popen:
    """A node process, its output appended to log_file. A new session: the nodes outlive this command and
    ignore the terminal's Ctrl-C."""
    # QUORUMLOG_TLS_CA is this command's CA as a client, and also the spelling of a node's `tls_ca` key: a node
    # of a plain cluster inheriting it would refuse to start (tls_ca without a certificate). A TLS cluster's
    # nodes get their CA by flag.
    env = {k: v for k, v in os.environ.items() if k != TLS_CA_ENV}
    with open(log_file, "ab") as log:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=cwd, env=env)


async def wait_for_leader(peers: dict, group: str, procs: dict[str, subprocess.Popen], timeout_s: float) -> dict:
    """Poll status until one member leads (a master/slave group: its master, holding the controller's lease);
    raise if a node dies or time runs out."""
    deadline = time.monotonic() + timeout_s
    async with Client(peers, group=group, request_timeout_ms=500, timeout_ms=1_000, max_retries=0) as c:
        while True:
            for nid, p in procs.items():
                if p.poll() is not None:
                    raise RuntimeError(f"node {nid} exited with code {p.returncode} during startup")
            nodes = await c.status()
            # (a master/slave member is master only under the controller's lease: after a restart the old master
            # is named in its old epoch, without a lease, until the controller elects again)
            leaders = [n for n in nodes if n.role == "leader" or (n.role == "master" and n.raw.get("lease_ms_left"))]
            if leaders:
                return {"leader_id": leaders[0].id, "term": leaders[0].term,
                        "nodes": [n.to_dict() for n in nodes]}
            if time.monotonic() > deadline:
                roles = ", ".join(f"{n.id}={n.role}" for n in nodes)
                raise TimeoutError(f"no leader elected within {timeout_s:g} s ({roles})")
            await asyncio.sleep(POLL_INTERVAL_S * 2)


@cluster_app.command("up")
def up(nodes: int = typer.Option(3, "--nodes", min=1, max=99, help="How many nodes"),
       data_dir: str = typer.Option(..., "--data-dir", help="Directory for the nodes' data, logs and cluster.json"),
       base_port: int = typer.Option(7001, "--base-port", min=1, max=65535, help="Node i listens on base-port + i"),
       host: str = typer.Option("127.0.0.1", "--host", help="Address every node listens on"),
       group: str = typer.Option("default", "--group", help="Group name"),
       http_base_port: int = typer.Option(-1, "--http-base-port", min=-1, max=65535, show_default=False,
                                          help="Node i serves its status page and /metrics on this + i (0 = off; "
                                          f"default: base-port + {HTTP_PORT_OFFSET} when free, else free ports)"),
       rocketmq_base_port: int = typer.Option(0, "--rocketmq-base-port", min=0, max=65535,
                                              help="Node i serves RocketMQ 5 clients (gRPC) on this + i (0 = off)"),
       kafka_base_port: int = typer.Option(0, "--kafka-base-port", min=0, max=65535,
                                           help="Node i serves Kafka clients on this + i (0 = off)"),
       flush: str = typer.Option("sync", "--flush", help="sync (fsync before ack) or async (DLedger's default)"),
       mode: str = typer.Option("raft", "--mode", help="raft, or master-slave: the group is RocketMQ's HA kind "
                                "(one master, placed to spread leaders, the rest slaves; the nodes' own Raft group "
                                "is then `_nodes`)"),
       ack: str = typer.Option("sync", "--ack", help="master-slave: sync (SYNC_MASTER) or async (ASYNC_MASTER)"),
       slave_read_enable: bool = typer.Option(False, "--slave-read-enable",
                                              help="master-slave: slaves serve reads (up to the confirm offset)"),
       config: Optional[str] = typer.Option(None, "--config", help="TOML config file passed to every node"),
       settings: Optional[List[str]] = typer.Option(None, "--set", help="KEY=VALUE config for every node (repeat)"),
       timeout_s: float = typer.Option(30.0, "--timeout-s", min=0.1, help="Give up if no leader by then"),
       tls: bool = typer.Option(False, "--tls", help="TLS on every port: make a CA and one certificate per node "
                                "under D/tls (mutual TLS between nodes); commands given --cluster D use its CA"),
       json_out: bool = JsonOpt) -> None:
    """Start N nodes in the background, write D/cluster.json, return once a leader is elected. On a directory
    whose cluster is stopped, start its nodes again as cluster.json records them (the other options unused)."""
    setup_logging()
    existing = os.path.join(os.path.abspath(data_dir), CLUSTER_FILE)
    stopped = _stopped_cluster(existing)
    if stopped is not None:
        return _restart(existing, stopped, timeout_s, json_out)
    if flush not in tuple(Flush):
        usage(f"--flush {flush!r}: must be sync or async")
    if mode not in ("raft", "master-slave"):
        usage(f"--mode {mode!r}: raft or master-slave")
    if ack not in tuple(Ack):
        usage(f"--ack {ack!r}: sync or async")
    if mode == "master-slave" and group.startswith("_"):
        usage(f"--group {group!r}: names starting with _ are the cluster's own (_meta, {NODE_GROUP})")
    # A node process always runs its own Raft group (its config's `group`). In master-slave mode that is
    # NODE_GROUP, and the cluster's group is a master/slave group on every node, created once `_meta` (its
    # controller's state) exists.
    node_group = group if mode == "raft" else NODE_GROUP
    for flag, first in (("--base-port", base_port), ("--http-base-port", http_base_port),
                        ("--rocketmq-base-port", rocketmq_base_port), ("--kafka-base-port", kafka_base_port)):
        if first > 0 and first + nodes - 1 > 65535:
            usage(f"{flag} {first}: {nodes} nodes run past port 65535")
    data_dir = os.path.abspath(data_dir)
    config = os.path.abspath(config) if config else None
    kv = _parse_settings(settings or [])
    ids = [f"n{i}" for i in range(nodes)]
    peers = {nid: (host, base_port + i) for i, nid in enumerate(ids)}
    http_ports = _http_ports(host, base_port, nodes, http_base_port)
    door_ports = {kind: [first + i if first else 0 for i in range(nodes)]
                  for kind, first in (("rocketmq", rocketmq_base_port), ("kafka", kafka_base_port))}
    peers_text = format_peers(peers)
    # Validate every node's whole configuration before anything is written or started.
    for i, nid in enumerate(ids):
        try:
            load_config(config, env={}, flags={"node_id": nid, "peers": peers_text, "group": node_group, "flush": flush,
                                               "data_dir": os.path.join(data_dir, nid),
                                               "http_port": str(http_ports[i]),
                                               **dict(kv), **_door_settings(door_ports, i)})
        except ConfigError as e:
            usage(str(e))
    if os.path.exists(existing):
        try:
            with open(existing, encoding="utf-8") as f:
                old = json.load(f)
            running = [n["id"] for n in old.get("nodes", []) if pid_alive(n.get("pid"))
                       and _is_our_node(n["pid"], n["id"])]
        except (OSError, ValueError, KeyError, TypeError):
            running = []
        if running:
            usage(f"--data-dir {data_dir!r}: a cluster is already running there "
                  f"({', '.join(running)}); run `quorumlog cluster down --data-dir {data_dir}` first")
    # (a cluster.json whose nodes' data is gone is stale: a new cluster replaces it)
    busy = [f"{h}:{p}" for h, p in peers.values() if not _port_free(h, p)]
    if http_base_port > 0:
        busy += [f"{host}:{p}" for p in http_ports if not _port_free(host, p)]
    busy += [f"{host}:{p}" for ports in door_ports.values() for p in ports if p and not _port_free(host, p)]
    if busy:
        usage(f"ports already in use: {', '.join(busy)} (choose other base ports)")
    held = [nid for nid in ids if os.path.isdir(os.path.join(data_dir, nid)) and os.listdir(os.path.join(data_dir, nid))]
    if held:
        usage(f"--data-dir {data_dir!r}: {', '.join(held)} hold(s) data of a cluster its cluster.json no longer "
              "describes; remove the directory (or choose another --data-dir)")

    os.makedirs(data_dir, exist_ok=True)
    tls_ca = _make_tls(data_dir, ids, host) if tls else None
    procs: dict[str, subprocess.Popen] = {}
    node_docs = []
    try:
        for i, nid in enumerate(ids):
            node_dir = os.path.join(data_dir, nid)
            os.makedirs(node_dir, exist_ok=True)
            log_file = os.path.join(data_dir, f"{nid}.log")
            http_port = http_ports[i]
            doors = _door_settings(door_ports, i)
            node_kv = kv + list(doors.items()) + (_tls_settings(os.path.dirname(tls_ca), nid) if tls_ca else [])
            argv = node_argv(nid, peers_text, node_dir, node_group, flush, http_port, config, node_kv)
            procs[nid] = _spawn_node(argv, log_file, data_dir)
            h, p = peers[nid]
            node_docs.append({"id": nid, "address": f"{h}:{p}", "pid": procs[nid].pid, "data_dir": node_dir,
                              "log_file": log_file, "argv": argv, "http_port": http_port,
                              **{k: int(v) for k, v in doors.items()}})
        doc = {"group": group, "peers": peers_text, "flush": flush, "created_at": time.time(), "nodes": node_docs,
               "config": config, "settings": [list(kv_pair) for kv_pair in kv], "retired": [], "mode": mode,
               "node_group": node_group, "ack": ack, "slave_read_enable": slave_read_enable, "bootstrapped": False}
        if tls_ca:
            doc["tls_ca"] = tls_ca  # (the CA certificate, public: clients verify the nodes with it)
        _write_json_atomic(existing, doc)
        elected = _bootstrap(existing, doc, peers, procs, timeout_s)
    except BaseException as e:
        _stop_pids(node_docs, 2.0)
        _discard(existing, node_docs, tls_ca)  # nothing runs and nothing was acknowledged: start clean next time
        if _interrupted(e):
            err_console.print(f"cluster up interrupted: stopped the nodes and removed what they had made in {data_dir}"
                              " (logs kept); run it again", highlight=False)
            raise typer.Exit(130) from None
        if isinstance(e, _StartFailed):
            die(ResponseCode.INTERNAL_ERROR, f"cluster up: {e}; stopped the nodes (logs in {data_dir})")
        raise
    _print_up(doc, elected, json_out)


def _door_settings(door_ports: dict[str, list[int]], i: int) -> dict[str, str]:
    """Node i's front door ports as config settings (`rocketmq_port`, `kafka_port`), the doors that are on."""
    return {f"{kind}_port": str(ports[i]) for kind, ports in door_ports.items() if ports[i]}


def _http_ports(host: str, base_port: int, nodes: int, asked: int) -> list[int]:
    """Each node's status page port (0 = off): `asked` + i, or by default base-port + HTTP_PORT_OFFSET + i when
    those are free, else free ones."""
    if asked >= 0:
        return [asked + i if asked else 0 for i in range(nodes)]
    preferred = [base_port + HTTP_PORT_OFFSET + i for i in range(nodes)]
    if preferred[-1] <= 65535 and all(_port_free(host, p) for p in preferred):
        return preferred
    from ..local_ports import free_ports
    return free_ports(nodes)


def _bootstrap(path: str, doc: dict, peers: dict[str, tuple[str, int]], procs: dict[str, subprocess.Popen],
               timeout_s: float) -> dict:
    """Wait for the nodes' group's leader, then make what `bootstrapped` records (`_meta`, and in master-slave
    mode the cluster's group); a step an interrupted `cluster up` already took is taken as done."""
    try:
        elected = run(wait_for_leader(peers, doc["node_group"], procs, timeout_s))
        if not doc.get("bootstrapped", True):
            run(bootstrap_meta(peers, doc["node_group"], timeout_s))
            if doc.get("mode") == "master-slave":
                run(create_master_slave(peers, doc["group"], doc.get("ack", Ack.SYNC), timeout_s,
                                        doc.get("slave_read_enable", False)))
            doc["bootstrapped"] = True
            _write_json_atomic(path, doc)
        if doc.get("mode") == "master-slave":  # (its controller, in `_meta`, elects the master)
            elected = run(wait_for_leader(peers, doc["group"], procs, timeout_s))
        return elected
    except (RuntimeError, TimeoutError) as e:
        if _interrupted(e):
            raise
        sys.stderr.write("\n".join(f"--- {n['log_file']} (tail)\n{_tail(n['log_file'])}" for n in doc["nodes"]) + "\n")
        raise _StartFailed(str(e)) from None


def _interrupted(e: BaseException) -> bool:
    # (`run` turns Ctrl-C into typer.Exit(130), which is a RuntimeError)
    return isinstance(e, KeyboardInterrupt) or (isinstance(e, typer.Exit) and e.exit_code == 130)


def _discard(path: str, node_docs: list[dict], tls_ca: str | None) -> None:
    """Remove what a `cluster up` that did not finish made: its cluster.json, the nodes' data, its certificates."""
    import shutil
    _remove(path)
    for n in node_docs:
        shutil.rmtree(n["data_dir"], ignore_errors=True)
    if tls_ca:
        shutil.rmtree(os.path.dirname(tls_ca), ignore_errors=True)


def _print_up(doc: dict, elected: dict, json_out: bool) -> None:
    if json_out:
        print_json({**doc, "leader_id": elected["leader_id"], "term": elected["term"],
                    "status_page": status_page_url(doc)})
        return
    mode = doc.get("mode", "raft")
    who = "master" if mode == "master-slave" else "leader"
    table = new_table(title=f"group {doc['group']} ({mode}): {who} {elected['leader_id']} (term {elected['term']}), "
                        f"flush {doc.get('flush', 'sync')}")
    for col in ("id", "address", "pid", "http", "log"):
        table.add_column(col)
    for n in doc["nodes"]:
        table.add_row(n["id"], n["address"], str(n["pid"]), str(n.get("http_port") or "-"), n["log_file"])
    out_console.print(table)
    out_console.print(f"peers: {doc['peers']}", highlight=False)
    for kind, name in (("rocketmq", "RocketMQ endpoints"), ("kafka", "Kafka bootstrap servers")):
        from ..doors import door_endpoints
        endpoints = door_endpoints(doc, kind)
        if endpoints:
            out_console.print(f"{name}: {endpoints}", highlight=False)
    page = status_page_url(doc)
    if page:
        out_console.print(f"status page: {page}", highlight=False)


def status_page_url(doc: dict) -> str | None:
    """The first node's status page (every node serves the whole cluster's), from cluster.json; None when off."""
    n = next((n for n in doc["nodes"] if n.get("http_port")), None)
    if n is None:
        return None
    host = n["address"].rsplit(":", 1)[0]
    return f"{'https' if doc.get('tls_ca') else 'http'}://{host}:{n['http_port']}/"


def _stopped_cluster(path: str) -> dict | None:
    """cluster.json's document when none of its nodes runs and every node's data directory is there."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        nodes = doc["nodes"]
        if not nodes or any(pid_alive(n.get("pid")) and _is_our_node(n["pid"], n["id"]) for n in nodes):
            return None
        return doc if all(os.path.isdir(n["data_dir"]) and n["argv"] for n in nodes) else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _restart(path: str, doc: dict, timeout_s: float, json_out: bool) -> None:
    """Start a stopped cluster's nodes again with the command lines cluster.json recorded (ids, ports, data,
    settings and certificates as they were) and wait for their group's leader. `_meta` and every group are in
    the nodes' data, unless the `cluster up` that made them was stopped before it finished: that is done now."""
    from ..peers import parse_peers
    peers = parse_peers(doc["peers"])
    busy = [f"{h}:{p}" for h, p in peers.values() if not _port_free(h, p)]
    host = next(iter(peers.values()))[0]
    busy += [f"{host}:{n['http_port']}" for n in doc["nodes"] if n.get("http_port")
             and not _port_free(host, n["http_port"])]
    if busy:
        usage(f"cluster up (restarting {os.path.dirname(path)}): ports already in use: {', '.join(busy)}")
    if doc.get("tls_ca"):
        os.environ[TLS_CA_ENV] = doc["tls_ca"]
    procs: dict[str, subprocess.Popen] = {}
    try:
        for n in doc["nodes"]:
            procs[n["id"]] = _spawn_node(n["argv"], n["log_file"], os.path.dirname(path))
            n["pid"] = procs[n["id"]].pid
        _write_json_atomic(path, doc)
        doc.setdefault("node_group", doc["group"])
        elected = _bootstrap(path, doc, peers, procs, timeout_s)
    except _StartFailed as e:
        _stop_pids(doc["nodes"], 2.0)  # (cluster.json stays: the data it describes is still there)
        die(ResponseCode.INTERNAL_ERROR, f"cluster up (restarting {os.path.dirname(path)}): {e}; stopped the nodes")
    except BaseException:
        _stop_pids(doc["nodes"], 2.0)
        raise
    if not json_out:
        out_console.print(f"restarted the cluster in {os.path.dirname(path)} from its cluster.json", highlight=False)
    _print_up(doc, elected, json_out)


async def bootstrap_meta(peers: dict[str, tuple[str, int]], group: str, timeout_s: float) -> None:
    """Create the `_meta` group (its key/value store, on the first up to 5 nodes) and record the nodes and the
    first group in it."""
    deadline = time.monotonic() + timeout_s
    try:
        async with GroupAdmin(peers, timeout_ms=int(timeout_s * 1000)) as admin:
            await admin.wait_answering(max(0.0, deadline - time.monotonic()))
            try:
                await admin.create_meta()
            except GroupExists:  # (made by a `cluster up` stopped before it finished)
                await admin.record_nodes(admin.nodes)
            await admin.record_group(group, list(peers))  # the nodes' own group: every node hosts it
    except QuorumLogError as e:
        raise RuntimeError(f"creating the _meta group: {type(e).__name__} ({e.code.name}): {e}") from None


async def create_master_slave(peers: dict[str, tuple[str, int]], group: str, ack: str, timeout_s: float,
                              slave_read_enable: bool = False) -> None:
    """The cluster's master/slave group on every node (the master on the first), once it has its master."""
    try:
        async with GroupAdmin(peers, timeout_ms=int(timeout_s * 1000)) as admin:
            p = await admin.create(group, nodes=list(peers), mode="master-slave", master_slave={
                "ack": ack, "min_in_sync_replicas": min(2, len(peers)) if ack == Ack.SYNC else 1,
                "slave_read_enable": slave_read_enable})
    except GroupExists:  # (made by a `cluster up` stopped before it finished: its master is waited for next)
        return
    except QuorumLogError as e:
        raise RuntimeError(f"creating the master/slave group {group}: {type(e).__name__} ({e.code.name}): {e}") \
            from None
    if p.leader is None:
        raise TimeoutError(f"the master/slave group {group} has no master within {timeout_s:g} s")


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


class _StartFailed(Exception):
    pass


@cluster_app.command("down")
def down(data_dir: str = typer.Option(..., "--data-dir", help="The directory given to `cluster up`"),
         grace_s: float = typer.Option(STOP_GRACE_S, "--grace-s", min=0, help="SIGKILL after this long"),
         json_out: bool = JsonOpt) -> None:
    """Stop the nodes: SIGTERM (flush, checkpoint), then SIGKILL after the grace period."""
    setup_logging()
    path = os.path.join(data_dir, CLUSTER_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        nodes = doc["nodes"]
    except FileNotFoundError:
        usage(f"--data-dir {data_dir!r}: no {CLUSTER_FILE} there")
    except (OSError, ValueError, KeyError) as e:
        usage(f"--data-dir {data_dir!r}: cannot read {path}: {e}")
    stopped, killed = _stop_pids(nodes, grace_s)
    result = {"stopped": stopped, "killed": killed,
              "not_running": sorted({n["id"] for n in nodes} - set(stopped) - set(killed))}
    if json_out:
        print_json(result)
    else:
        for nid in stopped:
            out_console.print(f"{nid}: stopped")
        for nid in killed:
            out_console.print(f"{nid}: [yellow]killed[/yellow] (did not stop within {grace_s:g} s)")
        for nid in result["not_running"]:
            out_console.print(f"{nid}: not running")


def _read_doc(data_dir: str) -> tuple[str, dict]:
    path = os.path.join(data_dir, CLUSTER_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except FileNotFoundError:
        usage(f"--data-dir {data_dir!r}: no {CLUSTER_FILE} there")
    except (OSError, ValueError) as e:
        usage(f"--data-dir {data_dir!r}: cannot read {path}: {e}")
    if isinstance(doc, dict) and doc.get("tls_ca"):  # a `cluster up --tls` cluster: talk to it with its CA
        os.environ.setdefault(TLS_CA_ENV, doc["tls_ca"])
    return path, doc


def _next_node_id(doc: dict) -> str:
    """n<k> above every id this cluster ever used: ids are never reused (a removed member's id is retired)."""
    used = [n["id"] for n in doc["nodes"]] + list(doc.get("retired", []))
    numbers = [int(i[1:]) for i in used if i[:1] == "n" and i[1:].isdigit()]
    return f"n{max(numbers, default=-1) + 1}"


async def _wait_answering(peers: dict, group: str, node_id: str, proc: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    async with Client({node_id: peers[node_id]}, group=group, request_timeout_ms=500, timeout_ms=1_000,
                      max_retries=0) as c:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"node {node_id} exited with code {proc.returncode} during startup")
            if (await c.status())[0].reachable:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"node {node_id} did not answer within {timeout_s:g} s")
            await asyncio.sleep(POLL_INTERVAL_S * 2)


@cluster_app.command("init")
def init(peers: str = typer.Option(..., "--peers", help="Every node, as each was started: n0=host:port,..."),
         group: str = typer.Option("default", "--group", help="The group the nodes were started with (`quorumlog "
                                   "node --group`)"),
         timeout_s: float = typer.Option(60.0, "--timeout-s", min=0.1, help="Wait this long for every node"),
         json_out: bool = JsonOpt) -> None:
    """Bootstrap nodes started by hand (`quorumlog node`, one per host): make the cluster's metadata group
    `_meta` on them and record every node. Run it again with a node added to --peers to record the node that
    joined (it changes nothing else). `cluster up` does this itself for the nodes it starts."""
    setup_logging()
    nodes = resolve_target(peers, None, None).peers

    async def go() -> dict:
        deadline = time.monotonic() + timeout_s
        async with GroupAdmin(nodes, timeout_ms=int(timeout_s * 1000)) as admin:
            while True:  # `_meta` is placed on every node (up to five): all of them must answer first
                statuses = await admin.cluster_status()
                silent = sorted(n for n, st in statuses.items() if not isinstance(st, dict))
                if not silent:
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{', '.join(silent)} did not answer within {timeout_s:g} s: "
                                       f"{statuses[silent[0]]}")
                await asyncio.sleep(POLL_INTERVAL_S)
            meta_on = sorted(n for n, st in statuses.items() if any(g["group"] == META_GROUP for g in st["groups"]))
            created = not meta_on
            if created:
                meta_on = list((await admin.create_meta()).members)
                await admin.record_group(group, list(nodes))
            else:
                await admin.record_nodes(nodes)
        return {"meta": sorted(meta_on), "created": created, "nodes": sorted(nodes)}

    try:
        result = run(go())
    except TimeoutError as e:
        die(ResponseCode.TIMEOUT, f"cluster init: {e}")
    if json_out:
        print_json(result)
    else:
        out_console.print(("made `_meta` on " if result["created"] else "`_meta` exists on ")
                          + f"{', '.join(result['meta'])}; nodes recorded: {', '.join(result['nodes'])}",
                          highlight=False)


@cluster_app.command("add-node")
def add_node(data_dir: str = typer.Option(..., "--data-dir", help="The directory given to `cluster up`"),
             timeout_s: float = typer.Option(30.0, "--timeout-s", min=0.1, help="Give up if it does not answer"),
             json_out: bool = JsonOpt) -> None:
    """Start one more node process (a fresh id, the next free port) that joins the cluster's group without a
    vote, and add it to cluster.json. Make it a member with `quorumlog member add --node ID`."""
    setup_logging()
    data_dir = os.path.abspath(data_dir)
    path, doc = _read_doc(data_dir)
    nodes = doc["nodes"]
    node_id = _next_node_id(doc)
    from ..peers import parse_peers
    peers = parse_peers(doc["peers"])
    host = next(iter(peers.values()))[0]
    chosen: set[int] = set()  # the new node's ports so far: each of its listeners needs one of its own

    def next_port(after: int) -> int:
        port = after + 1
        while port in chosen or not _port_free(host, port):
            port += 1
        chosen.add(port)
        return port

    port = next_port(max(p for _h, p in peers.values()))
    peers[node_id] = (host, port)
    peers_text = format_peers(peers)
    http_ports = [n.get("http_port", 0) for n in nodes if n.get("http_port")]
    http_port = next_port(max(http_ports)) if http_ports else 0
    node_dir = os.path.join(data_dir, node_id)
    os.makedirs(node_dir, exist_ok=True)
    log_file = os.path.join(data_dir, f"{node_id}.log")
    settings = [tuple(kv_pair) for kv_pair in doc.get("settings", [])] + [("join", "true")]
    doors = {}
    for key in ("rocketmq_port", "kafka_port"):  # the next port of each door the cluster runs
        taken = [n[key] for n in nodes if n.get(key)]
        if taken:
            doors[key] = next_port(max(taken))
            settings.append((key, str(doors[key])))
    if doc.get("tls_ca"):  # a certificate for the new node from the cluster's CA
        from ..transport.certs import make_node_cert
        make_node_cert(os.path.dirname(doc["tls_ca"]), node_id, [host])
        settings += _tls_settings(os.path.dirname(doc["tls_ca"]), node_id)
        os.environ[TLS_CA_ENV] = doc["tls_ca"]
    node_group = doc.get("node_group", doc["group"])
    argv = node_argv(node_id, peers_text, node_dir, node_group, doc.get("flush", "sync"), http_port,
                     doc.get("config"), settings)
    proc = _spawn_node(argv, log_file, data_dir)
    node_doc = {"id": node_id, "address": f"{host}:{port}", "pid": proc.pid, "data_dir": node_dir,
                "log_file": log_file, "argv": argv, "http_port": http_port, **doors}
    try:
        run(_wait_answering(peers, node_group, node_id, proc, timeout_s))
    except (RuntimeError, TimeoutError) as e:
        _stop_pids([node_doc], 2.0)
        sys.stderr.write(f"--- {log_file} (tail)\n{_tail(log_file)}\n")
        die(ResponseCode.INTERNAL_ERROR, f"cluster add-node: {e}")
    nodes.append(node_doc)
    doc["peers"] = peers_text
    _write_json_atomic(path, doc)
    run(_record(peers, lambda admin: admin.record_nodes({node_id: (host, port)})))
    from .members import keep_meta_size
    result = {"id": node_id, "address": node_doc["address"], "pid": proc.pid,
              "meta_member": run(keep_meta_size(peers, timeout_s)) == node_id}
    if json_out:
        print_json(result)
    else:
        out_console.print(f"{node_id} at {node_doc['address']} (pid {proc.pid})"
                          f"{', a member of _meta (it had fewer than it keeps)' if result['meta_member'] else ''}; "
                          f"make it a member with `quorumlog member add --cluster {data_dir} --node {node_id}`",
                          highlight=False)


@cluster_app.command("remove-node")
def remove_node(data_dir: str = typer.Option(..., "--data-dir", help="The directory given to `cluster up`"),
                node_id: str = typer.Option(..., "--id", help="The node to stop and forget"),
                grace_s: float = typer.Option(STOP_GRACE_S, "--grace-s", min=0, help="SIGKILL after this long"),
                drain: bool = typer.Option(False, "--drain", help="First move each of its replicas to the "
                                           "least-loaded node not hosting that group (member add there, then "
                                           "member remove here)"),
                timeout_s: float = typer.Option(120.0, "--timeout-s", min=1, help="Per group moved (--drain)"),
                json_out: bool = JsonOpt) -> None:
    """Stop a node that no group has as a member any more and drop it from cluster.json (its id is retired).
    Refused with NODE_IN_USE while it is a voter or learner of any group (the message names each group's
    `member remove` command), unless --drain moves them; `_meta` keeps its size either way."""
    setup_logging()
    data_dir = os.path.abspath(data_dir)
    path, doc = _read_doc(data_dir)
    node = next((n for n in doc["nodes"] if n["id"] == node_id), None)
    if node is None:
        usage(f"--id {node_id!r}: no such node in {path}")
    from ..peers import parse_peers
    from .members import _membership
    peers = parse_peers(doc["peers"])
    own = doc.get("node_group", doc["group"])  # the nodes' own Raft group

    async def members() -> dict:
        # every node is asked (the one leaving may be the leader; a dead one just does not answer)
        async with Client(peers, group=own, request_timeout_ms=1_000, timeout_ms=5_000) as c:
            return await _membership(c)

    m = run(members())
    if m["leader"] is None:
        die(ResponseCode.NOT_LEADER, f"group {own} has no leader: cannot tell whether {node_id} "
            f"is still a member")
    in_use = run(_groups_using(peers, node_id))
    if node_id in m["voters"] or node_id in m["learners"]:
        in_use = sorted({own, *in_use})
    moved: dict[str, str] = {}
    if in_use and drain:
        moved = run(_drain(peers, node_id, in_use, timeout_s))
        in_use = run(_groups_using(peers, node_id))
    if in_use:
        die(ResponseCode.NODE_IN_USE, f"{node_id} is a member of group {', '.join(in_use)}: move its replicas "
            f"first with `quorumlog cluster remove-node --data-dir {data_dir} --id {node_id} --drain`, or remove it "
            f"from each: " + "; ".join(f"`quorumlog member remove --cluster {data_dir} --group {g} --node {node_id}`"
                                       for g in in_use))
    ledgers = run(_ledgers_on(peers, node_id, drain, timeout_s))
    if ledgers:
        held = f"{node_id}'s bookie holds fragments of {len(ledgers)} ledgers " \
               f"({', '.join(map(str, ledgers[:5]))}{', ...' if len(ledgers) > 5 else ''})"
        die(ResponseCode.NODE_IN_USE, f"{held} still after {timeout_s:g} s of auto-recovery (`quorumlog ledger "
            f"underreplicated --cluster {data_dir}` shows them); run it again later" if drain else
            f"{held}; run `quorumlog bookie decommission --cluster {data_dir} --id {node_id}` first, or --drain")
    stopped, killed = _stop_pids([node], grace_s)
    doc["nodes"] = [n for n in doc["nodes"] if n["id"] != node_id]
    doc["retired"] = sorted(set(doc.get("retired", [])) | {node_id})
    peers.pop(node_id, None)
    doc["peers"] = format_peers(peers)
    _write_json_atomic(path, doc)
    run(_record(peers, lambda admin: admin.forget_node(node_id)))
    result = {"id": node_id, "stopped": bool(stopped), "killed": bool(killed), "moved": moved}
    if json_out:
        print_json(result)
    else:
        out_console.print(f"{node_id}: {'killed' if killed else 'stopped'}, removed from {path}", highlight=False)


async def _ledgers_on(peers: dict, node_id: str, drain: bool, timeout_s: float) -> list[int]:
    """The ledgers whose metadata names node_id's bookie; with drain, after decommissioning it and waiting (up to
    timeout_s) for auto-recovery to copy its fragments away."""
    from ..errors import UnknownGroup
    from ..ledgers import LedgerClient
    async with LedgerClient(peers, timeout_ms=10_000) as lc:
        try:
            held = await lc.ledgers_on(node_id)
        except UnknownGroup:
            return []  # no `_meta` group: no ledgers
        if held and drain:
            await lc.decommission_bookie(node_id)
            err_console.print(f"bookie {node_id} decommissioned: waiting for auto-recovery to move "
                              f"{len(held)} ledgers' fragments", highlight=False)
            deadline = asyncio.get_running_loop().time() + timeout_s
            while held and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(1.0)
                held = await lc.ledgers_on(node_id)
        return held


async def _groups_using(peers: dict, node_id: str) -> list[str]:
    """The groups whose leader has node_id as a voter or learner."""
    async with GroupAdmin(peers, timeout_ms=5_000) as admin:
        statuses = await admin.cluster_status()
    return sorted({g["group"] for s in statuses.values() if isinstance(s, dict) for g in s["groups"]
                   if g["role"] == "leader" and (node_id in g["voters"] or node_id in g["learners"])})


async def _drain(peers: dict, node_id: str, groups: list[str], timeout_s: float) -> dict[str, str]:
    """Move node_id's replica of each group to the least-loaded live node not hosting it; returns group -> node.
    Refused (NODE_IN_USE) for a group no other node can take."""
    from .members import add_member, record_members, remove_member
    moved: dict[str, str] = {}
    for group in groups:
        async with GroupAdmin(peers, timeout_ms=10_000) as admin:
            statuses = {n: s for n, s in (await admin.cluster_status()).items() if isinstance(s, dict)}
        members = {m for s in statuses.values() for g in s["groups"] if g["group"] == group and g["role"] == "leader"
                   for m in (*g["voters"], *g["learners"])}
        candidates = sorted((n for n in statuses if n != node_id and n not in members),
                            key=lambda n: (len(statuses[n]["groups"]), n))
        if not candidates:
            die(ResponseCode.NODE_IN_USE, f"no live node to move {node_id}'s replica of group {group} to "
                f"(add one with `cluster add-node`)")
        to = candidates[0]
        target = Target(peers, group)
        await record_members(target, await add_member(target, to, format_address(peers[to]), timeout_s))
        await record_members(target, await remove_member(target, node_id, timeout_s))
        moved[group] = to
        err_console.print(f"{group}: replica moved {node_id} -> {to}", highlight=False)  # (stdout: the result)
    return moved


async def _record(peers: dict, update) -> None:
    """Keep the `_meta` record of the nodes (best effort: the cluster.json and the nodes hold the truth)."""
    async with GroupAdmin(peers, timeout_ms=10_000) as admin:
        await admin.record_quietly(update(admin))


__all__ = ["cluster_app", "pid_alive"]
