"""A small randomized run of the core under drops, duplicates, reordering, partitions and crashes.

Not the simulator (quorumlog/sim does that at scale): a quick seeded check, next to the unit tests, that the
core keeps Raft's safety properties and recovers once faults stop.
"""

from __future__ import annotations

import random

import pytest

from quorumlog.codes import ResponseCode
from quorumlog.raft.types import ClientAppend, Receive, Role, Tick

from .harness import Cluster


class Fuzz:
    def __init__(self, seed: int, n: int) -> None:
        self.rng = random.Random(seed)
        self.c = Cluster(n, seed=seed, max_push_batch_bytes=self.rng.choice([200, 4096, 1 << 20]),
                         max_push_timeout_ms=self.rng.choice([200, 1000]))
        self.leader_of_term: dict[int, str] = {}
        self.committed: dict[int, tuple[int, bytes]] = {}  # index -> (term, body), from any node
        self.next_seq: dict[int, int] = {}
        self.outstanding: dict[int, tuple[int, int, bytes]] = {}  # request id -> (client, seq, body)
        self.acked: dict[tuple[int, int], tuple[int, int, int]] = {}  # (client, seq) -> (first, last, term)
        self.rid = 0

    # -- invariants after every step -------------------------------------------------------------------
    def check(self) -> None:
        c = self.c
        for nid in c.ids:
            node = c.nodes[nid]
            if not node.up:
                continue
            core = node.core
            if core.role is Role.LEADER:
                prev = self.leader_of_term.setdefault(core.term, nid)
                assert prev == nid, f"two leaders in term {core.term}: {prev} and {nid}"
            store = node.store
            for i in range(max(store.begin_index, 0), core.committed_index + 1):
                entry = (store.term_at(i), store.get(i).body)
                known = self.committed.setdefault(i, entry)
                assert known == entry, f"committed entry {i} differs on {nid}: {entry} vs {known}"

    # -- actions -----------------------------------------------------------------------------------------
    def deliver_some(self) -> None:
        c, rng = self.c, self.rng
        if c.local and rng.random() < 0.7:
            nid, event = c.local.popleft()
            if c.nodes[nid].up:
                c.flush(nid) if event == "flush" else c.step(nid, event)
            return
        if not c.net:
            return
        k = min(len(c.net), 4)
        pick = rng.randrange(k)  # mild reordering
        m = c.net[pick]
        del c.net[pick]
        r = rng.random()
        if r < 0.05:
            return  # dropped
        if r < 0.08:
            c.net.append(m)  # duplicated
        if not c._dropped(m):
            c.step(m.to, Receive(m))

    def client(self) -> None:
        c, rng = self.c, self.rng
        up = [n for n in c.ids if c.nodes[n].up]
        if not up:
            return
        target = c.leader() if rng.random() < 0.8 and c.leader() else rng.choice(up)
        if target is None:
            return
        if self.outstanding and rng.random() < 0.3:  # retry an old request with the same (client, seq)
            old_rid = rng.choice(sorted(self.outstanding))
            cid, seq, body = self.outstanding.pop(old_rid)
        else:
            cid = rng.randint(1, 3)
            seq = self.next_seq.get(cid, 0)
            self.next_seq[cid] = seq + 1
            body = b"c%d-s%d" % (cid, seq)
        self.rid += 1
        self.outstanding[self.rid] = (cid, seq, body)
        c.step(target, ClientAppend(self.rid, (body,), cid, seq))

    def collect(self) -> None:
        for rid, done in list(self.c.completions.items()):
            if rid in self.outstanding and done.code == ResponseCode.SUCCESS:
                cid, seq, body = self.outstanding.pop(rid)
                res = (done.first_index, done.last_index, done.term)
                prev = self.acked.setdefault((cid, seq), res)
                assert prev == res, f"({cid},{seq}) acknowledged twice at different places: {prev} {res}"

    def run(self, steps: int) -> None:
        c, rng = self.c, self.rng
        for _ in range(steps):
            r = rng.random()
            if r < 0.55:
                self.deliver_some()
            elif r < 0.75:
                c.now_ms += rng.choice([1, 10, 50])
                for nid in c.ids:
                    if c.nodes[nid].up:
                        c.step(nid, Tick(c.now_ms))
            elif r < 0.90:
                self.client()
            elif r < 0.93:
                a, b = rng.sample(c.ids, 2)
                c.blocked.add((a, b))  # one-way cut
            elif r < 0.95:
                c.heal()
            elif r < 0.955:
                up = [n for n in c.ids if c.nodes[n].up]
                if len(up) > len(c.ids) // 2:
                    c.crash(rng.choice(up))
            elif r < 0.98:
                down = [n for n in c.ids if not c.nodes[n].up]
                if down:
                    c.restart(rng.choice(down), seed=rng.randrange(1 << 30))
            self.collect()
            self.check()

    def settle(self) -> None:
        """Faults stop: everyone up, network healed; a leader appears and every node converges."""
        c = self.c
        c.heal()
        for nid in c.ids:
            if not c.nodes[nid].up:
                c.restart(nid, seed=self.rng.randrange(1 << 30))
        c.deliver()
        leader = c.run_until(lambda: c.leader() is not None, 5_000) is not None and c.leader()
        # one more write commits everything before it in the new term
        self.rid += 1
        rid = self.rid
        c.step(leader, ClientAppend(rid, (b"final",)))
        c.run_until(lambda: rid in c.completions, 5_000)
        c.run(1_000)
        self.collect()
        self.check()
        leader = c.leader()
        end = c.nodes[leader].store.end_index
        for nid in c.ids:
            assert c.nodes[nid].store.end_index == end, nid
            assert c.core(nid).committed_index == c.core(leader).committed_index
            assert c.nodes[nid].store.chain_crc_at(end) == c.nodes[leader].store.chain_crc_at(end)
        log = c.bodies(leader)
        for (cid, seq), (first, last, term) in self.acked.items():
            assert log[first] == b"c%d-s%d" % (cid, seq), (cid, seq, first)
            assert c.nodes[leader].store.term_at(first) == term
        tags = [b for b in log if b.startswith(b"c")]
        assert len(tags) == len(set(tags)), "a batch was written twice"


@pytest.mark.parametrize("seed", range(24))
def test_fuzz_safety_and_recovery(seed):
    f = Fuzz(seed, 3 if seed % 2 else 5)
    f.run(1_500)
    f.settle()


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(1_000, 1_020))  # (the simulator runs 2000 worlds of the whole node)
def test_fuzz_safety_and_recovery_more_seeds(seed):
    f = Fuzz(seed, 3 if seed % 2 else 5)
    f.run(4_000)
    f.settle()
