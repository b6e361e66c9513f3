"""Membership change in the core: learners, promotion, removal (the leader's too), and the guarded traps."""

from collections import deque

from quorumlog.codes import ResponseCode
from quorumlog.raft.membership import Membership, majorities_overlap
from quorumlog.raft.types import Role
from quorumlog.store.memory import MemoryStore

from .harness import Cluster

OK = ResponseCode.SUCCESS


def _settle(c: Cluster, leader: str) -> None:
    """Commit an entry of the leader's term (a change waits for one)."""
    rid = c.append(leader, [b"warm-up"])
    c.run_until(lambda: rid in c.completions)
    assert c.completions[rid].code is OK


def _answer(c: Cluster, rid: int, max_ms: int = 5_000) -> ResponseCode:
    c.run_until(lambda: rid in c.completions, max_ms)
    return c.completions[rid].code


def _grow(c: Cluster, leader: str, nid: str) -> None:
    c.add_node(nid)
    assert _answer(c, c.change(leader, "add_learner", nid)) is OK
    c.run_until(lambda: c.nodes[nid].store.end_index == c.nodes[leader].store.end_index)
    c.run(300)  # heard from within the election timeout
    assert _answer(c, c.change(leader, "promote", nid)) is OK


def _with_caught_up_learner() -> tuple[Cluster, str]:
    """Three voters and n3, a learner holding the whole log and heard from within the election timeout."""
    c = Cluster(3)
    leader = c.elect()
    _settle(c, leader)
    c.add_node("n3")
    assert _answer(c, c.change(leader, "add_learner", "n3")) is OK
    c.run_until(lambda: c.nodes["n3"].store.end_index == c.nodes[leader].store.end_index)
    c.run(300)
    return c, leader


def test_majority_overlap_rule():
    a, b = frozenset("ABC"), frozenset("ABCD")
    assert majorities_overlap(a, b) and majorities_overlap(b, a)
    assert not majorities_overlap(frozenset("ABC"), frozenset("ABCDE"))  # {B,C} vs {A,D,E}
    assert majorities_overlap(frozenset("ABCD"), frozenset("ABC"))
    assert not majorities_overlap(frozenset("AB"), frozenset("CD"))


def test_membership_body_round_trip():
    m = Membership(frozenset({"n0", "n1"}), frozenset({"n3"}), frozenset({"n2"}), 4, 17)
    assert Membership.decode(m.encode(), 17) == m


def test_learner_receives_the_log_but_never_votes_and_joins_the_quorum_once_promoted():
    c = Cluster(3)
    leader = c.elect()
    _settle(c, leader)
    c.add_node("n3")
    rid = c.change(leader, "add_learner", "n3")
    assert _answer(c, rid) is OK
    rid = c.append(leader, [b"a", b"b"])
    assert _answer(c, rid) is OK
    c.run_until(lambda: c.nodes["n3"].store.end_index == c.nodes[leader].store.end_index)
    learner = c.core("n3")
    assert learner.membership.learners == {"n3"} and not learner.is_voter
    # a learner never campaigns, even when its leader goes away
    c.isolate("n3")
    c.run(3_000)
    assert learner.role is Role.FOLLOWER and learner.term == c.core(leader).term
    assert not [m for m in c.sent if m.frm == "n3" and type(m).__name__ == "VoteRequest"]
    c.heal()
    c.run(300)
    assert _answer(c, c.change(leader, "promote", "n3")) is OK
    for nid in c.ids:
        assert c.core(nid).membership.voters == {"n0", "n1", "n2", "n3"}
    # 4 voters: quorum 3; with two of the old three down, nothing commits
    others = [n for n in ("n0", "n1", "n2") if n != leader]
    c.crash(others[0])
    c.crash(others[1])
    rid = c.append(leader, [b"needs-three"])
    c.run(400)
    assert rid not in c.completions


