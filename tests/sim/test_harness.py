"""The simulator's own machinery, driven by a tiny stand-in core (no Raft needed): the checker catches
what it claims to, the network and disks behave, one seed gives one trace."""

from __future__ import annotations

import dataclasses
import random

import pytest

from quorumlog.sim.checker import Violation
from quorumlog.sim.disk import Disk, SimStore
from quorumlog.sim.network import Network
from quorumlog.sim.options import SimOptions
from quorumlog.sim.scheduler import Scheduler
from quorumlog.sim.world import World, run_seed

from .standin import StandInCore, planting


def standin_options(seed: int, **overrides) -> SimOptions:
    # The stand-in has no elections, no dedup, no retention and no membership: no crashes (EIO fail-stops too),
    # no full disks, no transfers, no idempotent clients, no retention, no membership changes.
    base = dict(crash_weight=0, transfer_weight=0, idempotent_clients=0, disk_full_weight=0, disk_error_weight=0,
                retention_every_ms=0, membership_weight=0)
    base.update(overrides)
    return dataclasses.replace(SimOptions.from_seed(seed), **base)


def run_standin(options: SimOptions, core: type[StandInCore] = StandInCore) -> tuple[World, list[str]]:
    lines: list[str] = []
    world = World(options, core, lines.append)
    world.run()
    return world, lines


@pytest.mark.parametrize("seed", range(12))
def test_standin_world_is_safe_and_live(seed):
    world, _ = run_standin(standin_options(seed))
    assert world.finished
    assert world.checker.committed_index >= 0
    assert world.checker.acked_batches > 0
    assert all(c.settled for c in world.clients)


def test_same_seed_same_trace():
    _, a = run_standin(standin_options(7))
    _, b = run_standin(standin_options(7))
    _, c = run_standin(standin_options(8))
    assert len(a) > 100
    assert a == b
    assert a != c


def test_checker_catches_ack_before_commit():
    with pytest.raises(Violation) as info:
        run_standin(standin_options(3), planting("ack_on_write"))
    assert info.value.kind == "ack_before_commit"


def test_checker_catches_duplicates_of_idempotent_retries():
    # The stand-in does not deduplicate: some seed where a client retries must commit a batch twice.
    kinds = set()
    for seed in range(40):
        try:
            run_standin(standin_options(seed, idempotent_clients=1, client_drop_ratio=0.1))
        except Violation as v:
            kinds.add(v.kind)
    assert "duplicate" in kinds


def test_checker_catches_log_matching_and_committed_changes():
    """Feed the checker two nodes' stores directly: same (index, term), different entries."""
    world = World(standin_options(1), StandInCore, None)
    a, b = world.nodes["n0"], world.nodes["n1"]
    a.store.append_batch(1, [b"x"], 0)
    b.store.append_batch(1, [b"y"], 0)
    world.checker.on_append(a, 0, 0)
    with pytest.raises(Violation) as info:
        world.checker.on_append(b, 0, 0)
    assert info.value.kind == "log_matching"


def test_checker_catches_phantom_and_commit_without_quorum():
    world = World(standin_options(1), StandInCore, None)
    n0 = world.nodes["n0"]
    n0.store.append_batch(1, [b"nobody-sent-this"], 0)
    n0.store.flush()
    n0.store.set_committed_index(0)
    with pytest.raises(Violation) as info:
        world.checker.on_commit(n0)
    assert info.value.kind == "phantom_entry"


def test_commit_without_majority_durable_is_caught():
    world = World(standin_options(1), StandInCore, None)
    n0 = world.nodes["n0"]
    op_body = b"c0:0:0:"
    from quorumlog.sim.checker import Op
    world.checker.register_op(Op("c0", 0, (op_body,), -1), 0)
    n0.store.append_batch(1, [op_body], 0)
    n0.store.flush()  # durable on n0 only: 1 of 3
    n0.store.set_committed_index(0)
    with pytest.raises(Violation) as info:
        world.checker.on_commit(n0)
    assert info.value.kind == "commit_without_quorum"


