"""A node whose cluster has no `_meta` yet (started by hand, before `cluster init`) says so once a minute, not
once a second: the retries go to DEBUG, and the line it does print names the command that ends the wait."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest

from quorumlog.local_ports import free_ports

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def test_a_node_waiting_for_meta_logs_it_once_not_every_retry(tmp_path):
    port = free_ports(1)[0]
    log_path = tmp_path / "n0.log"
    with open(log_path, "wb") as out:
        p = subprocess.Popen([sys.executable, "-m", "quorumlog.cli", "node", "--id", "n0", "--peers",
                              f"n0=127.0.0.1:{port}", "--data-dir", str(tmp_path / "n0"), "--log-level", "debug"],
                             stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while len(re.findall(r"DEBUG .*bookie registration pending", log_path.read_text())) < 3:
            assert p.poll() is None and time.monotonic() < deadline, log_path.read_text()[-3000:]
            time.sleep(0.2)
    finally:
        p.terminate()
        p.wait(timeout=30)
    text = log_path.read_text()
    shown = re.findall(r"INFO .*bookie registration pending.*", text)
    assert len(shown) == 1 and "cluster init" in shown[0], shown
    assert len(re.findall(r"INFO .*auto-recovery pass on n0 ended early", text)) <= 1
