"""What the client hands back: append results, entries, node status."""

from __future__ import annotations

import json
from dataclasses import field
from datetime import datetime, timedelta, timezone
from typing import Any

from ..frozen import frozen

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_ONE_MS = timedelta(milliseconds=1)

UNREACHABLE = "unreachable"  # role of a node that did not answer status

# The member that takes writes: a Raft group's leader, a master/slave group's master.
WRITABLE_ROLES = ("leader", "master")


@frozen
class AppendResult:
    """Where an appended entry landed: its 0-based index and the leader's term that committed it (a
    master/slave group's master epoch); in a master/slave group also its physical offset (where its record
    begins in the master's log, RocketMQ's wroteOffset), -1 in a Raft group."""

    index: int
    term: int
    offset: int = -1


def datetime_of_ms(timestamp_ms: int) -> datetime:
    """Store timestamp (ms since the epoch) → aware UTC datetime, exactly (no float rounding)."""
    return _EPOCH + timedelta(milliseconds=timestamp_ms)


@frozen
class Entry:
    """One committed entry. `timestamp` is the leader's store time as an aware UTC datetime;
    `timestamp_ms` gives the same instant as integer milliseconds since the epoch."""

    index: int
    term: int
    timestamp: datetime
    body: bytes

    @property
    def timestamp_ms(self) -> int:
        return (self.timestamp - _EPOCH) // _ONE_MS

    @classmethod
    def from_stored(cls, index: int, term: int, timestamp_ms: int, body: bytes) -> "Entry":
        return cls(index, term, datetime_of_ms(timestamp_ms), body)


@frozen
class NodeStatus:
    """One member as it reports itself (the node's /status document), or role "unreachable"."""

    id: str
    address: str
    role: str
    term: int = -1
    leader_id: str | None = None
    begin_index: int = -1
    end_index: int = -1
    committed_index: int = -1
    watermarks: dict[str, int] = field(default_factory=dict)
    error: str | None = None  # why it is unreachable
    raw: dict[str, Any] = field(default_factory=dict)  # the whole document, for fields we do not model

    @property
    def reachable(self) -> bool:
        return self.role != UNREACHABLE

    @classmethod
    def unreachable(cls, node_id: str, address: str, error: str) -> "NodeStatus":
        return cls(id=node_id, address=address, role=UNREACHABLE, error=error)

    @classmethod
    def from_json(cls, node_id: str, address: str, status_json: bytes | str) -> "NodeStatus":
        doc = json.loads(status_json or b"{}")
        if not isinstance(doc, dict):
            raise ValueError(f"status of {node_id}: expected a JSON object, got {type(doc).__name__}")

        def num(*keys: str, default: int = -1) -> int:
            for k in keys:
                v = doc.get(k)
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    return int(v)
            return default

        role = doc.get("role", "unknown")
        if hasattr(role, "value"):
            role = role.value
        leader = doc.get("leader_id", doc.get("leader"))
        marks = doc.get("watermarks") or doc.get("peer_watermarks") or {}
        return cls(
            id=str(doc.get("id", doc.get("node_id", node_id))),
            address=address,
            role=str(role).lower(),
            term=num("term", "current_term"),
            leader_id=str(leader) if leader not in (None, "") else None,
            begin_index=num("begin_index", "ledger_begin_index"),
            end_index=num("end_index", "ledger_end_index"),
            committed_index=num("committed_index"),
            watermarks={str(k): int(v) for k, v in marks.items()} if isinstance(marks, dict) else {},
            raw=doc,
        )

    def to_dict(self) -> dict[str, Any]:
        """The CLI's JSON shape: the node's own document, with our normalised fields on top."""
        out = dict(self.raw)
        out.update(id=self.id, address=self.address, role=self.role, term=self.term, leader_id=self.leader_id,
                   begin_index=self.begin_index, end_index=self.end_index,
                   committed_index=self.committed_index, watermarks=self.watermarks)
        if self.error is not None:
            out["error"] = self.error
        return out
