"""The master/slave controller (quorumlog/ha/controller.py): elections from the SyncStateSet with the highest
(epoch, max offset), a new epoch each time, the old master's lease over before anyone else is elected, unclean
elections only when enabled, hand switches; and SYNC_MASTER counting only the accepted set's acks."""

from __future__ import annotations

import pytest

from quorumlog.codes import ResponseCode
from quorumlog.ha.controller import Elected, HAController
from quorumlog.ha.transfer import GroupTransferService

M = ["n0", "n1", "n2"]


def _all(c: HAController, now: int, offsets=(0, 0, 0), epoch: int = 0) -> dict:
    return {m: c.on_heartbeat(m, now, epoch, off) for m, off in zip(M, offsets)}


def test_bootstrap_then_the_silent_masters_best_in_sync_member_takes_over_after_its_lease():
    c = HAController(M, master_timeout_ms=300, lease_ms=200)
    _all(c, 0)
    first = c.tick(0)
    assert first is not None and first.epoch == 1 and c.master == first.master
    lease = c.on_heartbeat(first.master, 10, 1, 100)
    assert lease == 210
    others = [m for m in M if m != first.master]
    assert c.alter_sync_state_set(first.master, 1, {first.master, *others})
    assert not c.alter_sync_state_set(others[0], 1, set(M))  # only the master changes it
    for t in range(20, 400, 20):  # the master goes silent; the others keep heartbeating
        c.on_heartbeat(others[0], t, 1, 90)
        c.on_heartbeat(others[1], t, 1, 100)
        got = c.tick(t)
        if t <= 310:
            assert got is None, t  # not before master_timeout (and so not before its lease ended)
        elif got is not None:
            assert got == Elected(others[1], 2) and c.sync_state_set == {others[1]}  # highest max offset
            break
    else:
        raise AssertionError("no election")
    assert c.on_heartbeat(first.master, 500, 1, 120) is None  # the old master gets no lease any more


def test_no_clean_candidate_no_election_unless_unclean_is_enabled():
    for unclean in (False, True):
        c = HAController(M, master_timeout_ms=300, lease_ms=200, enable_elect_unclean=unclean)
        _all(c, 0)
        m = c.tick(0).master
        c.on_heartbeat(m, 0, 1, 100)  # its set is just itself: nobody else is in sync
        others = [x for x in M if x != m]
        for x in others:
            c.on_heartbeat(x, 400, 1, 50)
        got = c.tick(400)
        assert (got is not None and not got.clean and got.master in others) if unclean else got is None


def test_a_hand_switch_waits_for_the_masters_lease():
    c = HAController(M, master_timeout_ms=300, lease_ms=200)
    _all(c, 0)
    m = c.tick(0).master
    to = next(x for x in M if x != m)
    c.alter_sync_state_set(m, 1, set(M))
    c.on_heartbeat(m, 50, 1, 10)  # lease to 250
    c.request_switch(to)
    assert c.on_heartbeat(m, 100, 1, 10) is None  # no renewal while switching
    _all(c, 100, (10, 10, 10), 1)
    assert c.tick(240) is None
    assert c.tick(250) is None  # (reports from before the lease's end may miss its last acks)
    _all(c, 250, (10, 10, 10), 1)
    assert c.tick(250) == Elected(to, 2)


def test_sync_master_counts_only_the_accepted_sets_acks():
    g = GroupTransferService(min_in_sync_replicas=2, slave_timeout_ms=1_000)
    g.on_slave_offset("n1", 100, 100, 0)
    g.on_slave_offset("n2", 100, 100, 0)
    g.accepted = frozenset({"n0", "n2"})
    assert g.request(1, 100, 0).code == ResponseCode.SUCCESS  # n2 holds it
    g.on_slave_offset("n1", 200, 200, 1)
    assert g.request(2, 200, 1) is None  # n1 holds 200 but is not in the accepted set
    assert [d.code for d in g.poll(1_001)] == [ResponseCode.FLUSH_SLAVE_TIMEOUT]
    g.accepted = frozenset({"n0"})
    assert g.request(3, 200, 2).code == ResponseCode.IN_SYNC_REPLICAS_NOT_ENOUGH


