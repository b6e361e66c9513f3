"""Test helpers: append with the client, read back with the client, kill a process tree by pid."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import quorumlog
from quorumlog.spark.flights import chunks_by_bytes


def append(peers: str, bodies: list[bytes], batch_bytes: int = 256 * 1024) -> tuple[int, int]:
    """Append bodies in order (one batch at a time); returns [first, end) of their indexes."""
    first = last = None
    with quorumlog.connect(peers) as c:
        for chunk in chunks_by_bytes(bodies, batch_bytes):
            res = c.append_batch(list(chunk))
            first = res[0].index if first is None else first
            last = res[-1].index
    assert first is not None and last - first + 1 >= len(bodies)
    return first, last + 1


def client_entries(peers: str, start: int, end: int) -> list:
    """What the client reads for [start, end)."""
    with quorumlog.connect(peers) as c:
        return list(c.read(start, end - 1))


def descendants(pid: int) -> list[int]:
    """Every live descendant of pid (from /proc), children before grandchildren."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(0), []):
            out.append(child)
            todo.append(child)
    return out


def kill_tree(pid: int) -> list[int]:
    """kill -9 pid and all its descendants (the Spark driver's JVM), each by pid; returns the pids killed."""
    pids = [pid, *descendants(pid)]
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return pids
