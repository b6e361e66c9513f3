"""The command line every seeded simulator shares: run seeds [start, start + seeds) or replay one with its trace.

    python -m quorumlog.sim.<module> --seeds N [--start S] [--bug B]...
    python -m quorumlog.sim.<module> --seed S [--trace]
"""

from __future__ import annotations

import argparse
from typing import Any, Callable

RunSeed = Callable[..., Any]  # run_seed(seed, bugs, trace) -> a violation or None


def seed_main(module: str, doc: str, run_seed: RunSeed, planted: tuple[str, ...], name: str,
              argv: list[str] | None = None, describe: Callable[[int], str] = lambda seed: "") -> int:
    p = argparse.ArgumentParser(prog=f"python -m {module}", description=doc,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=200)
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--seed", type=int)
    p.add_argument("--trace", action="store_true")
    p.add_argument("--bug", action="append", default=[], choices=planted)
    a = p.parse_args(argv)
    bugs = frozenset(a.bug)
    if a.seed is not None:
        v = run_seed(a.seed, bugs, print if a.trace else None)
        print(f"seed={a.seed} {describe(a.seed)} {'ok' if v is None else f'VIOLATION {v}'}".replace("  ", " "))
        return 0 if v is None else 1
    failed = 0
    for seed in range(a.start, a.start + a.seeds):
        v = run_seed(seed, bugs)
        if v is not None:
            failed += 1
            print(f"FAIL seed={seed}: {v}\n  replay: python -m {module} --seed {seed} --trace")
    print(f"{name} seeds={a.seeds} from {a.start} violations={failed}")
    return 1 if failed else 0
