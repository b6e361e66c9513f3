"""Elections: pre-vote, check-quorum, vote persistence, randomized timeouts from the given rng."""

import random

import pytest

from quorumlog.raft.core import RaftCore
from quorumlog.raft.types import HardState, RaftConfig, Receive, Role, Tick
from quorumlog.store.memory import MemoryStore
from quorumlog.wire.messages import VoteRequest, VoteResponse

from .harness import Cluster


@pytest.mark.parametrize("pre_vote", [True, False])
def test_one_leader_is_elected_and_others_follow(pre_vote):
    c = Cluster(5, pre_vote=pre_vote)
    leader = c.elect()
    c.run(500)
    assert c.leaders() == [leader]
    term = c.core(leader).term
    assert term == 1  # no split vote with this seed, and pre-votes never bump a term
    for nid in c.ids:
        assert c.core(nid).term == term
        assert c.core(nid).leader_id == leader
        assert c.nodes[nid].hard_state.term == term  # persisted through Ready.hard_state


def test_failover_is_well_under_a_second_and_deterministic():
    def failover(seed):
        c = Cluster(3, seed=seed)
        old = c.elect()
        c.crash(old)
        return c.run_until(lambda: c.leader() not in (None, old), 3000), c.leader()

    took, new = failover(7)
    assert took < 1100  # election timeout 500–1000 ms plus a round trip
    assert failover(7) == (took, new)  # the same seed gives the same run


def test_pre_vote_keeps_a_rejoining_node_from_disrupting_the_leader():
    c = Cluster(3, pre_vote=True)
    leader = c.elect()
    follower = next(n for n in c.ids if n != leader)
    term = c.core(leader).term
    c.isolate(follower)
    c.run(5_000)  # many election timeouts pass on the isolated node
    assert c.core(follower).term == term  # pre-votes failed, so its term never moved
    assert c.core(follower).role is not Role.LEADER
    c.heal()
    c.run(1_000)
    assert c.leader() == leader and c.core(leader).term == term
    assert c.core(follower).leader_id == leader


def test_without_pre_vote_a_rejoining_node_bumps_the_term():
    """The contrast: plain Raft lets the partitioned node's inflated term depose the leader."""
    c = Cluster(3, pre_vote=False, check_quorum=False)
    leader = c.elect()
    follower = next(n for n in c.ids if n != leader)
    term = c.core(leader).term
    c.isolate(follower)
    c.run(5_000)
    assert c.core(follower).term > term + 2
    c.heal()
    c.run(2_000)
    assert c.core(c.elect()).term > term + 2


def test_check_quorum_leader_steps_down_within_one_election_timeout():
    c = Cluster(3)
    leader = c.elect()
    c.isolate(leader)
    took = c.run_until(lambda: c.core(leader).role is not Role.LEADER, 2_000)
    assert took <= 2 * c.core(leader).config.election_timeout_min_ms
    new = c.run_until(lambda: c.leader() not in (None, leader), 3_000) is not None and c.leader()
    assert new != leader


def test_without_check_quorum_an_isolated_leader_stays_leader():
    c = Cluster(3, check_quorum=False)
    leader = c.elect()
    c.isolate(leader)
    c.run(3_000)
    assert c.core(leader).role is Role.LEADER


def _voter(hard_state=HardState(), **cfg):
    config = RaftConfig(node_id="n1", peers=("n0", "n1", "n2"), **cfg)
    return RaftCore(config, MemoryStore(), hard_state, random.Random(1), 0)


def test_vote_is_persisted_before_the_grant_is_sent():
    core = _voter(pre_vote=False)
    ready = core.step(Receive(VoteRequest("n0", "n1", 1, -1, -1)))
    assert ready.hard_state == HardState(1, "n0")
    (resp,) = ready.messages
    assert isinstance(resp, VoteResponse) and resp.granted and resp.term == 1


@pytest.mark.parametrize("bug", [False, True])
def test_one_vote_per_term_unless_double_vote_is_planted(bug, plant):
    if bug:
        plant("double_vote")
    core = _voter()
    core.step(Receive(VoteRequest("n0", "n1", 1, -1, -1)))
    (resp,) = core.step(Receive(VoteRequest("n2", "n1", 1, -1, -1))).messages
    assert resp.granted is bug


def test_restarted_voter_remembers_its_vote():
    core = _voter(HardState(3, "n0"))
    (resp,) = core.step(Receive(VoteRequest("n2", "n1", 3, 10, 3))).messages
    assert not resp.granted


def test_up_to_date_rule_on_last_term_then_last_index():
    store = MemoryStore()
    store.append_batch(2, [b"x", b"y"], 0)
    config = RaftConfig(node_id="n1", peers=("n0", "n1", "n2"))
    core = RaftCore(config, store, HardState(2, None), random.Random(1), 0)
    grant = lambda frm, term, li, lt: core.step(Receive(VoteRequest(frm, "n1", term, li, lt))).messages[0].granted
    assert not grant("n0", 3, 5, 1)  # longer log but older last term
    assert not grant("n0", 4, 0, 2)  # same last term, shorter
    assert grant("n2", 5, 1, 2)  # same last term, same length


def test_pre_vote_does_not_touch_term_or_vote():
    core = _voter()
    ready = core.step(Receive(VoteRequest("n0", "n1", 1, -1, -1, pre_vote=True)))
    assert ready.hard_state is None and core.term == 0
    (resp,) = ready.messages
    assert resp.pre_vote and resp.granted and resp.term == 1


def test_election_timeouts_come_from_the_given_rng():
    def first_campaign(seed):
        config = RaftConfig(node_id="n1", peers=("n0", "n1", "n2"))
        core = RaftCore(config, MemoryStore(), HardState(), random.Random(seed), 0)
        for t in range(0, 2000, 5):
            if core.step(Tick(t)).messages:
                return t
    times = {first_campaign(s) for s in range(20)}
    assert len(times) > 5 and all(500 <= t <= 1000 for t in times)
    assert first_campaign(3) == first_campaign(3)


def test_single_node_group_elects_itself_and_commits():
    c = Cluster(1)
    leader = c.elect()
    rid = c.append(leader, [b"solo"])
    c.deliver()
    assert c.completions[rid].last_index == 0 and c.core(leader).committed_index == 0
