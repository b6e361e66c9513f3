"""The README's five-minute tour, run as written: every command of its shell blocks, top to bottom, on one
cluster (the one its first command starts). Only the ports differ (`cluster up` is given a free --base-port,
so a parallel test cannot hold them) and `quorumlog` is this interpreter's. A command that fails fails the test
with its output; the tour's Python blocks are fragments (top-level await), read but not run."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys

import pytest

from quorumlog.local_ports import free_base_port

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

README = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")
CLI = [sys.executable, "-m", "quorumlog.cli"]


def tour_commands() -> list[str]:
    text = open(README, encoding="utf-8").read()
    tour = text.split("## Five-minute tour", 1)[1].split("\n## ", 1)[0]
    lines = [ln for block in re.findall(r"```bash\n(.*?)```", tour, re.S) for ln in block.splitlines()]
    return [ln.split("  #", 1)[0].strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]


def test_the_tour_lists_every_mode():
    cmds = tour_commands()
    assert cmds[0].startswith("quorumlog cluster up") and all(c.startswith("quorumlog ") for c in cmds), cmds
    for what in ("append", "group create", "ha elect", "ledger write", "topic create", "consume", "kv put",
                 "cluster add-node", "cluster remove-node"):
        assert any(c.startswith(f"quorumlog {what}") for c in cmds), what


def test_the_readme_tour_runs_as_written(tmp_path):
    d = str(tmp_path / "ql")
    base = free_base_port(4)  # (3 nodes, and the one the tour adds)
    try:
        for line in tour_commands():
            argv = shlex.split(line.replace("$D", d))[1:]
            if argv[:2] == ["cluster", "up"]:
                argv += ["--base-port", str(base), "--timeout-s", "60"]
            r = subprocess.run([*CLI, *argv], capture_output=True, text=True, timeout=300)
            assert r.returncode == 0, f"`{line}` → exit {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr}"
    finally:
        subprocess.run([*CLI, "cluster", "down", "--data-dir", d, "--grace-s", "5"], capture_output=True, timeout=60)
        _kill_leftovers(d)


def _kill_leftovers(d: str) -> None:
    import json
    try:
        with open(os.path.join(d, "cluster.json")) as f:
            pids = [n["pid"] for n in json.load(f)["nodes"]]
    except (OSError, ValueError, KeyError):
        return
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, TypeError):
            pass
