"""Consumer groups' coordinators, on the `_meta` group's leader (Kafka's group coordinator; RocketMQ rebalances
on each client instead, from views that may disagree, so two consumers can hold one queue for a while).

- One GroupCoordinator (topic/group_coordinator.py) per consumer group, in memory on the leader. A new leader
  starts empty: members' heartbeats get UNKNOWN_MEMBER and they join again. Its generations start at its Raft
  term << 32, above every generation an earlier leader handed out, so a member of an old generation is refused
  by every later coordinator.
- join: the member's topics (from `topics/T` in the store) join the group's queues (the union over members,
  each topic's queues shared among its own subscribers), and the queues it holds (`owned`); every change of
  members or queues is a new generation. A queue moves only once its old holder gave it up (cooperative,
  group_coordinator.py); a new leader's coordinator hands out a queue nobody declared only REJOIN_GRACE_MS
  after its term began.
  heartbeat: SUCCESS with the current assignment, or ILLEGAL_GENERATION (rejoin) / UNKNOWN_MEMBER (expired:
  join again). A member silent for its own session timeout leaves (checked every TICK_MS).
- commit: checked against the generation and the holder of each queue, then written as one batch of puts
  (`offsets/<group>/<topic>/<queue>` = the next offset to read) through the group's log; answered once
  committed. A member that lost a queue cannot commit it: ILLEGAL_GENERATION.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Callable

from ...clock import monotonic_ms
from ...codes import ResponseCode
from ...meta.kv import encode_put
from ...raft.types import ClientAppend, Completion
from ...topic.group_coordinator import GroupCoordinator, offset_key
from ...wire.client import ConsumerGroupRequest, ConsumerGroupResponse
from ..host import ConsensusGroup, Pending, Session, meta_leader_refusal, send_response

log = logging.getLogger(__name__)

TICK_MS = 500
# A new leader's coordinators hand out a queue no rejoining member declared only this long after the term
# began: members still consuming under the old coordinator hear of the new one at their next heartbeat.
REJOIN_GRACE_MS = 5_000
MIN_SESSION_TIMEOUT_MS, MAX_SESSION_TIMEOUT_MS = 1_000, 300_000

Answer = Callable[..., None]


class ConsumerGroupService:
    serves = (ConsumerGroupRequest,)

    def __init__(self, replica: ConsensusGroup) -> None:
        self.replica = replica
        self.coordinators: dict[str, GroupCoordinator] = {}
        self._term = -1
        self._term_started_ms = 0
        self._ticker: asyncio.Task | None = None

    def on_request(self, session: Session, req: ConsumerGroupRequest) -> None:
        r = self.replica

        def answer(code: ResponseCode, message: str = "", body: dict | None = None) -> None:
            send_response(session, ConsumerGroupResponse(req.request_id, code, r.core.leader_id,
                                                   json.dumps(body or {}).encode(), message))

        refused = meta_leader_refusal(r, "consumer groups are coordinated")
        if refused is not None:
            return answer(*refused)
        try:
            b = json.loads(req.body)
            group = b["group"]
            if not isinstance(group, str) or not group or "/" in group:
                raise ValueError(f"bad group {group!r}")
        except (ValueError, KeyError, TypeError) as e:
            return answer(ResponseCode.BAD_REQUEST, f"consumer group {req.op}: {e}")
        if r.core.term != self._term:  # a new leadership: earlier coordinators' state is gone
            self._term = r.core.term
            self._term_started_ms = getattr(r.core, "leader_since_ms", monotonic_ms())  # (the same monotonic clock)
            self.coordinators.clear()
        if self._ticker is None or self._ticker.done():
            self._ticker = asyncio.ensure_future(self._tick())
        now_ms = monotonic_ms()
        op = req.op
        c = self.coordinators.get(group)
        try:
            if op == "join":
                return self._join(group, b, now_ms, answer)
            if op == "describe":
                if c is None:
                    return answer(ResponseCode.SUCCESS, body={"group": group, "generation": 0, "members": [],
                                                              "owners": []})
                return answer(ResponseCode.SUCCESS, body={
                    "group": group, "generation": c.generation, "members": sorted(c.last_seen),
                    "owners": [[t, q, c.holder.get((t, q))] for t, q in c.queues]})
            member = str(b["member"])
            if c is None:
                return answer(ResponseCode.UNKNOWN_MEMBER, f"{member} is not a member of {group}: join")
            if op == "heartbeat":
                code = c.heartbeat(member, int(b["generation"]), now_ms)
                return answer(code, "" if code is ResponseCode.SUCCESS else "rejoin",
                              _assignment(c, member))
            if op == "leave":
                c.leave(member)
                return answer(ResponseCode.SUCCESS)
            if op == "commit":
                return self._commit(session, req, c, group, member, int(b["generation"]), b["offsets"], answer)
        except (KeyError, TypeError, ValueError) as e:
            return answer(ResponseCode.BAD_REQUEST, f"consumer group {op}: {e!r}")
        return answer(ResponseCode.BAD_REQUEST, f"unknown consumer group op {op!r}")

    def _join(self, group: str, b: dict, now_ms: int, answer: Answer) -> None:
        member, topics = str(b["member"]), [str(t) for t in b["topics"]]
        timeout = int(b.get("session_timeout_ms", 10_000))
        if not topics or not MIN_SESSION_TIMEOUT_MS <= timeout <= MAX_SESSION_TIMEOUT_MS:
            return answer(ResponseCode.BAD_REQUEST, f"join: topics {topics}, session_timeout_ms {timeout} "
                                                    f"({MIN_SESSION_TIMEOUT_MS}..{MAX_SESSION_TIMEOUT_MS})")
        kv = self.replica.sm.kv
        queues = []
        for t in topics:
            got = kv.get(f"topics/{t}")
            if got is None:
                return answer(ResponseCode.TOPIC_NOT_EXIST, f"topic {t!r} does not exist")
            queues += [(t, q) for q in range(len(json.loads(got.value)["queues"]))]
        c = self.coordinators.get(group)
        if c is None:
            c = self.coordinators[group] = GroupCoordinator(
                group, [], session_timeout_ms=timeout, generation=max(self._term, 0) << 32,
                hand_free_after_ms=self._term_started_ms + REJOIN_GRACE_MS)
        owned = [(str(t), int(q)) for t, q in b.get("owned", [])]
        c.join(member, now_ms, queues, session_timeout_ms=timeout, owned=owned)
        log.info("consumer group %s: %s joined, generation %d, members %s", group, member, c.generation,
                 sorted(c.last_seen))
        answer(ResponseCode.SUCCESS, body=_assignment(c, member))

    def _commit(self, session: Session, req: ConsumerGroupRequest, c: GroupCoordinator, group: str, member: str,
                generation: int, offsets: dict, answer: Answer) -> None:
        bodies = []
        for name, offset in sorted(offsets.items()):
            topic, _, q = name.rpartition("/")
            queue = (topic, int(q))
            code = c.check(member, generation, queue)
            if code is not ResponseCode.SUCCESS:
                return answer(code, f"{member} of generation {generation} does not own {name} (generation "
                                    f"{c.generation}): rejoin")
            if int(offset) < 0:
                return answer(ResponseCode.BAD_REQUEST, f"commit: offset {offset} of {name}")
            bodies.append(encode_put(offset_key(group, *queue), str(int(offset)).encode()))
        if not bodies:
            return answer(ResponseCode.SUCCESS)

        def done(c: Completion) -> None:
            send_response(session, ConsumerGroupResponse(req.request_id, c.code, c.leader_id, message=c.message))

        self.replica.submit(lambda rid: ClientAppend(rid, tuple(bodies), 0, -1), Pending(done))

    async def _tick(self) -> None:
        while not self.replica.stopping:
            await asyncio.sleep(TICK_MS / 1000)
            now_ms = monotonic_ms()
            for group, c in list(self.coordinators.items()):
                for gone in c.tick(now_ms):
                    log.info("consumer group %s: %s silent past its session timeout; generation %d", group, gone,
                             c.generation)

    def close(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()


def _assignment(c: GroupCoordinator, member: str) -> dict:
    a = c.assignment(member)
    return {"generation": a.generation, "queues": [list(q) for q in a.queues]}
