"""The idempotent-producer window: only forgotten seqs are 'too old'; out-of-order new seqs are new."""

from __future__ import annotations

from quorumlog.store.base import PRODUCER_WINDOW_BATCHES


def test_out_of_order_seqs_are_new_until_something_is_forgotten(store):
    store.append_batch(1, [b"x"], 1, producer=(5, 7))
    # seq 6 was in flight behind 7 (pipelining): nothing forgotten yet, so it is judged new.
    assert store.producer_window_floor(5) is None
    assert store.find_producer_batch(5, 6) is None


def test_floor_is_just_above_the_highest_forgotten_seq(store):
    for seq in range(PRODUCER_WINDOW_BATCHES + 3):
        store.append_batch(1, [b"%d" % seq], 1, producer=(5, seq))
    assert store.producer_window_floor(5) == 3  # seqs 0, 1, 2 were evicted
    assert store.find_producer_batch(5, 2) is None
    hit = store.find_producer_batch(5, 3)
    assert (hit.first_index, hit.last_index) == (3, 3)
    assert store.producer_window_floor(6) is None  # another client is unaffected
