"""FileStore.records_at: chosen entries read in place through the index (a topic pull's path) are the entries a
range read gives, across data and index segment boundaries, producer tags stripped; anything it cannot vouch
for (a damaged unit or header) is None, so the caller falls back to the checked range read."""

from __future__ import annotations

import array
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quorumlog.errors import IndexOutOfRange
from quorumlog.format import log_entry
from quorumlog.format.log_entry import decode_records
from quorumlog.store import FileStore, StoreConfig

pytestmark = pytest.mark.skipif(log_entry.compiled is None, reason="the compiled codec is not built")
SMALL = StoreConfig(data_segment_size_bytes=4096, index_segment_size_bytes=32 * 8, max_entry_bytes=1024,
                    disk_full_ratio=1.0, checkpoint_interval_ms=0)


def _store(path, batches) -> FileStore:
    s = FileStore(str(path), SMALL)
    for i, (bodies, tagged, noop) in enumerate(batches):
        s.append_batch(1 + i % 3, [b""] if noop else bodies, 1_700_000_000_000 + i,
                       producer=(7, i) if tagged and not noop else None, noop=noop)
    return s


def _entries(located) -> list[tuple[int, int, int, bytes]]:
    out = []
    for view, (n, index, term, ts_us, starts, ends) in located:
        index, term, ts_us = (memoryview(b).cast("q") for b in (index, term, ts_us))
        starts, ends = memoryview(starts).cast("i"), memoryview(ends).cast("i")
        out += [(index[k], term[k], ts_us[k] // 1000, bytes(view[starts[k]:ends[k]])) for k in range(n)]
    return out


@given(st.lists(st.tuples(st.lists(st.binary(max_size=300), min_size=1, max_size=5), st.booleans(), st.booleans()),
                min_size=1, max_size=20), st.data())
@settings(max_examples=80, deadline=None)
def test_chosen_entries_are_the_range_reads_entries(tmp_path_factory, batches, data):
    s = _store(tmp_path_factory.mktemp("g"), batches)
    try:
        everything = [e for chunk in s.read(s.begin_index, 1 << 30).chunks for e in decode_records(chunk)]
        chosen = sorted(data.draw(st.sets(st.sampled_from(everything), max_size=len(everything))),
                        key=lambda e: e.index) if everything else []
        located = s.records_at(array.array("q", [e.index for e in chosen]).tobytes())
        assert _entries(located) == [(e.index, e.term, e.timestamp_ms, e.body) for e in chosen]
    finally:
        s.close()


def test_a_damaged_unit_or_an_index_out_of_range_is_not_vouched_for(tmp_path):
    s = _store(tmp_path / "g", [([b"a" * 100, b"b" * 100], False, False), ([b"c"], True, False)])
    try:
        b = s.begin_index
        wanted = array.array("q", [b + 1, b + 2]).tobytes()
        assert [e[0] for e in _entries(s.records_at(wanted))] == [b + 1, b + 2]
        with pytest.raises(IndexOutOfRange):
            s.records_at(array.array("q", [b + 1, b + 3]).tobytes())
        seg = s._index_seg(b + 2)
        off = (b + 2 - seg.start) * log_entry.INDEX_UNIT_SIZE
        saved = bytes(seg.view[off:off + 4])
        os.pwrite(seg.fd, bytes(4), off)  # the unit's magic (the mapping sees the file)
        try:
            assert s.records_at(wanted) is None
        finally:
            os.pwrite(seg.fd, saved, off)
        assert len(_entries(s.records_at(wanted))) == 2
    finally:
        s.close()
