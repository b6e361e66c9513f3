"""The fault injector: during the fault phase, at random gaps, one action drawn by the seed's weights.

Partitions come in five shapes: one node isolated both ways (and later rejoining), a minority/majority
split, a node that can hear but not speak, one that can speak but not hear, and a single one-way link.
Crashes lose unflushed data and restart after a while from what the store and the HardState kept. Disk
faults: a full disk (writes refused with DISK_FULL for a while) and EIO on the next write (the node hands over
and fail-stops, then is restarted on a healed disk after a while).
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from ..raft.types import StoreRecovered

if TYPE_CHECKING:
    from .world import World

CRASH_DOWN_MIN_MS = 50
PARTITION_MIN_MS = 50
SLOW_DISK_MIN_MS = 200
SLOW_DISK_MAX_MS = 3_000
DISK_FULL_MIN_MS = 100
DISK_FULL_MAX_MS = 2_000


class FaultInjector:
    def __init__(self, world: "World") -> None:
        self.world = world
        self.rng: random.Random = world.rng
        o = world.options
        self.actions = [(w, name) for w, name in ((o.partition_weight, "partition"), (o.crash_weight, "crash"),
                                                  (o.slow_disk_weight, "slow_disk"),
                                                  (o.transfer_weight, "transfer"), (o.heal_weight, "heal"),
                                                  (o.disk_full_weight, "disk_full"),
                                                  (o.disk_error_weight, "disk_error"),
                                                  (o.membership_weight, "membership"))
                        if w > 0]
        self.total_weight = sum(w for w, _ in self.actions)
        self.counts: dict[str, int] = {name: 0 for _, name in self.actions}

    def start(self) -> None:
        if self.actions:
            self._schedule_next()

    def _schedule_next(self) -> None:
        gap = int(self.rng.expovariate(1.0 / self.world.options.fault_gap_mean_ms))
        self.world.scheduler.after(gap, self._act)

    def _act(self) -> None:
        if self.world.phase != "faults":
            return
        pick = self.rng.randrange(self.total_weight)
        for weight, name in self.actions:
            if pick < weight:
                break
            pick -= weight
        self.counts[name] += 1
        getattr(self, f"_{name}")()
        self._schedule_next()

    def _victim(self, candidates: list[str]) -> str:
        leader = self.world.leader()
        if leader is not None and leader.node_id in candidates and \
                self.rng.random() < self.world.options.leader_victim_ratio:
            return leader.node_id
        return self.rng.choice(candidates)

    # -- actions -----------------------------------------------------------------------------------
    def _partition(self) -> None:
        world, rng = self.world, self.rng
        ids = world.node_ids
        shape = rng.randrange(5)
        victim = self._victim(ids)
        others = [n for n in ids if n != victim]
        net = world.network
        if shape == 0:
            links = net.cut([victim], others) + net.cut(others, [victim])
            what = f"isolate {victim}"
        elif shape == 1:
            minority = rng.sample(ids, rng.randint(1, len(ids) // 2))
            rest = [n for n in ids if n not in minority]
            links = net.cut(minority, rest) + net.cut(rest, minority)
            what = f"split {sorted(minority)} | {rest}"
        elif shape == 2:
            links = net.cut([victim], others)
            what = f"mute {victim} (hears, cannot speak)"
        elif shape == 3:
            links = net.cut(others, [victim])
            what = f"deafen {victim} (speaks, cannot hear)"
        else:
            to = rng.choice(others)
            links = net.cut([victim], [to])
            what = f"cut link {victim}->{to}"
        lasts_ms = rng.randint(PARTITION_MIN_MS, world.options.partition_max_ms)
        world.trace_line(lambda: f"FAULT partition for {lasts_ms} ms: {what}; blocked {net.describe_blocked()}")
        world.scheduler.after(lasts_ms, self._lift, links, net.generation, what)

    def _lift(self, links: list[tuple[str, str]], generation: int, what: str) -> None:
        net = self.world.network
        if generation != net.generation:
            return
        net.uncut(links, generation)
        self.world.trace_line(lambda: f"FAULT lift partition: {what}; blocked {net.describe_blocked()}")

    def _heal(self) -> None:
        self.world.network.heal()
        self.world.trace_line(lambda: "FAULT heal network")

    def _crash(self) -> None:
        world = self.world
        alive = [n for n in world.node_ids if world.nodes[n].alive]
        if not alive:
            return
        node = world.nodes[self._victim(alive)]
        world.crash(node)
        self.restart_later(node.node_id, node.incarnation)

    def _restart(self, node_id: str, incarnation: int) -> None:
        node = self.world.nodes[node_id]
        if not node.alive and node.incarnation == incarnation:
            self.world.restart(node)

    def _slow_disk(self) -> None:
        world = self.world
        node = world.nodes[self.rng.choice(world.node_ids)]
        node.disk.slow = True
        world.trace_line(lambda: f"FAULT slow disk {node.node_id}")
        world.scheduler.after(self.rng.randint(SLOW_DISK_MIN_MS, SLOW_DISK_MAX_MS), self._fast_disk, node.node_id)

    def _fast_disk(self, node_id: str) -> None:
        if self.world.nodes[node_id].disk.slow:
            self.world.nodes[node_id].disk.slow = False
            self.world.trace_line(lambda: f"FAULT disk normal {node_id}")

    def _disk_full(self) -> None:
        world = self.world
        node = world.nodes[self._victim(world.node_ids)]
        node.store.full = True
        lasts_ms = self.rng.randint(DISK_FULL_MIN_MS, DISK_FULL_MAX_MS)
        world.trace_line(lambda: f"FAULT disk full on {node.node_id} for {lasts_ms} ms")
        world.scheduler.after(lasts_ms, self._disk_space_back, node.node_id)

    def _disk_space_back(self, node_id: str) -> None:
        node = self.world.nodes[node_id]
        if node.store.full:
            node.store.full = False
            self.world.trace_line(lambda: f"FAULT disk space back on {node_id}")
            if node.alive:
                node.step(StoreRecovered())  # (as the node runtime's disk guard reports it)

    def _disk_error(self) -> None:
        world = self.world
        node = world.nodes[self._victim(world.node_ids)]
        node.store.fail_next_write = True
        world.trace_line(lambda: f"FAULT EIO on the next write of {node.node_id}")

    def restart_later(self, node_id: str, incarnation: int) -> None:
        self.world.scheduler.after(self.rng.randint(CRASH_DOWN_MIN_MS, self.world.options.crash_down_max_ms),
                                   self._restart, node_id, incarnation)

    def _transfer(self) -> None:
        self.world.transfer_leadership()

    def _membership(self) -> None:
        self.world.change_membership()

    def on_new_leader(self) -> None:
        """Operators retry a change right after a failover: the moment a new leader has not yet committed an
        entry of its term, when a change must still wait (raft/membership.py). Some seeds change there."""
        world = self.world
        if world.phase == "faults" and world.options.membership_weight and self.rng.random() < 0.3:
            world.scheduler.after(self.rng.randint(0, 20), world.change_membership)
