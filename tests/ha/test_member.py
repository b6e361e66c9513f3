"""A member's decisions under the controller (quorumlog/ha/member.py), the rules both the node runtime and the
switch simulator run: the handshake's cut and adopted epochs, the SyncStateSet a master proposes, and the
confirm offset readers are bounded by."""

from __future__ import annotations

from quorumlog.ha.epochs import EpochCache, EpochEntry
from quorumlog.ha.member import adopt_epochs, begin_epoch, confirm_offset, handshake_cut, sync_state_set_proposal


def cache(*pairs: tuple[int, int]) -> EpochCache:
    return EpochCache([EpochEntry(e, s) for e, s in pairs])


def test_an_old_master_rejoining_cuts_what_it_wrote_alone_and_adopts_the_new_epochs():
    old, new = cache((1, 0)), cache((1, 0), (2, 600))
    cut = handshake_cut(old, 800, new, 1_000)
    assert cut == 600
    old.truncate(cut)
    adopt_epochs(old, new)
    assert old.entries == new.entries


def test_a_slave_behind_cuts_nothing_and_a_fresh_one_starts_at_zero():
    assert handshake_cut(cache((1, 0), (2, 600)), 500, cache((1, 0), (2, 600), (3, 900)), 1_200) == 500
    fresh = EpochCache()
    assert handshake_cut(fresh, 0, cache((1, 0), (2, 600)), 1_200) == 0
    adopt_epochs(fresh, cache((1, 0), (2, 600)))
    assert fresh.entries == [EpochEntry(1, 0), EpochEntry(2, 600)]


def test_bytes_without_epochs_keep_only_what_the_masters_first_epoch_cannot_contradict():
    assert handshake_cut(EpochCache(), 700, cache((3, 400)), 900) == 400
    assert handshake_cut(EpochCache(), 300, cache((3, 400)), 900) == 300
    assert handshake_cut(EpochCache(), 700, EpochCache(), 0) == 0


def test_adopting_never_goes_back_to_an_older_epoch():
    mine = cache((1, 0), (4, 900))  # (it was master in epoch 4 after the other's epochs 2 and 3)
    adopt_epochs(mine, cache((1, 0), (2, 300), (3, 600), (5, 950)))
    assert [e.epoch for e in mine.entries] == [1, 4, 5]


def test_a_slave_joins_the_set_only_holding_every_acknowledged_byte():
    # n1 is in sync but lacks the last acknowledged append: the controller could elect it and lose that append
    assert sync_state_set_proposal("n0", {"n0"}, ["n1"], {"n1": 900}, acked_offset=1_000, confirmed=0) is None
    assert sync_state_set_proposal("n0", {"n0"}, ["n1"], {"n1": 1_000}, acked_offset=1_000, confirmed=0) == {"n0", "n1"}


def test_a_slave_joins_the_set_only_holding_every_confirmed_byte():
    # a master alone in its set confirms what it fsynced without an ack (min_in_sync_replicas 2 acks none): a
    # slave lacking that must not join, or its election would hand the confirmed bytes' queue offsets to others
    assert sync_state_set_proposal("n0", {"n0"}, ["n1"], {"n1": 900}, acked_offset=0, confirmed=1_000) is None
    assert sync_state_set_proposal("n0", {"n0"}, ["n1"], {"n1": 1_000}, acked_offset=0, confirmed=1_000) == {"n0", "n1"}


def test_a_member_out_of_sync_leaves_and_one_in_the_set_stays_while_in_sync():
    assert sync_state_set_proposal("n0", {"n0", "n1", "n2"}, ["n1"], {"n1": 900, "n2": 900},
                                   acked_offset=900, confirmed=0) == {"n0", "n1"}
    assert sync_state_set_proposal("n0", {"n0", "n1"}, ["n1"], {"n1": 5}, acked_offset=900, confirmed=0) is None