def test_a_master_back_from_a_crash_never_resumes_its_epoch():  # RocketMQ #2706
    c = HAController(M, master_timeout_ms=300, lease_ms=200)
    _all(c, 0)
    m = c.tick(0).master
    others = [x for x in M if x != m]
    c.alter_sync_state_set(m, 1, set(M))
    assert c.on_heartbeat(m, 50, 1, 500) == 250
    for x in others:
        c.on_heartbeat(x, 100, 1, 700)  # they hold more than the master kept through its crash
    assert c.on_heartbeat(m, 120, 1, 400, restarted=True) is None  # no lease for the restarted master
    # nor may it shrink its set to itself before the election: the others hold the tail it lost
    assert not c.alter_sync_state_set(m, 1, {m}) and c.sync_state_set == set(M)
    assert c.tick(200) is None  # its last lease runs to 250
    for x in others:
        c.on_heartbeat(x, 250, 1, 700)
    got = c.tick(250)
    assert got is not None and got.epoch == 2 and got.master in others  # the most data wins, a new epoch


def _running(q: int = 2) -> tuple[HAController, str, list[str]]:
    """Master m with every member in its set and a lease to 250; an append acked up to 1_000."""
    c = HAController(M, master_timeout_ms=300, lease_ms=200, min_in_sync_replicas=q)
    _all(c, 0)
    m = c.tick(0).master
    assert c.alter_sync_state_set(m, 1, set(M))
    assert c.on_heartbeat(m, 50, 1, 1_000, boot="b1", acked_offset=1_000) == 250
    return c, m, [x for x in M if x != m]


def test_a_lone_survivor_of_the_set_is_not_elected_when_another_may_hold_the_last_acks():
    """Set {A, B, C}, q = 2: X acked by A and C; C cut off, A dead. B, alone, may lack X (it was paused): no
    election until C is heard again, then the one holding the most. (B was elected before: 640 acks lost.)"""
    c, a, (b, cc) = _running()
    for t in (300, 400, 500):
        c.on_heartbeat(b, t, 1, 600)  # B lacks X
        assert c.tick(t) is None, t
    c.on_heartbeat(cc, 510, 1, 1_000)
    c.on_heartbeat(b, 510, 1, 600)
    assert c.tick(520) == Elected(cc, 2)


def test_no_member_below_the_acked_offset_is_elected():
    """Both live members of the set heard, but neither reports the acked offset the master told: wait."""
    c, a, (b, cc) = _running()
    c.on_heartbeat(b, 400, 1, 600)
    c.on_heartbeat(cc, 400, 1, 900)
    assert c.tick(400) is None
    c.on_heartbeat(cc, 450, 1, 1_000)
    assert c.tick(450) == Elected(cc, 2)


def test_a_hand_switch_to_a_member_lacking_acked_bytes_waits_then_is_given_up():
    """`ha elect --to X` with X's link throttled: X lacks acked bytes. No switch (86 of 100 acks were lost);
    after master_timeout_ms the master takes leases again. A target holding everything is switched to."""
    c, a, (b, cc) = _running()
    c.request_switch(b)
    assert c.on_heartbeat(a, 100, 1, 1_000, boot="b1", acked_offset=1_200) is None  # no lease while switching
    for t in range(250, 560, 50):
        c.on_heartbeat(a, t, 1, 1_200, boot="b1", acked_offset=1_200)
        c.on_heartbeat(b, t, 1, 700)
        c.on_heartbeat(cc, t, 1, 1_200)
        assert c.tick(t) is None, t
    assert c.switching_to is None and c.on_heartbeat(a, 600, 1, 1_200, boot="b1", acked_offset=1_200) == 800
    c.request_switch(cc)
    c.on_heartbeat(cc, 800, 1, 1_200)
    c.on_heartbeat(a, 800, 1, 1_200, boot="b1", acked_offset=1_200)
    assert c.tick(800) == Elected(cc, 2)


