"""One seed → every option of a simulator run (TigerBeetle's VOPR: the seed picks the world too).

The options come from random.Random(seed); the world draws from random.Random(world_seed(seed)), a stream
of its own, so overriding an option (--nodes) leaves the rest of a seed's world as it was.

Changing how options are drawn turns every seed into another world: pinned seeds
(tests/sim/test_regressions.py) must then be re-pinned.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, fields

# Bounds on a run, in virtual time. Sized so ≥ 2000 seeds fit CI's budget (tests/sim measure it).
FAULT_PHASE_MIN_MS = 3_000
FAULT_PHASE_MAX_MS = 6_000
# After healing: a leader, every client answered and every node caught up within this much virtual time.
# Two election timeouts (pre-vote + vote, possibly split) plus max_wait_ack and a client retry fit well.
LIVENESS_TIMEOUT_MS = 12_000
TICK_MIN_MS = 10
TICK_MAX_MS = 25
assert TICK_MAX_MS * 4 <= 100  # several ticks per heartbeat interval (types.HEARTBEAT_INTERVAL_MS)

PLANTED_BUGS = ("commit_previous_term_by_count", "double_vote", "skip_compare", "ack_before_quorum",
                "change_before_term_commit", "promote_lagging_learner", "read_before_term_commit")


def world_seed(seed: int) -> int:
    return random.Random(seed).getrandbits(64) ^ 0x5EED_0F_3A1D


@dataclass(frozen=True, slots=True)
class SimOptions:
    seed: int
    profile: str  # calm | mixed | churn
    node_count: int
    client_count: int
    idempotent_clients: int  # the first k clients send client_id/seq and retry the same batch
    client_max_in_flight: int  # non-idempotent clients only; idempotent ones keep one batch in flight
    client_think_max_ms: int
    client_batch_max: int
    tick_ms: int
    fault_phase_ms: int
    liveness_timeout_ms: int
    # network between nodes
    delay_min_ms: int
    delay_max_ms: int
    drop_ratio: float
    duplicate_ratio: float
    reorder_ratio: float  # a message held back up to 10× delay_max_ms
    client_drop_ratio: float
    # faults: mean gap between two fault actions, and the weight of each action kind
    fault_gap_mean_ms: int
    partition_weight: int
    crash_weight: int
    slow_disk_weight: int
    transfer_weight: int
    heal_weight: int
    partition_max_ms: int  # a partition lifts by itself after up to this long (or at a heal action)
    crash_down_max_ms: int
    # disk
    flush_delay_max_ms: int
    slow_flush_delay_max_ms: int
    keep_unflushed_max: int  # a crash may keep up to this many unflushed entries (OS write-back)
    leader_victim_ratio: float  # how often a crash or an isolation aims at the current leader
    # the core's configuration: narrow election windows make split votes, tiny pushes make partial acks
    election_timeout_min_ms: int
    election_timeout_max_ms: int
    max_push_batch_bytes: int
    max_pending_pushes: int
    max_wait_ack_ms: int
    client_timeout_ms: int  # > max_wait_ack_ms: a live leader answers before the client gives up
    # Drawn after everything above, so adding them left every earlier option of a seed as it was.
    idempotent_max_in_flight: int  # idempotent clients pipeline this many batches (seqs in order, dedup only)
    disk_full_weight: int  # a node's disk refuses writes for a while (DISK_FULL, StoreFailed)
    disk_error_weight: int  # a node's next write fails with EIO: StoreFailed(DISK_ERROR), then fail-stop
    retention_every_ms: int  # 0: off; else every node deletes old committed entries this often
    retention_keep_max: int  # ... keeping up to this many below its safe point (segment granularity)
    read_every_ms: int  # 0: off; else a reader reads committed entries from a random node this often
    # Membership changes among the faults: add a fresh node as a learner, promote a learner, remove a member
    # (the leader too), at most `max_new_nodes` fresh nodes per run.
    membership_weight: int
    max_new_nodes: int
    # Quiescence (raft/quiescence.py) with the runtime's node liveness (sim/liveness.py); idle clients pause
    # this often for 0.6-2.5 s, so groups go quiet between bursts (and their leaders crash while quiet).
    quiesce: bool
    client_idle_ratio: float
    linear_read_every_ms: int  # 0: off; else a reader asks a (possibly deposed) leader for a ReadIndex read
    check_quorum: bool  # off (etcd's default) a deposed leader lingers until it hears a newer term
    planted_bugs: frozenset[str] = frozenset()

    @classmethod
    def from_seed(cls, seed: int, node_count: int | None = None,
                  planted_bugs: frozenset[str] = frozenset()) -> "SimOptions":
        """Three profiles: calm (happy paths need coverage too), mixed (every fault, any mix), and churn
        (leaders crash and are cut off every few hundred ms while clients write: Figure-8 material)."""
        rng = random.Random(seed)
        for bug in planted_bugs:
            assert bug in PLANTED_BUGS, f"unknown planted bug {bug!r}; known: {PLANTED_BUGS}"
        drawn_nodes = rng.choice((3, 5))
        nodes = node_count if node_count is not None else drawn_nodes
        assert nodes in (3, 5), nodes
        roll = rng.random()
        profile = "calm" if roll < 0.15 else "churn" if roll < 0.45 else "mixed"
        calm, churn = profile == "calm", profile == "churn"
        client_count = rng.randint(1, 5)
        delay_min = rng.randint(0, 5)
        max_wait_ack_ms = rng.choice((800, 2_500))
        # 1 byte: one record per push, so a follower acks a batch entry by entry (partial quorums). Small
        # pushes come with a deep pipeline, or replication cannot keep up with the clients and the backlog
        # outlives the liveness phase (overload, not a bug).
        push_bytes = rng.choice((1, 400) if churn else (1, 400, 4096, 1024 * 1024))
        pending_pushes = 64 if push_bytes == 1 else rng.choice((4, 64) if push_bytes == 400 else (1, 4, 64))
        election_min = 300 if churn else rng.choice((300, 500))
        election_spread = rng.choice((30, 200) if churn else (30, 200, 500))
        return cls(
            seed=seed,
            profile=profile,
            node_count=nodes,
            client_count=client_count,
            idempotent_clients=rng.randint(0, client_count),
            client_max_in_flight=rng.randint(1, 4),
            client_think_max_ms=rng.choice((0, 5, 20) if churn else (0, 5, 20, 100)),
            client_batch_max=rng.choice((1, 3, 8)),
            tick_ms=rng.randint(TICK_MIN_MS, TICK_MAX_MS),
            fault_phase_ms=rng.randint(FAULT_PHASE_MIN_MS, FAULT_PHASE_MAX_MS),
            liveness_timeout_ms=LIVENESS_TIMEOUT_MS,
            delay_min_ms=delay_min,
            delay_max_ms=delay_min + rng.choice((1, 5, 20, 60)),
            drop_ratio=0.0 if calm else rng.choice((0.0, 0.01, 0.05, 0.15)),
            duplicate_ratio=0.0 if calm else rng.choice((0.0, 0.02, 0.1)),
            reorder_ratio=0.0 if calm else rng.choice((0.0, 0.02, 0.1)),
            client_drop_ratio=0.0 if calm else rng.choice((0.0, 0.02, 0.1)),
            fault_gap_mean_ms=(rng.choice((100, 200)) if churn else rng.choice((150, 400, 1_000)) * (10 if calm else 1)),
            partition_weight=rng.randint(1 if churn else 0, 4),
            crash_weight=rng.randint(2 if churn else 0, 4),
            slow_disk_weight=rng.randint(0, 2),
            transfer_weight=rng.randint(0, 2),
            heal_weight=rng.randint(0 if churn else 1, 2 if churn else 4),
            partition_max_ms=rng.choice((300, 800)) if churn else rng.choice((500, 2_000, 5_000)),
            crash_down_max_ms=rng.choice((300, 800)) if churn else rng.choice((500, 3_000)),
            flush_delay_max_ms=rng.choice((0, 1, 5)),
            slow_flush_delay_max_ms=rng.choice((50, 200, 600)),
            keep_unflushed_max=rng.choice((0, 0, 2, 10)),
            leader_victim_ratio=rng.choice((0.6, 0.9)) if churn else rng.choice((0.0, 0.3, 0.7)),
            election_timeout_min_ms=election_min,
            election_timeout_max_ms=election_min + election_spread,
            max_push_batch_bytes=push_bytes,
            max_pending_pushes=pending_pushes,
            max_wait_ack_ms=max_wait_ack_ms,
            client_timeout_ms=max_wait_ack_ms + rng.choice((200, 1_000)),
            idempotent_max_in_flight=rng.choice((1, 1, 3, 8)),
            disk_full_weight=0 if calm else rng.choice((0, 0, 1, 2)),
            disk_error_weight=0 if calm else rng.choice((0, 0, 1)),
            retention_every_ms=rng.choice((0, 0, 100, 500)),
            retention_keep_max=rng.choice((0, 3, 30)),
            read_every_ms=rng.choice((0, 50, 200)),
            membership_weight=rng.choice((0, 1, 2, 4)),
            max_new_nodes=rng.choice((1, 2, 4)),
            quiesce=rng.random() < 0.5,
            client_idle_ratio=rng.choice((0.0, 0.05, 0.2)),
            linear_read_every_ms=rng.choice((0, 20, 100)),
            check_quorum=rng.random() < 0.75,
            planted_bugs=frozenset(planted_bugs),
        )

    def describe(self) -> str:
        parts = []
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, frozenset):
                value = ",".join(sorted(value)) or "-"
            parts.append(f"{f.name}={value}")
        return " ".join(parts)
