"""A tiny, hand-driven cluster of RaftCores over MemoryStores, for the core's unit tests.

Time moves only when a test calls tick()/run(); messages move only when it calls deliver(). Every Ready is
executed exactly as the contract in quorumlog/raft/types.py says: hard state, truncate, appends (then
Stored, and Durable right away when the node flushes eagerly), messages, completions, committed index.
"""

from __future__ import annotations

import itertools
import random
from collections import deque
from dataclasses import replace

from quorumlog.codes import ResponseCode
from quorumlog.raft.core import RaftCore
from quorumlog.raft.types import (AppendBatch, ChangeMembership, ClientAppend, Completion, Durable, HardState,
                                  RaftConfig, Ready, Receive, Role, Stored, StoreFailed, Tick,
                                  TransferLeadership)
from quorumlog.store.memory import MemoryStore


class Node:
    def __init__(self, config: RaftConfig, seed: int, now_ms: int) -> None:
        self.config = config
        self.store = MemoryStore()
        self.hard_state = HardState()
        self.rng = random.Random(seed)
        self.core = RaftCore(config, self.store, self.hard_state, self.rng, now_ms)
        self.auto_flush = True
        self.up = True
        self.disk_full = False  # appends are refused (StoreFailed DISK_FULL follows), as a full disk's are

    @property
    def id(self) -> str:
        return self.config.node_id


