"""The ledger soak (quorumlog/soak/ledgers.py) in short: 5 real nodes, 3 writers, every fault kind once (kill -9,
SIGSTOP, a wiped disk and a disk filled to the last byte of a bookie, kill -9 of the `_meta` leader, recoveries
racing a restarted bookie's registration, a second bookie failing during ensemble changes), a recovery racing
a writer each cycle; 0 violations. The 110-cycle run is `make soak`'s, its figures in bench/results/soak-ledgers-*.json."""

from __future__ import annotations

import os

import pytest

from quorumlog.soak.ledgers import FAULT_KINDS, LedgerSoak

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


def test_a_short_ledger_soak_with_every_fault_kind(tmp_path):
    result = LedgerSoak(str(tmp_path), seed=11, cycles=len(FAULT_KINDS)).run()
    figures = result.figures()
    ran = set(FAULT_KINDS) if os.geteuid() == 0 else set(FAULT_KINDS) - {"fill_bookie_disk"}  # (a tmpfs needs root)
    assert {c.kind for c in result.cycles} == ran
    assert result.passed, figures
    assert figures["recoveries_that_fenced_a_writer"] >= len(FAULT_KINDS) - 1, figures  # (a writer may be between ledgers)
    assert result.acked > 5_000 and result.ledgers > 10, figures
