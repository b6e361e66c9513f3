"""A consumer group's members and who owns which queue, with a generation (Kafka's group coordinator, sans-I/O).

RocketMQ rebalances on each client from a possibly stale view, so two consumers of one group can hold one
queue for a while (its users see duplicates). Here one coordinator assigns, every change of members makes a
new generation, and every commit names the generation it was assigned in: an old generation's is refused with
ILLEGAL_GENERATION, so a member that lost its queues cannot commit for them.

Pulls go to the topic groups, not here, so a member keeps pulling its queues until it hears of a new
generation. A queue therefore moves the way Kafka's cooperative protocol moves a partition: its old holder is
first told to give it up (its next assignment leaves it out), and only once the holder confirmed that
assignment (a heartbeat in the new generation: by then it stopped pulling and committed what it delivered),
left, or went silent past its own session timeout is the queue handed to its new owner, in a further
generation. No queue ever has two holders.

A coordinator that replaces another (a new `_meta` leader) does not know who still consumes what: members
rejoining declare the queues they hold (`owned`, Kafka's owned partitions), which stay theirs, and a queue
nobody declared is handed out only from `hand_free_after_ms` on, once the members still consuming have had
time to hear of the new coordinator and rejoin.

    c = GroupCoordinator("cg", queues=[("T", 0), ("T", 1)], session_timeout_ms=10_000)
    g = c.join("c1", now_ms)            -> Assignment(generation, queues): the queues c1 holds from now
    c.heartbeat("c1", generation, now)  -> ResponseCode (SUCCESS, ILLEGAL_GENERATION: rejoin, UNKNOWN_MEMBER)
    c.check("c1", generation, queue)    -> ResponseCode for a commit of that queue
    c.leave("c1"); c.tick(now_ms)       # a member silent past its session_timeout_ms leaves
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
                 generation: int = 0, hand_free_after_ms: int = 0) -> None:
        self.group = group
        self.queues = sorted(queues)
        self.session_timeout_ms = session_timeout_ms  # (a member's own, given at its join, takes precedence)
        # Generations only grow. A coordinator that replaces another (a new `_meta` leader) starts above every
        # generation the old one handed out: the server starts it at its Raft term << 32.
        self.generation = generation
        self.last_seen: dict[str, int] = {}
        self.timeouts: dict[str, int] = {}  # member -> its session timeout (Kafka's and RocketMQ's are per member)
        self.owner: dict[Queue, str] = {}  # the member each queue goes to in this generation
        self.holder: dict[Queue, str] = {}  # the member that may consume it now: handed it, not yet given it up
        self.subscriptions: dict[str, frozenset[Queue]] = {}  # member -> the queues of its topics
        self.hand_free_after_ms = hand_free_after_ms  # (see the module's docstring)
        self.now_ms = 0  # the latest time an event carried

    def _subscribes(self, member: str, queue: Queue) -> bool:
        wanted = self.subscriptions.get(member)
        return wanted is None or queue in wanted  # (a member that named no topics takes any of the group's)

    def _rebalance(self) -> None:
        """A new generation. Each topic's queues go to the members subscribed to it (never to one that did not
        ask for it), evenly: a holder keeps up to its fair share of what it holds (fewer queues are revoked),
        the rest go to the subscribers with the fewest."""
        self.generation += 1
        self.owner = {}
        total = dict.fromkeys(self.last_seen, 0)
        by_topic: dict[str, list[Queue]] = {}
        for q in self.queues:
            by_topic.setdefault(q[0], []).append(q)
        for qs in by_topic.values():
            takers = [m for m in sorted(total) if self._subscribes(m, qs[0])]
            if not takers:
                continue
            share = -(-len(qs) // len(takers))  # (ceil: what a holder may keep of what it holds)
            load = dict.fromkeys(takers, 0)
            rest = []
            for q in qs:
                held = self.holder.get(q)
                if held in load and load[held] < share:
                    self.owner[q] = held
                    load[held] += 1
                else:
                    rest.append(q)
            for q in rest:
                m = min(takers, key=lambda m: (load[m], total[m], m))
                self.owner[q] = m
                load[m] += 1
            for m, n in load.items():
                total[m] += n

    def _assigned(self, member: str) -> tuple[Queue, ...]:
        """The queues `member` owns in this generation that nobody else still holds (nor may still hold)."""
        free = self.now_ms >= self.hand_free_after_ms
        return tuple(q for q in self.queues if self.owner.get(q) == member
                     and self.holder.get(q, member if free else None) == member)

    def assignment(self, member: str) -> Assignment:
        return Assignment(self.generation, self._assigned(member))

    def _hand(self, member: str) -> Assignment:
        """`member` hears its assignment: from now on it holds those queues."""
        a = self.assignment(member)
        for q in a.queues:
            self.holder[q] = member
        return a

    def _release(self, member: str, keep: tuple[Queue, ...] = ()) -> bool:
        """`member` gave up every queue it held but `keep`; True if that frees a queue for another member."""
        freed = [q for q, m in self.holder.items() if m == member and q not in keep]
        for q in freed:
            del self.holder[q]
        return any(self.owner.get(q) not in (None, member) for q in freed)

    def join(self, member: str, now_ms: int, queues: list[Queue] | None = None, *,
             session_timeout_ms: int | None = None, owned: list[Queue] = ()) -> Assignment:
        """`member` joins (or confirms it is here); `queues`, the queues of the topics it subscribes to: the
        group shares out the union of its members' queues, each topic's among its own subscribers. `owned`:
        the queues it holds now (from an earlier coordinator); they stay its own unless another holds them."""
        new = member not in self.last_seen
        self._advance(now_ms)
        self.last_seen[member] = now_ms
        for q in owned:
            if q not in self.holder and (queues is None or q in queues):
                self.holder[q] = member
                new = True
        if session_timeout_ms is not None:
            self.timeouts[member] = session_timeout_ms
        if queues is not None:
            if self.subscriptions.get(member) != frozenset(queues):
                new = True
            self.subscriptions[member] = frozenset(queues)
            self.queues = sorted(frozenset().union(*self.subscriptions.values()))
        if new:
            self._rebalance()
        return self._hand(member)

    def leave(self, member: str) -> None:
        if self.last_seen.pop(member, None) is not None:
            self._forget(member)
            self._rebalance()

    def _forget(self, member: str) -> None:
        """A member left: its queues are free; its subscription goes; queues only it wanted are no longer
        shared out."""
        self._release(member)
        self.timeouts.pop(member, None)
        if self.subscriptions.pop(member, None) is not None and self.subscriptions:
            self.queues = sorted(frozenset().union(*self.subscriptions.values()))

    def heartbeat(self, member: str, generation: int, now_ms: int) -> ResponseCode:
        """A heartbeat in the current generation confirms the member applied its assignment: it gave up the
        queues that assignment left out, which go to their new owners in a new generation."""
        if member not in self.last_seen:
            return ResponseCode.UNKNOWN_MEMBER  # (it expired: join again)
        self._advance(now_ms)
        self.last_seen[member] = now_ms
        if generation != self.generation:
            return ResponseCode.ILLEGAL_GENERATION
        if self._release(member, keep=self._assigned(member)):
            self._rebalance()
            return ResponseCode.ILLEGAL_GENERATION  # (nothing new for it, but it learns the generation moved)
        return ResponseCode.SUCCESS

    def check(self, member: str, generation: int, queue: Queue) -> ResponseCode:
        """May `member`, assigned in `generation`, commit `queue` now? Its holder may, also while the queue is
        being revoked from it: what it delivered is committed before it gives the queue up."""
        if member not in self.last_seen:
            return ResponseCode.UNKNOWN_MEMBER
        if generation != self.generation or self.holder.get(queue) != member:
            return ResponseCode.ILLEGAL_GENERATION
        return ResponseCode.SUCCESS

    def tick(self, now_ms: int) -> list[str]:
        """Members silent past their session timeout leave (their queues move); returns them. Queues nobody
        declared are handed out once hand_free_after_ms has passed (a new generation: their owners rejoin)."""
        self._advance(now_ms)
        gone = [m for m, t in self.last_seen.items()
                if now_ms - t > self.timeouts.get(m, self.session_timeout_ms)]
        for m in gone:
            del self.last_seen[m]
            self._forget(m)
        if gone:
            self._rebalance()
        return gone

    def _advance(self, now_ms: int) -> None:
        """Time moves on; when the grace ends, queues nobody declared become free: a new generation tells
        their owners (at their next heartbeat) to rejoin and take them."""
        was_free = self.now_ms >= self.hand_free_after_ms
        self.now_ms = max(self.now_ms, now_ms)
        if not was_free and self.now_ms >= self.hand_free_after_ms and any(q not in self.holder for q in self.owner):
            self._rebalance()
