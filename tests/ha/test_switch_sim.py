"""Master/slave switches in the simulator (quorumlog/sim/ha_switch.py): the controller with late answers and
replaced mid-run, leases, the SyncStateSet and its versions, epochs and the consistent point together, under
kill -9 / power cuts that lose unsynced tails, SIGSTOPped in-set slaves, isolated members, throttled links,
stalled fsyncs, hand switches and the fault orderings of the bug reports, with every member dispatching its
messages into consume queues up to its commit point (topics on master/slave groups). 500 seeds per CI run with 0
violations; planted bugs (the old rules, installed by the simulator over the cores' functions) caught on pinned
seeds that pass without them; a seed replays."""

from __future__ import annotations

import pytest

from quorumlog.sim.ha_switch import HASwitchSim, run_seed

CHUNKS, PER_CHUNK = 4, 125
STEPS = 1_000  # 5 s of faults per seed, then healing (the CLI's default runs 15 s)


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_switch_seeds(chunk):
    failures = [(s, str(v)) for s in range(chunk * PER_CHUNK, (chunk + 1) * PER_CHUNK)
                if (v := run_seed(s, steps=STEPS)) is not None]
    assert not failures, f"replay: python -m quorumlog.sim.ha_switch --seed {failures[0][0]} --trace; {failures[:3]}"


# Each planted bug, the seeds (of the first 100) it made fail, and what the checker saw. Every one of these seeds
# passes without the bug (test_switch_seeds).
# (no_lease: two masters' writes also leave members whose bytes differ or reuse queue offsets)
# (no_truncate: the diverged tail's messages already hold queue offsets the new master hands out again)
# (dispatch_unconfirmed: RocketMQ before the controller, consume queues built from what was written)
# keep_lagging_in_set: a shrink kept a paused member lacking acked bytes, and the controller elected any live
# member of the set; switch_to_lagging: `ha elect --to` a member lacking acked bytes; count_outside_set: a shrink
# counted only once the controller answered, and a disconnected slave's report counted; restart_unseen: a master
# back from a power cut that took its epoch entry was not seen as restarted.
@pytest.mark.parametrize("planted, seeds, kinds", [
    ("no_lease", (3, 5, 9, 12, 14, 15), {"two_writable_masters", "not_converged", "queue_offset_reused"}),
    ("no_truncate", (1, 2, 7, 9, 11, 13), {"not_converged", "acked_lost", "queue_offset_reused", "bad_record"}),
    ("dispatch_unconfirmed", (2, 5, 9, 11, 12, 15), {"queue_offset_reused", "dispatched_truncated"}),
    ("keep_lagging_in_set", (4, 6, 8, 10, 17, 18), {"acked_lost"}),
    ("switch_to_lagging", (8, 10, 18, 21, 38, 45), {"acked_lost"}),
    ("count_outside_set", (7, 13, 14, 24, 26, 32), {"acked_lost", "queue_offset_reused"}),
    ("restart_unseen", (5, 9, 12, 17, 27, 29), {"acked_lost", "queue_offset_reused"})])
def test_planted_bugs_are_caught(planted, seeds, kinds):
    caught = {s: v.kind for s in seeds if (v := run_seed(s, frozenset({planted}), steps=STEPS)) is not None}
    assert set(caught) == set(seeds) and set(caught.values()) <= kinds, caught
    assert all(run_seed(s, steps=STEPS) is None for s in seeds[:2])  # (the same seeds, without the bug)


def test_the_seeds_switch_and_a_seed_replays():
    sim = HASwitchSim(7)
    sim.run()
    assert sim.elections >= 2 and len(sim.acked) > 100
    a: list[str] = []
    b: list[str] = []
    HASwitchSim(7, trace=a.append).run()
    HASwitchSim(7, trace=b.append).run()
    assert a == b and any("elects" in line for line in a)
