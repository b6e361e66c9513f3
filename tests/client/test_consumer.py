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
