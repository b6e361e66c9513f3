"""Consumer-group membership with generations (quorumlog/topic/group_coordinator.py): every queue has exactly
one owner per generation; two consumers joining at the same instant never both own a queue; a member that
lost its queues (a rebalance, its session timeout) cannot pull or commit them (ILLEGAL_GENERATION); a silent
member's queues move after the session timeout."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from quorumlog.codes import ResponseCode
from quorumlog.topic.group_coordinator import GroupCoordinator

QUEUES = [("T", i) for i in range(8)]
OK, ILLEGAL = ResponseCode.SUCCESS, ResponseCode.ILLEGAL_GENERATION


def test_two_consumers_joining_at_once_never_both_own_a_queue():
    c = GroupCoordinator("cg", QUEUES, session_timeout_ms=1_000)
    a1 = c.join("c1", 0)
    a2 = c.join("c2", 0)  # the same instant: a second generation, but c1 still holds every queue
    assert a1.generation == 1 and a2.generation == 2 and len(a1.queues) == 8 and a2.queues == ()
    # c1 still holds its generation-1 view of all 8 queues: it may commit none of them until it rejoins
    assert all(c.check("c1", a1.generation, q) == ILLEGAL for q in a1.queues)
    assert c.heartbeat("c1", a1.generation, 10) == ILLEGAL  # told to rejoin
    b1 = c.join("c1", 10)
    assert len(b1.queues) == 4
    assert c.heartbeat("c1", b1.generation, 20) == ILLEGAL  # it gave up the other 4: they move, c1 rejoins
    b1 = c.join("c1", 20)
    assert c.heartbeat("c2", a2.generation, 20) == ILLEGAL
    a2 = c.join("c2", 20)
    assert set(b1.queues).isdisjoint(a2.queues) and set(b1.queues) | set(a2.queues) == set(QUEUES)
    assert all(c.check("c2", a2.generation, q) == OK for q in a2.queues)


def test_a_silent_member_leaves_after_the_session_timeout_and_its_commits_are_refused():
    c = GroupCoordinator("cg", QUEUES, session_timeout_ms=1_000)
    c.join("c1", 0)
    a2 = c.join("c2", 0)
    c.join("c1", 0)
    for t in range(100, 1_200, 100):
        c.heartbeat("c1", c.generation, t)
    assert c.tick(1_100) == ["c2"]
    assert len(c.assignment("c1").queues) == 8
    assert c.check("c2", a2.generation, QUEUES[1]) == ResponseCode.UNKNOWN_MEMBER
    assert c.heartbeat("c2", a2.generation, 1_200) == ResponseCode.UNKNOWN_MEMBER


@given(st.lists(st.tuples(st.sampled_from(["join", "leave", "tick"]), st.sampled_from(["a", "b", "c", "d"]),
                          st.integers(0, 500)), max_size=40))
@settings(max_examples=200, deadline=None)
def test_no_queue_has_two_owners_in_a_generation(ops):
    c = GroupCoordinator("cg", QUEUES, session_timeout_ms=300)
    now = 0
    for op, m, dt in ops:
        now += dt
        if op == "join":
            c.join(m, now)
        elif op == "leave":
            c.leave(m)
        else:
            c.tick(now)
        owners = {q: [x for x in c.last_seen if c.check(x, c.generation, q) == OK] for q in QUEUES}
        assert all(len(v) <= 1 for v in owners.values()), owners


def test_the_group_shares_the_union_of_its_members_topics_and_a_successor_starts_above_every_generation():
    other = [("U", i) for i in range(2)]
    c = GroupCoordinator("cg", [], generation=5 << 32)
    a = c.join("c1", 0, QUEUES[:2])
    assert a.generation == (5 << 32) + 1 and a.queues == tuple(QUEUES[:2])
    assert c.join("c1", 1, QUEUES[:2]).generation == a.generation  # the same subscription: no rebalance
    b = c.join("c2", 2, other)  # another topic: the union is shared out, in a new generation
    assert c.check("c1", a.generation, QUEUES[0]) == ILLEGAL
    mine = c.join("c1", 3, QUEUES[:2])
    assert set(mine.queues) | set(b.queues) <= set(QUEUES[:2] + other) and len(c.queues) == 4
    assert set(mine.queues).isdisjoint(c.assignment("c2").queues)
    c.leave("c2")  # U's queues go with the only member that wanted them
    assert c.queues == QUEUES[:2] and c.join("c1", 4).queues == tuple(QUEUES[:2])
    successor = GroupCoordinator("cg", QUEUES, generation=6 << 32)
    assert successor.join("c1", 5).generation > c.generation


# -- cooperative hand-over: a queue is never held by two members ----------------------------------------------

class Member:
    """What a consumer does with what the coordinator tells it (client/consumer.py): it consumes exactly the
    queues of the last assignment it heard, rejoins when told the generation moved, and stops consuming when
    its session expired (it has not heard from the coordinator for that long)."""

    def __init__(self, c: GroupCoordinator, name: str, queues: list | None = None, timeout_ms: int | None = None):
        self.c, self.name, self.queues, self.timeout_ms = c, name, queues, timeout_ms  # (queues: its topics')
        self.generation, self.consuming = -1, frozenset()

    def join(self, now: int) -> None:
        a = self.c.join(self.name, now, self.queues, session_timeout_ms=self.timeout_ms, owned=sorted(self.consuming))
        self.generation, self.consuming = a.generation, frozenset(a.queues)

    def heartbeat(self, now: int) -> ResponseCode:
        code = self.c.heartbeat(self.name, self.generation, now)
        if code != OK:
            self.join(now)  # (declaring what it holds: after an expiry, nothing — it stopped on its own)
        return code


def assert_one_consumer_per_queue(members: list[Member]) -> None:
    seen: dict = {}
    for m in members:
        for q in m.consuming:
            assert q not in seen, f"{q} consumed by {seen[q]} and {m.name} at once"
            seen[q] = m.name


def settle(c: GroupCoordinator, members: list[Member], now: int) -> None:
    """Heartbeat every live member until a round in which every one is told SUCCESS (a bounded number)."""
    for _ in range(2 * len(members) + 4):
        codes = []
        for m in members:
            codes.append(m.heartbeat(now))
            assert_one_consumer_per_queue(members)
        if all(code == OK for code in codes):
            return
    raise AssertionError("the group never settled")


def test_a_queue_goes_to_its_new_owner_only_once_the_old_one_gave_it_up():
    c = GroupCoordinator("cg", QUEUES, session_timeout_ms=1_000)
    a, b = Member(c, "a"), Member(c, "b")
    a.join(0)
    assert a.consuming == set(QUEUES)
    b.join(10)  # the owner table gives b half the queues, but a still pulls them: b gets none yet
    assert b.consuming == set() and c.check("b", b.generation, QUEUES[1]) == ILLEGAL
    a.heartbeat(20)  # told the generation moved: a rejoins and hears it keeps 4 (it still holds all 8 here)
    assert len(a.consuming) == 4 and b.consuming == set()
    revoked = sorted(set(QUEUES) - a.consuming)
    assert c.check("a", a.generation, revoked[0]) == OK  # it commits what it delivered before giving them up
    a.heartbeat(30)  # it confirms: the 4 are free and move, in a new generation
    assert c.check("a", a.generation, revoked[0]) == ILLEGAL
    b.heartbeat(40)
    assert b.consuming == set(revoked) and a.consuming.isdisjoint(b.consuming)
    settle(c, [a, b], 50)
    assert a.consuming | b.consuming == set(QUEUES) and len(a.consuming) == len(b.consuming) == 4


def test_a_silent_holders_queues_move_after_its_session_timeout():
    c = GroupCoordinator("cg", QUEUES, session_timeout_ms=1_000)
    a, b = Member(c, "a"), Member(c, "b")
    a.join(0)
    b.join(10)
    for t in range(100, 1_001, 100):  # a is paused: it never confirms
        b.heartbeat(t)
        assert b.consuming == set()
    assert c.tick(1_001) == ["a"]
    a.consuming = frozenset()  # (a stops on its own: it heard nothing for its session timeout)
    b.heartbeat(1_100)
    assert b.consuming == set(QUEUES)


@given(st.lists(st.tuples(st.sampled_from(["join", "heartbeat", "leave", "tick"]), st.integers(0, 3),
                          st.integers(0, 400)), max_size=60))
@settings(max_examples=300, deadline=None)
def test_no_queue_is_consumed_by_two_members_at_once_and_the_group_settles(ops):
    other = [("U", i) for i in range(3)]
    c = GroupCoordinator("cg", [], session_timeout_ms=300)
    subscriptions = [QUEUES, QUEUES + other, other, QUEUES]
    members = [Member(c, f"m{i}", subscriptions[i], timeout_ms=300 + 200 * i) for i in range(4)]
    now = 0
    for op, i, dt in ops:
        now += dt
        m = members[i]
        if op == "join":
            m.join(now)
        elif op == "heartbeat" and m.name in c.last_seen:
            m.heartbeat(now)
        elif op == "leave":
            m.consuming = frozenset()  # (the consumer stops, commits, then leaves)
            c.leave(m.name)
        elif op == "tick":
            for gone in c.tick(now):
                next(x for x in members if x.name == gone).consuming = frozenset()
        assert_one_consumer_per_queue(members)
    live = [m for m in members if m.name in c.last_seen]
    settle(c, live, now)
    for q in {q for m in live for q in m.queues}:  # each is consumed, by one of its topic's subscribers
        takers = [m for m in live if q in m.consuming]
        assert len(takers) == 1 and q in takers[0].queues, (q, takers)


def test_a_topics_queues_go_to_its_subscribers_only():
    c = GroupCoordinator("cg", [])
    a, b = Member(c, "a", QUEUES), Member(c, "b", [("B", i) for i in range(3)])
    a.join(0)
    b.join(0)
    settle(c, [a, b], 0)
    assert a.consuming == set(QUEUES) and b.consuming == {("B", 0), ("B", 1), ("B", 2)}


def test_each_member_keeps_its_own_session_timeout():
    c = GroupCoordinator("cg", QUEUES)
    c.join("patient", 0, QUEUES, session_timeout_ms=30_000)
    c.join("hasty", 0, QUEUES, session_timeout_ms=1_000)
    for t in range(500, 30_001, 500):
        c.heartbeat("hasty", c.generation, t)
        assert c.tick(t) == []  # the patient member, silent for up to 30 s, is within its session timeout
    assert c.tick(30_001) == ["patient"]
    assert c.tick(31_001) == ["hasty"]


def test_a_new_coordinator_keeps_declared_queues_and_hands_undeclared_ones_only_after_the_grace():
    """A new `_meta` leader's coordinator knows nobody: a's rejoin must not hand it the queues b still consumes
    under the old coordinator (b hears of the new one only at its next heartbeat)."""
    c = GroupCoordinator("cg", [], generation=7 << 32, hand_free_after_ms=5_000)
    a, b = Member(c, "a", QUEUES), Member(c, "b", QUEUES)
    a.consuming, b.consuming = frozenset(QUEUES[:4]), frozenset(QUEUES[4:])  # (from the old coordinator)
    a.generation = b.generation = 6 << 32

    def join(m: Member, now: int) -> None:
        got = m.c.join(m.name, now, m.queues, owned=sorted(m.consuming))
        m.generation, m.consuming = got.generation, frozenset(got.queues)

    join(a, 100)
    assert a.consuming == set(QUEUES[:4])
    assert_one_consumer_per_queue([a, b])
    join(b, 300)
    assert b.consuming == set(QUEUES[4:])
    settle(c, [a, b], 400)
    assert a.consuming == set(QUEUES[:4]) and b.consuming == set(QUEUES[4:])
    # b dies instead: its queues (nobody declared them) go to a once the grace has passed
    c2 = GroupCoordinator("cg", [], generation=8 << 32, hand_free_after_ms=5_000)
    a.c = c2
    join(a, 100)
    assert a.consuming == set(QUEUES[:4])
    c2.tick(4_999)
    a.heartbeat(4_999)
    assert a.consuming == set(QUEUES[:4])
    c2.tick(5_000)
    a.heartbeat(5_000)
    assert a.consuming == set(QUEUES)


def test_the_grace_ends_at_a_heartbeat_as_well_as_at_a_tick():
    c = GroupCoordinator("cg", [], hand_free_after_ms=1_000)
    a = Member(c, "a", QUEUES)
    a.join(0)
    assert a.consuming == set()
    for t in range(200, 1_201, 200):
        a.heartbeat(t)  # (the member's heartbeats come before the service's tick)
    assert a.consuming == set(QUEUES)
