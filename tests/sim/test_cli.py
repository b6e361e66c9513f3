"""`python -m quorumlog.sim`: a summary and exit 0 when all seeds hold, the seed and its replay command and
exit 1 when one breaks an invariant."""

from __future__ import annotations

import subprocess
import sys


def _sim(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "quorumlog.sim", *args], capture_output=True, text=True,
                          timeout=300)


def test_many_seeds_summary():
    p = _sim("--seeds", "4", "--start", "1000000")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "seeds=4" in p.stdout and "violations=0" in p.stdout and "wall_time=" in p.stdout


def test_failure_prints_seed_and_replay_and_exits_nonzero():
    p = _sim("--seeds", "2", "--bug", "ack_before_quorum")
    assert p.returncode == 1
    assert "FAIL seed=0" in p.stdout
    assert "replay: python -m quorumlog.sim --seed 0 " in p.stdout and "--bug ack_before_quorum" in p.stdout


def test_trace_replays_one_seed_line_by_line():
    p = _sim("--seed", "3", "--trace")
    assert p.returncode == 0, p.stdout[-2000:]
    lines = p.stdout.splitlines()
    assert lines[0].startswith("[      0] seed 3:")
    assert any(" <- " in line and "push APPEND" in line for line in lines)
    assert any("is leader of term" in line for line in lines)
    assert lines[-1].startswith("seed=3 ") and "trace_sha256=" in lines[-1]