class Cluster:
    def __init__(self, n: int = 3, *, seed: int = 1, **config) -> None:
        self.ids = tuple(f"n{i}" for i in range(n))
        self._config = config
        self._seed = seed
        self.now_ms = 0
        self.nodes: dict[str, Node] = {}
        for i, nid in enumerate(self.ids):
            cfg = RaftConfig(node_id=nid, peers=self.ids, **config)
            self.nodes[nid] = Node(cfg, seed * 1000 + i, self.now_ms)
        self.net: deque = deque()  # messages in flight, delivered in order by deliver()
        self.local: deque = deque()  # (node id, event) the runtime owes its core (Stored, Durable)
        self.blocked: set[tuple[str, str]] = set()
        self.completions: dict[int, Completion] = {}
        self.completed_by: dict[int, str] = {}
        self.sent: list = []  # every message ever sent (for assertions)
        self._request_ids = itertools.count(1)
        self.drop_filter = None  # optional callable(message) -> bool: True drops it

    # -- driving -------------------------------------------------------------------------------------
    def step(self, nid: str, event) -> Ready:
        node = self.nodes[nid]
        assert node.up, f"{nid} is down"
        ready = node.core.step(event)
        self._execute(node, ready)
        return ready

    def _execute(self, node: Node, ready: Ready) -> None:
        store = node.store
        if ready.hard_state is not None:
            assert ready.hard_state.term >= node.hard_state.term
            node.hard_state = ready.hard_state
        if ready.truncate_after is not None:
            store.truncate_after(ready.truncate_after)
        if ready.reset_to is not None:
            store.reset(ready.reset_to, ready.reset_producers)
        if ready.appends and node.disk_full:
            self.local.append((node.id, StoreFailed(ResponseCode.DISK_FULL, "ENOSPC")))
            ready = replace(ready, appends=())
        for a in ready.appends:
            if isinstance(a, AppendBatch):
                assert a.first_index == store.end_index + 1
                end = store.append_batch(a.term, a.bodies, a.timestamp_ms, a.producer, a.noop)
                assert end == a.first_index + len(a.bodies) - 1
            else:
                assert a.first_index == store.end_index + 1, (node.id, a.first_index, store.end_index)
                end = store.append_records(a.data)
                assert end == a.last_index
        for m in ready.messages:
            self.sent.append(m)
            self.net.append(m)
        for c in ready.completions:
            assert c.request_id not in self.completions or c.request_id < 0, f"answered twice: {c}"
            self.completions[c.request_id] = c
            self.completed_by[c.request_id] = node.id
        if ready.committed_index is not None:
            store.set_committed_index(ready.committed_index)
            store.checkpoint()
        if ready.appends:
            self.local.append((node.id, Stored(store.end_index)))
            if node.auto_flush:
                self.local.append((node.id, "flush"))

    def flush(self, nid: str) -> None:
        node = self.nodes[nid]
        self.step(nid, Durable(node.store.flush()))

    def deliver(self, limit: int = 1_000_000) -> int:
        """Run owed local events and deliver messages until quiet (or `limit` deliveries)."""
        count = 0
        while (self.local or self.net) and count < limit:
            if self.local:
                nid, event = self.local.popleft()
                if not self.nodes[nid].up:
                    continue
                if event == "flush":
                    self.flush(nid)
                else:
                    self.step(nid, event)
                continue
            m = self.net.popleft()
            count += 1
            if self._dropped(m):
                continue
            self.step(m.to, Receive(m))
        return count

    def deliver_one(self):
        """Deliver the next message only (after owed local events); returns it."""
        while self.local:
            nid, event = self.local.popleft()
            if self.nodes[nid].up:
                self.flush(nid) if event == "flush" else self.step(nid, event)
        if not self.net:
            return None
        m = self.net.popleft()
        if not self._dropped(m):
            self.step(m.to, Receive(m))
        return m

    def _dropped(self, m) -> bool:
        return ((m.frm, m.to) in self.blocked or not self.nodes[m.to].up or not self.nodes[m.frm].up
                or (self.drop_filter is not None and self.drop_filter(m)))

    def tick(self, ms: int = 10) -> None:
        self.now_ms += ms
        for nid in self.ids:
            if self.nodes[nid].up:
                self.step(nid, Tick(self.now_ms))
        self.deliver()

    def run(self, ms: int, step_ms: int = 10) -> None:
        for _ in range(ms // step_ms):
            self.tick(step_ms)

    def run_until(self, pred, max_ms: int = 10_000, step_ms: int = 10) -> int:
        start = self.now_ms
        while not pred():
            assert self.now_ms - start < max_ms, f"condition not met within {max_ms} ms"
            self.tick(step_ms)
        return self.now_ms - start

    # -- queries ---------------------------------------------------------------------------------------
    def core(self, nid: str) -> RaftCore:
        return self.nodes[nid].core

    def leaders(self) -> list[str]:
        return [nid for nid in self.ids if self.nodes[nid].up and self.core(nid).role is Role.LEADER]

    def leader(self) -> str | None:
        leaders = self.leaders()
        if not leaders:
            return None
        return max(leaders, key=lambda nid: self.core(nid).term)

    def elect(self, max_ms: int = 10_000) -> str:
        self.run_until(lambda: self.leader() is not None, max_ms)
        return self.leader()

    def log_terms(self, nid: str) -> list[int]:
        store = self.nodes[nid].store
        return [store.term_at(i) for i in range(store.begin_index, store.end_index + 1)]

    def bodies(self, nid: str, upto: int | None = None) -> list[bytes]:
        store = self.nodes[nid].store
        end = store.end_index if upto is None else upto
        return [store.get(i).body for i in range(store.begin_index, end + 1)]

    # -- client ----------------------------------------------------------------------------------------
    def append(self, nid: str, bodies, client_id: int = 0, seq: int = -1, request_id: int | None = None) -> int:
        rid = next(self._request_ids) if request_id is None else request_id
        self.step(nid, ClientAppend(rid, tuple(bodies), client_id, seq))
        return rid

    def change(self, nid: str, change: str, node_id: str) -> int:
        """Ask `nid` for a membership change (raft/membership.Change value); returns the request id."""
        rid = next(self._request_ids)
        self.step(nid, ChangeMembership(rid, change, node_id))
        return rid

    def add_node(self, nid: str) -> None:
        """Start a fresh node that joins the group (no configuration until the leader's log gives it one)."""
        assert nid not in self.nodes
        cfg = RaftConfig(node_id=nid, peers=self.ids, join=True, **self._config)
        self.ids = self.ids + (nid,)
        self.nodes[nid] = Node(cfg, self._seed * 1000 + len(self.ids), self.now_ms)

    def transfer(self, nid: str, to: str) -> int:
        rid = next(self._request_ids)
        self.step(nid, TransferLeadership(rid, to))
        return rid

    # -- faults ----------------------------------------------------------------------------------------
    def isolate(self, nid: str) -> None:
        for other in self.ids:
            if other != nid:
                self.blocked |= {(nid, other), (other, nid)}

    def cut(self, a: str, b: str) -> None:
        self.blocked |= {(a, b), (b, a)}

    def heal(self) -> None:
        self.blocked.clear()

    def crash(self, nid: str, keep_unflushed: int = 0) -> None:
        node = self.nodes[nid]
        node.store.crash(keep_unflushed)
        node.up = False
        self.local = deque((n, e) for n, e in self.local if n != nid)

    def restart(self, nid: str, seed: int = 99) -> None:
        node = self.nodes[nid]
        node.up = True
        node.rng = random.Random(seed)
        node.core = RaftCore(node.config, node.store, node.hard_state, node.rng, self.now_ms)

    def reconfigure(self, nid: str, **changes) -> None:
        """Restart `nid`'s core with changed config (same store and hard state)."""
        node = self.nodes[nid]
        node.config = replace(node.config, **changes)
        node.core = RaftCore(node.config, node.store, node.hard_state, node.rng, self.now_ms)
