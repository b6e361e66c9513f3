"""The Kafka door's read-ahead (doors/kafka/read_ahead.py), with a clock the test moves: a pull started for an
offset answers the Fetch at that offset once, and never when it is too old, empty or failed; the oldest go past
the limit; closing cancels what runs."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from quorumlog.doors.kafka.read_ahead import ReadAhead
from quorumlog.errors import NotLeader


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def pulled(n: int = 1) -> SimpleNamespace:
    return SimpleNamespace(messages=[object()] * n)


async def answer(value, gate: asyncio.Event | None = None):
    if gate is not None:
        await gate.wait()
    if isinstance(value, BaseException):
        raise value
    return value


def read_ahead(clock: Clock, **kw) -> ReadAhead:
    return ReadAhead(asyncio.ensure_future, clock=clock, **kw)


def test_a_read_ahead_answers_the_fetch_at_its_offset_once() -> None:
    async def main() -> None:
        clock = Clock()
        ra = read_ahead(clock)
        p = pulled()
        gate = asyncio.Event()
        ra.start(("t", 0, 10), answer(p, gate))
        assert await ra.take(("t", 0, 11)) is None  # another offset: nothing
        taking = asyncio.ensure_future(ra.take(("t", 0, 10)))
        await asyncio.sleep(0)
        assert not taking.done()  # still pulling: the fetch waits for it rather than pulling twice
        gate.set()
        assert await taking is p
        assert await ra.take(("t", 0, 10)) is None  # taken once
        assert (ra.started, ra.taken, len(ra)) == (1, 1, 0)

    asyncio.run(main())


@pytest.mark.parametrize("case", ["old before", "old after", "empty", "failed"])
def test_what_a_fetch_must_not_take(case: str) -> None:
    async def main() -> None:
        clock = Clock()
        ra = read_ahead(clock, max_age_s=1.0)
        gate = asyncio.Event()
        value = {"empty": pulled(0), "failed": NotLeader("moved")}.get(case, pulled())
        ra.start(("t", 1, 5), answer(value, gate))
        if case == "old before":
            clock.now += 1.5
            assert await ra.take(("t", 1, 5)) is None
        elif case == "old after":  # the pull was slow: what it says of the partition is stale by now
            taking = asyncio.ensure_future(ra.take(("t", 1, 5)))
            await asyncio.sleep(0)
            clock.now += 1.5
            gate.set()
            assert await taking is None
        else:
            gate.set()
            await asyncio.sleep(0)
            assert await ra.take(("t", 1, 5)) is None
        assert ra.taken == 0

    asyncio.run(main())


def test_the_oldest_go_past_the_limit_and_clear_cancels() -> None:
    async def main() -> None:
        clock = Clock()
        ra = read_ahead(clock, max_entries=2)
        gate = asyncio.Event()
        tasks = []
        for offset in range(3):
            ra.start(("t", 0, offset), answer(pulled(), gate))
            tasks.append(next(reversed(ra._pulls.values()))[1])
        await asyncio.sleep(0)
        assert len(ra) == 2 and tasks[0].cancelled()
        assert await ra.take(("t", 0, 0)) is None
        ra.start(("t", 0, 2), answer(pulled(), gate))  # the same key again: the first one goes
        await asyncio.sleep(0)
        assert tasks[2].cancelled() and len(ra) == 2
        ra.clear()
        await asyncio.sleep(0)
        assert len(ra) == 0 and tasks[1].cancelled()

    asyncio.run(main())