def test_truncating_a_committed_entry_is_caught():
    world = World(standin_options(1), StandInCore, None)
    from quorumlog.sim.checker import Op
    world.checker.register_op(Op("c0", 0, (b"a", b"b"), -1), 0)
    for n in world.nodes.values():
        n.store.append_batch(1, [b"a", b"b"], 0)
        n.store.flush()
    n0 = world.nodes["n0"]
    n0.store.set_committed_index(1)
    world.checker.on_commit(n0)
    n1 = world.nodes["n1"]
    with pytest.raises(Violation) as info:
        world.checker.on_truncate(n1, 0)
    assert info.value.kind == "committed_truncated"


def test_group_commit_covers_only_what_was_written_before_the_flush_started():
    sched = Scheduler()
    store = SimStore()
    durable: list[int] = []
    disk = Disk(store, random.Random(1), sched, flush_delay_max_ms=10, slow_flush_delay_max_ms=10,
                on_durable=durable.append)
    store.append_batch(1, [b"a", b"b"], 0)
    disk.written()  # flush #1 covers 0..1
    store.append_batch(1, [b"c"], 0)
    disk.written()  # waits for flush #2
    while len(sched):
        handler, args = sched.pop()
        handler(*args)
    assert durable == [1, 2]
    # A truncate while a flush is in flight: the flush covers no more than what survived.
    store.append_batch(1, [b"d", b"e"], 0)
    disk.written()
    store.truncate_after(2)
    disk.truncated(2)
    store.append_batch(2, [b"D"], 0)
    disk.written()
    handler, args = sched.pop()
    handler(*args)
    assert durable[-1] == 2 and store.durable_index == 2
    # A crash loses the unflushed entry.
    store.crash()
    disk.crashed()
    assert store.end_index == 2


def test_network_partitions_are_directed_and_heal():
    sched = Scheduler()
    opts = dataclasses.replace(SimOptions.from_seed(0), drop_ratio=0.0, duplicate_ratio=0.0, reorder_ratio=0.0,
                               delay_min_ms=1, delay_max_ms=1)
    net = Network(random.Random(0), sched, opts, None)
    got: list[str] = []
    net.send("n0", "n1", "in-flight", got.append)
    net.cut(["n0"], ["n1"])  # cuts what is in flight too
    net.send("n0", "n1", "a", got.append)
    net.send("n1", "n0", "b", got.append)  # the other direction still works
    while len(sched):
        handler, args = sched.pop()
        handler(*args)
    net.heal()
    net.send("n0", "n1", "c", got.append)
    while len(sched):
        handler, args = sched.pop()
        handler(*args)
    assert got == ["b", "c"]


def test_options_are_a_function_of_the_seed():
    assert SimOptions.from_seed(5) == SimOptions.from_seed(5)
    assert {SimOptions.from_seed(s).node_count for s in range(50)} == {3, 5}
    assert SimOptions.from_seed(5, node_count=3).node_count == 3


def test_run_seed_reports_exceptions_as_violations():
    class Exploding(StandInCore):
        def step(self, event):
            raise AssertionError("core invariant broken")

    r = run_seed(1, core_factory=Exploding)
    assert not r.ok and r.violation.kind == "exception"
    assert "core invariant broken" in r.violation.detail


def test_a_disk_that_loses_fsynced_data_is_caught(monkeypatch):
    """With the real core: a disk whose crash also loses *flushed* entries breaks durability, and some seed
    shows it (a committed entry no longer on a majority, or gone from a new leader's log)."""
    import quorumlog.sim.node as sim_node
    from quorumlog.sim.disk import SimStore as RealSimStore

    class LyingStore(RealSimStore):
        def crash(self, keep_unflushed: int = 0) -> None:
            self._durable = max(-1, self._durable - 3)  # the last 3 "fsynced" entries were never on disk
            super().crash(keep_unflushed)

    monkeypatch.setattr(sim_node, "SimStore", LyingStore)
    kinds = set()
    for seed in range(60):
        r = run_seed(seed)
        if not r.ok:
            kinds.add(r.violation.kind)
            if kinds & {"commit_without_quorum", "leader_completeness", "state_machine_safety",
                        "committed_truncated", "ack_mismatch"}:
                break
    assert kinds & {"commit_without_quorum", "leader_completeness", "state_machine_safety",
                    "committed_truncated", "ack_mismatch"}, kinds
