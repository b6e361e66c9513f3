"""Seeds that once broke an invariant, pinned (TigerBeetle: a failing seed becomes a regression test).

Each entry says what broke, against which core, and what the trace showed. Replay one with
`python -m quorumlog.sim --seed S --trace`. The seeds are worlds drawn by SimOptions.from_seed: if the way
options are drawn changes, these seeds become other worlds and must be re-pinned (re-run and re-check).
"""

from __future__ import annotations

import pytest

from quorumlog.sim import run_seed

PINNED = {
    # Core bug, open at core 849fcfc (+ its working tree at 17:35 UTC): an idempotent batch committed twice.
    # Client c2 (client_id 3) sends seq 5 = 8 entries; leader n2 writes them; n2 crashes with part of the
    # unflushed batch kept (MemoryStore.crash(keep_unflushed) models OS write-back, as a torn tail on disk
    # would); the surviving prefix has no producer tag (the tag rides on the batch's *last* entry), a later
    # leader's no-op commits that prefix, and the client's retry of seq 5 is not recognised as a duplicate
    # and is appended again: "duplicate: body b'c2:5:0:...' committed at 44 and again at 49".
    1884: "duplicate",
    # Same family, 5 nodes: c2 seq 1 = 3 entries at 45..47 on leader n1 (term 4), written on n0 and n3 but
    # durable only to 44; n3 and n0 crash keeping 1 unflushed entry each (45 = the batch's first entry,
    # untagged); n0 restarts with end 45, is elected (term 5), its no-op commits 45, and the retry of seq 1
    # is appended again ("c2:1:0" committed at 45 and again at 50).
    770: "duplicate",
    # Same family: c4 (idempotent) seq 13 = 7 entries at 220..226 on leader n2; n2 crashes keeping 2 of the
    # unflushed entries (end 226 of a batch that ended later), the prefix is committed by the next leader
    # and the retry is appended again ("c4:13:0" at 216 and again at 275).
    10: "duplicate",
    1660: "duplicate",  # same family (c1 seq 2 committed at 56 and again at 75)
    # Found once the simulator ran retention, disk faults, reads and pipelined idempotent clients,
    # against the core of 87e3155 plus its working tree:
    # n0, reset to its leader's begin index 211 with an empty producer table, became leader; c0's retry of
    # seq 8 (committed at 20, deleted by retention) was appended again at 245. Fix: the reset TRUNCATE
    # carries the leader's producer table.
    72: "duplicate",
    # n4 held an old term's entry 0 at the leader's begin - 1 (retention deleted 0): the leader could not name
    # its term (prev_term -1) and looped COMPARE -> APPEND -> INCONSISTENT_STATE. Fix: the follower checks the
    # first record's chain CRC against its prefix, and resets when it does not link.
    151: "liveness",
    # Retention moved the leader's begin past a COMPARE round's lower bound (and a resent TRUNCATE's index):
    # the leader read entries it no longer held (IndexOutOfRange).
    290: "exception",
    955: "exception",
    # A retry of a batch below the new leader's begin index but above its lagging commit point read the
    # deleted batch's term (IndexOutOfRange).
    2481: "exception",
    3699: "duplicate",  # same family as 72
    # Retention ran after the last checkpoint, then a crash: the store reopened with a committed index below
    # its begin index, and as leader the core read the term of a deleted entry. Fix: below begin is committed.
    8579: "exception",
    9899: "exception",
    # A new leader's no-op was refused by its full disk; it kept leading (no caught-up successor) and never
    # wrote the no-op again: nothing of its term, so the inherited entry 134 never committed and a client
    # retrying that batch waited forever. Fix: a leader writes its no-op again once the disk takes writes.
    10703: "liveness",
}


@pytest.mark.parametrize("seed", sorted(PINNED))
def test_pinned_seed(seed):
    r = run_seed(seed)
    assert r.ok, (f"seed {seed} (once failed with {PINNED[seed]}) fails: {r.violation}\n"
                  f"replay: {r.replay_command()}")
