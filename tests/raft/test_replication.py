"""Log replication: Figure 8, stale leaders, repair of a far-behind follower, the EntryHandler's buffer."""

import pytest

from quorumlog.codes import ResponseCode
from quorumlog.errors import CorruptEntry
from quorumlog.raft.quorum_ack_checker import check_quorum_ack, quorum_index
from quorumlog.raft.types import HardState, Receive, Role, Tick
from quorumlog.store.memory import MemoryStore
from quorumlog.wire.messages import PushRequest, PushResponse, PushType

from .harness import Cluster

def _campaign(c: Cluster, nid: str) -> None:
    """Make exactly `nid` time out and run for leader (others' clocks are not advanced)."""
    c.now_ms = max(c.now_ms, c.core(nid).elector.election_deadline_ms)
    c.step(nid, Tick(c.now_ms))
    c.deliver()


def test_quorum_ack_checker_counts_only_current_term():
    terms = [1, 1, 2, 2, 4]
    term_at = terms.__getitem__
    assert quorum_index([4, 3, 1, -1, -1], 3) == 1
    # a majority holds index 3 (term 2), but the leader is in term 4: nothing commits by counting
    assert check_quorum_ack([3, 3, -1, -1], 3, 3, 4, term_at, 1) == 1
    assert quorum_index([3, 3, 3, -1, -1], 3) == 3  # (what counting alone would commit: Figure 8's bug)
    # once the term-4 entry reaches a majority, everything before it commits with it
    assert check_quorum_ack([4, 4, -1, -1], 4, 3, 4, term_at, 1) == 4
    # the leader counts itself only up to its durable index
    assert check_quorum_ack([4, 4, -1, -1], 1, 3, 4, term_at, 1) == 1
    assert check_quorum_ack([4, 4, 4, -1], 1, 3, 4, term_at, 1) == 4


@pytest.mark.parametrize("bug", [False, True])
def test_figure_8_leader_must_not_commit_a_previous_term_entry_by_counting(bug, plant):
    """Raft paper, Figure 8, with 0-based indexes and one committed entry before it starts.

    (a) S1 leads term 2 and gets entry 1 to S2 only. (b) S5 leads term 3 with S3, S4 and writes its own
    entry 1. (c) S1 leads term 4 and copies its term-2 entry 1 to S3: a majority holds it, yet it must not
    commit. (d) S5 leads term 5 (its last term 3 beats S2's and S3's 2) and overwrites entry 1 everywhere.
    With the planted bug S1 commits entry 1 in (c), and (d) then destroys a committed entry.
    """
    if bug:
        plant("commit_previous_term_by_count")
    c = Cluster(5, pre_vote=False, check_quorum=False, max_push_batch_bytes=1)
    s1, s2, s3, s4, s5 = c.ids
    _campaign(c, s1)
    assert c.leader() == s1
    rid = c.append(s1, [b"base"])
    c.deliver()
    assert c.completions[rid].code == ResponseCode.SUCCESS
    c.step(s1, Tick(c.now_ms))  # nothing more: every node holds entry 0
    # (a) S1 leads term 2, entry 1 reaches S2 only
    c.crash(s1)
    c.restart(s1)
    _campaign(c, s1)
    assert c.core(s1).role is Role.LEADER and c.core(s1).term == 2
    c.isolate(s1)
    c.blocked -= {(s1, s2), (s2, s1)}
    c.append(s1, [b"a"])
    c.deliver()
    assert c.log_terms(s2) == [1, 2] and c.log_terms(s3) == [1]
    # (b) S1 crashes; S5 leads term 3 with S3, S4 and writes entry 1 only locally
    c.crash(s1)
    c.heal()
    c.cut(s5, s2)
    _campaign(c, s5)
    assert c.core(s5).role is Role.LEADER and c.core(s5).term == 3
    c.isolate(s5)
    c.append(s5, [b"b"])
    c.deliver()
    assert c.log_terms(s5) == [1, 3]
    # (c) S5 crashes; S1 leads term 4 and copies entry 1 (term 2) to S3 — but not its term-4 no-op
    c.crash(s5)
    c.heal()
    c.restart(s1)
    c.drop_filter = lambda m: isinstance(m, PushRequest) and m.push_type == PushType.APPEND and m.first_index >= 2
    _campaign(c, s1)  # term 3: S3 and S4 already voted for S5 in term 3
    _campaign(c, s1)  # term 4
    assert c.core(s1).role is Role.LEADER and c.core(s1).term == 4
    c.deliver()
    for _ in range(3):
        c.step(s1, Tick(c.now_ms))
        c.deliver()
    holders = [n for n in (s1, s2, s3, s4) if c.log_terms(n)[:2] == [1, 2]]
    assert len(holders) >= 3  # a majority of five holds the term-2 entry
    committed_in_c = c.core(s1).committed_index
    assert committed_in_c == (1 if bug else 0)
    # (d) S1 crashes; S5 leads term 5 and overwrites entry 1 on everyone it reaches
    c.drop_filter = None
    c.crash(s1)
    c.restart(s5)
    try:
        _campaign(c, s5)  # term 4 is taken
        _campaign(c, s5)
        assert c.core(s5).role is Role.LEADER and c.core(s5).term == 5
        for _ in range(3):
            c.step(s5, Tick(c.now_ms))
            c.deliver()
        overwritten = all(c.bodies(n)[:2] == [b"base", b"b"] for n in (s2, s3, s4, s5))
        assert overwritten
        safety_violated = committed_in_c >= 1  # a committed entry was replaced
    except CorruptEntry:
        # a follower that learnt the wrong commit keeps entry 1 and its chain CRC refuses S5's entry 2
        safety_violated = True
    assert safety_violated is bug


