"""Proof that the checker can fail: each bug planted in the core (sim/planted_raft.py) is caught within a
bounded number of seeds, by a violation of the kind that bug should cause, on a seed that passes without it."""

from __future__ import annotations

import pytest

from quorumlog.sim import PLANTED_BUGS
from quorumlog.sim.planted import EXPECTED_KINDS, hunt

MAX_SEEDS = 200  # measured: each bug is caught within its first ~20 seeds (see the report in tests/sim)


@pytest.mark.parametrize("bug", PLANTED_BUGS)
def test_planted_bug_is_caught(bug):
    h = hunt(bug, start=0, max_seeds=MAX_SEEDS)
    assert h.seed is not None, f"{bug} not caught in {MAX_SEEDS} seeds (false alarms: {h.false_alarms})"
    assert h.result.violation.kind in EXPECTED_KINDS[bug], h.result.violation


def test_a_planted_bug_is_in_the_core_only_for_the_run():
    """The shipped cores have no branch for planted bugs: the simulator swaps a rule method for a broken copy
    and puts the original back, even when the run raises."""
    import pathlib

    import quorumlog.raft as raft
    from quorumlog.raft.election import LeaderElector
    from quorumlog.sim.planted_raft import RAFT_BUGS, planted

    assert set(PLANTED_BUGS) <= set(RAFT_BUGS)
    originals = {(cls, name): cls.__dict__[name] for fixes in RAFT_BUGS.values() for cls, name, _ in fixes}
    with pytest.raises(RuntimeError), planted(RAFT_BUGS):
        assert not LeaderElector._voted_for_another("n0", "n2")  # double_vote: a second candidate granted
        raise RuntimeError("the run failed")
    assert all(cls.__dict__[name] is original for (cls, name), original in originals.items())
    assert LeaderElector._voted_for_another("n0", "n2")
    cores = pathlib.Path(raft.__file__).parent.parent
    for source in [*cores.joinpath("raft").glob("*.py"), *cores.joinpath("ledger").glob("*.py")]:
        assert "planted" not in source.read_text().lower(), source
