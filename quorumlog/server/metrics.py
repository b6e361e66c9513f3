"""Prometheus metrics of one node, in its own CollectorRegistry (several nodes may share a process in tests)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import CONTENT_TYPE_LATEST

# fsync on SSDs: 50 µs .. 100 ms; commit (append received → committed): 100 µs .. 10 s.
FSYNC_BUCKETS_S = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
COMMIT_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                    10.0)
ROLES = ("follower", "candidate", "leader")


class NodeMetrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self, node_id: str, group: str) -> None:
        self.registry = r = CollectorRegistry(auto_describe=True)
        labels = {"node": node_id, "group": group}
        self._labels = labels
        names = list(labels)
        self.appends = Counter("quorumlog_appends", "Entries appended and committed through this node as leader",
                               names, registry=r).labels(**labels)
        self.append_bytes = Counter("quorumlog_append_bytes", "Body bytes of committed appends",
                                    names, registry=r).labels(**labels)
        self.append_requests = Counter("quorumlog_append_requests", "Client append requests by response code",
                                       names + ["code"], registry=r)
        self.fsync_seconds = Histogram("quorumlog_fsync_seconds", "Latency of one group-commit fdatasync",
                                       names, buckets=FSYNC_BUCKETS_S, registry=r).labels(**labels)
        self.commit_seconds = Histogram("quorumlog_commit_latency_seconds",
                                        "Append received → committed (acknowledged)",
                                        names, buckets=COMMIT_BUCKETS_S, registry=r).labels(**labels)
        self.role = Gauge("quorumlog_role", "1 for this node's current role", names + ["role"], registry=r)
        self.term = Gauge("quorumlog_term", "Current term", names, registry=r).labels(**labels)
        self.end_index = Gauge("quorumlog_end_index", "ledger_end_index", names, registry=r).labels(**labels)
        self.committed_index = Gauge("quorumlog_committed_index", "committed_index", names,
                                     registry=r).labels(**labels)
        self.peer_lag = Gauge("quorumlog_peer_lag_entries", "Leader: end_index minus the peer's watermark",
                              names + ["peer"], registry=r)
        self.pending_requests = Gauge("quorumlog_pending_requests", "Client appends waiting for a quorum",
                                      names, registry=r).labels(**labels)
        self.waiting_reads = Gauge("quorumlog_waiting_reads", "Long-poll reads parked", names,
                                   registry=r).labels(**labels)
        self.disk_used_bytes = Gauge("quorumlog_disk_used_bytes", "Used bytes of the data_dir filesystem", names,
                                     registry=r).labels(**labels)
        self.disk_total_bytes = Gauge("quorumlog_disk_total_bytes", "Size of the data_dir filesystem", names,
                                      registry=r).labels(**labels)
        self.disk_used_ratio = Gauge("quorumlog_disk_used_ratio", "Used / total of the data_dir filesystem", names,
                                     registry=r).labels(**labels)
        self.store_bytes = Gauge("quorumlog_store_bytes", "Bytes of files in data_dir", names,
                                 registry=r).labels(**labels)
        self.protocol_error_closes = Counter("quorumlog_protocol_error_closes",
                                             "Connections closed for a protocol error", names, registry=r).labels(**labels)
        self.loop_stalls = Counter("quorumlog_event_loop_stalls", "Ticks that came over 100 ms late", names,
                                   registry=r).labels(**labels)
        self.store_failures = Counter("quorumlog_store_failures", "Store writes/fsyncs that failed",
                                      names + ["code"], registry=r)

    def count_request(self, code_name: str) -> None:
        self.append_requests.labels(**self._labels, code=code_name).inc()

    def set_role(self, role: str) -> None:
        for r in ROLES:
            self.role.labels(**self._labels, role=r).set(1 if r == role else 0)

    def set_peer_lag(self, peer: str, lag: int) -> None:
        self.peer_lag.labels(**self._labels, peer=peer).set(lag)

    def store_failed(self, code_name: str) -> None:
        self.store_failures.labels(**self._labels, code=code_name).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
