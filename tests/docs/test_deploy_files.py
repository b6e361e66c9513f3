"""The deployment files in `deploy/` work as shipped: the systemd unit passes `systemd-analyze verify`, and the
container image is built where a container builder runs; elsewhere its build is checked step by step (every
COPY source exists, and the package installs from exactly what the image copies)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEPLOY = os.path.join(ROOT, "deploy")


def test_the_systemd_unit_verifies(tmp_path):
    if shutil.which("systemd-analyze") is None:
        pytest.fail("systemd-analyze is missing: scripts/system-deps.sh installs systemd")
    unit = open(os.path.join(DEPLOY, "quorumlog.service"), encoding="utf-8").read()
    assert "ExecStart=/opt/quorumlog/bin/quorumlog node --config /etc/quorumlog/node.toml" in unit
    # (verify checks that ExecStart's program exists: point it at this checkout's console script)
    here = unit.replace("/opt/quorumlog/bin/quorumlog", os.path.join(os.path.dirname(sys.executable), "quorumlog"))
    path = tmp_path / "quorumlog.service"
    path.write_text(here)
    r = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True, text=True, timeout=60)
    problems = [ln for ln in (r.stdout + r.stderr).splitlines() if "quorumlog.service" in ln]
    assert r.returncode == 0 and not problems, r.stdout + r.stderr


def _builder() -> str | None:
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "info"], capture_output=True, timeout=30).returncode == 0:
        return docker
    return None


@pytest.mark.slow
def test_the_container_image_builds(tmp_path):
    dockerfile = os.path.join(DEPLOY, "Dockerfile")
    docker = _builder()
    if docker is not None:
        r = subprocess.run([docker, "build", "-f", dockerfile, "-t", "quorumlog-ci", ROOT], capture_output=True,
                           text=True, timeout=900)
        assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
        r = subprocess.run([docker, "run", "--rm", "quorumlog-ci", "--help"], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0 and "node" in r.stdout, r.stdout + r.stderr
        return
    # No builder here: the build stage's steps, checked one by one in a copy of what it copies.
    text = open(dockerfile, encoding="utf-8").read()
    stages = text.split("\nFROM ")
    assert len(stages) == 3 and all(re.match(r"python:3\.\d+-slim-\w+", s) for s in stages[1:]), "two pinned stages"
    context = tmp_path / "context"
    for line in stages[1].splitlines():
        if line.startswith("COPY "):
            *sources, dest = line.split()[1:]
            for src in sources:
                path = os.path.join(ROOT, src)
                assert os.path.exists(path), f"COPY {src}: missing from the repository"
                target = context / (dest if dest not in ("./", ".") else "") / (src if dest in ("./", ".") else "")
                if os.path.isdir(path):
                    shutil.copytree(path, target, ignore=shutil.ignore_patterns("__pycache__", "*.so", "build"))
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy(path, target)
    assert "pip install --no-cache-dir ." in stages[1]
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                        str(tmp_path / "wheel"), str(context)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    wheel = next((tmp_path / "wheel").glob("quorumlog-*.whl"))
    names = subprocess.run([sys.executable, "-m", "zipfile", "-l", str(wheel)], capture_output=True, text=True).stdout
    assert "status_page.html" in names and "quorumlog/cli/__init__.py" in names
    assert 'ENTRYPOINT ["quorumlog"]' in stages[2] and "USER quorumlog" in stages[2]
