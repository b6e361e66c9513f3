"""Check a history of appends against every node's committed log after healing.

Properties (each violation names one):
- `lost`: an append acknowledged ok(index) is not in the log at that index.
- `ack_index_mismatch`: an ok value is in the log, but at another index than its ack said.
- `duplicate`: a value appears more than once in a node's log (ok or unknown alike).
- `phantom`: a value in the log that no client sent.
- `failed_present`: a value whose append definitely failed is in the log.
- `divergent`: two nodes disagree on an index both hold, or hold different committed logs after healing.
- `index_order`: a node's log indexes do not strictly increase (gaps are no-op entries and are fine).
- `real_time_order`: A acknowledged before B was invoked, yet index(A) >= index(B).

Clock-free in the sense that matters: only the client's own monotonic clock orders invoke/complete; the
nodes' timestamps are never used.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

OK = "ok"
FAILED = "failed"
UNKNOWN = "unknown"

PROPERTIES = ("lost", "ack_index_mismatch", "duplicate", "phantom", "failed_present", "divergent", "index_order",
              "real_time_order")


@dataclass(frozen=True, slots=True)
class Op:
    """One append as a client saw it; times from the client's monotonic clock, in seconds."""

    client: str
    value: bytes
    invoke_s: float
    complete_s: float
    outcome: str  # OK | FAILED | UNKNOWN
    index: int | None = None  # the acknowledged index (OK only)

    def __post_init__(self) -> None:
        assert self.outcome in (OK, FAILED, UNKNOWN), self.outcome
        assert (self.index is not None) == (self.outcome == OK), self


@dataclass(frozen=True, slots=True)
class Violation:
    property: str
    detail: str

    def __str__(self) -> str:
        return f"{self.property}: {self.detail}"


def _pairs(log: Iterable) -> list[tuple[int, bytes]]:
    """Accept (index, body) tuples or objects with .index and .body (client Entry)."""
    out = []
    for e in log:
        if isinstance(e, tuple):
            out.append((int(e[0]), bytes(e[1])))
        else:
            out.append((int(e.index), bytes(e.body)))
    return out


def check(history: Sequence[Op], logs: Mapping[str, Iterable], *, must_be_equal: bool = True,
          max_per_property: int = 20) -> list[Violation]:
    """All violations found (empty = the run is correct). `logs`: node id → its committed log."""
    out: list[Violation] = []
    counts: dict[str, int] = {}

    def report(prop: str, detail: str) -> None:
        assert prop in PROPERTIES, prop
        counts[prop] = counts.get(prop, 0) + 1
        if counts[prop] <= max_per_property:
            out.append(Violation(prop, detail))

    node_logs = {nid: _pairs(log) for nid, log in logs.items()}
    assert node_logs, "no node logs to check"

    for nid, log in node_logs.items():
        for (a, _), (b, _) in zip(log, log[1:]):
            if a >= b:
                report("index_order", f"{nid}: index {b} follows {a}")
                break
        seen: dict[bytes, int] = {}
        for index, body in log:
            if body in seen:
                report("duplicate", f"{nid}: {body[:60]!r} at {seen[body]} and {index}")
            else:
                seen[body] = index

    # One committed log: every pair of nodes agrees on each index both hold, and (healed) they hold the same.
    ids = sorted(node_logs)
    ref_id = max(ids, key=lambda n: len(node_logs[n]))
    ref = node_logs[ref_id]
    ref_map = dict(ref)
    for nid in ids:
        if nid == ref_id:
            continue
        log = node_logs[nid]
        for index, body in log:
            if index in ref_map and ref_map[index] != body:
                report("divergent", f"{nid} has {body[:60]!r} at {index}, {ref_id} has {ref_map[index][:60]!r}")
                break
            if index not in ref_map:
                report("divergent", f"{nid} has index {index} ({body[:60]!r}) that {ref_id} lacks")
                break
        if must_be_equal and len(log) != len(ref):
            report("divergent", f"{nid} holds {len(log)} committed entries, {ref_id} holds {len(ref)}")

    # Where each value sits: the union of all nodes' logs (the reference first).
    where: dict[bytes, int] = {}
    for nid in [ref_id] + [i for i in ids if i != ref_id]:
        for index, body in node_logs[nid]:
            where.setdefault(body, index)

    sent: dict[bytes, Op] = {}
    for op in history:
        assert op.value not in sent, f"the workload sent {op.value!r} twice; values must be unique"
        sent[op.value] = op
    for body, index in where.items():
        op = sent.get(body)
        if op is None:
            report("phantom", f"{body[:60]!r} at {index} was never sent")
        elif op.outcome == FAILED:
            report("failed_present", f"{body[:60]!r} (client {op.client}) failed but is at {index}")

    for op in history:
        if op.outcome != OK:
            continue
        found = where.get(op.value)
        if found is None:
            held = ref_map.get(op.index)
            report("lost", f"{op.value[:60]!r} (client {op.client}) acked at {op.index}, in no log"
                   + (f"; {ref_id} has {held[:60]!r} there" if held is not None else ""))
        elif found != op.index:
            report("ack_index_mismatch", f"{op.value[:60]!r} (client {op.client}) acked at {op.index}, "
                   f"in the log at {found}")

    # Real-time order over the log positions (the ack index where the value is missing, already reported).
    oks = [op for op in history if op.outcome == OK]
    pos = {op.value: where.get(op.value, op.index) for op in oks}
    by_complete = sorted(oks, key=lambda o: o.complete_s)
    completes = [o.complete_s for o in by_complete]
    # prefix maximum of positions over ops sorted by completion time
    best: list[Op] = []
    for o in by_complete:
        best.append(o if not best or pos[o.value] > pos[best[-1].value] else best[-1])
    for b in oks:
        k = bisect.bisect_left(completes, b.invoke_s)  # ops completed strictly before b was invoked
        if k == 0:
            continue
        a = best[k - 1]
        if pos[a.value] >= pos[b.value]:
            report("real_time_order", f"{a.value[:60]!r} acked at t={a.complete_s:.6f} before {b.value[:60]!r} "
                   f"was invoked at t={b.invoke_s:.6f}, yet index {pos[a.value]} >= {pos[b.value]}")

    for prop, n in counts.items():
        if n > max_per_property:
            out.append(Violation(prop, f"... and {n - max_per_property} more"))
    return out


def summarize(history: Sequence[Op]) -> dict[str, int]:
    c = {OK: 0, FAILED: 0, UNKNOWN: 0}
    for op in history:
        c[op.outcome] += 1
    return c
