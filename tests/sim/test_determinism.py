"""One seed, one trace: byte for byte, in this process and in fresh ones with other hash seeds (set and
dict orders of str keys vary with PYTHONHASHSEED; a simulator that leaned on them would diverge)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from quorumlog.sim import run_seed

SEEDS = (3, 11, 42)  # 3- and 5-node worlds, with crashes and partitions


@pytest.mark.parametrize("seed", SEEDS)
def test_same_seed_same_trace_in_process(seed):
    a = run_seed(seed, hash_trace=True)
    b = run_seed(seed, hash_trace=True)
    assert a.trace_sha256 and a.trace_sha256 == b.trace_sha256
    assert (a.steps, a.virtual_ms, a.stats) == (b.steps, b.virtual_ms, b.stats)
    assert a.steps > 100


def test_different_seeds_different_traces():
    hashes = {run_seed(seed, hash_trace=True).trace_sha256 for seed in SEEDS}
    assert len(hashes) == len(SEEDS)


def _replay_in_fresh_process(seed: int, hash_seed: str) -> str:
    env = dict(os.environ, PYTHONHASHSEED=hash_seed)
    out = subprocess.run([sys.executable, "-m", "quorumlog.sim", "--seed", str(seed)], env=env,
                         capture_output=True, text=True, timeout=120).stdout
    match = re.search(r"trace_sha256=([0-9a-f]+)", out)
    assert match, out
    return match.group(1)


def test_same_trace_across_processes_and_hash_seeds():
    seed = SEEDS[1]
    expected = run_seed(seed, hash_trace=True).trace_sha256[:16]
    assert _replay_in_fresh_process(seed, "1") == expected
    assert _replay_in_fresh_process(seed, "2024") == expected
