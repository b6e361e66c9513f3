"""Prometheus metrics of one node, in its own CollectorRegistry (several nodes may share a process in tests).

Per-group series carry the labels {node, group} (GroupMetrics, one per replica); the node's own — its disk,
its event loop, its listener — carry {node}.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import CONTENT_TYPE_LATEST

# fsync on SSDs: 50 µs .. 100 ms; commit (append received → committed): 100 µs .. 10 s.
FSYNC_BUCKETS_S = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
COMMIT_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                    10.0)
# loop lag (how late a sleeper on the event loop wakes, loop_lag.py): 1 ms .. 10 s; the target is none over 200 ms.
LOOP_LAG_BUCKETS_S = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
ROLES = ("follower", "candidate", "leader")
_G = ["node", "group"]


class NodeMetrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self, node_id: str) -> None:
        self.node_id = node_id
        self.registry = r = CollectorRegistry(auto_describe=True)
        n = {"node": node_id}
        self.appends = Counter("quorumlog_appends", "Entries appended and committed through this node as leader",
                               _G, registry=r)
        self.append_bytes = Counter("quorumlog_append_bytes", "Body bytes of committed appends", _G, registry=r)
        self.append_requests = Counter("quorumlog_append_requests", "Client append requests by response code",
                                       _G + ["code"], registry=r)
        self.fsync_seconds = Histogram("quorumlog_fsync_seconds", "Latency of one group-commit fdatasync",
                                       _G, buckets=FSYNC_BUCKETS_S, registry=r)
        self.commit_seconds = Histogram("quorumlog_commit_latency_seconds",
                                        "Append received → committed (acknowledged)",
                                        _G, buckets=COMMIT_BUCKETS_S, registry=r)
        self.role = Gauge("quorumlog_role", "1 for this node's current role", _G + ["role"], registry=r)
        self.term = Gauge("quorumlog_term", "Current term", _G, registry=r)
        self.end_index = Gauge("quorumlog_end_index", "ledger_end_index", _G, registry=r)
        self.committed_index = Gauge("quorumlog_committed_index", "committed_index", _G, registry=r)
        self.peer_lag = Gauge("quorumlog_peer_lag_entries", "Leader: end_index minus the peer's watermark",
                              _G + ["peer"], registry=r)
        self.pending_requests = Gauge("quorumlog_pending_requests", "Client appends waiting for a quorum", _G,
                                      registry=r)
        self.waiting_reads = Gauge("quorumlog_waiting_reads", "Long-poll reads parked", _G, registry=r)
        self.store_bytes = Gauge("quorumlog_store_bytes", "Bytes of files in the group's directory", _G,
                                 registry=r)
        self.store_failures = Counter("quorumlog_store_failures", "Store writes/fsyncs that failed", _G + ["code"],
                                      registry=r)
        self.groups = Gauge("quorumlog_groups", "Groups hosted by this node", ["node"], registry=r).labels(**n)
        self.disk_used_bytes = Gauge("quorumlog_disk_used_bytes", "Used bytes of the data_dir filesystem", ["node"],
                                     registry=r).labels(**n)
        self.disk_total_bytes = Gauge("quorumlog_disk_total_bytes", "Size of the data_dir filesystem", ["node"],
                                      registry=r).labels(**n)
        self.disk_used_ratio = Gauge("quorumlog_disk_used_ratio", "Used / total of the data_dir filesystem",
                                     ["node"], registry=r).labels(**n)
        self.protocol_error_closes = Counter("quorumlog_protocol_error_closes",
                                             "Connections closed for a protocol error", ["node"],
                                             registry=r).labels(**n)
        self.loop_stalls = Counter("quorumlog_event_loop_stalls", "Ticks that came over 100 ms late", ["node"],
                                   registry=r).labels(**n)
        self.loop_lag_seconds = Histogram("quorumlog_event_loop_lag_seconds",
                                          "How late a sleeper on the event loop woke (every 20 ms)", ["node"],
                                          buckets=LOOP_LAG_BUCKETS_S, registry=r).labels(**n)
        self.loop_lag_max_seconds = Gauge("quorumlog_event_loop_lag_max_seconds",
                                          "The longest event loop lag since the node started", ["node"],
                                          registry=r).labels(**n)
        self.loop_paused = Counter("quorumlog_event_loop_paused",
                                   "Loop lag samples left out because the process was stopped (SIGSTOP)", ["node"],
                                   registry=r).labels(**n)

    def group(self, group: str) -> "GroupMetrics":
        return GroupMetrics(self, group)

    def forget_group(self, group: str) -> None:
        """A deleted group's series go away with it."""
        for family in (self.appends, self.append_bytes, self.fsync_seconds, self.commit_seconds, self.term,
                       self.end_index, self.committed_index, self.pending_requests, self.waiting_reads,
                       self.store_bytes, self.append_requests, self.role, self.peer_lag, self.store_failures):
            for labels in list(family._metrics):  # noqa: SLF001 - prometheus_client has no public "children"
                if labels[:2] == (self.node_id, group):
                    family.remove(*labels)

    def summary(self) -> dict[str, float]:
        """Totals the status page turns into rates: committed appends and bytes as leader, and the commit
        latency histogram's sum and count (a mean per interval is Δsum / Δcount)."""
        out = {"appends": 0.0, "append_bytes": 0.0, "commit_seconds_sum": 0.0, "commit_seconds_count": 0.0}
        names = {"quorumlog_appends_total": "appends", "quorumlog_append_bytes_total": "append_bytes",
                 "quorumlog_commit_latency_seconds_sum": "commit_seconds_sum",
                 "quorumlog_commit_latency_seconds_count": "commit_seconds_count"}
        for family in self.registry.collect():
            for sample in family.samples:
                key = names.get(sample.name)
                if key is not None:
                    out[key] += sample.value
        return out

    def render(self) -> bytes:
        return generate_latest(self.registry)


class GroupMetrics:
    """One group's series on this node."""

    def __init__(self, node: NodeMetrics, group: str) -> None:
        self._labels = labels = {"node": node.node_id, "group": group}
        self._node = node
        self.appends = node.appends.labels(**labels)
        self.append_bytes = node.append_bytes.labels(**labels)
        self.fsync_seconds = node.fsync_seconds.labels(**labels)
        self.commit_seconds = node.commit_seconds.labels(**labels)
        self.term = node.term.labels(**labels)
        self.end_index = node.end_index.labels(**labels)
        self.committed_index = node.committed_index.labels(**labels)
        self.pending_requests = node.pending_requests.labels(**labels)
        self.waiting_reads = node.waiting_reads.labels(**labels)
        self.store_bytes = node.store_bytes.labels(**labels)

    def count_request(self, code_name: str) -> None:
        self._node.append_requests.labels(**self._labels, code=code_name).inc()

    def set_role(self, role: str) -> None:
        for r in ROLES:
            self._node.role.labels(**self._labels, role=r).set(1 if r == role else 0)

    def set_peer_lag(self, peer: str, lag: int) -> None:
        self._node.peer_lag.labels(**self._labels, peer=peer).set(lag)

    def store_failed(self, code_name: str) -> None:
        self._node.store_failures.labels(**self._labels, code=code_name).inc()
