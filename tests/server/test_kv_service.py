"""The key/value service's runtime decisions (server/services/kv.py), with a stand-in replica: the answer to a
retried write whose result is no longer kept, and where a member that needs a snapshot fetches it."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from quorumlog.codes import ResponseCode
from quorumlog.meta.kv import KVStore, encode_put
from quorumlog.server.services.kv import KvService
from quorumlog.wire.client import KvRequest


class _Machine:
    """A state machine host whose results of old writes were pushed out (4,096 later writes, or a restart)."""

    def __init__(self, kv: KVStore) -> None:
        self.kv = kv

    async def wait_applied(self, index: int) -> None:
        assert index <= self.kv.applied_index

    def result_of(self, index: int) -> None:
        return None


def _answer_to_retry(kv: KVStore, index: int, req: KvRequest):
    sent = []
    replica = SimpleNamespace(sm=_Machine(kv), metrics=SimpleNamespace(count_request=lambda name: None))
    service = KvService(replica)
    asyncio.run(service._answer_applied(SimpleNamespace(send=sent.append), req, index, read=False))
    (resp,) = sent
    return resp


def test_a_retried_compare_and_set_that_conflicted_is_never_answered_success():
    kv = KVStore()
    kv.apply(0, encode_put("lock", b"a"))
    assert kv.apply(1, encode_put("lock", b"b", 5)).code == ResponseCode.METADATA_VERSION_CONFLICT
    resp = _answer_to_retry(kv, 1, KvRequest(1, "put", "lock", b"b", expected_version=5, client_id=9, seq=1))
    assert resp.code == ResponseCode.DUPLICATE_SEQUENCE_TOO_OLD and "read the key" in resp.message
    assert kv.get("lock").value == b"a"


def test_a_retried_write_whose_outcome_is_known_is_answered_success():
    kv = KVStore()
    kv.apply(0, encode_put("lock", b"a", 0))  # a create-only put that took: still the key's last change
    resp = _answer_to_retry(kv, 0, KvRequest(1, "put", "lock", b"a", expected_version=0, client_id=9, seq=1))
    assert (resp.code, resp.version) == (ResponseCode.SUCCESS, 1)
    kv.apply(1, encode_put("other", b"x"))  # an unconditional put always took
    resp = _answer_to_retry(kv, 1, KvRequest(1, "put", "other", b"x", client_id=9, seq=2))
    assert resp.code == ResponseCode.SUCCESS
    kv.apply(2, encode_put("lock", b"c"))  # the create was overwritten since: unknown whether it had taken
    resp = _answer_to_retry(kv, 0, KvRequest(1, "put", "lock", b"a", expected_version=0, client_id=9, seq=1))
    assert resp.code == ResponseCode.DUPLICATE_SEQUENCE_TOO_OLD


def test_a_member_that_needs_a_snapshot_never_asks_itself_for_it():
    links = {"n1": ("127.0.0.1", 1), "n3": ("127.0.0.1", 3)}
    replica = SimpleNamespace(config=SimpleNamespace(node_id="n2"), links=links, leader_id="n2")
    service = KvService(replica)
    assert [service._snapshot_source(i) for i in range(4)] == ["n1", "n3", "n1", "n3"]
    replica.leader_id = "n3"
    assert service._snapshot_source(0) == "n3"
    replica.leader_id = None
    assert service._snapshot_source(1) == "n3"


class _Runner:
    def __init__(self, snapshots: list[tuple[int, bytes]]) -> None:
        self.snapshots = snapshots
        self.taken = 0

    def take_snapshot(self) -> tuple[int, bytes]:
        self.taken += 1
        return self.snapshots[min(self.taken, len(self.snapshots)) - 1]


class _Loopback:
    """A connection to a member's KvService: each call is answered by its on_request."""

    def __init__(self, service: KvService, sent: list) -> None:
        self.service, self.sent, self.calls, self._rid = service, sent, [], 0

    def next_request_id(self) -> int:
        self._rid += 1
        return self._rid

    async def call(self, req: KvRequest, timeout_ms: int):
        self.calls.append(req)
        self.service.on_request(SimpleNamespace(send=self.sent.append), req)
        return self.sent.pop()


def _member(runner: _Runner, state_machine: str = "topics"):
    sent: list = []
    replica = SimpleNamespace(sm=SimpleNamespace(runner=runner), stopping=False, state_machine=state_machine,
                              group="t1")
    service = KvService(replica)
    return service, _Loopback(service, sent)


def test_a_snapshot_larger_than_a_frame_is_fetched_in_chunks(monkeypatch):
    from quorumlog.server.services import kv as kv_service
    from quorumlog.server.services.kv import fetch_snapshot
    monkeypatch.setattr(kv_service, "SNAPSHOT_CHUNK_BYTES", 30)  # (a frame holds 64 MiB: 30 bytes stand for it)
    data = bytes(range(100))
    runner = _Runner([(41, data), (57, b"newer" * 40)])
    service, conn = _member(runner)
    assert asyncio.run(fetch_snapshot(conn)) == data
    assert [c.expected_version for c in conn.calls] == [0, 30, 60, 90] and runner.taken == 1
    # the member moved on to a newer snapshot between chunks: the fetch is refused, and starts again
    service._serving = (57, b"newer" * 40)
    from quorumlog.errors import QuorumLogError
    try:
        asyncio.run(_resume(conn, 41, 30))
        raise AssertionError("a chunk of another snapshot was served")
    except QuorumLogError as e:
        assert e.code == ResponseCode.INCONSISTENT_STATE


async def _resume(conn: _Loopback, index: int, offset: int):
    resp = await conn.call(KvRequest(conn.next_request_id(), "snapshot_chunk", revision=index,
                                     expected_version=offset), 1_000)
    if resp.code != ResponseCode.SUCCESS:
        from quorumlog.errors import QuorumLogError
        raise QuorumLogError.for_code(resp.code, resp.message)
    return resp
