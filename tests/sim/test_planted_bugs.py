"""Proof that the checker can fail: each bug planted in the core (RaftConfig.planted_bugs) is caught within a
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
