"""ReadIndex (raft/read_index.py): a read is answered with the commit index of its arrival once a quorum
answered a heartbeat sent after it; a deposed leader that cannot reach a quorum never answers one."""

from quorumlog.codes import ResponseCode
from quorumlog.raft.types import ClientRead, Role, Tick
from quorumlog.wire.messages import HeartbeatRequest, HeartbeatResponse

from .harness import Cluster


def _read(c: Cluster, nid: str, rid: int) -> int:
    c.step(nid, ClientRead(rid))
    return rid


def test_a_read_is_answered_with_the_commit_index_once_a_quorum_answered_a_later_heartbeat():
    c = Cluster(3)
    leader = c.elect()
    rid = c.append(leader, [b"a", b"b"])
    c.deliver()
    committed = c.completions[rid].last_index
    sent = len(c.sent)
    _read(c, leader, 9001)
    assert 9001 not in c.completions  # not before any follower answered
    rounds = [m for m in c.sent[sent:] if isinstance(m, HeartbeatRequest)]
    assert {m.to for m in rounds} == set(c.ids) - {leader} and all(m.read_seq >= 1 for m in rounds)
    c.deliver()
    done = c.completions[9001]
    assert done.code is ResponseCode.SUCCESS and done.first_index == committed
    echoed = [m for m in c.sent[sent:] if isinstance(m, HeartbeatResponse)]
    assert all(m.read_seq == rounds[0].read_seq for m in echoed)


def test_reads_arriving_while_a_round_is_in_flight_share_the_next_one():
    c = Cluster(5)
    leader = c.elect()
    c.append(leader, [b"a"])
    c.deliver()
    sent = len(c.sent)
    for rid in range(100, 110):
        _read(c, leader, rid)
    assert len([m for m in c.sent[sent:] if isinstance(m, HeartbeatRequest)]) == 4  # the first read's round
    c.deliver()
    assert all(c.completions[rid].code is ResponseCode.SUCCESS for rid in range(100, 110))
    assert len([m for m in c.sent[sent:] if isinstance(m, HeartbeatRequest)]) == 8  # and one for the other nine


def test_an_answer_to_a_heartbeat_sent_before_the_read_confirms_nothing():
    c = Cluster(3)
    leader = c.elect()
    c.append(leader, [b"a"])
    c.deliver()
    c.now_ms += c.core(leader).config.heartbeat_interval_ms
    c.step(leader, Tick(c.now_ms))  # heartbeats sent before the read are in flight...
    before = [m for m in c.net if isinstance(m, HeartbeatRequest)]
    assert len(before) == 2
    c.step(leader, ClientRead(7))
    read_round = c.core(leader).read_index.seq
    assert all(m.read_seq < read_round for m in before)
    c.drop_filter = lambda m: isinstance(m, HeartbeatRequest) and m.read_seq == read_round  # ...its own is lost
    c.deliver()
    assert any(isinstance(m, HeartbeatResponse) and m.to == leader for m in c.sent[-4:])
    assert 7 not in c.completions
    c.drop_filter = None
    c.run(200)  # the next regular heartbeats carry the round too
    assert c.completions[7].code is ResponseCode.SUCCESS


def _deposed_leader_reads(**config) -> tuple[Cluster, int, int]:
    """A leader cut off while the others elect a new one and commit; then a read reaches the old leader.
    Returns the cluster, the old leader's read request id and the index the new leader acknowledged."""
    c = Cluster(3, check_quorum=False, **config)
    old = c.elect()
    c.append(old, [b"x"])
    c.deliver()
    c.isolate(old)
    c.run_until(lambda: any(c.core(n).role is Role.LEADER for n in c.ids if n != old), max_ms=5_000)
    new = next(n for n in c.ids if n != old and c.core(n).role is Role.LEADER)
    rid = c.append(new, [b"y"])
    c.deliver()
    assert c.completions[rid].code is ResponseCode.SUCCESS
    assert c.core(old).role is Role.LEADER  # it still thinks so (check_quorum off)
    _read(c, old, 55)
    c.run(c.core(old).config.max_wait_ack_ms + 100)
    return c, 55, c.completions[rid].last_index


def test_a_deposed_leader_in_a_minority_never_answers_and_the_read_times_out():
    c, read, acked = _deposed_leader_reads()
    assert c.completions[read].code is ResponseCode.WAIT_QUORUM_ACK_TIMEOUT
    new = c.leader()
    c.heal()
    _read(c, new, 56)
    c.deliver()
    assert c.completions[56].first_index >= acked


def test_the_quorum_round_is_what_keeps_it_linearizable(plant):
    plant("read_without_quorum")  # the same scene answers at once from the deposed leader's commit point
    c, read, acked = _deposed_leader_reads()
    assert c.completions[read].code is ResponseCode.SUCCESS and c.completions[read].first_index < acked


def test_a_new_leader_answers_reads_only_after_an_entry_of_its_term_commits():
    c = Cluster(3)
    leader = c.elect()
    c.append(leader, [b"a"])
    c.deliver()
    c.crash(leader)
    new = c.elect()
    core = c.core(new)
    # force the read to arrive before the new leader's no-op commits: stop delivering to followers
    others = [n for n in c.ids if n not in (leader, new)]
    for o in others:
        c.cut(new, o)
    _read(c, new, 77)
    assert 77 not in c.completions
    assert core.log.term_at(core.committed_index) != core.term or core.committed_index < core.log.begin_index
    c.heal()
    c.run_until(lambda: 77 in c.completions, max_ms=2_000)
    done = c.completions[77]
    assert done.code is ResponseCode.SUCCESS and core.log.term_at(done.first_index) == core.term


def test_a_follower_refuses_with_the_leader_and_a_single_node_group_answers_at_once():
    c = Cluster(3)
    leader = c.elect()
    c.deliver()
    follower = next(n for n in c.ids if n != leader)
    _read(c, follower, 5)
    assert c.completions[5].code is ResponseCode.NOT_LEADER and c.completions[5].leader_id == leader
    one = Cluster(1)
    only = one.elect()
    one.append(only, [b"a"])
    one.deliver()
    _read(one, only, 6)  # its own vote is the quorum: answered in the same step
    assert one.completions[6].code is ResponseCode.SUCCESS and one.completions[6].first_index == 0


def test_a_read_wakes_a_quiet_leader_and_it_quiesces_again():
    c = Cluster(3, quiesce=True)
    leader = c.elect()
    c.append(leader, [b"a"])
    c.run_until(lambda: all(c.core(n).quiet for n in c.ids), max_ms=2_000)
    _read(c, leader, 8)
    c.deliver()
    assert c.completions[8].code is ResponseCode.SUCCESS
    c.run_until(lambda: all(c.core(n).quiet for n in c.ids), max_ms=2_000)


def test_stepping_down_fails_waiting_reads():
    c = Cluster(3)
    leader = c.elect()
    c.deliver()
    c.isolate(leader)
    _read(c, leader, 9)
    c.run_until(lambda: 9 in c.completions, max_ms=5_000)  # check-quorum steps it down first
    assert c.completions[9].code in (ResponseCode.TERM_CHANGED, ResponseCode.WAIT_QUORUM_ACK_TIMEOUT)