def test_promotion_waits_until_the_learner_holds_the_committed_log():
    c = Cluster(3)
    leader = c.elect()
    _settle(c, leader)
    c.add_node("n3")
    c.isolate("n3")  # it never receives the log
    assert _answer(c, c.change(leader, "add_learner", "n3")) is OK
    assert _answer(c, c.change(leader, "promote", "n3")) is ResponseCode.LEARNER_NOT_CAUGHT_UP
    assert c.core(leader).membership.voters == {"n0", "n1", "n2"}


def test_a_promotion_of_a_live_learner_a_batch_behind_waits_for_its_ack():
    # Under load a learner trails the commit point by the batch in flight whenever a request lands; refusing
    # then made promotion a lottery on a busy machine (CI: 30 s of LEARNER_NOT_CAUGHT_UP under 4 writers).
    c, leader = _with_caught_up_learner()
    c.nodes["n3"].auto_flush = False  # it stores what it gets but acknowledges nothing until flushed
    _answer(c, c.append(leader, [b"in flight"]))
    assert c.core(leader).dispatchers["n3"].match_index < c.core(leader).committed_index
    rid = c.change(leader, "promote", "n3")
    c.run(100)
    assert rid not in c.completions  # waiting, not refused
    c.flush("n3")
    c.nodes["n3"].auto_flush = True
    assert _answer(c, rid) is OK
    assert c.core(leader).membership.voters == {"n0", "n1", "n2", "n3"}


def test_a_promotion_under_steady_load_holds_appends_for_a_final_round_and_loses_none():
    # A learner does not vote, so under load the commit point moves on before its acks land: every message
    # from n3 reaches the leader two ticks late while a writer appends every tick. Without the final round
    # (appends held until the learner holds the frozen commit point) the promotion was refused after an
    # election timeout.
    c, leader = _with_caught_up_learner()
    late, replayed = deque([[], []]), set()

    def two_ticks_late(m):
        if m.frm != "n3" or id(m) in replayed:
            return False
        late[-1].append(m)
        return True

    c.drop_filter = two_ticks_late
    writes, promote, held_seen = [], None, False
    for i in range(300):
        due = late.popleft()
        late.append([])
        replayed.update(id(m) for m in due)
        c.net.extend(due)
        writes.append(c.append(leader, [b"w%d" % i]))
        if i == 20:
            promote = c.change(leader, "promote", "n3")
        held_seen |= c.core(leader).membership_changer.held > 0
        c.tick()
        if promote in c.completions and i > 40:
            break
    assert c.completions[promote].code is OK and held_seen
    c.drop_filter = None
    c.run_until(lambda: all(w in c.completions for w in writes))
    assert all(c.completions[w].code is OK for w in writes)  # held, never refused
    assert c.core(leader).membership.voters == {"n0", "n1", "n2", "n3"}
    bodies = c.bodies(leader)
    assert [b for b in bodies if b[:1] == b"w" and b[1:].isdigit()] == [b"w%d" % i for i in range(len(writes))]


def test_a_waiting_promotion_is_refused_after_an_election_timeout():
    c, leader = _with_caught_up_learner()
    c.nodes["n3"].auto_flush = False
    _answer(c, c.append(leader, [b"never acknowledged by n3"]))
    rid = c.change(leader, "promote", "n3")
    waited = c.run_until(lambda: rid in c.completions, 5_000)
    assert c.completions[rid].code is ResponseCode.LEARNER_NOT_CAUGHT_UP
    assert waited >= c.core(leader).config.election_timeout_min_ms - 10
    assert c.core(leader).membership.voters == {"n0", "n1", "n2"}


def test_one_change_at_a_time_and_each_refusal_has_its_code():
    c = Cluster(3)
    leader = c.elect()
    _settle(c, leader)
    follower = next(n for n in c.ids if n != leader)
    assert _answer(c, c.change(follower, "add_learner", "n3")) is ResponseCode.NOT_LEADER
    assert _answer(c, c.change(leader, "add_learner", "n1" if leader != "n1" else "n0")) is ResponseCode.MEMBER_EXISTS
    rid = c.change(leader, "remove", "n9")
    assert _answer(c, rid) is ResponseCode.UNKNOWN_MEMBER
    assert c.completions[rid].message == "n9 is not a member"  # (what the CLI's error line says)
    assert _answer(c, c.change(leader, "promote", "n9")) is ResponseCode.UNKNOWN_MEMBER
    assert _answer(c, c.change(leader, "frobnicate", "n3")) is ResponseCode.BAD_REQUEST
    # a second change while the first is uncommitted: hold the first's replication back
    c.add_node("n3")
    c.isolate(leader)
    first = c.change(leader, "add_learner", "n3")
    second = c.change(leader, "remove", follower)
    assert c.completions[second].code is ResponseCode.CONFIG_CHANGE_IN_PROGRESS
    assert first not in c.completions


