"""The ledger protocol in the simulator (quorumlog/sim/ledgers.py): 1,000 seeds per run with bookie crashes,
wiped bookies, partitions, slow bookies and recoveries racing the writer, 0 violations; the planted bug
bugs (recovery that trusts a single "no such entry"; reads that follow a write-back's ensemble change) are caught, on seeds that pass without it; a seed replays."""

from __future__ import annotations

import pytest

from quorumlog.sim.ledgers import run_seed

CHUNKS, PER_CHUNK = 4, 250


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_ledger_seed_chunk(chunk):
    failures = [(s, str(v)) for s in range(chunk * PER_CHUNK, (chunk + 1) * PER_CHUNK)
                if (v := run_seed(s)) is not None]
    assert not failures, f"replay: python -m quorumlog.sim.ledgers --seed {failures[0][0]} --trace; {failures[:3]}"


@pytest.mark.parametrize("planted", ["trust_one_no_such_entry", "read_from_replacement"])
def test_a_planted_recovery_bug_is_caught(planted):
    """trust_one_no_such_entry: absence decided on one answer; read_from_replacement: after a write-back's
    ensemble change, reads go to the replacement (which holds nothing) instead of where entries were written."""
    bug = frozenset({planted})
    caught = []
    for seed in range(200):
        v = run_seed(seed, bug)
        if v is not None and run_seed(seed) is None:
            caught.append((seed, v.kind))
            if len(caught) == 3:
                break
    assert caught and all(kind in ("acked_beyond_close", "acked_lost") for _, kind in caught), caught


def test_a_seed_replays_the_same_trace():
    lines_a: list[str] = []
    lines_b: list[str] = []
    run_seed(17, trace=lines_a.append)
    run_seed(17, trace=lines_b.append)
    assert lines_a == lines_b and len(lines_a) > 10
