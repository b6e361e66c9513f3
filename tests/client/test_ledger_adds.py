"""The ledger client's AddSender: one add request out per bookie, what queues behind it leaves when the round
ends (or ROUND_WAIT_S), and a bookie that does not answer fails the adds queued for it at once. Driven with a registry whose
calls the test answers, and writers that only record what the sender tells them."""

from __future__ import annotations

import asyncio

from quorumlog.client.ledger_adds import MAX_ADD_REQUEST_BYTES, ROUND_BYTES, ROUND_WAIT_S, AddSender
from quorumlog.codes import ResponseCode
from quorumlog.errors import Timeout
from quorumlog.wire.ledger import (MAX_ADD_BATCH, AddEntry, BookieOp, BookieOpResponse, pack_multi_results,
                                   unpack_multi_adds)


class Registry:
    def __init__(self) -> None:
        self.calls: list[tuple[str, object, asyncio.Future]] = []
        self._rid = 0

    def request_id(self) -> int:
        self._rid += 1
        return self._rid

    async def call(self, bookie, request, timeout_ms=None):
        fut = asyncio.get_running_loop().create_future()
        self.calls.append((bookie, request, fut))
        return await fut


class Writer:
    def __init__(self, ledger_id: int) -> None:
        self.ledger_id = ledger_id
        self.results: list[tuple[str, list[tuple[int, int]]]] = []
        self.failed: list[str] = []
        self.sent: list[tuple[str, list[int], asyncio.Future]] = []  # lone-writer requests (send_adds)

    async def send_adds(self, bookie, adds) -> bool:
        fut = asyncio.get_running_loop().create_future()
        self.sent.append((bookie, [m.entry_id for m in adds], fut))
        return await fut

    def add_results(self, bookie, results) -> None:
        self.results.append((bookie, list(results)))

    def bookie_failed(self, bookie) -> None:
        self.failed.append(bookie)


def add(writer: Writer, bookie: str, entry_id: int, size: int = 10) -> AddEntry:
    return AddEntry(bookie, writer.ledger_id, entry_id, b"x" * size, entry_id - 1)


def answer_all(bookie_call) -> None:
    _, request, fut = bookie_call
    sections = unpack_multi_adds(request.data)
    fut.set_result(BookieOpResponse(request.request_id, ResponseCode.SUCCESS, BookieOp.ADD_MULTI,
                                    data=pack_multi_results([(lid, e, 0) for lid, adds in sections
                                                             for e, _, _ in adds])))


async def turn() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


def ids(bookie_call) -> list[tuple[int, list[int]]]:
    return [(lid, [e for e, _, _ in adds]) for lid, adds in unpack_multi_adds(bookie_call[1].data)]


def drive(body) -> None:
    """Run body(registry, sender, three writers of ledgers 1, 2, 3) on a fresh loop."""
    async def main():
        reg = Registry()
        await body(reg, AddSender(reg), Writer(1), Writer(2), Writer(3))  # type: ignore[arg-type]
    asyncio.run(main())


def test_adds_queued_behind_a_bookies_request_leave_together_when_the_round_ends():
    async def body(reg, sender, w1, w2, w3):
        sender.queue(w1, [add(w1, "b0", 0)])
        sender.queue(w2, [add(w2, "b0", 0)])
        sender.queue(w3, [add(w3, "b1", 0)])
        await turn()
        assert [(c[0], ids(c)) for c in reg.calls] == [("b0", [(1, [0]), (2, [0])])]
        assert [(b, e) for b, e, _ in w3.sent] == [("b1", [0])]  # (a lone writer's adds: its own request)
        for w in (w1, w2, w3):  # b0 is busy: these wait
            sender.queue(w, [add(w, "b0", 1)])
        sender.queue(w3, [add(w3, "b1", 1)])
        await turn()
        assert len(reg.calls) == 1 and len(w3.sent) == 1
        answer_all(reg.calls[0])
        await turn()
        assert w1.results == [("b0", [(0, 0)])] and w2.results == [("b0", [(0, 0)])]
        assert len(reg.calls) == 1  # b0 is free, but b1's request is out: the round goes on
        w3.sent[0][2].set_result(True)
        await turn()  # the round is over: both leave
        assert len(reg.calls) == 2 and ids(reg.calls[1]) == [(1, [1]), (2, [1]), (3, [1])]
        assert [(b, e) for b, e, _ in w3.sent] == [("b1", [0]), ("b1", [1])]
        assert w1.failed == w2.failed == w3.failed == []
    drive(body)


