"""The runtime's one clock: monotonic milliseconds, the time every core is stepped with (Tick(now_ms)).

The cores read no clock (they are sans-I/O); the node, its groups and their services read this one, so the
times they hand each other (a term's start, a lease, a heartbeat's send time) are on the same scale."""

from __future__ import annotations

import time


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000