def test_no_change_before_an_entry_of_the_leaders_term_is_committed():
    c = Cluster(3)
    leader = c.elect()
    _settle(c, leader)
    old = leader
    c.isolate(old)
    new = c.run_until(lambda: c.leader() not in (None, old)) and c.leader()
    c.heal()
    core = c.core(new)
    # fresh leader, nothing of its term committed yet (its log was fully committed: no no-op was written)
    if core.log.term_at(core.committed_index) != core.term:
        c.add_node("n3")
        rid = c.change(new, "add_learner", "n3")
        assert c.completions[rid].code is ResponseCode.CONFIG_CHANGE_IN_PROGRESS
        c.run(200)  # the no-op the refusal wrote commits
    assert core.log.term_at(core.committed_index) == core.term
    if "n3" not in c.nodes:
        c.add_node("n3")
    assert _answer(c, c.change(new, "add_learner", "n3")) is OK


def test_removing_a_follower_shrinks_the_quorum_and_retires_its_id():
    c = Cluster(3)
    leader = c.elect()
    _settle(c, leader)
    gone = next(n for n in c.ids if n != leader)
    assert _answer(c, c.change(leader, "remove", gone)) is OK
    stay = [n for n in ("n0", "n1", "n2") if n not in (leader, gone)]
    assert c.core(leader).membership.voters == {leader, *stay}
    assert _answer(c, c.change(leader, "add_learner", gone)) is ResponseCode.MEMBER_EXISTS  # never reused
    c.crash(gone)
    rid = c.append(leader, [b"after"])
    assert _answer(c, rid) is OK


def test_removed_leader_commits_its_removal_then_hands_over():
    c = Cluster(3)
    leader = c.elect()
    _settle(c, leader)
    rid = c.change(leader, "remove", leader)
    assert _answer(c, rid) is OK
    c.run_until(lambda: c.leader() not in (None, leader), 3_000)
    new = c.leader()
    assert c.core(new).membership.voters == set(c.ids) - {leader}
    assert c.core(leader).role is Role.FOLLOWER
    c.run(3_000)
    assert c.core(leader).role is Role.FOLLOWER  # never campaigns again
    rid = c.append(new, [b"x"])
    assert _answer(c, rid) is OK


def test_a_change_whose_new_majority_is_not_live_is_refused():
    c = Cluster(3)
    leader = c.elect()
    _settle(c, leader)
    a, b = [n for n in c.ids if n != leader]
    c.crash(b)
    c.run(600)  # b not heard within the election timeout
    # removing a would leave {leader, b}, whose majority needs the dead b: the group would wedge
    assert _answer(c, c.change(leader, "remove", a)) is ResponseCode.NEW_QUORUM_NOT_ALIVE
    assert _answer(c, c.change(leader, "remove", b)) is OK  # {leader, a}: both live
    assert _answer(c, c.change(leader, "remove", a)) is OK  # {leader}: alone is a quorum
    assert _answer(c, c.change(leader, "remove", leader)) is ResponseCode.LAST_VOTER


def test_grow_to_five_then_replace_a_crashed_member():
    c = Cluster(3)
    leader = c.elect()
    _settle(c, leader)
    _grow(c, leader, "n3")
    _grow(c, leader, "n4")
    assert c.core(leader).membership.voters == {"n0", "n1", "n2", "n3", "n4"}
    dead = next(n for n in c.ids if n != leader)
    c.crash(dead)
    c.run(600)
    assert _answer(c, c.change(leader, "remove", dead)) is OK
    _grow(c, leader, "n5")
    rid = c.append(leader, [b"five"])
    assert _answer(c, rid) is OK
    for nid in ("n3", "n4", "n5"):
        assert c.nodes[nid].store.get(c.completions[rid].first_index).body == b"five"


