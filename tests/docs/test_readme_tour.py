"""The README's five-minute tour, run as written: every command of its shell blocks, top to bottom, on one
cluster (the one its first command starts), and the Python blocks of the front doors (complete programs of the
real RocketMQ and Kafka clients) where they stand. Only the ports differ (`cluster up` is given free ports, so
a parallel test cannot hold them; the doors' addresses are rewritten to match) and `quorumlog` is this
interpreter's. A step that fails fails the test with its output; the other Python blocks are fragments
(top-level await), read but not run."""

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


DOOR_CLIENTS = ("from rocketmq import", "from confluent_kafka import")  # the Python blocks that run


def tour_steps() -> list[tuple[str, str]]:
    """("bash", one command) and ("python", a door client's program), in the tour's order."""
    text = open(README, encoding="utf-8").read()
    tour = text.split("## Five-minute tour", 1)[1].split("\n## ", 1)[0]
    steps = []
    for lang, block in re.findall(r"```(bash|python)\n(.*?)```", tour, re.S):
        if lang == "python":
            if block.startswith(DOOR_CLIENTS):
                steps.append(("python", block))
            continue
        steps += [("bash", ln.split("  #", 1)[0].strip()) for ln in block.splitlines()
                  if ln.strip() and not ln.lstrip().startswith("#")]
    return steps


def tour_commands() -> list[str]:
    return [text for kind, text in tour_steps() if kind == "bash"]


def test_the_tour_lists_every_mode():
    cmds = tour_commands()
    assert cmds[0].startswith("quorumlog cluster up"), cmds
    assert all(c.startswith(("quorumlog ", "kcat ")) for c in cmds), cmds
    for what in ("append", "group create", "ha elect", "ledger write", "topic create", "consume", "kv put",
                 "cluster add-node", "cluster remove-node"):
        assert any(c.startswith(f"quorumlog {what}") for c in cmds), what
    assert [kind for kind, text in tour_steps() if kind == "python"] == ["python", "python"]  # both doors' clients


def _door_port(cmd: str, flag: str) -> int:
    return int(re.search(rf"{flag} (\d+)", cmd).group(1))


def test_the_readme_tour_runs_as_written(tmp_path):
    d = str(tmp_path / "ql")
    base = free_base_port(4)  # (3 nodes, and the one the tour adds)
    up = tour_commands()[0]
    # the doors' ports as the README gives them -> free ones, wherever an address names them
    ports = {_door_port(up, "--rocketmq-base-port"): free_base_port(4), _door_port(up, "--kafka-base-port"): free_base_port(4)}

    def local(text: str) -> str:
        for asked, free in ports.items():
            text = re.sub(rf"(?<![0-9]){asked // 10}\d(?![0-9])", lambda m: str(free + int(m.group(0)) - asked), text)
        return text.replace("$D", d)

    try:
        for kind, text in tour_steps():
            if kind == "python":
                r = subprocess.run([sys.executable, "-c", local(text)], capture_output=True, text=True, timeout=120)
                assert r.returncode == 0, f"{text}\n→ exit {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr}"
                continue
            argv = shlex.split(local(text))
            if argv[:3] == ["quorumlog", "cluster", "up"]:
                argv += ["--base-port", str(base), "--timeout-s", "60"]
            argv = [*CLI, *argv[1:]] if argv[0] == "quorumlog" else argv
            r = subprocess.run(argv, capture_output=True, text=True, timeout=300)
            assert r.returncode == 0, f"`{text}` → exit {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr}"
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
