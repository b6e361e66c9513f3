"""The consumer-group service (server/services/consumer_groups.py) with a stand-in `_meta` leader: what the runtime
hands the coordinator at a join — each member's own session timeout, each topic's own queues."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

from quorumlog.codes import ResponseCode
from quorumlog.meta.kv import KVStore, encode_put
from quorumlog.raft.types import Role
from quorumlog.server.services import consumer_groups
from quorumlog.server.services.consumer_groups import ConsumerGroupService
from quorumlog.wire.client import ConsumerGroupRequest


def _service(topics: dict[str, int]):
    kv = KVStore()
    for i, (name, queues) in enumerate(sorted(topics.items())):
        kv.apply(i, encode_put(f"topics/{name}", json.dumps({"queues": [{} for _ in range(queues)]}).encode()))
    answers = []
    replica = SimpleNamespace(state_machine="kv", stopping=False, sm=SimpleNamespace(kv=kv),
                              core=SimpleNamespace(role=Role.LEADER, term=3, leader_id="n1",
                                                   leader_since_ms=0))
    return ConsumerGroupService(replica), answers


def _call(service, answers, op: str, **body) -> tuple[ResponseCode, dict]:
    body = json.dumps({"group": "cg", **body}).encode()
    service.on_request(SimpleNamespace(send=answers.append), ConsumerGroupRequest(1, op, body))
    resp = answers.pop()
    return resp.code, json.loads(resp.body or b"{}")


def test_each_member_is_expired_by_its_own_session_timeout(monkeypatch):
    async def main() -> None:
        service, answers = _service({"T": 4})
        now = [1_000_000]
        monkeypatch.setattr(consumer_groups, "monotonic_ms", lambda: now[0])
        assert _call(service, answers, "join", member="patient", topics=["T"], session_timeout_ms=30_000)[0] == \
            ResponseCode.SUCCESS
        _call(service, answers, "join", member="hasty", topics=["T"], session_timeout_ms=1_000)
        c = service.coordinators["cg"]
        for _ in range(10):  # the hasty member heartbeats; the patient one is silent for 5 s, within its 30 s
            now[0] += 500
            _call(service, answers, "heartbeat", member="hasty", generation=c.generation)
            assert c.tick(now[0]) == []
        service.close()

    asyncio.run(main())


def test_a_topics_queues_go_only_to_members_that_subscribe_to_it(monkeypatch):
    async def main() -> None:
        service, answers = _service({"A": 4, "B": 3})
        monkeypatch.setattr(consumer_groups, "monotonic_ms", lambda: 1_000_000)
        _call(service, answers, "join", member="a", topics=["A"])
        code, got = _call(service, answers, "join", member="b", topics=["B"])
        assert code == ResponseCode.SUCCESS and sorted(map(tuple, got["queues"])) == [("B", 0), ("B", 1), ("B", 2)]
        code, got = _call(service, answers, "heartbeat", member="a", generation=1)  # (a hears of b's join)
        code, got = _call(service, answers, "join", member="a", topics=["A"])
        assert sorted(map(tuple, got["queues"])) == [("A", q) for q in range(4)]
        service.close()

    asyncio.run(main())