def test_stale_leader_comes_back_and_has_its_suffix_truncated():
    c = Cluster(3)
    old = c.elect()
    rid0 = c.append(old, [b"committed"])
    c.run_until(lambda: rid0 in c.completions)
    c.isolate(old)
    stale = [c.append(old, [b"stale-%d" % i]) for i in range(3)]
    c.deliver()
    assert c.nodes[old].store.end_index == 3  # stored locally, never committed
    new = c.run_until(lambda: c.leader() not in (None, old), 3_000) and c.leader()
    fresh = c.append(new, [b"fresh-1", b"fresh-2"])
    c.run_until(lambda: fresh in c.completions)
    assert all(c.completions[r].code in (ResponseCode.TERM_CHANGED, ResponseCode.WAIT_QUORUM_ACK_TIMEOUT)
               for r in stale)
    c.heal()
    c.run(1_000)
    assert c.core(old).role is Role.FOLLOWER and c.core(old).leader_id == new
    for nid in c.ids:
        assert c.bodies(nid)[:3] == [b"committed", b"fresh-1", b"fresh-2"], nid
        assert b"stale-0" not in c.bodies(nid)
    truncates = [m for m in c.sent if isinstance(m, PushRequest) and m.to == old and m.push_type == PushType.TRUNCATE]
    assert truncates and truncates[-1].prev_index == 0


def test_follower_far_behind_is_repaired_in_byte_bounded_batches():
    c = Cluster(3, max_push_batch_bytes=4096)
    lagger = c.elect()
    rid = c.append(lagger, [b"x" * 100] * 5)
    c.run_until(lambda: rid in c.completions)
    # the lagger, a leader cut off from the others, writes entries nobody else gets ...
    c.isolate(lagger)
    for _ in range(5):
        c.append(lagger, [b"divergent"] * 10)
    c.deliver()
    assert c.nodes[lagger].store.end_index == 54
    # ... while the other two elect a leader and write a lot
    main = c.run_until(lambda: c.leader() not in (None, lagger), 5_000) is not None and c.leader()
    main = next(n for n in c.leaders() if n != lagger)
    for i in range(20):
        rid = c.append(main, [b"%05d-%s" % (i, b"y" * 200)] * 100)
    c.run_until(lambda: rid in c.completions)
    start = len(c.sent)
    c.heal()
    c.run_until(lambda: c.nodes[lagger].store.end_index == c.nodes[main].store.end_index
                and c.core(lagger).committed_index == c.core(main).committed_index, 10_000)
    assert c.bodies(lagger) == c.bodies(main)
    pushes = [m for m in c.sent[start:] if isinstance(m, PushRequest) and m.to == lagger]
    compares = [m.prev_index for m in pushes if m.push_type == PushType.COMPARE]
    end_main = c.nodes[main].store.end_index
    assert compares[:3] == [end_main, 54, 4]  # our end, the follower's end, the start of our term's run
    assert len(compares) <= 3 + 7  # then bisection between 4 (agrees) and 54 (differs)
    truncates = [m.prev_index for m in pushes if m.push_type == PushType.TRUNCATE]
    assert truncates == [4]  # exactly the divergent suffix is dropped
    appends = [m for m in pushes if m.push_type == PushType.APPEND]
    assert len(appends) > 100
    assert all(m.records.size_bytes <= 4096 for m in appends if m.count > 1)


