"""Stand-ins for the raft core and the transport, so the runtime's tests exercise the runtime alone."""

from __future__ import annotations

from quorumlog.codes import ResponseCode
from quorumlog.raft.types import (
    AppendBatch, ClientAppend, Completion, Durable, HardState, NodeStatus, Ready, Role, StoreFailed, Stored, Tick,
    TransferLeadership,
)


class SoloCore:
    """A one-node 'leader': appends on request, commits what is durable. Records every event it saw."""

    def __init__(self, config, log, hard_state, rng, now_ms) -> None:
        self.config = config
        self.log = log
        self.term = max(hard_state.term, 1)
        self.hard_state_sent = hard_state.term == 0
        self.events: list = []
        self.pending: list[tuple[int, int, int]] = []  # (request_id, first, last)
        self.committed = log.committed_index
        self.role = Role.LEADER

    def step(self, event) -> Ready:
        self.events.append(event)
        if isinstance(event, Tick):
            if self.hard_state_sent:
                self.hard_state_sent = False
                return Ready(hard_state=HardState(self.term, self.config.node_id), messages=("hello-peer",))
            return Ready()
        if isinstance(event, ClientAppend):
            if self.role != Role.LEADER:
                return Ready(completions=(Completion(event.request_id, ResponseCode.NOT_LEADER, leader_id="n1"),))
            first = self.log.end_index + 1 + sum(l - f + 1 for _, f, l in self.pending if f > self.log.end_index)
            last = first + len(event.bodies) - 1
            self.pending.append((event.request_id, first, last))
            producer = (event.client_id, event.seq) if event.client_id else None
            return Ready(appends=(AppendBatch(first, self.term, tuple(event.bodies), 1_000, producer),))
        if isinstance(event, Stored):
            return Ready()
        if isinstance(event, Durable):
            done = [p for p in self.pending if p[2] <= event.index]
            self.pending = [p for p in self.pending if p[2] > event.index]
            self.committed = max(self.committed, event.index)
            return Ready(completions=tuple(Completion(r, ResponseCode.SUCCESS, f, l, self.term) for r, f, l in done),
                         committed_index=self.committed)
        if isinstance(event, StoreFailed):
            failed, self.pending = self.pending, []
            return Ready(completions=tuple(Completion(r, event.code) for r, _, _ in failed))
        if isinstance(event, TransferLeadership):
            return Ready(completions=(Completion(event.request_id, ResponseCode.SUCCESS, leader_id=event.to),))
        return Ready()

    def status(self) -> NodeStatus:
        return NodeStatus(self.config.node_id, self.role, self.term, self.config.node_id, self.log.begin_index,
                          self.log.end_index, self.committed, {})


class FakeSession:
    def __init__(self) -> None:
        self.responses: list = []

    def send(self, response) -> None:
        self.responses.append(response)


class FakeTransport:
    def __init__(self) -> None:
        self.sent: list = []
        self.on_peer_message = None
        self.on_client_request = None
        self.accepting = False
        self.closed = False

    async def start(self, on_peer_message, on_client_request, members_of, on_peer_hello=None,
                    on_peer_gone=None) -> None:
        self.on_peer_message = lambda msg, group="default": on_peer_message(group, msg)
        self.members_of = members_of
        self.accepting = True
        self.tasks = set()

        def on_client(session, request):  # like TransportServer.track: run what the handler returns
            import asyncio
            result = on_client_request(session, request)
            if result is not None:
                t = asyncio.ensure_future(result)
                self.tasks.add(t)
                t.add_done_callback(self.tasks.discard)
        self.on_client_request = on_client

    def send(self, group, msg) -> None:
        self.sent.append(msg)

    async def stop_accepting(self) -> None:
        self.accepting = False

    async def close(self) -> None:
        self.closed = True
