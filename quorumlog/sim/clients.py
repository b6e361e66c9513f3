"""Simulated clients: they append batches, time out, follow NOT_LEADER redirects and retry.

An idempotent client (client_id > 0) pipelines up to idempotent_max_in_flight batches with increasing seqs and
retries each with the same (client_id, seq) and the same bodies until it succeeds, so the leader must
deduplicate (retries may land out of order: the contract promises dedup, not order, across failed batches);
DUPLICATE_SEQUENCE_TOO_OLD ends a retry as "outcome unknown". A plain client never resends a body:
after a failure or a timeout the outcome is unknown, so it sends a *new* batch with new bodies — which keeps
"every body is committed at most once" a strict check for both kinds.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from ..codes import ResponseCode
from ..raft.types import ClientAppend, Completion
from .checker import Op
from .options import SimOptions

if TYPE_CHECKING:
    from .world import World

RETRY_BACKOFF_MAX_MS = 100
BODY_PAD_MAX_BYTES = 64


class SimClient:
    def __init__(self, world: "World", index: int, idempotent: bool, options: SimOptions) -> None:
        self.world = world
        self.rng: random.Random = world.rng
        self.name = f"c{index}"
        self.client_id = index + 1 if idempotent else 0
        self.max_in_flight = options.idempotent_max_in_flight if idempotent else options.client_max_in_flight
        self.think_max_ms = options.client_think_max_ms
        self.idle_ratio = options.client_idle_ratio
        self.batch_max = options.client_batch_max
        self.timeout_ms = options.client_timeout_ms
        self.leader_hint: str | None = None
        self.next_op_no = 0
        self.next_seq = 0
        self.in_flight: dict[int, Op] = {}  # request_id -> op
        self.ops_open = 0  # ops neither acked nor abandoned (in flight or waiting to retry)
        self.healed_at_ms: int | None = None
        self.done = False  # an op first sent after the heal was acknowledged; no more ops
        self.acked = 0
        self.failed = 0

    # -- workload ----------------------------------------------------------------------------------
    def start(self) -> None:
        self.world.scheduler.after(self.rng.randint(0, 50), self._fill)

    def heal(self, now_ms: int) -> None:
        """Liveness phase: one batch at a time until one sent from now on is acknowledged."""
        self.healed_at_ms = now_ms
        self.max_in_flight = 1
        self.world.scheduler.after(0, self._fill)

    @property
    def settled(self) -> bool:
        return self.done and self.ops_open == 0

    def _fill(self) -> None:
        while not self.done and self.ops_open < self.max_in_flight:
            self._send(self._new_op())

    def _new_op(self) -> Op:
        count = self.rng.randint(1, self.batch_max)
        pad = b"." * self.rng.randint(0, BODY_PAD_MAX_BYTES)
        op_no = self.next_op_no
        self.next_op_no += 1
        bodies = tuple(f"{self.name}:{op_no}:{k}:".encode() + pad for k in range(count))
        seq = -1
        if self.client_id:
            seq = self.next_seq
            self.next_seq += 1
        op = Op(self.name, op_no, bodies, seq)
        self.world.checker.register_op(op, self.world.scheduler.now_ms)
        self.ops_open += 1
        return op

    def _send(self, op: Op) -> None:
        world = self.world
        target = self.leader_hint or self.rng.choice(world.node_ids)
        request_id = world.new_request_id(self, op)
        op.request_ids.append(request_id)
        self.in_flight[request_id] = op
        event = ClientAppend(request_id, op.bodies, self.client_id, op.seq)
        world.trace_line(lambda: f"{self.name} -> {target} append req={request_id} op={op.op_no} "
                                 f"n={len(op.bodies)} seq={op.seq}")
        world.network.send_client((target, event), world.deliver_client_request)
        world.scheduler.after(self.timeout_ms, self._timeout, request_id)

    # -- answers -----------------------------------------------------------------------------------
    def on_completion(self, completion: Completion) -> None:
        op = self.in_flight.pop(completion.request_id, None)
        if op is None:
            return  # answer to a request we already gave up on
        code = completion.code
        self.world.trace_line(lambda: f"{self.name} <- req={completion.request_id} {code.name} "
                                      f"{completion.first_index}..{completion.last_index} t={completion.term} "
                                      f"leader={completion.leader_id}")
        if code == ResponseCode.SUCCESS:
            self.acked += 1
            self.ops_open -= 1
            if self.healed_at_ms is not None and op.first_sent_ms >= self.healed_at_ms:
                self.done = True
            pause_ms = self.rng.randint(0, self.think_max_ms)
            if self.idle_ratio and self.rng.random() < self.idle_ratio:
                pause_ms = self.rng.randint(600, 2_500)  # long enough for the group to go quiet
            self.world.scheduler.after(pause_ms, self._fill)
            return
        if code == ResponseCode.DUPLICATE_SEQUENCE_TOO_OLD:
            self.failed += 1
            self.ops_open -= 1  # the leader can no longer tell: outcome unknown, as for a plain client
            self.world.scheduler.after(0, self._fill)
            return
        if code == ResponseCode.NOT_LEADER:
            asked = self.world.request_target.get(completion.request_id)
            self.leader_hint = completion.leader_id if completion.leader_id != asked else None
        elif code in (ResponseCode.TERM_CHANGED, ResponseCode.WAIT_QUORUM_ACK_TIMEOUT):
            pass  # the same node may be leader again, or not: keep the hint, the redirect will tell
        else:
            self.leader_hint = None
        self._retry(op, backoff=code != ResponseCode.NOT_LEADER or completion.leader_id is None)

    def _timeout(self, request_id: int) -> None:
        op = self.in_flight.pop(request_id, None)
        if op is None:
            return
        self.world.trace_line(lambda: f"{self.name} timeout req={request_id}")
        self.leader_hint = None
        self._retry(op, backoff=True)

    def _retry(self, op: Op, backoff: bool) -> None:
        self.failed += 1
        delay = self.rng.randint(1, RETRY_BACKOFF_MAX_MS) if backoff else 0
        if self.client_id:
            self.world.scheduler.after(delay, self._send, op)  # same seq, same bodies: the leader dedups
        else:
            self.ops_open -= 1  # outcome unknown: never resend these bodies
            self.world.scheduler.after(delay, self._fill)