def test_a_free_bookie_waits_for_the_round_at_most_round_wait_unless_round_bytes_are_queued():
    async def body(reg, sender, w1, w2, w3):
        sender.queue(w1, [add(w1, "hung", 0)])
        await turn()
        assert [b for b, _, _ in w1.sent] == ["hung"]  # never answered
        sender.queue(w2, [add(w2, "b0", 0)])
        await turn()
        assert w2.sent == []  # waits for the round...
        await asyncio.sleep(ROUND_WAIT_S * 3)
        assert [e for _, e, _ in w2.sent] == [[0]]  # ... but not past ROUND_WAIT_S
        sender.queue(w3, [add(w3, "b1", 0, size=ROUND_BYTES)])
        await turn()
        assert [e for _, e, _ in w3.sent] == [[0]]  # full enough: no wait
    drive(body)


def test_a_bookie_that_does_not_answer_fails_the_adds_queued_behind_it_at_once():
    async def body(reg, sender, w1, w2, w3):
        sender.queue(w1, [add(w1, "b0", 0)])
        sender.queue(w2, [add(w2, "b0", 0)])
        await turn()
        sender.queue(w3, [add(w3, "b0", 0)])  # queued behind the request in flight
        sender.queue(w3, [add(w3, "b1", 0)])
        await turn()
        reg.calls[0][2].set_exception(Timeout("no answer"))
        await turn()
        assert w1.failed == w2.failed == ["b0"]  # their request's
        assert w3.failed == ["b0"]  # queued: failed with it, never sent to b0
        assert [c[0] for c in reg.calls] == ["b0"]
        assert [(b, e) for b, e, _ in w3.sent] == [("b1", [0])]  # other bookies go on
        w3.sent[0][2].set_result(True)
        await turn()
        sender.queue(w3, [add(w3, "b0", 1)])  # b0 is free again: a later add is sent
        await turn()
        assert [c[0] for c in reg.calls] == ["b0"] and [b for b, _, _ in w3.sent] == ["b1", "b0"]
    drive(body)


def test_a_request_carries_at_most_max_add_batch_adds_and_the_rest_follows_in_order():
    async def body(reg, sender, w1, w2, w3):
        for e in range(MAX_ADD_BATCH):
            sender.queue(w1, [add(w1, "b0", e)])
        for e in range(5):
            sender.queue(w2, [add(w2, "b0", e)])
        await turn()
        # w1 alone fills the first request (a lone writer's: send_adds); w2's follow once it is answered
        assert len(w1.sent) == 1 and w1.sent[0][1] == list(range(MAX_ADD_BATCH)) and reg.calls == []
        w1.sent[0][2].set_result(True)
        await turn()
        assert w2.sent[0][1] == [0, 1, 2, 3, 4]
    drive(body)


def test_a_request_stops_at_max_add_request_bytes_but_carries_at_least_one_add():
    async def body(reg, sender, w1, w2, w3):
        big = MAX_ADD_REQUEST_BYTES // 2 + 1
        sender.queue(w1, [add(w1, "b0", 0, size=big)])
        sender.queue(w2, [add(w2, "b0", 0, size=big)])
        sender.queue(w2, [add(w2, "b0", 1, size=10)])
        await turn()
        assert [e for _, e, _ in w1.sent] == [[0]] and w2.sent == []
        w1.sent[0][2].set_result(True)
        await turn()
        assert [e for _, e, _ in w2.sent] == [[0, 1]]
        sender.queue(w3, [add(w3, "b1", 0, size=MAX_ADD_REQUEST_BYTES + 1)])  # above the bound: still goes, alone
        await turn()
        assert [e for _, e, _ in w3.sent] == [[0]]
    drive(body)
