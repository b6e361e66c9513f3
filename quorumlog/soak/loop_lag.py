"""The nodes' event-loop lag over a soak, for its summary: max and p99.9 over every node process that ran.

Each node reports its own (server/loop_lag.py) in its status, counted since the process started. A soak reads
the statuses before every fault and after it healed and keeps, per node process (node id and pid), the latest
report; a restart starts a new process, whose report adds to the old one's. What a process measured after its
last read and before a kill -9 is lost: up to one cycle's worth, not the fault's own hold. A SIGSTOPped node's
pause is not lag (the node counts it apart, as `paused`).
"""

from __future__ import annotations

from typing import Any, Mapping

from ..server.loop_lag import merge_buckets, quantile_ms

STALL_TARGET_MS = 200  # no stall over this in the soaks and benchmarks


class LoopLagTally:
    def __init__(self) -> None:
        self._latest: dict[tuple[str, int], dict] = {}  # (node id, pid) -> its last loop_lag report

    def record(self, statuses: Mapping[str, Any]) -> None:
        """statuses: node id -> its status document (a dict, or a client NodeStatus with `.raw`)."""
        for nid, doc in statuses.items():
            doc = getattr(doc, "raw", doc)
            if isinstance(doc, dict) and isinstance(doc.get("loop_lag"), dict) and doc.get("pid"):
                self._latest[(nid, int(doc["pid"]))] = doc["loop_lag"]

    def figures(self) -> dict:
        """Max, p99, p99.9 and samples over STALL_TARGET_MS: of the lag, and of the lag less the loop thread's
        wait for a CPU (server/loop_lag.py: the stalls of the nodes' own making)."""
        reports = list(self._latest.values())
        per_node: dict[str, float] = {}
        for (nid, _), r in self._latest.items():
            per_node[nid] = max(per_node.get(nid, 0.0), r.get("max_ms", 0.0))
        return {"processes": len(reports), "paused_samples": sum(r.get("paused", 0) for r in reports),
                **combine(reports), "max_ms_by_node": dict(sorted(per_node.items())),
                "less_cpu_wait": combine([r.get("less_cpu_wait", {}) for r in reports])}


def combine(reports: list[dict]) -> dict:
    """Several loop lag summaries (LoopLag.summary()) as one: max, p99, p99.9 over all their samples."""
    buckets = merge_buckets(r.get("buckets_ms", {}) for r in reports)
    top = max((r.get("max_ms", 0.0) for r in reports), default=0.0)
    return {"samples": sum(buckets.values()), "max_ms": top, "p99_ms": quantile_ms(buckets, 0.99, top),
            "p999_ms": quantile_ms(buckets, 0.999, top),
            f"over_{STALL_TARGET_MS}_ms": sum(n for k, n in buckets.items() if float(k) > STALL_TARGET_MS)}
