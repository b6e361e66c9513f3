"""Client append requests waiting for their quorum (DLedger's pendingAppendResponsesByTerm).

One PendingAppend per log write; several request ids may wait on it (an idempotent retry joins the batch it
duplicates). Deadlines are kept in arrival order: every request waits the same max_wait_ack_ms and time only
grows, so the oldest deadline is always at the left.
"""

from __future__ import annotations

from collections import deque

from ..codes import ResponseCode
from .types import Completion


class PendingAppend:
    __slots__ = ("first_index", "last_index", "term", "producer", "waiters")

    def __init__(self, first_index: int, last_index: int, term: int, producer: tuple[int, int] | None) -> None:
        assert first_index <= last_index
        self.first_index = first_index
        self.last_index = last_index
        self.term = term
        self.producer = producer
        self.waiters: list[int] = []


class PendingRequests:
    def __init__(self) -> None:
        self._appends: deque[PendingAppend] = deque()  # ordered by last_index
        self._owner: dict[int, PendingAppend] = {}  # request_id -> its batch
        self._deadlines: deque[tuple[int, int]] = deque()  # (deadline_ms, request_id), arrival order
        self._by_producer: dict[tuple[int, int], PendingAppend] = {}

    def __len__(self) -> int:
        return len(self._owner)

    @property
    def max_index(self) -> int:
        return self._appends[-1].last_index if self._appends else -1

    def by_producer(self, producer: tuple[int, int]) -> PendingAppend | None:
        return self._by_producer.get(producer)

    def add(self, first_index: int, last_index: int, term: int, producer: tuple[int, int] | None) -> PendingAppend:
        pa = PendingAppend(first_index, last_index, term, producer)
        appends = self._appends
        if not appends or appends[-1].last_index < last_index:
            appends.append(pa)
        else:  # rare: an idempotent retry of an older, still uncommitted batch found in the log
            pos = len(appends)
            while pos > 0 and appends[pos - 1].last_index > last_index:
                pos -= 1
            appends.insert(pos, pa)
        if producer is not None:
            self._by_producer[producer] = pa
        return pa

    def wait(self, pa: PendingAppend, request_id: int, deadline_ms: int) -> None:
        assert request_id not in self._owner, f"duplicate request_id {request_id}"
        pa.waiters.append(request_id)
        self._owner[request_id] = pa
        self._deadlines.append((deadline_ms, request_id))

    def complete_up_to(self, committed_index: int, out: list[Completion]) -> None:
        """Answer SUCCESS for every batch wholly ≤ committed_index."""
        appends = self._appends
        owner = self._owner
        while appends and appends[0].last_index <= committed_index:
            pa = appends.popleft()
            for rid in pa.waiters:
                if owner.pop(rid, None) is pa:
                    out.append(Completion(rid, ResponseCode.SUCCESS, pa.first_index, pa.last_index, pa.term))
            if pa.producer is not None and self._by_producer.get(pa.producer) is pa:
                del self._by_producer[pa.producer]
        if not owner:
            self._deadlines.clear()

    def expire(self, now_ms: int, out: list[Completion]) -> None:
        """Answer WAIT_QUORUM_ACK_TIMEOUT for requests past their deadline (the batch stays: it may still
        commit, and an idempotent retry can join it)."""
        deadlines = self._deadlines
        owner = self._owner
        while deadlines and deadlines[0][0] <= now_ms:
            _, rid = deadlines.popleft()
            pa = owner.pop(rid, None)
            if pa is not None:
                pa.waiters.remove(rid)
                out.append(Completion(rid, ResponseCode.WAIT_QUORUM_ACK_TIMEOUT, pa.first_index, pa.last_index,
                                      pa.term))

    def fail_all(self, code: ResponseCode, leader_id: str | None, out: list[Completion],
                 written_up_to: int = -1) -> None:
        """Answer every waiting request with `code`; but a batch wholly ≤ `written_up_to` is in our log and
        may have been pushed, so it may still commit under a later leader: its waiters get the retriable
        "outcome unknown" (WAIT_QUORUM_ACK_TIMEOUT), never a final refusal (an idempotent retry finds it)."""
        for pa in self._appends:
            answer = ResponseCode.WAIT_QUORUM_ACK_TIMEOUT if pa.last_index <= written_up_to else code
            for rid in pa.waiters:
                if self._owner.pop(rid, None) is pa:
                    out.append(Completion(rid, answer, leader_id=leader_id))
        assert not self._owner
        self._appends.clear()
        self._deadlines.clear()
        self._by_producer.clear()