def _leader_with_captured_pushes(n_batches=4):
    """A leader whose APPEND pushes to n1 are held back so the test can deliver them by hand."""
    c = Cluster(3, max_push_batch_bytes=1)  # one entry per push
    leader = c.elect()
    target = next(n for n in c.ids if n != leader)
    c.run(200)
    held = []
    c.drop_filter = lambda m: (isinstance(m, PushRequest) and m.to == target and m.push_type == PushType.APPEND
                               and not held.append(m))
    for i in range(n_batches):
        c.append(leader, [b"e%d" % i])
    c.deliver()
    c.drop_filter = None
    assert [m.first_index for m in held] == list(range(n_batches))
    return c, leader, target, held


def _responses_to(c, leader, start):
    return [m for m in c.sent[start:] if isinstance(m, PushResponse) and m.to == leader]


def test_out_of_order_pushes_are_buffered_and_stored_in_order():
    c, leader, target, held = _leader_with_captured_pushes(4)
    start = len(c.sent)
    for m in reversed(held):
        c.step(target, Receive(m))
        c.deliver()
    assert c.bodies(target) == [b"e0", b"e1", b"e2", b"e3"]
    codes = {r.code for r in _responses_to(c, leader, start)}
    assert codes == {ResponseCode.SUCCESS}


def test_repeated_push_is_answered_repeated_push():
    c, leader, target, held = _leader_with_captured_pushes(3)
    start = len(c.sent)
    c.step(target, Receive(held[2]))  # buffered: waits for 0 and 1
    c.step(target, Receive(held[2]))
    (resp,) = _responses_to(c, leader, start)
    assert resp.code == ResponseCode.REPEATED_PUSH and resp.index == 2
    # a push of entries already stored is confirmed, not stored twice
    c.step(target, Receive(held[0]))
    c.step(target, Receive(held[1]))
    c.deliver()
    c.step(target, Receive(held[0]))
    assert c.bodies(target) == [b"e0", b"e1", b"e2"]
    assert _responses_to(c, leader, start)[-1].code == ResponseCode.SUCCESS


def test_push_with_a_mismatching_entry_is_answered_inconsistent_state():
    c, leader, target, held = _leader_with_captured_pushes(2)
    c.step(target, Receive(held[0]))
    c.step(target, Receive(held[1]))
    fake = PushRequest(leader, target, held[1].term, PushType.APPEND, -1, 0, 999, 1, 1, held[1].records)
    start = len(c.sent)
    c.step(target, Receive(fake))
    # entry 1 is already held with the same term: the overlap is confirmed, prev_term is not re-read
    assert _responses_to(c, leader, start)[-1].code == ResponseCode.SUCCESS
    gap = PushRequest(leader, target, held[1].term, PushType.APPEND, -1, 1, 999, 2, 2, held[1].records)
    # a push whose prev does not match at our end: INCONSISTENT_STATE, nothing stored
    c.core(target).handler.matched_end = -1
    c.step(target, Receive(gap))
    assert _responses_to(c, leader, start)[-1].code == ResponseCode.INCONSISTENT_STATE
    assert c.nodes[target].store.end_index == 1


def test_buffered_push_that_waits_too_long_fails_fast():
    c, leader, target, held = _leader_with_captured_pushes(3)
    start = len(c.sent)
    c.step(target, Receive(held[2]))
    c.step(target, Tick(c.now_ms + c.core(target).config.max_push_timeout_ms))
    (resp,) = _responses_to(c, leader, start)
    assert resp.code == ResponseCode.INCONSISTENT_STATE
    assert not c.core(target).handler.buffer


