"""Crash points for crash tests (etcd's gofail failpoints, in spirit): the process dies at a named instant, as
if kill -9 hit it exactly there — in the middle of a multi-step write that a real crash could tear.

    QUORUMLOG_FAILPOINTS=store.truncate.after_data python -m quorumlog.server ...

arms the named points (comma-separated) for that process; `crash_point(name)` then exits at once with status
137 (kill -9's), without flushing or closing anything. Unarmed (the variable unset, as in production) a point
costs one lookup in an empty set. The names are listed here so a test cannot arm a point that does not exist.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)

EXIT_CODE = 137  # 128 + SIGKILL
POINTS = frozenset({
    "store.truncate.after_data",  # FileStore.truncate_after: the data is zeroed and synced, the index units not
})


def _armed() -> frozenset[str]:
    names = frozenset(n.strip() for n in os.environ.get("QUORUMLOG_FAILPOINTS", "").split(",") if n.strip())
    unknown = names - POINTS
    if unknown:
        raise ValueError(f"QUORUMLOG_FAILPOINTS names unknown points {sorted(unknown)} (known: {sorted(POINTS)})")
    return names


ARMED = _armed()


def crash_point(name: str) -> None:
    assert name in POINTS, name
    if name in ARMED:
        log.critical("failpoint %s: exiting with status %d", name, EXIT_CODE)
        for h in logging.getLogger().handlers:  # (the log line is what a test looks for)
            h.flush()
        os._exit(EXIT_CODE)
