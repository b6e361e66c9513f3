"""The consumer's handling of a pull refused as beyond the queue's end (client/consumer.py)."""

from __future__ import annotations

import asyncio

import quorumlog
from quorumlog.errors import OffsetTooBig

Q = ("T", 0)


class _Topics:
    """A deposed leader answered the pull OFFSET_TOO_BIG (its log is shorter); the new leader has the queue
    up to `end`."""

    def __init__(self, end: int) -> None:
        self.end = end

    async def pull(self, *a, **kw):
        raise OffsetTooBig("offset 100 > the queue's end 90")

    async def offsets(self, topic: str, queue_id: int) -> tuple[int, int]:
        return 0, self.end

    async def close(self) -> None:
        pass


def _fill_after_too_big(end: int) -> int:
    async def main() -> int:
        c = quorumlog.Consumer("n1=127.0.0.1:1", consumer_group="cg", topics=["T"])
        c._tc = _Topics(end)
        c.generation, c.assignment = 1, (Q,)
        c._fetch, c._consumed = {Q: 100}, {Q: 100}
        await c._fill()
        return c._fetch[Q]

    return asyncio.run(main())


def test_offset_too_big_from_a_deposed_leader_never_makes_a_consumer_skip():
    assert _fill_after_too_big(end=150) == 100  # the queue does reach 100: read on from there, skip nothing


def test_offset_too_big_after_a_commit_beyond_the_end_resets_to_the_end():
    assert _fill_after_too_big(end=90) == 90


class _Coordinator:
    """The coordinator's answers, in order; records what the consumer asked."""

    def __init__(self, *answers: dict) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[str, dict]] = []

    async def __call__(self, op: str, body: dict) -> dict:
        self.calls.append((op, body))
        return self.answers.pop(0) if op == "join" else {}


def test_a_revoked_queue_is_given_up_before_the_coordinator_hears_it_is_free():
    """Its pull is cancelled and what was fetched dropped; what was delivered is committed; only then does a
    heartbeat tell the coordinator (which then hands the queue to its new owner, starting from that commit)."""
    from quorumlog.client.topics import TopicMessage  # noqa: F401  (the buffer holds these)

    async def main() -> None:
        c = quorumlog.Consumer("n1=127.0.0.1:1", consumer_group="cg", topics=["T"])
        c._tc = _Topics(0)
        kept, lost = ("T", 0), ("T", 1)
        c.generation, c.assignment = 1, (kept, lost)
        c._fetch, c._consumed, c._committed = {kept: 5, lost: 40}, {kept: 5, lost: 37}, {kept: 5, lost: 30}
        pull = asyncio.ensure_future(asyncio.sleep(10))
        c._pulls = {lost: (1, pull)}
        c._call = coordinator = _Coordinator({"generation": 2, "queues": [list(kept)]})
        await c._join()
        await asyncio.sleep(0)
        assert [op for op, _ in coordinator.calls] == ["join", "commit", "heartbeat"]
        assert coordinator.calls[0][1]["owned"] == [list(kept), list(lost)]
        assert coordinator.calls[1][1] == {"generation": 2, "offsets": {"T/1": 37}}
        assert pull.cancelled() and c.assignment == (kept,) and lost not in c._fetch
        await c._tc.close()

    asyncio.run(main())


def test_a_consumer_unheard_for_its_session_timeout_delivers_nothing_before_it_joined_again():
    import time

    async def main() -> None:
        c = quorumlog.Consumer("n1=127.0.0.1:1", consumer_group="cg", topics=["T"], session_timeout_ms=1_000)
        c._tc = _Topics(0)
        c.generation, c.assignment, c._rejoin = 1, (Q,), False
        c._fetch, c._consumed, c._committed = {Q: 5}, {Q: 5}, {Q: 5}
        c._next_commit = time.monotonic() + 60
        c._heard = time.monotonic() - 2  # (its heartbeats have failed for 2 s)
        c._call = coordinator = _Coordinator({"generation": 9, "queues": []})
        assert await c._ready()
        assert [op for op, _ in coordinator.calls] == ["join", "heartbeat"] and c.assignment == ()

    asyncio.run(main())
