"""Node-level liveness, sans-I/O: when each node was last heard (any message, any group) and which went silent
for the minimum election timeout. The node runtime (server/node.py) and the simulator (sim/liveness.py) feed
it and step PeerSilent into their cores for each node it reports, once per silence (raft/quiescence.py)."""

from __future__ import annotations

from typing import Iterable


class PeerLiveness:
    __slots__ = ("silence_ms", "_heard", "_silent")

    def __init__(self, silence_ms: int) -> None:
        self.silence_ms = silence_ms
        self._heard: dict[str, int] = {}
        self._silent: set[str] = set()

    def heard(self, node_id: str, now_ms: int) -> bool:
        """node_id spoke; True when it had been reported silent (it is back)."""
        self._heard[node_id] = now_ms
        if node_id in self._silent:
            self._silent.discard(node_id)
            return True
        return False

    def restart(self, now_ms: int) -> None:
        """We heard nothing because we did not listen (a restart, a stalled loop): everyone gets a fresh timeout."""
        self._heard = dict.fromkeys(self._heard, now_ms)
        self._silent.clear()

    def newly_silent(self, nodes: Iterable[str], now_ms: int) -> list[str]:
        """Of `nodes`, those silent for longer than silence_ms and not reported yet (a node never heard counts
        from the first time it is asked about)."""
        out = []
        for p in nodes:
            if p not in self._silent and now_ms - self._heard.setdefault(p, now_ms) > self.silence_ms:
                self._silent.add(p)
                out.append(p)
        return out
