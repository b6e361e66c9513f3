"""End-to-end test helpers: histories of acknowledged appends and their checks."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import quorumlog
from quorumlog.client import Client, Entry
from quorumlog.soak import checker
from quorumlog.soak.checker import OK, UNKNOWN, Op


# -- load and checks ---------------------------------------------------------------------------------------
@dataclass
class History:
    """What writers saw: every acknowledged body with its index, and bodies whose fate is unknown."""

    acked: dict[bytes, int] = field(default_factory=dict)
    unknown: set[bytes] = field(default_factory=set)
    ack_times: list[tuple[float, int]] = field(default_factory=list)  # (monotonic, index)
    errors: dict[str, int] = field(default_factory=dict)
    times: dict[bytes, tuple[float, float]] = field(default_factory=dict)  # body -> (invoked, completed)


async def writer(client: Client, name: str, history: History, stop: asyncio.Event, body_bytes: int = 0,
                 pause_s: float = 0.0) -> None:
    """Append unique bodies until stop is set; records each ack (never retries a body itself: the client does)."""
    i = 0
    pad = b"." * max(0, body_bytes - 24)
    while not stop.is_set():
        body = f"{name}-{i:08d}".encode() + pad
        i += 1
        t0 = time.monotonic()
        try:
            r = await client.append(body)
        except quorumlog.QuorumLogError as e:
            history.times[body] = (t0, time.monotonic())
            history.unknown.add(body)
            history.errors[e.code.name] = history.errors.get(e.code.name, 0) + 1
            await asyncio.sleep(0.01)
            continue
        assert body not in history.acked
        t1 = time.monotonic()
        history.times[body] = (t0, t1)
        history.acked[body] = r.index
        history.ack_times.append((t1, r.index))
        if pause_s:
            await asyncio.sleep(pause_s)


def check_logs(history: History, logs: dict[str, list[Entry]], *, must_be_equal: bool = True) -> list[Entry]:
    """The soak's checker (quorumlog.soak.checker, one checker for both) over this history: no acknowledged
    entry lost or moved, none duplicated, no phantom, one committed log, real-time order. Returns the longest
    committed log."""
    assert logs
    forever = float("inf")  # an ack recorded without times takes no part in the real-time check
    ops = [Op("e2e", body, *history.times.get(body, (0.0, forever)), OK, index)
           for body, index in history.acked.items()]
    ops += [Op("e2e", body, *history.times.get(body, (0.0, forever)), UNKNOWN) for body in history.unknown]
    violations = checker.check(ops, logs, must_be_equal=must_be_equal)
    assert not violations, "\n".join(map(str, violations))
    return max(logs.values(), key=len)


async def time_to_first_write(client: Client, body: bytes, timeout_s: float = 10.0,
                              history: History | None = None) -> float:
    """Seconds until an append of body is acknowledged (the client redirects/retries inside); the ack joins
    `history` when given (the checker flags any entry in the log that no history sent)."""
    t0 = time.monotonic()
    r = await asyncio.wait_for(client.append(body), timeout_s)
    t1 = time.monotonic()
    if history is not None:
        history.acked[body] = r.index
        history.times[body] = (t0, t1)
    return t1 - t0
