"""Many seeds, zero violations: CI runs 1500 (15 chunks of 100, so pytest-xdist spreads them over cores),
mixed 3- and 5-node worlds as the seeds draw them. A failure names the seed and the command that replays it."""

from __future__ import annotations

import pytest

from quorumlog.sim import run_seed

CHUNK_SEEDS = 100
CHUNKS = 15
SMOKE_SEEDS = range(1_000_000, 1_000_012)  # a few fresh worlds for `make test-fast`


def _run(seeds) -> tuple[list[str], dict[int, int]]:
    failures, nodes = [], {3: 0, 5: 0}
    for seed in seeds:
        r = run_seed(seed)
        nodes[r.options.node_count] += 1
        if not r.ok:
            v = r.violation
            failures.append(f"seed={seed} ({r.options.profile}, {r.options.node_count} nodes) at {r.virtual_ms} ms: "
                            f"{v.kind}: {v.detail[:400]}\n    replay: {r.replay_command()}")
    return failures, nodes


@pytest.mark.slow
@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_seed_chunk(chunk):
    failures, nodes = _run(range(chunk * CHUNK_SEEDS, (chunk + 1) * CHUNK_SEEDS))
    assert nodes[3] and nodes[5], nodes  # every chunk mixes 3- and 5-node worlds
    assert not failures, f"{len(failures)} of {CHUNK_SEEDS} seeds broke an invariant:\n" + "\n".join(failures)


def test_smoke_seeds():
    failures, _ = _run(SMOKE_SEEDS)
    assert not failures, "\n".join(failures)