def test_a_master_with_a_new_boot_restarted_even_if_its_epoch_entry_was_lost():
    """A power cut took the master's epoch entry (it reports an older epoch) and its unsynced tail: it is not
    given its epoch back (a slave then truncated 100 of 100 acks to it); the controller elects again."""
    c, a, (b, cc) = _running()
    assert c.on_heartbeat(a, 100, 0, 400, boot="b2") is None  # a new process, epoch entry gone
    for x in (b, cc):
        c.on_heartbeat(x, 250, 1, 1_000)
    got = c.tick(250)
    assert got is not None and got.master in (b, cc) and got.epoch == 2


def test_every_change_of_the_set_has_a_new_version():
    c, a, (b, cc) = _running()
    v = c.sync_state_set_epoch
    assert c.alter_sync_state_set(a, 1, {a, b})
    assert c.sync_state_set_epoch == v + 1
    assert c.alter_sync_state_set(a, 1, {a, b}) and c.sync_state_set_epoch == v + 1  # (no change: same version)


def test_a_shrink_counts_before_the_controller_answers_and_a_stale_answer_restores_nothing():
    """The master applied a new set only once the controller's answer came back, so a slave already removed by
    the controller still completed appends; a late answer of a deposed `_meta` leader restored the old set; a
    disconnected slave's last report kept counting."""
    g = GroupTransferService(min_in_sync_replicas=2, slave_timeout_ms=1_000)
    assert g.set_committed(frozenset({"n0", "n1", "n2"}), 5)
    g.on_slave_offset("n1", 100, 300, 0)
    g.on_slave_offset("n2", 300, 300, 0)
    assert g.propose(frozenset({"n0", "n1"})) == 5  # n2 leaves: from now on it counts for nothing
    assert g.request(1, 300, 0) is None
    assert g.possibly_accepted == {"n0", "n1", "n2"}  # (what readers may see still waits for n2 too)
    assert not g.set_committed(frozenset({"n0", "n1", "n2"}), 4) and g.pending_proposal == {"n0", "n1"}
    assert g.set_committed(frozenset({"n0", "n1"}), 6) and g.pending_proposal is None
    assert not g.set_committed(frozenset({"n0", "n1", "n2"}), 5)  # a late answer from before the shrink
    assert g.accepted == {"n0", "n1"} and g.poll(10) == []
    g.on_slave_offset("n1", 300, 300, 20)
    g.on_slave_gone("n1")  # its session ended: its report no longer counts
    assert g.poll(30) == []
    g.on_slave_connected("n1")
    g.on_slave_offset("n1", 300, 300, 40)
    assert [d.code for d in g.poll(40)] == [ResponseCode.SUCCESS]


def test_the_controller_takes_a_proposal_only_on_its_base_version():
    """A late copy of an earlier proposal (its answer lost, sent again meanwhile) must not undo a later one."""
    c, a, (b, cc) = _running()
    v = c.sync_state_set_epoch
    assert c.alter_sync_state_set(a, 1, {a, b}, base_version=v)
    assert not c.alter_sync_state_set(a, 1, {a, b, cc}, base_version=v) and c.sync_state_set == {a, b}
    assert c.alter_sync_state_set(a, 1, {a, b}, base_version=v)  # (the same one again: already taken)


def test_a_hand_switch_to_the_master_is_done_already_and_to_a_stranger_is_refused():
    c = HAController(M, master_timeout_ms=300, lease_ms=200)
    _all(c, 0)
    m = c.tick(0).master
    lease = c.on_heartbeat(m, 50, 1, 10)
    assert c.request_switch(m) is False and c.switching_to is None  # (asked twice, or placement chose it)
    assert c.on_heartbeat(m, 100, 1, 10) is not None and lease is not None  # its lease goes on
    with pytest.raises(ValueError):
        c.request_switch("nobody")
    to = next(x for x in M if x != m)
    assert c.request_switch(to) is True and c.switching_to == to
    with pytest.raises(ValueError):
        c.request_switch(m)  # (a switch away from it is under way)
