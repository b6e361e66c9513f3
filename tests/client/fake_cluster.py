"""An in-process fake group for client tests: real TransportServers on loopback, a scripted 'leader'.

No raft: one shared log, a leader chosen by the test, and knobs to misbehave (answer NOT_LEADER, drop a
response after applying the append, answer an error code, delay answers). Every request is recorded, so
tests assert what went over the wire (seq reuse, frame counts, long-poll wait_ms).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

from quorumlog.codes import ResponseCode
from quorumlog.format import log_entry
from quorumlog.format.log_entry import Records
from quorumlog.transport import TransportServer
from quorumlog.wire.client import (AppendRequest, AppendResponse, ReadRequest, ReadResponse, StatusRequest,
                                   StatusResponse, TransferLeaderRequest, TransferLeaderResponse)

TIMESTAMP_MS = 1_700_000_000_123


@dataclass
class Seen:
    node_id: str
    request: object


@dataclass
class FakeGroup:
    node_ids: tuple[str, ...]
    leader_id: str | None = None
    term: int = 1
    records: list[bytes] = field(default_factory=list)  # stored record bytes, index = position
    terms: list[int] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    producers: dict[tuple[int, int], tuple[int, int, int]] = field(default_factory=dict)  # → first, last, term
    seen: list[Seen] = field(default_factory=list)
    # Misbehaviour knobs, consumed one per append request that reaches the leader:
    drop_responses: int = 0  # apply the append but never answer it
    abort_connections: int = 0  # apply the append, then cut the client's connection instead of answering
    error_codes: list[ResponseCode] = field(default_factory=list)  # answer these codes first
    append_delay_s: float = 0.0
    status_down: set[str] = field(default_factory=set)  # nodes whose status answers an error
    max_entry_bytes: int = 1 << 20
    chain: int = 0
    # Reads see the log's last `commit_lag` entries as not yet committed (a new leader before its no-op commits).
    commit_lag: int = 0
    begin_index: int = 0  # reads refuse nothing below it but return nothing from before it (retention)
    hidden: set[int] = field(default_factory=set)  # indexes reads skip, as a node skips no-op entries

    def __post_init__(self) -> None:
        self.committed = asyncio.Event()

    @property
    def end_index(self) -> int:
        return len(self.records) - 1

    @property
    def committed_index(self) -> int:
        return self.end_index - self.commit_lag

    def catch_up_commit(self) -> None:
        """The lagging commit point reaches the end (the new leader's no-op committed): wake long-polls."""
        self.commit_lag = 0
        self.committed.set()
        self.committed = asyncio.Event()

    def appends(self, node_id: str | None = None) -> list[AppendRequest]:
        return [s.request for s in self.seen if isinstance(s.request, AppendRequest)
                and (node_id is None or s.node_id == node_id)]

    def reads(self) -> list[ReadRequest]:
        return [s.request for s in self.seen if isinstance(s.request, ReadRequest)]

    def store(self, bodies: tuple[bytes, ...], producer: tuple[int, int] | None) -> tuple[int, int]:
        first = len(self.records)
        buf, sizes, self.chain = log_entry.encode_batch(first, self.term, bodies, TIMESTAMP_MS, 0, self.chain, producer)
        off = 0
        for size, body in zip(sizes, bodies):
            self.records.append(bytes(buf[off:off + size]))
            self.terms.append(self.term)
            self.bodies.append(body)
            off += size
        self.committed.set()
        self.committed = asyncio.Event()  # the next waiters wait for the next commit
        return first, len(self.records) - 1


class FakeNode:
    def __init__(self, group: FakeGroup, node_id: str) -> None:
        self.group = group
        self.node_id = node_id
        self.server: TransportServer | None = None

    async def start(self) -> None:
        self.server = await TransportServer.start(
            "127.0.0.1", 0, group="default", node_id=self.node_id, members=self.group.node_ids,
            on_peer_message=lambda g, m: None, on_client_request=self.on_request)

    @property
    def address(self) -> tuple[str, int]:
        assert self.server is not None
        return ("127.0.0.1", self.server.port)

    def on_request(self, req, session):
        self.group.seen.append(Seen(self.node_id, req))
        return self.handle(req, session)

    async def handle(self, req, session) -> None:
        g = self.group
        if isinstance(req, AppendRequest):
            if g.leader_id != self.node_id:
                session.send(AppendResponse(req.request_id, ResponseCode.NOT_LEADER, leader_id=g.leader_id))
                return
            if g.append_delay_s:
                await asyncio.sleep(g.append_delay_s)
            if g.error_codes:
                session.send(AppendResponse(req.request_id, g.error_codes.pop(0), message="scripted"))
                return
            if any(len(b) > g.max_entry_bytes for b in req.bodies):
                session.send(AppendResponse(req.request_id, ResponseCode.ENTRY_TOO_LARGE, message="too big"))
                return
            key = (req.client_id, req.seq)
            if req.client_id and key in g.producers:
                first, last, term = g.producers[key]  # a retry: the first attempt's answer, nothing stored
            else:
                first, last = g.store(req.bodies, key if req.client_id else None)
                term = g.term
                if req.client_id:
                    g.producers[key] = (first, last, term)
            if g.drop_responses:
                g.drop_responses -= 1
                return
            if g.abort_connections:
                g.abort_connections -= 1
                session._conn.transport.abort()  # test-only reach into the transport: a crash mid-answer
                return
            session.send(AppendResponse(req.request_id, ResponseCode.SUCCESS, first_index=first, last_index=last,
                                        term=term))
        elif isinstance(req, ReadRequest):
            if req.start > g.committed_index and req.wait_ms > 0:
                try:
                    await asyncio.wait_for(g.committed.wait(), req.wait_ms / 1000)
                except asyncio.TimeoutError:
                    pass
            last = g.committed_index if req.end < 0 else min(req.end, g.committed_index)
            start = max(req.start, g.begin_index)
            if start > last:
                records = Records(start, start - 1, (), 0)
            else:
                chunk = b"".join(r for i, r in enumerate(g.records[start:last + 1], start) if i not in g.hidden)
                records = Records(start, last, (chunk,), len(chunk))
            session.send(ReadResponse(req.request_id, ResponseCode.SUCCESS, g.begin_index, g.committed_index,
                                      records))
        elif isinstance(req, StatusRequest):
            if self.node_id in g.status_down:
                session.send(StatusResponse(req.request_id, ResponseCode.INTERNAL_ERROR))
                return
            doc = {"id": self.node_id, "role": "leader" if g.leader_id == self.node_id else "follower",
                   "term": g.term, "leader_id": g.leader_id, "begin_index": 0, "end_index": g.end_index,
                   "committed_index": g.end_index, "flush": "sync"}
            session.send(StatusResponse(req.request_id, ResponseCode.SUCCESS, json.dumps(doc).encode()))
        elif isinstance(req, TransferLeaderRequest):
            if g.leader_id != self.node_id:
                session.send(TransferLeaderResponse(req.request_id, ResponseCode.NOT_LEADER, leader_id=g.leader_id))
                return
            g.leader_id, g.term = req.to, g.term + 1
            session.send(TransferLeaderResponse(req.request_id, ResponseCode.SUCCESS, leader_id=req.to))


class FakeCluster:
    def __init__(self, n: int = 3, leader: str | None = "n0") -> None:
        self.group = FakeGroup(tuple(f"n{i}" for i in range(n)), leader_id=leader)
        self.nodes = {nid: FakeNode(self.group, nid) for nid in self.group.node_ids}

    async def __aenter__(self) -> "FakeCluster":
        for node in self.nodes.values():
            await node.start()
        return self

    async def __aexit__(self, *exc) -> None:
        for node in self.nodes.values():
            if node.server is not None:
                await node.server.close()

    @property
    def peers(self) -> dict[str, tuple[str, int]]:
        return {nid: node.address for nid, node in self.nodes.items()}

    @property
    def peers_text(self) -> str:
        return ",".join(f"{nid}={h}:{p}" for nid, (h, p) in self.peers.items())
