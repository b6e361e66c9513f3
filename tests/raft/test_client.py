"""Client appends: validation, pending limit, timeouts, term changes, idempotence, store failures."""

import pytest

from quorumlog.codes import ResponseCode
from quorumlog.raft.types import AppendBatch, ClientAppend, Role, StoreFailed, Tick
from quorumlog.wire.messages import PushRequest, TakeLeadershipRequest

from .harness import Cluster


def _cluster(**cfg):
    c = Cluster(3, **cfg)
    leader = c.elect()
    c.run(200)
    return c, leader, [n for n in c.ids if n != leader]


def test_success_carries_indexes_and_term_of_each_batch():
    c, leader, _ = _cluster()
    a = c.append(leader, [b"1", b"2"])
    b = c.append(leader, [b"3"])
    c.deliver()
    term = c.core(leader).term
    assert (c.completions[a].first_index, c.completions[a].last_index, c.completions[a].term) == (0, 1, term)
    assert (c.completions[b].first_index, c.completions[b].last_index) == (2, 2)


def test_empty_batch_is_refused():
    c, leader, _ = _cluster()
    rid = c.append(leader, [])
    assert c.completions[rid].code == ResponseCode.REQUEST_WITH_EMPTY_BODYS


def test_not_leader_carries_the_leader_id():
    c, leader, (f, _) = _cluster()
    rid = c.append(f, [b"x"])
    assert c.completions[rid].code == ResponseCode.NOT_LEADER
    assert c.completions[rid].leader_id == leader


def test_pending_limit_refuses_with_leader_pending_full():
    c, leader, followers = _cluster(max_pending_requests=2)
    for f in followers:
        c.isolate(f)
    ok = [c.append(leader, [b"x"]) for _ in range(2)]
    full = c.append(leader, [b"y"])
    assert c.completions[full].code == ResponseCode.LEADER_PENDING_FULL
    assert not any(r in c.completions for r in ok)


def test_wait_ack_timeout_after_max_wait_ack_ms():
    c, leader, followers = _cluster(check_quorum=False)
    for f in followers:
        c.isolate(f)
    rid = c.append(leader, [b"x"])
    wait = c.core(leader).config.max_wait_ack_ms
    c.run(wait - 20)
    assert rid not in c.completions
    c.run(40)
    assert c.completions[rid].code == ResponseCode.WAIT_QUORUM_ACK_TIMEOUT


def test_requests_cut_by_a_term_change_fail_with_term_changed():
    c, leader, followers = _cluster()
    c.isolate(leader)
    rid = c.append(leader, [b"x"])
    c.run_until(lambda: c.core(leader).role is not Role.LEADER, 2_000)  # check-quorum, before max_wait_ack_ms
    assert c.completions[rid].code == ResponseCode.TERM_CHANGED


def test_higher_term_message_fails_pending_with_term_changed():
    c, leader, followers = _cluster(check_quorum=False, pre_vote=False)
    c.isolate(leader)
    rid = c.append(leader, [b"x"])
    c.run_until(lambda: c.leader() not in (None, leader), 3_000)
    assert rid not in c.completions
    c.heal()
    c.run(300)
    assert c.completions[rid].code == ResponseCode.TERM_CHANGED
    assert c.core(leader).role is Role.FOLLOWER


def test_idempotent_duplicate_after_leader_change_returns_original_indexes():
    c, leader, _ = _cluster()
    c.append(leader, [b"pad"])
    first = c.append(leader, [b"p1", b"p2"], client_id=7, seq=0)
    c.deliver()
    done = c.completions[first]
    assert done.code == ResponseCode.SUCCESS and (done.first_index, done.last_index) == (1, 2)
    c.crash(leader)
    new = c.run_until(lambda: c.leader() not in (None, leader), 3_000) is not None and c.leader()
    end_before = c.nodes[new].store.end_index
    retry = c.append(new, [b"p1", b"p2"], client_id=7, seq=0)
    c.run_until(lambda: retry in c.completions)
    again = c.completions[retry]
    assert again.code == ResponseCode.SUCCESS
    assert (again.first_index, again.last_index, again.term) == (1, 2, done.term)
    assert c.nodes[new].store.end_index == end_before  # nothing written twice
    assert c.bodies(new).count(b"p1") == 1


def test_idempotent_duplicate_of_an_in_flight_batch_joins_it():
    c, leader, followers = _cluster()
    c.isolate(followers[0])
    c.isolate(followers[1])
    a = c.append(leader, [b"once"], client_id=9, seq=5)
    b = c.append(leader, [b"once"], client_id=9, seq=5)
    assert c.nodes[leader].store.end_index == 0  # one write
    c.heal()
    c.run_until(lambda: a in c.completions and b in c.completions)
    assert c.completions[a] .code == c.completions[b].code == ResponseCode.SUCCESS
    assert c.completions[a].first_index == c.completions[b].first_index == 0