def test_lost_push_is_sent_again_after_the_push_timeout():
    c = Cluster(3)
    leader = c.elect()
    a, b = (n for n in c.ids if n != leader)
    c.isolate(b)
    c.blocked -= {(leader, b), (b, leader)}  # b hears the leader (no election), but its pushes are lost:
    dropped = []
    c.drop_filter = lambda m: (isinstance(m, PushRequest) and m.push_type == PushType.APPEND and m.to in (a, b)
                               and len(dropped) < 2 and not dropped.append(m))
    rid = c.append(leader, [b"retry-me"])
    c.deliver()
    assert len(dropped) == 2 and rid not in c.completions
    took = c.run_until(lambda: rid in c.completions, 3_000)
    timeout = c.core(leader).config.max_push_timeout_ms
    assert timeout <= took < timeout + 100
    assert c.completions[rid].code == ResponseCode.SUCCESS
    resent = [m for m in c.sent if isinstance(m, PushRequest) and m.push_type == PushType.APPEND and m.to == a]
    assert [m.first_index for m in resent] == [0, 0]


def test_follower_acknowledges_only_durable_entries():
    c = Cluster(3)
    leader = c.elect()
    for n in c.ids:
        c.nodes[n].auto_flush = False
    c.flush(leader)
    rid = c.append(leader, [b"d"])
    c.deliver()
    followers = [n for n in c.ids if n != leader]
    assert all(c.nodes[n].store.end_index == 0 for n in followers)
    c.flush(leader)
    c.deliver()
    assert rid not in c.completions  # stored everywhere, durable only on the leader
    c.flush(followers[0])
    c.deliver()
    assert c.completions[rid].code == ResponseCode.SUCCESS


def test_leader_counts_itself_only_when_durable():
    c = Cluster(3)
    leader = c.elect()
    c.nodes[leader].auto_flush = False
    followers = [n for n in c.ids if n != leader]
    c.isolate(followers[1])
    rid = c.append(leader, [b"d"])
    c.deliver()
    assert rid not in c.completions  # the follower acked; the leader's own copy is not durable
    c.flush(leader)
    c.deliver()
    assert c.completions[rid].code == ResponseCode.SUCCESS


def test_followers_learn_the_commit_index_from_heartbeats_when_idle():
    c = Cluster(3)
    leader = c.elect()
    c.drop_filter = lambda m: isinstance(m, PushRequest) and m.push_type == PushType.COMMIT
    rid = c.append(leader, [b"x"])
    c.deliver()
    assert c.completions[rid].code == ResponseCode.SUCCESS
    assert all(c.core(n).committed_index == -1 for n in c.ids if n != leader)
    c.run(c.core(leader).config.heartbeat_interval_ms + 10)
    assert all(c.core(n).committed_index == 0 for n in c.ids)
    assert all(c.nodes[n].store.committed_index == 0 for n in c.ids)


@pytest.mark.parametrize("bug", [False, True])
def test_skip_compare_lets_a_divergent_follower_keep_a_wrong_entry(bug, plant):
    if bug:
        plant("skip_compare")
    c = Cluster(3, pre_vote=False)
    old = c.elect()
    c.isolate(old)
    c.append(old, [b"old-term"])  # stored on `old` only
    c.deliver()
    new = c.run_until(lambda: c.leader() not in (None, old), 5_000) is not None and c.leader()
    new = next(n for n in c.leaders() if n != old)
    rid = c.append(new, [b"new-term"])
    c.run_until(lambda: rid in c.completions)
    c.heal()
    try:
        rid2 = c.append(new, [b"next"])
        c.run_until(lambda: rid2 in c.completions)
        c.run(1_000)
        diverged = c.bodies(old) != c.bodies(new)
    except CorruptEntry:
        diverged = True  # the store's chain CRC refused an APPEND that does not follow its log
    assert diverged is bug


def test_pushes_never_split_an_uncommitted_batch():
    c = Cluster(3, max_push_batch_bytes=100)  # smaller than one record of these batches
    leader = c.elect()
    c.run(200)
    start = len(c.sent)
    a = c.append(leader, [b"a" * 50] * 10)
    b = c.append(leader, [b"b" * 50] * 7)
    c.deliver()
    assert c.completions[a].code == c.completions[b].code == ResponseCode.SUCCESS
    spans = {(m.first_index, m.last_index) for m in c.sent[start:]
             if isinstance(m, PushRequest) and m.push_type == PushType.APPEND}
    assert spans <= {(0, 9), (10, 16), (0, 16)}, spans


