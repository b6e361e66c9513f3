"""The key/value service's runtime decisions (server/kv_service.py), with a stand-in replica: the answer to a
retried write whose result is no longer kept, and where a member that needs a snapshot fetches it."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from quorumlog.codes import ResponseCode
from quorumlog.meta.kv import KVStore, encode_put
from quorumlog.server.kv_service import KvService
from quorumlog.server.replica import _Pending
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
    replica = SimpleNamespace(sm=_Machine(kv), _send=lambda session, resp: sent.append(resp),
                              metrics=SimpleNamespace(count_request=lambda name: None))
    service = KvService(replica)
    asyncio.run(service._answer_applied(_Pending("session", 7, "kv_write", 0.0, request=req), index))
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
