"""The soak's writers record an append that raised as failed only when no attempt can have appended it."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from quorumlog.codes import ResponseCode
from quorumlog.errors import NetworkError
from quorumlog.soak.checker import FAILED, UNKNOWN
from quorumlog.soak.runner import NOT_SENT, _record_attempts, outcome_of_failed_append
from quorumlog.wire.client import AppendRequest

pytestmark = pytest.mark.timeout(10)


@pytest.mark.parametrize("attempts, outcome", [
    ([], FAILED),  # never sent (no leader found)
    ([NOT_SENT, NOT_SENT], FAILED),
    ([ResponseCode.NOT_LEADER, ResponseCode.LEADER_TRANSFERRING], FAILED),
    ([ResponseCode.ENTRY_TOO_LARGE], FAILED),
    ([NOT_SENT, ResponseCode.LEADER_PENDING_FULL], FAILED),
    (["TimeoutErr"], UNKNOWN),  # sent, no answer: it may be in the log
    (["TimeoutErr", ResponseCode.NOT_LEADER], UNKNOWN),  # the last error hides the first attempt's fate
    ([ResponseCode.NOT_LEADER, "NetworkError"], UNKNOWN),
    ([ResponseCode.DISK_FULL], UNKNOWN),  # a leader fails pending (maybe replicated) entries with it
    ([ResponseCode.DISK_ERROR], UNKNOWN),
    ([ResponseCode.TERM_CHANGED], UNKNOWN),
])
def test_outcome_of_a_failed_append(attempts, outcome):
    assert outcome_of_failed_append(attempts) == outcome


def test_attempts_are_recorded_per_append_request():
    class Pool:
        def __init__(self):
            self.fail_connect = False

        async def get(self, node_id, timeout_ms):
            if self.fail_connect:
                raise NetworkError("connection refused")
            return object()

        async def call(self, node_id, request, timeout_ms):
            await self.get(node_id, timeout_ms)
            if request == "status":
                return "status-answer"
            if request.bodies == (b"slow",):
                raise NetworkError("connection lost")
            return SimpleNamespace(code=ResponseCode.NOT_LEADER)

    async def main():
        pool = Pool()
        client = SimpleNamespace(_pool=pool)
        attempts: list = []
        _record_attempts(client, attempts)
        assert await pool.call("n0", "status", 100) == "status-answer"
        assert attempts == []  # only appends count
        await pool.call("n0", AppendRequest(1, (b"x",), 1, 0), 100)
        with pytest.raises(NetworkError):
            await pool.call("n0", AppendRequest(2, (b"slow",), 1, 1), 100)
        pool.fail_connect = True
        with pytest.raises(NetworkError):
            await pool.call("n0", AppendRequest(3, (b"y",), 1, 2), 100)
        assert attempts == [ResponseCode.NOT_LEADER, "NetworkError", NOT_SENT]
    asyncio.run(main())