def test_truncate_keeps_entries_that_already_match_this_leader():
    """A TRUNCATE carries the leader's entries; the follower drops only what conflicts with them."""
    c, leader, target, held = _leader_with_captured_pushes(3)
    for m in held[:2]:
        c.step(target, Receive(m))
    c.deliver()
    assert c.nodes[target].store.end_index == 1
    start = len(c.sent)
    term = c.core(leader).term
    lstore = c.nodes[leader].store
    recs = lstore.read(1, 1 << 20)  # entries 1..2: 1 is held already (same term), 2 is new
    c.step(target, Receive(PushRequest(leader, target, term, PushType.TRUNCATE, -1, 0, lstore.term_at(0),
                                       1, recs.last_index, recs)))
    c.deliver()
    assert c.bodies(target) == c.bodies(leader)[:3]
    resp = next(m for m in c.sent[start:] if isinstance(m, PushResponse) and m.push_type == PushType.TRUNCATE)
    assert resp.code == ResponseCode.SUCCESS and resp.end_index == 2


def test_a_conflicting_suffix_is_replaced_from_the_first_conflict_only():
    import random

    from quorumlog.raft.core import RaftCore
    from quorumlog.raft.types import HardState, RaftConfig
    from quorumlog.store.memory import MemoryStore

    store = MemoryStore()
    store.append_batch(1, [b"a", b"b"], 0)
    store.append_batch(2, [b"stale-c", b"stale-d"], 0)  # from a leader of term 2 that never committed them
    leader_log = MemoryStore()
    leader_log.append_batch(1, [b"a", b"b"], 0)
    leader_log.append_batch(3, [b"c", b"d", b"e"], 0)
    f = RaftCore(RaftConfig(node_id="n1", peers=("n0", "n1", "n2")), store, HardState(3, None), random.Random(1), 0)
    recs = leader_log.read(1, 1 << 20)
    ready = f.step(Receive(PushRequest("n0", "n1", 3, PushType.TRUNCATE, -1, 0, 1, 1, 4, recs)))
    assert ready.truncate_after == 1  # entry 1 agrees; 2 is the first conflict
    (app,) = ready.appends
    assert (app.first_index, app.last_index) == (2, 4)
    store.truncate_after(1)
    store.append_records(app.data)
    assert [store.get(i).body for i in range(5)] == [b"a", b"b", b"c", b"d", b"e"]


