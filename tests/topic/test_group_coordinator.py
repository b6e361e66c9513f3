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
    a2 = c.join("c2", 0)  # the same instant: a second generation
    assert a1.generation == 1 and a2.generation == 2 and len(a1.queues) == 8 and len(a2.queues) == 4
    # c1 still holds its generation-1 view of all 8 queues: it may pull none of them until it rejoins
    assert all(c.check("c1", a1.generation, q) == ILLEGAL for q in a1.queues)
    assert c.heartbeat("c1", a1.generation, 10) == ILLEGAL  # told to rejoin
    b1 = c.join("c1", 10)
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
    assert c.check("c2", a2.generation, a2.queues[0]) == ResponseCode.UNKNOWN_MEMBER
    assert c.heartbeat("c2", a2.generation, 1_200) == ResponseCode.UNKNOWN_MEMBER


@given(st.lists(st.tuples(st.sampled_from(["join", "leave", "tick"]), st.sampled_from(["a", "b", "c", "d"]),
                          st.integers(0, 500)), max_size=40))
@settings(max_examples=200, deadline=None)
def test_every_queue_has_exactly_one_owner_per_generation(ops):
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
        assert all(len(v) == (1 if c.last_seen else 0) for v in owners.values()), owners


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