def test_a_shrink_keeps_no_member_lacking_an_acknowledged_byte():
    """n1 paused while still "in sync", 900 acked by n0 and n2, then n2 cut off: the set shrank to {n0, n1} and
    n1 was elected, 640 acks lost. A set that loses a member keeps only members holding every acked byte."""
    assert sync_state_set_proposal("n0", {"n0", "n1", "n2"}, ["n1"], {"n1": 5, "n2": 900},
                                   acked_offset=900, confirmed=0) == {"n0"}
    # (growing only: a laggard stays, every ack still has its holders in the set)
    assert sync_state_set_proposal("n0", {"n0", "n1"}, ["n1", "n2"], {"n1": 5, "n2": 900},
                                   acked_offset=900, confirmed=0) == {"n0", "n1", "n2"}


def test_the_confirm_offset_is_the_lowest_held_across_the_set_and_never_moves_back():
    assert confirm_offset(1_000, {"n0", "n1", "n2"}, "n0", {"n1": 700, "n2": 800}, 0) == 700
    assert confirm_offset(600, {"n0", "n1"}, "n0", {"n1": 700}, 0) == 600  # (the master's own fsynced end)
    # n2 began a new session and has not reported: it counts as holding what was confirmed before
    assert confirm_offset(1_000, {"n0", "n1", "n2"}, "n0", {"n1": 900, "n2": -1}, 700) == 700
    assert confirm_offset(1_000, {"n0", "n1"}, "n0", {"n1": 500}, 700) == 700


def test_a_slave_elected_before_it_pulled_the_masters_first_byte_begins_its_epoch_anyway():
    # it adopted epoch 2 starting at 1,000 (the old master's end when elected) but holds only 900 bytes
    mine = cache((1, 0), (2, 1_000))
    assert begin_epoch(mine, 3, 900)
    assert mine.entries == [EpochEntry(1, 0), EpochEntry(3, 900)]
    assert not begin_epoch(mine, 3, 950)  # (restarted within its own epoch: continues it)
    assert mine.entries == [EpochEntry(1, 0), EpochEntry(3, 900)]


def test_a_member_follows_the_controllers_answers_and_holds_a_lease_from_its_send_time():
    from quorumlog.ha.member import MasterTerm
    t = MasterTerm("n0", "n0", alter_interval_ms=500)
    assert not t.is_master and not t.holds_lease(0)  # (no answer yet: no writes)
    assert t.on_view("n0", 1, sent_ms=100, lease_ms=600)  # a new epoch: become master
    assert t.holds_lease(699) and not t.holds_lease(700)  # from the send time, not the answer's arrival
    assert not t.on_view("n0", 1, sent_ms=50, lease_ms=600) and t.lease_until_ms == 700  # (a late answer)
    assert not t.on_view("n1", 0, sent_ms=800, lease_ms=None)  # an older epoch changes nothing
    assert t.on_view("n1", 2, sent_ms=800, lease_ms=None) and not t.is_master and not t.holds_lease(801)


def test_a_master_proposes_one_set_at_a_time_under_its_lease_and_sends_an_unanswered_one_again():
    from quorumlog.ha.member import MasterTerm
    from quorumlog.ha.transfer import GroupTransferService
    g = GroupTransferService(min_in_sync_replicas=2)
    g.set_committed(frozenset({"n0", "n1"}), 3)
    t = MasterTerm("n0", "n0", alter_interval_ms=500)
    assert t.proposal(0, g, 0, 0) is None  # no lease
    t.on_view("n0", 1, sent_ms=0, lease_ms=10_000)
    assert t.proposal(10, g, 0, 0) == (frozenset({"n0"}), 3)  # n1 out of sync: it leaves, counted at once
    assert g.accepted == {"n0"} and t.proposal(20, g, 0, 0) is None  # (one at a time)
    t.alter_answered(30)  # the call failed: no answer
    assert t.proposal(100, g, 0, 0) is None  # (not before alter_interval_ms)
    assert t.proposal(600, g, 0, 0) == (frozenset({"n0"}), 3)  # the same one again, on the same base
