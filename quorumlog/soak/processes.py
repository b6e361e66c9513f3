"""Real node processes on loopback: start, signal (kill -9, SIGSTOP), restart, stop, inspect.

Used by the fault soak and by the end-to-end tests. Every process a Cluster starts is stopped by
Cluster.stop() (SIGTERM, then SIGKILL), which callers run in `finally` (or through `with Cluster(...)`).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import quorumlog
from quorumlog.client import Client, Entry
from quorumlog.client.types import WRITABLE_ROLES
from quorumlog.local_ports import free_ports

PYTHON = sys.executable

# Small segments: a node preallocates its segments (test-sized ones are zero-filled), and tests want that quick.
NODE_ARGS = (
    "--max-entry-bytes", str(1024 * 1024),
    "--data-segment-size", str(8 * 1024 * 1024),
    "--index-segment-size", str(1024 * 1024),
    "--checkpoint-interval-ms", "200",
)


@dataclass
class NodeProc:
    node_id: str
    port: int
    http_port: int
    data_dir: str
    log_path: str
    argv: list[str]
    env: dict[str, str]
    proc: subprocess.Popen | None = None
    starts: int = 0

    def start(self) -> None:
        assert not self.alive, f"{self.node_id} already running"
        log = open(self.log_path, "ab")
        log.write(f"\n==== start #{self.starts} {time.strftime('%H:%M:%S')} ====\n".encode())
        log.flush()
        self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                     start_new_session=True)
        log.close()
        self.starts += 1

    def rss_kb(self) -> int:
        """The process's resident memory now (Linux /proc)."""
        with open(f"/proc/{self.pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))

    def wait_log(self, text: str, timeout_s: float = 10.0) -> None:
        """Wait until the node's log has `text` (AssertionError naming it after timeout_s)."""
        deadline = time.monotonic() + timeout_s
        while True:
            with open(self.log_path, errors="replace") as f:
                if text in f.read():
                    return
            assert time.monotonic() < deadline, f"{self.node_id}'s log never said {text!r}"
            time.sleep(0.2)

    def state(self) -> str:
        """"running (pid P)", "exited with code C: <its log's last line>" or "not started"."""
        if self.proc is None:
            return "not started"
        code = self.proc.poll()
        if code is None:
            return f"running (pid {self.proc.pid})"
        last = next((line for line in reversed(self.log_text().splitlines()) if line.strip()), "")
        return f"exited with code {code}: {last[-300:]}"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def kill9(self) -> None:
        if self.alive:
            self.signal(signal.SIGKILL)
            self.proc.wait(10)

    def terminate(self, grace_s: float = 15.0) -> int | None:
        """SIGTERM (after SIGCONT, in case it is stopped), then SIGKILL after grace_s; returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGCONT)
                os.kill(self.proc.pid, signal.SIGTERM)
                return self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def log_text(self) -> str:
        try:
            with open(self.log_path, "r", errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def rss_bytes(self) -> int:
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0


def fill_to_last_byte(path: str, leave_bytes: int = 0) -> str:
    """Create path and grow it until the disk refuses (ENOSPC): the disk is then full to its last byte, so a
    write that needs a new block fails. Most of the space is taken with fallocate, the rest with unbuffered
    writes (nothing left over for a close to fail on). `leave_bytes`: stop that short of full instead (fallocate
    only). Returns a note of what it took."""
    st = os.statvfs(os.path.dirname(os.path.abspath(path)))
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
    try:
        size = max(st.f_bavail * st.f_frsize - (leave_bytes or 1 << 20), 0)  # (the last MiB: written below)
        if size:
            try:
                os.posix_fallocate(fd, 0, size)
            except OSError as e:
                return f"filler of {size} bytes: {e!r}"
        if leave_bytes:
            return f"filled {size} bytes, {st.f_bavail * st.f_frsize - size} left"
        os.lseek(fd, size, os.SEEK_SET)
        chunk = bytes(1 << 16)
        while True:
            try:
                size += os.write(fd, chunk)
            except OSError:
                if len(chunk) == 1:
                    return f"filled {size} bytes"
                chunk = chunk[:len(chunk) // 2]  # (then the last blocks, a smaller write at a time)
    finally:
        os.close(fd)


def _member_of(node_id: str, leader: Any) -> bool:
    """Whether node_id is in the configuration `leader` reports (a removed node no longer hears its leader)."""
    members = set(leader.raw.get("voters", [])) | set(leader.raw.get("learners", []))
    return not members or node_id in members


@dataclass
class Cluster:
    base_dir: str
    n: int = 3
    extra_args: tuple[str, ...] = ()
    data_dirs: dict[str, str] = field(default_factory=dict)  # node_id -> data dir override
    proxied: tuple[str, ...] = ()  # nodes that everyone reaches through a test proxy (see proxy_ports)
    nodes: dict[str, NodeProc] = field(default_factory=dict)
    peers: str = ""
    proxy_ports: dict[str, int] = field(default_factory=dict)  # node_id -> the port peers and clients use

    # Nodes that can join later (add_node): their ports are reserved now and clients know their addresses
    # from the start; the group's bootstrap members are the first n only.
    spares: int = 0
    node_args: dict[str, tuple[str, ...]] = field(default_factory=dict)  # node_id -> its own extra arguments

    def __post_init__(self) -> None:
        total = self.n + self.spares
        ports = free_ports(2 * total + len(self.proxied))
        ids = [f"n{i}" for i in range(total)]
        self.proxy_ports = {nid: ports[2 * total + k] for k, nid in enumerate(self.proxied)}
        addresses = [f"{nid}=127.0.0.1:{self.proxy_ports.get(nid, ports[i])}" for i, nid in enumerate(ids)]
        self.peers = ",".join(addresses[:self.n])
        self._env = dict(os.environ, PYTHONUNBUFFERED="1")
        self._env.pop("QUORUMLOG_CONFIG", None)
        self._ports = ports
        self._addresses = addresses
        for i, nid in enumerate(ids[:self.n]):
            self.nodes[nid] = self._node(i, nid, self.peers)

    def _node(self, i: int, nid: str, peers: str, *extra: str) -> NodeProc:
        total = self.n + self.spares
        data_dir = self.data_dirs.get(nid) or os.path.join(self.base_dir, nid)
        argv = [PYTHON, "-m", "quorumlog.server", "--id", nid, "--peers", peers, "--data-dir", data_dir,
                "--http-port", str(self._ports[total + i]), "--bind-port", str(self._ports[i]), *NODE_ARGS,
                *self.extra_args, *self.node_args.get(nid, ()), *extra]
        return NodeProc(nid, self._ports[i], self._ports[total + i], data_dir,
                        os.path.join(self.base_dir, f"{nid}.log"), argv, self._env)

    def add_node(self) -> NodeProc:
        """Start the next spare node with --join: it knows the bootstrap members and itself, has no vote, and
        waits to be made a member (client.change_member)."""
        i = len(self.nodes)
        assert i < self.n + self.spares, "no spare node left (Cluster(spares=...))"
        nid = f"n{i}"
        node = self.nodes[nid] = self._node(i, nid, ",".join([self.peers, self._addresses[i]]), "--join", "true")
        node.start()
        return node

    def spare_port(self, i: int) -> int:
        """The port reserved for the i-th node (spares: i ≥ n)."""
        return self._ports[i]

    def spare_node(self, i: int, peers: str, *extra: str) -> NodeProc:
        """Spare i as a node process (not started) with the given peers and arguments (add_node's general
        form, for callers that route links themselves)."""
        nid = f"n{i}"
        node = self.nodes[nid] = self._node(i, nid, peers, *extra)
        return node

    def start(self) -> "Cluster":
        for node in self.nodes.values():
            node.start()
        return self

    def stop(self) -> dict[str, int | None]:
        return {nid: node.terminate() for nid, node in self.nodes.items()}

    def __enter__(self) -> "Cluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def logs(self) -> str:
        return "\n".join(f"---- {nid} ({node.state()}) ----\n{node.log_text()[-4000:]}"
                         for nid, node in self.nodes.items())

    def describe(self, statuses: dict[str, Any], members: Any = None) -> str:
        """One line per member: its role, term and indexes, or why it did not answer and whether it runs
        (first in a failure's message: CI keeps a failure's head, and the node logs after it may be cut)."""
        out = []
        for nid in members or statuses:
            s, node = statuses[nid], self.nodes.get(nid)
            where = f"; process {node.state()}" if node is not None else ""
            if s.role == "unreachable":
                out.append(f"{nid}: unreachable ({s.error}{where})")
            else:
                out.append(f"{nid}: {s.role} term {s.term} end {s.end_index} committed {s.committed_index}")
        return "; ".join(out)

    def client(self, **kw: Any) -> Client:
        kw.setdefault("timeout_ms", 10_000)
        return quorumlog.client.Client(self.client_peers, **kw)

    @property
    def client_peers(self) -> str:
        """Where clients look: the members (`peers`, which a caller may rewrite) and every spare node."""
        return ",".join([self.peers, *self._addresses[self.n:]])

    def peers_without(self, *node_ids: str) -> str:
        return ",".join(p for p in self.peers.split(",") if p.split("=")[0] not in node_ids)

    # -- inspection (async) ------------------------------------------------------------------------------
    async def statuses(self, client: Client) -> dict[str, Any]:
        return {s.id: s for s in await client.status()}

    async def wait_leader(self, client: Client, timeout_s: float = 15.0, exclude: tuple[str, ...] = (),
                          min_term: int = 0) -> str:
        """The id of the leader that the live members agree on (excluding `exclude`), within timeout_s."""
        deadline = time.monotonic() + timeout_s
        while True:
            st = await self.statuses(client)
            # (a master/slave group: its master, and the slaves of its epoch following it)
            leaders = [s for nid, s in st.items() if s.role in WRITABLE_ROLES and nid not in exclude
                       and s.term >= min_term
                       and all(o.leader_id == s.id for o in st.values() if o.role in ("follower", "slave")
                               and o.term == s.term and _member_of(o.id, s))]
            if len(leaders) == 1:
                return leaders[0].id
            if time.monotonic() > deadline:
                raise AssertionError(f"no single leader within {timeout_s}s: {self.describe(st)}\n{self.logs()}")
            await asyncio.sleep(0.05)

    async def wait_converged(self, client: Client, timeout_s: float = 20.0,
                             members: tuple[str, ...] | None = None) -> dict[str, Any]:
        """Wait until every live member has end_index == committed_index, all equal; returns the statuses."""
        members = members or tuple(nid for nid, n in self.nodes.items() if n.alive)
        deadline = time.monotonic() + timeout_s
        while True:
            st = await self.statuses(client)
            sub = [st[m] for m in members]
            if all(s.role != "unreachable" for s in sub):
                ends = {(s.end_index, s.committed_index) for s in sub}
                if len(ends) == 1 and sub[0].end_index == sub[0].committed_index:
                    return st
            if time.monotonic() > deadline:
                raise AssertionError(f"members did not converge within {timeout_s}s: "
                                     f"{self.describe(st, members)}\n{self.logs()}")
            await asyncio.sleep(0.05)

    async def committed_log(self, client: Client, node_id: str) -> list[Entry]:
        return [e async for e in client.read(0, node=node_id)]

    async def committed_logs(self, client: Client, members: tuple[str, ...] | None = None) -> dict[str, list[Entry]]:
        members = members or tuple(nid for nid, n in self.nodes.items() if n.alive)
        return {m: await self.committed_log(client, m) for m in members}