@pytest.mark.parametrize("throttled", [True, False])
def test_lagging_follower_is_throttled_to_the_push_quota(throttled):
    quota = 2_000
    c = Cluster(3, max_push_batch_bytes=500, peer_push_quota=quota,
                peer_push_throttle_point=1_000 if throttled else 1 << 40)
    leader = c.elect()
    lagger = next(n for n in c.ids if n != leader)
    c.isolate(lagger)
    for i in range(40):
        rid = c.append(leader, [b"%03d" % i + b"z" * 100])
    c.run_until(lambda: rid in c.completions)
    c.run(600)  # cut off for a while
    seen: dict[int, tuple[int, int]] = {}  # first index -> (time ms, bytes) of each push the lagger gets
    c.drop_filter = lambda m: (isinstance(m, PushRequest) and m.to == lagger and m.records is not None
                               and m.first_index not in seen
                               and seen.setdefault(m.first_index, (c.now_ms, m.records.size_bytes)) is None)
    c.heal()
    took = c.run_until(lambda: c.nodes[lagger].store.end_index == 39, 20_000)
    assert c.bodies(lagger) == c.bodies(leader)
    per_second: dict[int, int] = {}
    for t, size in seen.values():  # resends of pushes lost while it was cut off count when first sent
        per_second[t // 1000] = per_second.get(t // 1000, 0) + size
    total = sum(per_second.values())
    assert total >= 40 * (56 + 103)  # every record (header + body) was sent
    if throttled:
        assert max(per_second.values()) <= quota + 500  # the quota, overshot by at most one push
        assert took >= 1_000 * (total // (quota + 500) - 1)
    else:
        assert took < 400  # the heartbeat answer after the heal shows the follower is back


def test_status_reports_role_indexes_and_watermarks():
    c = Cluster(3)
    leader = c.elect()
    rid = c.append(leader, [b"s"])
    c.run_until(lambda: rid in c.completions)
    st = c.core(leader).status()
    assert st.role is Role.LEADER and st.leader_id == leader and st.committed_index == 0 and st.end_index == 0
    assert st.watermarks == {n: 0 for n in c.ids}
    fst = c.core(next(n for n in c.ids if n != leader)).status()
    assert fst.role is Role.FOLLOWER and fst.watermarks == {} and fst.leader_id == leader


def test_lost_acks_are_recovered_through_compare():
    c = Cluster(3)
    leader = c.elect()
    c.run(200)
    c.drop_filter = lambda m: isinstance(m, PushResponse) and m.push_type == PushType.APPEND
    rid = c.append(leader, [b"x"])
    c.deliver()
    c.drop_filter = None
    assert rid not in c.completions  # stored and durable everywhere, but every ack was lost
    took = c.run_until(lambda: rid in c.completions, 3_000)
    assert c.completions[rid].code == ResponseCode.SUCCESS
    assert took <= c.core(leader).config.max_push_timeout_ms + 50


def test_an_ack_that_overtakes_the_compare_answer_still_counts():
    c = Cluster(3)
    leader = c.elect()
    rid = c.append(leader, [b"x"])
    c.run_until(lambda: rid in c.completions)
    follower = next(n for n in c.ids if n != leader)
    d = c.core(leader).dispatchers[follower]
    d.watermark = -1  # as if its acks had not arrived yet
    d._enter_compare(0)
    assert d.state == PushType.COMPARE
    d.on_response(PushResponse(follower, leader, c.core(leader).term, PushType.APPEND, ResponseCode.SUCCESS, 0, 0))
    assert d.watermark == 0


def test_a_follower_never_acks_an_earlier_terms_entries_to_a_new_leader():
    """F held 0..5 from n0 (term 1), then campaigned (term 2). n2 leads term 2 and holds only 0..2 of them:
    F must acknowledge 2, not 5 — its earlier agreement was with another leader."""
    import random

    from quorumlog.raft.core import RaftCore
    from quorumlog.raft.types import Durable, HardState, RaftConfig
    from quorumlog.store.memory import MemoryStore

    source = MemoryStore()
    source.append_batch(1, [b"e%d" % i for i in range(6)], 0)
    store = MemoryStore()
    cfg = RaftConfig(node_id="n1", peers=("n0", "n1", "n2"), pre_vote=False)
    f = RaftCore(cfg, store, HardState(1, None), random.Random(3), 0)
    recs = source.read(0, 1 << 20)
    ready = f.step(Receive(PushRequest("n0", "n1", 1, PushType.APPEND, -1, -1, -1, 0, 5, recs)))
    store.append_records(ready.appends[0].data)
    f.step(Durable(store.flush()))
    assert f.handler.matched_end == 5
    f.step(Tick(f.elector.election_deadline_ms))  # campaigns: term 2
    assert f.term == 2 and f.role is Role.CANDIDATE
    msgs = f.step(Receive(PushRequest("n2", "n1", 2, PushType.COMPARE, -1, prev_index=2, prev_term=1))).messages
    acks = [m for m in msgs if isinstance(m, PushResponse) and m.push_type == PushType.APPEND]
    assert [a.index for a in acks] == [2]


def test_an_inherited_tail_is_pushed_in_pieces_at_batch_boundaries():
    """A new leader pushed the uncommitted tail it inherited in one piece, whatever its size
    (a 72 MB push over the 64 MiB frame cap never arrives). It now cuts it at the batches' ends, by the budget."""
    from quorumlog.codes import ResponseCode
    from quorumlog.wire.messages import PushRequest, PushResponse
    c = Cluster(3, max_push_batch_bytes=400, pre_vote=False, check_quorum=False)
    a = c.elect()
    c.run(200)
    b, d = [n for n in c.ids if n != a]
    ok = c.append(a, [b"base"])
    c.deliver()
    assert c.completions[ok].code == ResponseCode.SUCCESS
    base_end = c.core(a).log.end_index
    c.isolate(d)
    c.drop_filter = lambda m: isinstance(m, PushResponse) and m.frm == b  # b stores the tail; a never commits it
    for k in range(6):
        c.append(a, [bytes([65 + k]) * 60] * 3)  # 6 batches of 3 entries, ~116 B each: 2 batches exceed the budget
    c.run(100)
    assert c.nodes[b].store.end_index == base_end + 18 and c.core(a).committed_index == base_end
    c.crash(a)
    c.drop_filter = None
    c.heal()
    c.isolate(a)
    pushes = []
    c.drop_filter = lambda m: isinstance(m, PushRequest) and m.records is not None and m.frm == b \
        and pushes.append((m.first_index, m.last_index)) and False
    c.run_until(lambda: c.leader() == b and c.core(b).committed_index >= base_end + 19, 10_000)
    tail_pushes = [(f, l) for f, l in pushes if l <= base_end + 18]
    assert len(tail_pushes) > 1, pushes  # in pieces, not one push of the whole tail
    assert all((l - base_end) % 3 == 0 for _f, l in tail_pushes), pushes  # each ends at a batch's end
    assert c.bodies(d)[base_end + 1: base_end + 19] == c.bodies(b)[base_end + 1: base_end + 19]


@pytest.mark.parametrize("new_disk", [False, True])
def test_a_follower_whose_log_ends_below_the_leaders_begin_resets_to_it(new_disk):
    """A follower down longer than retention (or back with an empty disk) ends below the
    leader's begin index; COMPARE used to answer INCONSISTENT_STATE forever. The leader TRUNCATEs from its begin
    index - 1 and the follower starts its log there, with the leader's entries and commit point."""
    c = Cluster(3, max_push_batch_bytes=2048)
    leader = c.elect()
    rid = c.append(leader, [b"early"] * 3)
    c.run_until(lambda: rid in c.completions)
    away = next(n for n in c.ids if n != leader)
    c.run_until(lambda: c.nodes[away].store.end_index == c.nodes[leader].store.end_index
                and c.core(away).committed_index == c.nodes[leader].store.end_index)
    c.crash(away)
    for i in range(30):
        rid = c.append(leader, [b"%03d" % i + b"z" * 100] * 4)
    c.run_until(lambda: rid in c.completions)
    begin = c.nodes[leader].store.end_index - 20
    for nid in c.ids:  # retention on the two that stayed: what `away` lacks is gone
        if nid != away:
            c.nodes[nid].store.delete_before(begin)
    if new_disk:
        c.nodes[away].store = MemoryStore()
        c.nodes[away].hard_state = HardState()
    c.restart(away)
    start = len(c.sent)
    c.run_until(lambda: c.nodes[away].store.end_index == c.nodes[leader].store.end_index
                and c.core(away).committed_index == c.core(leader).committed_index, 5_000)
    store = c.nodes[away].store
    assert store.begin_index == begin
    assert c.bodies(away) == c.bodies(leader)
    assert c.core(away).committed_index == c.core(leader).committed_index
    inconsistent = [m for m in c.sent[start:] if isinstance(m, PushResponse) and m.frm == away
                    and m.code == ResponseCode.INCONSISTENT_STATE]
    assert inconsistent == []
    # and the group goes on with it: a new write commits on all three
    rid = c.append(leader, [b"after"])
    c.run_until(lambda: rid in c.completions and c.nodes[away].store.end_index == c.nodes[leader].store.end_index)
    assert c.bodies(away)[-1] == b"after"


def test_a_reset_follower_takes_the_producer_table_and_as_leader_answers_an_old_retry_once():
    """Found by the simulator (seed 72 before the fix): a follower reset to its leader's begin index started
    with an empty producer table, became leader, and a client's retry of a batch that retention had deleted
    was appended again. The reset TRUNCATE now carries the leader's table."""
    c = Cluster(3)
    leader = c.elect()
    rid = c.append(leader, [b"once-a", b"once-b"], client_id=5, seq=0)
    c.run_until(lambda: rid in c.completions)
    first = c.completions[rid].first_index
    away = next(n for n in c.ids if n != leader)
    c.run_until(lambda: c.core(away).committed_index >= first + 1)
    c.crash(away)
    c.nodes[away].store = MemoryStore()  # a replacement disk: nothing of the old log
    c.nodes[away].hard_state = HardState()
    for i in range(10):
        rid = c.append(leader, [b"later-%d" % i])
    c.run_until(lambda: rid in c.completions)
    begin = c.nodes[leader].store.end_index - 3
    for nid in c.ids:
        if nid != away:
            c.nodes[nid].store.delete_before(begin)
    c.restart(away)
    c.run_until(lambda: c.nodes[away].store.end_index == c.nodes[leader].store.end_index)
    assert c.nodes[away].store.begin_index == begin
    hit = c.nodes[away].store.find_producer_batch(5, 0)
    assert hit is not None and (hit.first_index, hit.last_index) == (first, first + 1)
    # the reset node leads; the client retries the old batch there
    tid = c.transfer(leader, away)
    c.run_until(lambda: tid in c.completions and c.leader() == away)
    end = c.nodes[away].store.end_index
    retry = c.append(away, [b"once-a", b"once-b"], client_id=5, seq=0)
    c.run_until(lambda: retry in c.completions)
    done = c.completions[retry]
    assert done.code == ResponseCode.SUCCESS and (done.first_index, done.last_index) == (first, first + 1)
    assert done.term == -1  # the batch is gone: its term is no longer known
    assert c.nodes[away].store.end_index == end  # not appended again


def test_a_follower_whose_old_entries_differ_below_the_leaders_begin_is_reset():
    """Found by the simulator (seed 151 before the fix): a follower holding an old term's entry at the
    leader's begin index - 1 could never be matched (the leader no longer knows that entry's term: prev_term
    -1) and looped COMPARE -> APPEND -> INCONSISTENT_STATE. The follower now checks the chain CRC of the
    leader's first record against its own prefix: it keeps a prefix that links and resets one that does not."""
    c = Cluster(3)
    stale = c.elect()
    rid = c.append(stale, [b"agreed"])
    c.run_until(lambda: rid in c.completions)
    # the leader is cut off and writes entries nobody else gets
    c.isolate(stale)
    c.append(stale, [b"divergent-1", b"divergent-2"])
    c.deliver()
    stale_end = c.nodes[stale].store.end_index
    # the other two elect a leader and write more than that; retention deletes up to past the stale entries
    c.run_until(lambda: any(n != stale for n in c.leaders()), 5_000)
    main = next(n for n in c.leaders() if n != stale)
    for i in range(10):
        rid = c.append(main, [b"main-%d" % i])
    c.run_until(lambda: rid in c.completions)
    begin = stale_end + 1  # the stale node's last (divergent) entry sits at the leader's begin - 1
    assert c.nodes[main].store.end_index > begin + 2
    for nid in c.ids:
        if nid != stale:
            c.nodes[nid].store.delete_before(begin)
    c.heal()
    c.run_until(lambda: c.nodes[stale].store.end_index == c.nodes[main].store.end_index
                and c.core(stale).committed_index == c.core(main).committed_index, 10_000)
    assert c.nodes[stale].store.begin_index == begin
    assert c.bodies(stale) == c.bodies(main)


def test_a_follower_whose_disk_is_full_is_probed_each_heartbeat_and_caught_up_once_it_has_room():
    """A follower whose write was refused (a full disk) dropped those pushes and will never answer them. It says
    DISK_FULL, and the leader probes it again each heartbeat interval, one push at a time, instead of waiting
    out max_push_timeout_ms: once the disk has room, the follower is caught up within a heartbeat or so."""
    c = Cluster(3)
    leader = c.elect()
    cfg = c.core(leader).config
    full, away = (n for n in c.ids if n != leader)
    c.isolate(away)  # the commit needs the full follower
    c.nodes[full].disk_full = True
    first = c.append(leader, [b"x"])
    c.deliver()
    assert first not in c.completions
    refusals = [m for m in c.sent if isinstance(m, PushResponse) and m.frm == full
                and m.code == ResponseCode.DISK_FULL]
    assert len(refusals) == 1 and refusals[0].end_index == -1
    # Full for a while under load: a probe per heartbeat interval, each a single push, never a window.
    sent_before = len(c.sent)
    for i in range(20):
        c.append(leader, [b"y%d" % i])
        c.run(50)
    pushes = [m for m in c.sent[sent_before:] if isinstance(m, PushRequest) and m.to == full
              and m.push_type == PushType.APPEND]
    assert 1000 // cfg.heartbeat_interval_ms // 2 <= len(pushes) <= 1000 // cfg.heartbeat_interval_ms + 2
    assert c.core(leader).committed_index == -1
    c.nodes[full].disk_full = False
    took = c.run_until(lambda: first in c.completions, 3_000)
    assert took <= 2 * cfg.heartbeat_interval_ms < cfg.max_push_timeout_ms
    c.run_until(lambda: c.core(leader).committed_index == 20, 1_000)
    assert c.bodies(full) == [b"x"] + [b"y%d" % i for i in range(20)]
