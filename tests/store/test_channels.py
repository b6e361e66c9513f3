"""Channel bits: batches are recognisably whole or partial, and no-op entries never reach readers."""

from __future__ import annotations

from quorumlog.spark.arrow import records_to_batches
from quorumlog.format import log_entry


def _channels(store, first, last):
    out = []
    for chunk in store.read(first, 1 << 20, last).chunks:
        out.extend(h.channel for h, _ in log_entry.iter_records(chunk))
    return out


def test_every_entry_but_the_batch_last_is_marked_continues(store):
    # 20 × 300-byte entries cross several 4 KiB segments: the mark must follow the batch, not the segment.
    store.append_batch(1, [bytes([i]) * 300 for i in range(20)], 1_000, producer=(9, 1))
    store.append_batch(1, [b"single"], 1_001)
    channels = _channels(store, 0, store.end_index)
    assert [c & log_entry.CHANNEL_BATCH_CONTINUES != 0 for c in channels] == [True] * 19 + [False, False]
    assert channels[19] & log_entry.CHANNEL_PRODUCER_TAG and not channels[20] & log_entry.CHANNEL_PRODUCER_TAG


def test_noop_is_stored_but_skipped_by_readers(store):
    store.append_batch(1, [b"a"], 1_000)
    store.append_batch(2, [b""], 1_001, noop=True)
    store.append_batch(2, [b"b", b"c"], 1_002)
    records = store.read(0, 1 << 20)
    assert records.count == 4  # replication still carries the no-op
    visible = [e for chunk in records.chunks for e in log_entry.decode_records(chunk)]
    assert [(e.index, e.body) for e in visible] == [(0, b"a"), (2, b"b"), (3, b"c")]
    batches = records_to_batches(records.chunks)
    assert [i for b in batches for i in b.column("index").to_pylist()] == [0, 2, 3]
    assert store.get(1).body == b""  # get by index still answers