def test_configuration_survives_restart_truncation_and_retention():
    c = Cluster(3)
    leader = c.elect()
    _settle(c, leader)
    c.add_node("n3")
    assert _answer(c, c.change(leader, "add_learner", "n3")) is OK
    for i in range(5):
        assert _answer(c, c.append(leader, [b"e%d" % i])) is OK
    store: MemoryStore = c.nodes[leader].store
    store.delete_before(store.committed_index)  # the membership entry is below begin now
    assert store.membership()[0] < store.begin_index
    c.crash(leader)
    c.restart(leader)
    assert c.core(leader).membership.learners == {"n3"}
    # a truncated uncommitted configuration gives way to the one before it
    s = MemoryStore()
    s.append_batch(1, [Membership(frozenset({"a"}), version=1).encode()], 0, (2**64 - 1, 1), noop=True)
    s.set_committed_index(0)
    s.append_batch(1, [Membership(frozenset({"a", "b"}), version=2).encode()], 0, (2**64 - 1, 2), noop=True)
    assert s.membership()[0] == 1
    s.truncate_after(0)
    assert s.membership()[0] == 0


def test_a_configuration_replaced_at_the_same_index_is_noticed():
    """A truncate can put another uncommitted configuration at the index of the one it dropped: the core must
    use the new one (it once compared indexes only; found by the simulator with a planted bug)."""
    import random

    from quorumlog.format.log_entry import MEMBERSHIP_PRODUCER_ID
    from quorumlog.raft.core import RaftCore
    from quorumlog.raft.types import HardState, RaftConfig, Tick

    store = MemoryStore()
    store.append_batch(1, [b"x"], 0)
    store.set_committed_index(0)
    a = Membership(frozenset({"n0", "n1"}), retired=frozenset({"n2"}), version=1)
    store.append_batch(1, [a.encode()], 0, (MEMBERSHIP_PRODUCER_ID, 1), noop=True)
    core = RaftCore(RaftConfig("n0", ("n0", "n1", "n2")), store, HardState(1), random.Random(1), 0)
    assert core.membership.voters == {"n0", "n1"}
    store.truncate_after(0)
    b = Membership(frozenset({"n0", "n2"}), retired=frozenset({"n1"}), version=1)
    store.append_batch(2, [b.encode()], 0, (MEMBERSHIP_PRODUCER_ID, 1), noop=True)
    core.step(Tick(10))
    assert core.membership.voters == {"n0", "n2"} and core.membership.index == 1
    store.truncate_after(0)
    core.step(Tick(20))
    assert core.membership.voters == {"n0", "n1", "n2"} and core.membership.index == -1  # bootstrap again


def test_a_leader_that_removed_itself_and_crashed_before_the_commit_does_not_wedge_the_group():
    """Voters {L, a}; L writes "remove L" and crashes before a has it. L's log is now the longer one, so a
    cannot win without L's vote, and L is no voter of its own latest configuration: L must still campaign for
    the configuration that removes it, commit it, and hand over (found by simulator seed 29)."""
    c = Cluster(3)
    leader = c.elect()
    _settle(c, leader)
    a, b = [n for n in c.ids if n != leader]
    assert _answer(c, c.change(leader, "remove", b)) is OK
    c.crash(b)
    c.blocked.add((leader, a))  # a no longer hears L (it was heard a moment ago: the new majority {a} is live)
    rid = c.change(leader, "remove", leader)
    c.run(50)
    assert rid not in c.completions and c.core(a).membership.voters == {leader, a}  # written on L only
    c.crash(leader)
    c.heal()
    c.restart(leader)
    c.run_until(lambda: c.leader() == a and c.core(a).membership.voters == {a}, 5_000)
    assert c.core(leader).role is Role.FOLLOWER and not c.core(leader).is_voter
    assert _answer(c, c.append(a, [b"alone"])) is OK
