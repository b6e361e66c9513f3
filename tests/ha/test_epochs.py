"""Master epochs and the consistent point a slave truncates to before it pulls from a new master (RocketMQ 5):
a diverged tail the old master wrote alone is cut, a slave ahead of a master that restarted behind it (#2706)
is cut back to what both hold, logs with no epoch in common restart from 0."""

from __future__ import annotations

import pytest

from quorumlog.ha.epochs import EpochCache, EpochEntry, consistent_point


def cache(*pairs: tuple[int, int]) -> EpochCache:
    return EpochCache([EpochEntry(e, s) for e, s in pairs])


def test_same_history_the_point_is_the_shorter_end():
    m, s = cache((1, 0), (2, 500)), cache((1, 0), (2, 500))
    assert consistent_point(s, 700, m, 900) == 700  # the slave is behind: nothing to cut
    assert consistent_point(s, 900, m, 900) == 900


def test_a_tail_the_old_master_wrote_alone_is_cut_at_the_new_epochs_start():
    # epoch 1's master wrote up to 800; the slave that became master (epoch 2) had only 600 of it
    old_master = cache((1, 0))
    new_master = cache((1, 0), (2, 600))
    assert consistent_point(old_master, 800, new_master, 1_000) == 600  # bytes 600..800 diverge: cut


def test_a_slave_ahead_of_a_master_that_restarted_behind_it_is_cut_back():  # RocketMQ #2706
    master, slave = cache((1, 0), (3, 400)), cache((1, 0), (3, 400))
    assert consistent_point(slave, 900, master, 700) == 700


def test_no_common_epoch_restarts_from_zero_and_epochs_only_grow():
    assert consistent_point(cache((1, 0)), 100, cache((2, 0)), 300) == 0
    c = cache((1, 0), (2, 100))
    with pytest.raises(ValueError):
        c.begin(2, 150)
    c.begin(2, 100)  # the same entry again (a slave copying it twice) is fine
    c.begin(4, 300)
    assert c.last_epoch == 4 and c.end_of(2, 500) == 300 and c.end_of(4, 500) == 500 and c.end_of(3, 500) is None
    c.truncate(300)
    assert c.entries == [EpochEntry(1, 0), EpochEntry(2, 100)]
