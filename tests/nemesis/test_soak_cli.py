"""`quorumlog soak`: argument validation (exit 2, nothing started) and a tiny real run with --json."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from quorumlog.cli.main import full_app as app
from quorumlog.soak.runner import ALL_KINDS

pytestmark = pytest.mark.timeout(120)
runner = CliRunner()


@pytest.mark.parametrize("args, message", [
    (["--kinds", "meteor_strike"], "unknown meteor_strike"),
    (["--kinds", ","], "no fault kind"),
    (["--network", "carrier_pigeon"], "--network must be"),
    (["--cycles", "0"], "Error"),  # typer's own range check
])
def test_bad_arguments_exit_2(args, message, tmp_path):
    r = runner.invoke(app, ["soak", "--base-dir", str(tmp_path / "run"), *args])
    assert r.exit_code == 2, r.output
    assert message in r.output
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").iterdir())  # nothing started


@pytest.mark.e2e
def test_tiny_run_prints_its_figures_as_json(tmp_path):
    r = runner.invoke(app, ["soak", "--seed", "5", "--cycles", "2", "--kinds", "kill9_node,failing_disk_leader",
                            "--network", "proxy", "--writers", "2", "--base-dir", str(tmp_path / "run"),
                            "--report-dir", str(tmp_path), "--out", str(tmp_path / "f.json"), "--json"])
    assert r.exit_code == 0, r.output
    figures = json.loads(r.stdout.strip().splitlines()[-1])
    assert figures["passed"] and figures["cycles"] == 2 and figures["violations"] == []
    assert set(figures["unavailability_s"]) <= set(ALL_KINDS) and figures["ops"]["ok"] > 0
    assert json.loads((tmp_path / "f.json").read_text())["cycles"] == 2