def test_retry_of_an_uncommitted_batch_found_in_a_new_leaders_log_waits_for_its_commit():
    """The batch reached a follower but the leader died before commit: the new leader has it, uncommitted,
    from an earlier term; the retry joins it and the new leader's no-op commits it."""
    c, leader, (f1, f2) = _cluster()
    c.isolate(f2)
    for n in c.ids:
        c.nodes[n].auto_flush = n != leader  # the leader never makes it durable: no commit
    rid = c.append(leader, [b"maybe"], client_id=3, seq=1)
    c.deliver()
    assert c.nodes[f1].store.end_index == 0 and rid not in c.completions
    c.crash(leader)
    c.heal()
    new = c.run_until(lambda: c.leader() not in (None, leader), 3_000) is not None and c.leader()
    retry = c.append(new, [b"maybe"], client_id=3, seq=1)
    c.run_until(lambda: retry in c.completions)
    assert c.completions[retry].code == ResponseCode.SUCCESS
    assert c.completions[retry].first_index == 0
    assert c.bodies(new)[0] == b"maybe" and c.bodies(new)[1] == b""  # the new leader's no-op
    assert c.bodies(new).count(b"maybe") == 1


def test_sequence_older_than_the_dedup_window_is_refused():
    c, leader, _ = _cluster()
    for seq in range(300):
        c.append(leader, [b"s%d" % seq], client_id=11, seq=seq)
    c.deliver()
    rid = c.append(leader, [b"s0"], client_id=11, seq=0)
    assert c.completions[rid].code == ResponseCode.DUPLICATE_SEQUENCE_TOO_OLD
    ok = c.append(leader, [b"s299"], client_id=11, seq=299)
    assert c.completions[ok].code == ResponseCode.SUCCESS and c.completions[ok].first_index == 299


def test_producer_tag_is_passed_to_the_store():
    c, leader, _ = _cluster()
    ready = c.step(leader, __import__("quorumlog.raft.types", fromlist=["ClientAppend"]).ClientAppend(
        1000, (b"z",), 5, 42))
    (batch,) = ready.appends
    assert isinstance(batch, AppendBatch) and batch.producer == (5, 42)


def test_disk_error_on_the_leader_fails_pending_and_steps_down():
    """A batch already written (and pushed) when the fsync fails may still commit under the
    next leader, so its client hears "outcome unknown" (retriable), not a final DISK_ERROR; a batch whose
    write never happened is refused with DISK_ERROR."""
    c, leader, _ = _cluster()
    for n in c.ids:
        c.nodes[n].auto_flush = False
    written = c.append(leader, [b"x"])
    c.step(leader, Tick(c.now_ms))  # the runtime's next step (a Stored) pushes it
    c.core(leader).step(ClientAppend(9_999, (b"never-written",), 0, -1))  # this write fails
    c.step(leader, StoreFailed(ResponseCode.DISK_ERROR, "EIO"))
    assert c.completions[written].code == ResponseCode.WAIT_QUORUM_ACK_TIMEOUT
    assert c.completions[9_999].code == ResponseCode.DISK_ERROR
    assert c.core(leader).role is Role.FOLLOWER
    for n in c.ids:
        c.nodes[n].auto_flush = True
    new = c.run_until(lambda: c.leader() not in (None, leader), 3_000) is not None and c.leader()
    assert new != leader
    c.run(300)
    assert b"x" in c.bodies(new, c.core(new).committed_index)  # it did commit: DISK_ERROR would have lied
    assert b"never-written" not in c.bodies(new)


