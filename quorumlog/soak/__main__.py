"""python -m quorumlog.soak --seed S --cycles N [--out FILE]: run a soak, print its figures, exit 1 on any
violation or a cycle that did not recover (a report directory is written under the temp dir)."""

from __future__ import annotations

import argparse
import json
import logging
import sys

from .runner import FAULT_KINDS, run_soak


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m quorumlog.soak")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--cycles", type=int, default=20)
    p.add_argument("--writers", type=int, default=4)
    p.add_argument("--kinds", default=",".join(FAULT_KINDS), help="comma-separated fault kinds")
    p.add_argument("--network", choices=("auto", "proxy", "netns"), default="auto",
                   help="netns (root): real partitions by veth link down; proxy: TCP proxy only; auto: netns if root")
    p.add_argument("--tls", action="store_true", help="nodes on mutual TLS with a token")
    p.add_argument("--mode", choices=("raft", "master-slave"), default="raft",
                   help="the writers' group: the nodes' Raft group, or a master/slave group (RocketMQ HA)")
    p.add_argument("--out", help="write the figures (JSON) here too")
    p.add_argument("--verbose", action="store_true")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO if a.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(message)s")
    result = run_soak(a.seed, a.cycles, writers=a.writers, kinds=tuple(a.kinds.split(",")), network=a.network, tls=a.tls,
                      mode=a.mode)
    figures = result.figures()
    text = json.dumps(figures, indent=1)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    if result.report_dir:
        print(f"report: {result.report_dir}", file=sys.stderr)
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
