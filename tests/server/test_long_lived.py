"""freeze_long_lived: what a node made to start leaves the full collections' passes."""

import gc

from quorumlog.server.long_lived import freeze_long_lived


def test_the_heap_made_before_serving_is_frozen_out_of_full_collections():
    try:
        kept = [[i] for i in range(10_000)]  # long-lived, tracked
        n = freeze_long_lived()
        assert n == gc.get_freeze_count() and n >= len(kept)
        assert not any(o is kept[0] for o in gc.get_objects(generation=2))  # (a collect alone puts it there)
    finally:
        gc.unfreeze()