def test_disk_error_hands_leadership_over_at_once_and_never_campaigns_again():
    c, leader, _ = _cluster()
    timeout_ms = c.core(leader).config.election_timeout_min_ms
    ok = c.append(leader, [b"before"])
    c.deliver()
    assert c.completions[ok].code == ResponseCode.SUCCESS
    c.step(leader, StoreFailed(ResponseCode.DISK_ERROR, "EIO"))
    # the most caught-up follower got TakeLeadership: a new leader well before any election timeout
    waited = c.run_until(lambda: c.leader() not in (None, leader), timeout_ms // 2)
    assert waited is not None, "no hand-over: the group waited for an election timeout"
    new = c.leader()
    after = c.append(new, [b"after"])
    c.deliver()
    assert c.completions[after].code == ResponseCode.SUCCESS
    # the node whose store failed never campaigns again in this process, even when the new leader goes away
    c.isolate(new)
    c.run(20 * c.core(leader).config.election_timeout_max_ms)
    assert c.core(leader).role is Role.FOLLOWER
    assert leader not in c.leaders()


def test_disk_full_on_the_leader_hands_over_to_a_caught_up_follower():
    c, leader, followers = _cluster()
    timeout_ms = c.core(leader).config.election_timeout_min_ms
    ok = c.append(leader, [b"x"])
    c.deliver()
    assert c.completions[ok].code == ResponseCode.SUCCESS
    rid = c.append(leader, [b"y"])  # written before the disk guard's report: it may still commit
    c.step(leader, StoreFailed(ResponseCode.DISK_FULL, "ENOSPC"))
    assert c.completions[rid].code == ResponseCode.WAIT_QUORUM_ACK_TIMEOUT
    again = c.append(leader, [b"z"])
    assert c.completions[again].code in (ResponseCode.DISK_FULL, ResponseCode.LEADER_TRANSFERRING)
    assert c.run_until(lambda: c.leader() in followers, timeout_ms) is not None, "no transfer"
    new = c.leader()
    later = c.append(new, [b"w"])
    c.deliver()
    assert c.completions[later].code == ResponseCode.SUCCESS
    assert c.bodies(new)[-1] == b"w" and b"x" in c.bodies(new)


@pytest.mark.parametrize("bug", [False, True])
def test_ack_before_quorum_answers_before_any_follower_has_it(bug, plant):
    if bug:
        plant("ack_before_quorum")
    c, leader, followers = _cluster()
    for f in followers:
        c.isolate(f)
    rid = c.append(leader, [b"x"])
    c.deliver()
    acked = rid in c.completions and c.completions[rid].code == ResponseCode.SUCCESS
    assert acked is bug
    assert c.core(leader).committed_index == -1


def test_a_partial_batch_at_a_new_leaders_end_is_dropped_not_committed():
    """A crash kept the first 2 entries of an unflushed 4-entry batch; that node is elected. It must not
    commit half the batch: it drops the partial batch, and the client's retry writes the batch once, whole."""
    c, leader, followers = _cluster(pre_vote=False, check_quorum=False)
    base = c.append(leader, [b"base"])
    c.deliver()
    assert c.completions[base].code == ResponseCode.SUCCESS
    for f in followers:
        c.isolate(f)
    c.nodes[leader].auto_flush = False
    c.append(leader, [b"b0", b"b1", b"b2", b"b3"], client_id=5, seq=0)
    c.deliver()
    c.crash(leader, keep_unflushed=2)
    assert c.bodies(leader) == [b"base", b"b0", b"b1"]  # a torn batch
    c.heal()
    c.restart(leader)
    c.now_ms = max(c.now_ms, c.core(leader).elector.election_deadline_ms)
    for f in followers:  # (their clocks stood still while cut off: restart them so their timers start now)
        c.crash(f)
        c.restart(f)
    c.step(leader, Tick(c.now_ms))
    c.deliver()
    assert c.core(leader).role is Role.LEADER  # its log was the longest
    retry = c.append(leader, [b"b0", b"b1", b"b2", b"b3"], client_id=5, seq=0)
    c.run_until(lambda: retry in c.completions)
    assert c.completions[retry].code == ResponseCode.SUCCESS
    c.run(300)
    for n in c.ids:
        bodies = c.bodies(n)
        assert bodies.count(b"b0") == 1 and bodies.count(b"b3") == 1, (n, bodies)
        assert bodies[-4:] == [b"b0", b"b1", b"b2", b"b3"]


def test_a_failed_leader_write_leaves_no_batch_boundary_behind():
    """A leader whose write failed (ENOSPC) kept that batch's end as a push/commit boundary,
    so the next batch, written over the same indexes, was pushed and committed only up to the stale end:
    half a batch committed. Pushes here carry one entry at most, so every push ends at a boundary."""
    c, leader, followers = _cluster(max_push_batch_bytes=200)
    core = c.core(leader)
    base = c.append(leader, [b"base"])
    c.deliver()
    assert c.completions[base].code == ResponseCode.SUCCESS
    end = core.log.end_index
    # A 2-entry batch whose write fails: the runtime never executes the Ready's append and reports the failure.
    core.step(ClientAppend(9_999, (b"lost-0", b"lost-1"), 0, -1))
    # the hand-over to a caught-up follower never arrives: the leader keeps leading (and refusing for a while)
    c.drop_filter = lambda m: isinstance(m, TakeLeadershipRequest)
    c.step(leader, StoreFailed(ResponseCode.DISK_FULL, "ENOSPC creating a segment"))
    assert c.nodes[leader].store.end_index == end
    c.run_until(lambda: c.now_ms >= core._disk_full_until_ms and not core.transfer.active, 10_000)
    assert c.leader() == leader
    seen_ends: list[int] = []
    c.drop_filter = lambda m: isinstance(m, PushRequest) and m.records is not None and seen_ends.append(m.last_index)
    rid = c.append(leader, [b"c" * 80] * 3)  # one entry per push (136 B each, 200 B budget)
    c.run_until(lambda: rid in c.completions, 5_000)
    assert c.completions[rid].code == ResponseCode.SUCCESS
    assert seen_ends and all(e == end + 3 for e in seen_ends), seen_ends  # never inside the batch
    for f in followers:
        assert c.core(f).committed_index in (end, end + 3)
