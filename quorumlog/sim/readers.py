"""A simulated linearizable reader (raft/read_index.py): it asks a node that believes it leads for a read
index every so often and checks the answer against what clients were told before it asked.

Linearizability of a ReadIndex read, as the checker can see it: the read index is committed, and it is at or
above every index acknowledged to any client before the read was sent (an acknowledged write is visible to
every later read). A deposed leader answering from its own commit point breaks the second.

It draws from its own random stream, so turning it on does not reshuffle the rest of a seed's run.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from ..codes import ResponseCode
from ..raft.types import ClientRead, Completion, Role
from .checker import Violation

if TYPE_CHECKING:
    from .world import World


class LinearReader:
    def __init__(self, world: "World", every_ms: int) -> None:
        self.world = world
        self.every_ms = every_ms
        self.rng = random.Random(world.options.seed * 7919 + 17)
        self.waiting: dict[int, tuple[str, int]] = {}  # request id -> (node, highest acked index when sent)
        self.confirmed = 0
        self.refused = 0

    def start(self) -> None:
        self.world.scheduler.after(self.rng.randint(1, self.every_ms), self._read)

    def _read(self) -> None:
        world = self.world
        if world.phase != "liveness":
            nodes = [world.nodes[n] for n in world.node_ids if world.nodes[n].alive]
            leaders = [n for n in nodes if n.core.role is Role.LEADER]  # stale ones too: that is the point
            if len(leaders) > 1 and self.rng.random() < 0.7:
                node = min(leaders, key=lambda n: n.core.term)  # a client whose hint went stale
            else:
                pool = leaders or nodes
                node = self.rng.choice(pool) if pool else None
            if node is not None:
                request_id = world.new_read_id(self)
                self.waiting[request_id] = (node.node_id, world.checker.max_acked_index)
                world.trace_line(lambda: f"reader -> {node.node_id} read req={request_id}")
                node.step(ClientRead(request_id))
        self.world.scheduler.after(self.rng.randint(1, self.every_ms), self._read)

    def on_completion(self, node_id: str, c: Completion) -> None:
        asked, floor = self.waiting.pop(c.request_id)
        self.world.trace_line(lambda: f"{node_id} read req={c.request_id} {c.code.name} index={c.first_index}")
        if c.code != ResponseCode.SUCCESS:
            self.refused += 1
            return
        self.confirmed += 1
        # checked once the step that answered is done: the checker learns that step's commit after it
        self.world.scheduler.after(0, self._check, node_id, c, floor)

    def _check(self, node_id: str, c: Completion, floor: int) -> None:
        checker = self.world.checker
        if c.first_index > checker.committed_index:
            raise Violation("stale_read", f"{node_id} gave read index {c.first_index} beyond the committed log "
                                          f"(ends at {checker.committed_index})")
        if c.first_index < floor:
            raise Violation("stale_read", f"{node_id} (term {c.term}) gave read index {c.first_index}, but index "
                                          f"{floor} was acknowledged before the read was sent")
