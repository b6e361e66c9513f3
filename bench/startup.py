"""How long a command takes to answer: `quorumlog status --cluster D` on a running 3-node cluster (127.0.0.1).

    python bench/startup.py [--runs 15]

Each run is a fresh process, as a person typing the command starts one; wall time and the process's CPU
(user + system, from wait4) per run, their median and best, next to a bare `python -c pass` (the
interpreter's own start). The machine's load average is recorded before and after: the target (≤ 0.4 s) is for
an idle machine, and a loaded one says so in the results rather than in a slower figure.
Results: bench/results/startup-<date>.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from quorumlog.spark.local import LocalCluster  # noqa: E402

import results_file  # noqa: E402  (bench/results_file.py)


# As a person's shell runs a command: with the bytecode cache (a session that sets PYTHONDONTWRITEBYTECODE
# compiles every module it changed on every run: 80 ms of this command's start-up).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def timed(argv: list[str]) -> tuple[float, float]:
    """(wall s, CPU s) of one run of argv, which must succeed."""
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=ENV)
    _pid, status, usage = os.wait4(p.pid, 0)
    wall = time.monotonic() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {p.stderr.read().decode()[-500:]}")
    p.stderr.close()
    return wall, usage.ru_utime + usage.ru_stime


def series(argv: list[str], runs: int) -> dict:
    walls, cpus = zip(*(timed(argv) for _ in range(runs)))
    return {"wall_median_s": round(statistics.median(walls), 3), "wall_best_s": round(min(walls), 3),
            "cpu_median_s": round(statistics.median(cpus), 3), "runs": runs}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    args = ap.parse_args()
    cluster = LocalCluster.up(os.path.join(tempfile.mkdtemp(prefix="bench-startup-"), "cluster"))
    try:
        load_before = os.getloadavg()
        status = [sys.executable, "-m", "quorumlog.cli", "status", "--cluster", str(cluster.data_dir)]
        timed(status)  # (the first run after a change writes the bytecode cache)
        figures = {"python_pass": series([sys.executable, "-c", "pass"], args.runs),
                   "status": series(status, args.runs),
                   "status_json": series(status + ["--json"], args.runs)}
        load_after = os.getloadavg()
    finally:
        cluster.down()
    doc = {"command": "quorumlog status --cluster D (3 nodes running)", "target_s": 0.4, **figures,
           "load_average_1m": {"before": round(load_before[0], 2), "after": round(load_after[0], 2)},
           "cpus": os.cpu_count()}
    results_file.write(args.out, "startup", doc, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
