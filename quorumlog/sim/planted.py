"""Proof that the checker can fail: hunt for the first seed on which a planted bug breaks an invariant.

A seed counts only if it fails *with* the bug and passes *without* it, so a bug the core really has (one
that the same seed trips anyway) is never mistaken for the planted one.
"""

from __future__ import annotations

from dataclasses import dataclass

from .world import SimResult, run_seed

# What each planted bug should trip. "exception": the core's own assertions noticed first (e.g. a node that
# granted a second vote in its term and then won becomes leader with voted_for naming someone else).
EXPECTED_KINDS = {
    "commit_previous_term_by_count": {"commit_rule", "state_machine_safety", "committed_truncated", "leader_completeness",
                                      "commit_without_quorum", "ack_mismatch", "log_matching", "exception"},
    "double_vote": {"double_vote", "election_safety", "exception", "log_matching", "state_machine_safety"},
    "skip_compare": {"log_matching", "state_machine_safety", "committed_truncated", "commit_without_quorum",
                     "leader_completeness", "ack_mismatch", "duplicate", "liveness", "exception"},
    "ack_before_quorum": {"ack_before_commit", "commit_without_quorum"},
    # A new leader's commit point lags until an entry of its term commits: changing before that builds on a
    # configuration other nodes may have replaced, and judges a learner "caught up" against a stale commit.
    "change_before_term_commit": {"change_rule", "disjoint_majorities", "membership_leader", "membership_chain", "election_safety",
                                  "leader_completeness", "state_machine_safety", "committed_truncated",
                                  "commit_without_quorum", "promotion_lagging", "log_matching", "ack_mismatch",
                                  "duplicate"},
    "promote_lagging_learner": {"promotion_lagging"},
    "read_before_term_commit": {"stale_read"},
}


@dataclass(frozen=True, slots=True)
class Hunt:
    bug: str
    seed: int | None  # the first seed that catches it, or None
    seeds_tried: int
    result: SimResult | None  # the failing run
    false_alarms: tuple[int, ...]  # seeds that failed with and without the bug (the core's own bugs)


def hunt(bug: str, start: int = 0, max_seeds: int = 200, node_count: int | None = None) -> Hunt:
    false_alarms = []
    for i, seed in enumerate(range(start, start + max_seeds)):
        r = run_seed(seed, node_count, frozenset({bug}))
        if r.ok:
            continue
        if not run_seed(seed, node_count).ok:
            false_alarms.append(seed)
            continue
        return Hunt(bug, seed, i + 1, r, tuple(false_alarms))
    return Hunt(bug, None, max_seeds, None, tuple(false_alarms))
