"""python -m quorumlog.sim: run many seeds (summary) or replay one (--seed S --trace).

Exit status 1 when any seed broke an invariant; every failure prints the command that replays it.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time

from .options import PLANTED_BUGS
from .world import SimResult, quiet_logging, run_seed, run_seed_star


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m quorumlog.sim", description=__doc__)
    p.add_argument("--seeds", type=int, default=None, help="how many seeds to run (default 100)")
    p.add_argument("--start", type=int, default=0, help="first seed of a --seeds run")
    p.add_argument("--seed", type=int, default=None, help="run exactly this seed")
    p.add_argument("--nodes", type=int, choices=(3, 5), default=None, help="override the seed's node count")
    p.add_argument("--trace", action="store_true", help="print one line per delivered message/event/fault")
    p.add_argument("--bug", action="append", default=[], choices=PLANTED_BUGS,
                   help="plant a known bug in the core (sim/planted_raft.py); may repeat")
    p.add_argument("--stop-on-first", action="store_true", help="stop a --seeds run at the first failure")
    p.add_argument("-v", "--verbose", action="store_true", help="one line per seed")
    p.add_argument("--jobs", type=int, default=1, help="worker processes for a --seeds run (results in seed order)")
    args = p.parse_args(argv)
    quiet_logging()
    if args.seed is not None and args.seeds is not None:
        p.error("--seed and --seeds are exclusive")
    return args


def _report_failure(r: SimResult, out) -> None:
    v = r.violation
    assert v is not None
    print(f"FAIL seed={r.seed} nodes={r.options.node_count} at {r.virtual_ms} ms after {r.steps} steps: "
          f"{v.kind}: {v.detail}", file=out)
    print(f"  replay: {r.replay_command()}", file=out)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    bugs = frozenset(args.bug)
    out = sys.stdout
    if args.seed is not None:
        trace = (lambda line: print(line, file=out)) if args.trace else None
        r = run_seed(args.seed, args.nodes, bugs, trace=trace, hash_trace=True)
        print(f"seed={r.seed} nodes={r.options.node_count} steps={r.steps} virtual_ms={r.virtual_ms} "
              f"wall_s={r.wall_s:.3f} trace_sha256={r.trace_sha256[:16]} "
              f"{'ok' if r.ok else 'VIOLATION'}", file=out)
        if not r.ok:
            _report_failure(r, out)
        return 0 if r.ok else 1

    count = 100 if args.seeds is None else args.seeds
    started = time.perf_counter()
    steps = virtual_ms = 0
    failures: list[SimResult] = []
    by_nodes = {3: 0, 5: 0}
    seeds = range(args.start, args.start + count)
    pool = multiprocessing.get_context("spawn").Pool(args.jobs, initializer=quiet_logging) if args.jobs > 1 else None
    results = (pool.imap(run_seed_star, [(seed, args.nodes, bugs) for seed in seeds]) if pool
               else (run_seed(seed, args.nodes, bugs) for seed in seeds))
    for r in results:
        seed = r.seed
        steps += r.steps
        virtual_ms += r.virtual_ms
        by_nodes[r.options.node_count] += 1
        if args.verbose:
            print(f"seed={seed} nodes={r.options.node_count} steps={r.steps} virtual_ms={r.virtual_ms} "
                  f"wall_s={r.wall_s:.3f} {'ok' if r.ok else r.violation.kind}", file=out)
        if not r.ok:
            failures.append(r)
            _report_failure(r, out)
            if args.stop_on_first:
                break
    if pool:
        pool.terminate()
    wall_s = time.perf_counter() - started
    ran = by_nodes[3] + by_nodes[5]
    print(f"seeds={ran} ({by_nodes[3]}×3 nodes, {by_nodes[5]}×5 nodes) from {args.start} steps={steps} "
          f"violations={len(failures)} virtual_time={virtual_ms / 1000:.1f}s wall_time={wall_s:.1f}s "
          f"({wall_s / max(ran, 1) * 1000:.0f} ms/seed)"
          + (f" bugs={','.join(sorted(bugs))}" if bugs else ""), file=out)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
