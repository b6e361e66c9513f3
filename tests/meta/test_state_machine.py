"""The runner feeds a group's committed entries to its state machine once each, in order, skipping no-ops and
producer tags; snapshots bound retention; a machine restored from a snapshot carries on from there."""

from __future__ import annotations

import pytest

from quorumlog.errors import IndexOutOfRange
from quorumlog.meta.kv import KVStore, encode_delete, encode_put
from quorumlog.meta.state_machine import StateMachineRunner
from quorumlog.store.memory import MemoryStore


def _log(*batches) -> MemoryStore:
    log = MemoryStore()
    for b in batches:
        if b == "noop":
            log.append_batch(1, [b""], 0, noop=True)
        else:
            bodies, producer = b
            log.append_batch(1, bodies, 0, producer=producer)
    log.flush()
    log.set_committed_index(log.end_index)
    return log


@pytest.fixture(params=["compiled", "python"])
def walk(request, monkeypatch):
    """The runner takes a chunk's records from the compiled column pass, or walks them in Python (the
    reference, and what a node without the compiled codec does): both must apply the same entries."""
    from quorumlog.format import log_entry
    from quorumlog.meta import state_machine

    if request.param == "compiled" and log_entry.compiled is None:
        pytest.skip("compiled codec not built")
    if request.param == "python":
        monkeypatch.setattr(state_machine, "record_columns", lambda chunk: None)
    return request.param


@pytest.mark.parametrize("read_max_bytes", [1, 1 << 20])  # one record per read, or all in one
def test_committed_entries_are_applied_once_in_order_without_noops_or_tags(walk, read_max_bytes):
    log = _log("noop", ([encode_put("a", b"1"), encode_put("b", b"2")], None),
               ([encode_put("a", b"3", expected_version=1)], (9, 0)), "noop", ([encode_delete("b")], None))
    kv = KVStore()
    runner = StateMachineRunner(kv, log, read_max_bytes=read_max_bytes)  # (1: the loop must go on)
    applied = runner.on_commit(2)
    assert [i for i, _ in applied] == [1, 2]
    assert runner.on_commit(2) == []  # nothing twice
    rest = runner.on_commit(log.end_index)
    assert [i for i, _ in rest] == [3, 5]
    assert kv.applied_index == 5 and kv.get("a").value == b"3" and kv.get("a").version == 2
    assert kv.get("b") is None


def test_snapshots_bound_retention_and_a_restored_machine_carries_on():
    log = _log(*[([encode_put(f"k{i % 3}", b"%d" % i)], None) for i in range(10)])
    kv = KVStore()
    runner = StateMachineRunner(kv, log, snapshot_every=4)
    runner.on_commit(5)
    assert runner.snapshot_due() and runner.retention_limit(9) == -1  # nothing covered yet
    index, snap = runner.take_snapshot()
    runner.snapshot_stored(index)
    assert (index, runner.retention_limit(9), runner.retention_limit(3)) == (5, 5, 3)
    assert not runner.snapshot_due()
    runner.on_commit(9)
    restored = KVStore.restore(snap)
    again = StateMachineRunner(restored, log)
    again.on_commit(9)
    assert restored.snapshot() == kv.snapshot()


def test_entries_deleted_before_they_were_applied_are_an_error_not_a_silent_gap():
    log = _log(*[([encode_put("k", b"%d" % i)], None) for i in range(6)])
    log.delete_before(4)
    runner = StateMachineRunner(KVStore(), log)
    with pytest.raises(IndexOutOfRange):
        runner.on_commit(5)
