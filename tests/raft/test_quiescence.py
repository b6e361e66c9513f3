"""Quiescence (raft/quiescence.py): an idle group goes quiet and sends nothing; anything to do wakes it; a quiet
group whose leader dies elects another one once the runtime says the leader's node went silent."""

from quorumlog.raft.types import PeerSilent, Receive, Role
from quorumlog.wire.messages import HeartbeatRequest, VoteRequest, VoteResponse

from .harness import Cluster


def _quiet_cluster(n: int = 3) -> tuple[Cluster, str]:
    c = Cluster(n, quiesce=True)
    leader = c.elect()
    c.append(leader, [b"a", b"b"])
    c.run_until(lambda: all(c.core(nid).quiet for nid in c.ids), max_ms=2_000)
    return c, leader


def test_an_idle_group_goes_quiet_and_sends_nothing_for_as_long_as_it_stays_idle():
    c, leader = _quiet_cluster()
    quiesce = [m for m in c.sent if isinstance(m, HeartbeatRequest) and m.quiesce]
    assert {m.to for m in quiesce} == set(c.ids) - {leader}
    sent = len(c.sent)
    c.run(60_000)  # a minute: many election timeouts
    assert len(c.sent) == sent
    assert c.leader() == leader and all(c.core(nid).quiet for nid in c.ids)
    assert c.core(leader).status().quiet


def test_without_quiesce_heartbeats_never_stop():
    c = Cluster(3)
    c.elect()
    c.run(1_000)
    sent = len(c.sent)
    c.run(1_000)
    assert len(c.sent) - sent >= 2 * 9  # ~10 heartbeats a second to each of 2 followers, and their answers
    assert not any(c.core(nid).quiet for nid in c.ids)


def test_an_append_wakes_the_group_commits_and_it_goes_quiet_again():
    c, leader = _quiet_cluster()
    c.run(5_000)
    rid = c.append(leader, [b"c"])
    c.run_until(lambda: rid in c.completions, max_ms=1_000)
    assert c.completions[rid].code.name == "SUCCESS"
    c.run_until(lambda: all(c.core(nid).quiet for nid in c.ids), max_ms=2_000)
    for nid in c.ids:
        assert c.bodies(nid) == [b"a", b"b", b"c"]


def test_a_quiet_groups_dead_leader_is_replaced_once_its_node_is_reported_silent():
    c, leader = _quiet_cluster()
    c.crash(leader)
    c.run(10_000)
    assert c.leader() is None or c.leader() == leader  # quiet followers do not notice on their own...
    followers = [nid for nid in c.ids if nid != leader]
    for f in followers:
        c.step(f, PeerSilent(leader))  # ...the node-level liveness tells them
    took = c.run_until(lambda: c.leader() not in (None, leader), max_ms=5_000)
    cfg = c.core(followers[0]).config
    assert took <= cfg.election_timeout_max_ms  # as fast as a group that never went quiet
    new = c.leader()
    rid = c.append(new, [b"after"])
    c.run_until(lambda: rid in c.completions, max_ms=2_000)
    assert c.bodies(new) == [b"a", b"b", b"after"]


def test_silence_of_a_node_that_is_not_the_leader_leaves_a_quiet_follower_quiet():
    c, leader = _quiet_cluster()
    f1, f2 = [nid for nid in c.ids if nid != leader]
    c.step(f1, PeerSilent(f2))
    assert c.core(f1).quiet


def test_a_quiet_leader_cut_off_from_its_followers_wakes_and_steps_down():
    c, leader = _quiet_cluster()
    c.isolate(leader)
    for f in c.ids:
        if f != leader:
            c.step(leader, PeerSilent(f))
    assert not c.core(leader).quiet
    c.run(2 * c.core(leader).config.election_timeout_max_ms)
    assert c.core(leader).role is not Role.LEADER  # check-quorum counts again once awake


def test_a_quiet_follower_still_rejects_a_disruptive_candidate():
    c, leader = _quiet_cluster()
    f1, f2 = [nid for nid in c.ids if nid != leader]
    term = c.core(f1).term
    c.step(f1, Receive(VoteRequest(f2, f1, term + 1, c.core(f2).end_index, c.core(f2).log.end_term,
                                   pre_vote=True)))
    answer = c.net[-1]
    assert isinstance(answer, VoteResponse) and not answer.granted
    c.deliver()
    assert c.core(f1).term == term and c.core(f1).member.leader_id == leader


def test_a_restarted_follower_wakes_the_quiet_leader_and_catches_up():
    c, leader = _quiet_cluster()
    f1 = next(nid for nid in c.ids if nid != leader)
    c.crash(f1)
    c.restart(f1)
    c.run_until(lambda: c.core(f1).member.leader_id == leader and c.core(f1).committed_index == 1, max_ms=10_000)
    assert c.leader() == leader
    c.run_until(lambda: all(c.core(nid).quiet for nid in c.ids), max_ms=3_000)


def test_a_dead_follower_does_not_keep_the_group_awake_and_catches_up_when_back():
    c, leader = _quiet_cluster()
    f1, f2 = [nid for nid in c.ids if nid != leader]
    c.crash(f2)
    for nid in (leader, f1):
        c.step(nid, PeerSilent(f2))
    rid = c.append(leader, [b"c"])
    c.run_until(lambda: rid in c.completions, max_ms=1_000)
    c.run_until(lambda: c.core(leader).quiet and c.core(f1).quiet, max_ms=2_000)  # with f2 behind
    sent = len(c.sent)
    c.run(10_000)
    assert len(c.sent) == sent
    c.restart(f2)  # it campaigns; its pre-vote wakes the leader, which brings it up to date
    c.run_until(lambda: c.core(f2).committed_index == c.core(leader).committed_index, max_ms=10_000)
    assert c.leader() == leader and c.bodies(f2) == [b"a", b"b", b"c"]
    c.run_until(lambda: all(c.core(nid).quiet for nid in c.ids), max_ms=3_000)


def test_no_quiet_without_a_live_majority():
    c, leader = _quiet_cluster()
    f1, f2 = [nid for nid in c.ids if nid != leader]
    rid = c.append(leader, [b"c"])
    c.run_until(lambda: rid in c.completions, max_ms=1_000)
    for f in (f1, f2):
        c.step(leader, PeerSilent(f))
    c.isolate(leader)
    c.run(3_000)
    assert c.core(leader).role is not Role.LEADER  # stayed awake, so check-quorum deposed it
