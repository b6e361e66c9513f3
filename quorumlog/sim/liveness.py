"""The runtime's node-level liveness, simulated (server/node.py does the same with real links): every node
sends one heartbeat per heartbeat interval to every other node, over the simulated network (so partitions,
drops and delays apply); any message from a node counts as hearing it. A node silent for an election timeout
is reported once to the local core as PeerSilent, which wakes quiet groups (raft/quiescence.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..raft.peer_liveness import PeerLiveness
from ..raft.types import HEARTBEAT_INTERVAL_MS, PeerSilent

if TYPE_CHECKING:
    from .world import World


class NodeLiveness:
    def __init__(self, world: "World") -> None:
        self.world = world
        self.of: dict[str, PeerLiveness] = {}  # each node's runtime's view of the others

    def start(self, node_id: str) -> None:
        self.of[node_id] = PeerLiveness(self.world.options.election_timeout_min_ms)
        self.world.scheduler.after(HEARTBEAT_INTERVAL_MS, self._beat, node_id)

    def restarted(self, node_id: str) -> None:
        """A restarted runtime has heard from nobody yet: it gives everyone an election timeout."""
        self.of[node_id].restart(self.world.scheduler.now_ms)

    def heard_from(self, listener: str, speaker: str) -> None:
        self.of[listener].heard(speaker, self.world.scheduler.now_ms)

    def _beat(self, node_id: str) -> None:
        world = self.world
        if world.nodes[node_id].alive:
            for p in world.nodes:
                if p != node_id:
                    world.network.send(node_id, p, None, lambda _, to=p: self._arrive(to, node_id))
        world.scheduler.after(HEARTBEAT_INTERVAL_MS, self._beat, node_id)

    def _arrive(self, listener: str, speaker: str) -> None:
        if self.world.nodes[listener].alive:
            self.heard_from(listener, speaker)

    def check(self, node_id: str) -> None:
        """At a tick of node_id: report each node silent for the minimum election timeout, once per silence."""
        world = self.world
        node = world.nodes[node_id]
        others = [p for p in world.nodes if p != node_id]
        for p in self.of[node_id].newly_silent(others, world.scheduler.now_ms):
            world.trace_line(lambda: f"{node_id}: node {p} silent")
            if hasattr(node.core, "quiescence"):  # (not the tests' stand-in core)
                node.step(PeerSilent(p))
                if not node.alive:
                    return
