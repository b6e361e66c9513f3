"""The simulator changes membership among its faults, and every kind of change commits on some seeds."""

from collections import Counter

from quorumlog.sim import run_seed


def test_seeds_add_promote_and_remove_members_including_the_leader():
    done, seeds_with_changes, grown = Counter(), 0, 0
    for seed in range(120):
        r = run_seed(seed)
        assert r.ok, f"seed {seed}: {r.violation}"
        changes = r.stats["membership_changes"]
        done.update(changes)
        seeds_with_changes += bool(changes)
        grown += r.stats["configurations"] > 2
    assert {"add_learner", "promote", "remove", "remove_leader"} <= done.keys(), done
    assert seeds_with_changes >= 20 and grown >= 5, (seeds_with_changes, grown)
