"""A consumer group's members and who owns which queue, with a generation (Kafka's group coordinator, sans-I/O).

RocketMQ rebalances on each client from a possibly stale view, so two consumers of one group can hold one
queue for a while (its users see duplicates). Here one coordinator assigns, every change of members makes a
new generation, and every pull and commit names the generation it was assigned in: an old generation's is
refused with ILLEGAL_GENERATION, so no two members ever own one queue in one generation and a member that lost
its queues cannot commit for them.

    c = GroupCoordinator("cg", queues=[("T", 0), ("T", 1)], session_timeout_ms=10_000)
    g = c.join("c1", now_ms)            -> Assignment(generation, queues)
    c.heartbeat("c1", generation, now)  -> ResponseCode (SUCCESS, ILLEGAL_GENERATION: rejoin, UNKNOWN_MEMBER)
    c.check("c1", generation, queue)    -> ResponseCode for a pull or a commit of that queue
    c.leave("c1"); c.tick(now_ms)       # a member silent past session_timeout_ms leaves
"""

from __future__ import annotations

from dataclasses import dataclass

from ..codes import ResponseCode

Queue = tuple[str, int]  # (topic, queue id)
OFFSETS_PREFIX = "offsets/"


def offset_key(group: str, topic: str, queue_id: int) -> str:
    """Where a group's committed offset of a queue is kept in `_meta` (the next offset to read)."""
    return f"{OFFSETS_PREFIX}{group}/{topic}/{queue_id}"


@dataclass(frozen=True, slots=True)
class Assignment:
    generation: int
    queues: tuple[Queue, ...]


class GroupCoordinator:
    def __init__(self, group: str, queues: list[Queue], *, session_timeout_ms: int = 10_000,
                 generation: int = 0) -> None:
        self.group = group
        self.queues = sorted(queues)
        self.session_timeout_ms = session_timeout_ms
        # Generations only grow. A coordinator that replaces another (a new `_meta` leader) starts above every
        # generation the old one handed out: the server starts it at its Raft term << 32.
        self.generation = generation
        self.last_seen: dict[str, int] = {}
        self.owner: dict[Queue, str] = {}
        self.subscriptions: dict[str, frozenset[Queue]] = {}  # member -> the queues of its topics

    def _rebalance(self) -> None:
        """Queues to members in sorted order, round robin: each queue has exactly one owner."""
        self.generation += 1
        members = sorted(self.last_seen)
        self.owner = {q: members[i % len(members)] for i, q in enumerate(self.queues)} if members else {}

    def assignment(self, member: str) -> Assignment:
        return Assignment(self.generation, tuple(q for q in self.queues if self.owner.get(q) == member))

    def join(self, member: str, now_ms: int, queues: list[Queue] | None = None) -> Assignment:
        """`member` joins (or confirms it is here); `queues`, the queues of the topics it subscribes to: the
        group shares out the union of its members' queues."""
        new = member not in self.last_seen
        self.last_seen[member] = now_ms
        if queues is not None:
            self.subscriptions[member] = frozenset(queues)
            union = sorted(frozenset().union(*self.subscriptions.values()))
            if union != self.queues:
                self.queues = union
                new = True
        if new:
            self._rebalance()
        return self.assignment(member)

    def leave(self, member: str) -> None:
        if self.last_seen.pop(member, None) is not None:
            self._forget(member)
            self._rebalance()

    def _forget(self, member: str) -> None:
        """A member left: its subscription goes; queues only it wanted are no longer shared out."""
        if self.subscriptions.pop(member, None) is not None and self.subscriptions:
            self.queues = sorted(frozenset().union(*self.subscriptions.values()))

    def heartbeat(self, member: str, generation: int, now_ms: int) -> ResponseCode:
        if member not in self.last_seen:
            return ResponseCode.UNKNOWN_MEMBER  # (it expired: join again)
        self.last_seen[member] = now_ms
        return ResponseCode.SUCCESS if generation == self.generation else ResponseCode.ILLEGAL_GENERATION

    def check(self, member: str, generation: int, queue: Queue) -> ResponseCode:
        """May `member`, assigned in `generation`, pull or commit `queue` now?"""
        if member not in self.last_seen:
            return ResponseCode.UNKNOWN_MEMBER
        if generation != self.generation or self.owner.get(queue) != member:
            return ResponseCode.ILLEGAL_GENERATION
        return ResponseCode.SUCCESS

    def tick(self, now_ms: int) -> list[str]:
        """Members silent past the session timeout leave (their queues move); returns them."""
        gone = [m for m, t in self.last_seen.items() if now_ms - t > self.session_timeout_ms]
        for m in gone:
            del self.last_seen[m]
            self._forget(m)
        if gone:
            self._rebalance()
        return gone
