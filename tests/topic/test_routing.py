"""A key's queue (client/topics.py queue_for): stable across processes and releases, and spread."""

from collections import Counter

from quorumlog.client.topics import queue_for


def test_a_keys_queue_is_pinned_so_a_release_never_moves_keys():
    # crc32c then murmur3's finalizer: these values are part of the contract (changing them reorders keys)
    assert [queue_for(k, 16) for k in ("", "a", "order-1", "order-2", "用户")] == [0, 0, 11, 5, 6]


def test_keys_that_differ_in_one_character_spread_over_every_queue():
    counts = Counter(queue_for(f"k{i}", 8) for i in range(400))
    assert len(counts) == 8 and min(counts.values()) > 25
    counts = Counter(queue_for(f"key-{i}", 8) for i in range(8000))
    assert max(counts.values()) < 1.1 * 1000

