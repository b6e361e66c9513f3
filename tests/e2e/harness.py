"""End-to-end test helpers: histories of acknowledged appends and their checks."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import quorumlog
from quorumlog.client import Client, Entry


# -- load and checks ---------------------------------------------------------------------------------------
@dataclass
class History:
    """What writers saw: every acknowledged body with its index, and bodies whose fate is unknown."""

    acked: dict[bytes, int] = field(default_factory=dict)
    unknown: set[bytes] = field(default_factory=set)
    ack_times: list[tuple[float, int]] = field(default_factory=list)  # (monotonic, index)
    errors: dict[str, int] = field(default_factory=dict)


async def writer(client: Client, name: str, history: History, stop: asyncio.Event, body_bytes: int = 0,
                 pause_s: float = 0.0) -> None:
    """Append unique bodies until stop is set; records each ack (never retries a body itself: the client does)."""
    i = 0
    pad = b"." * max(0, body_bytes - 24)
    while not stop.is_set():
        body = f"{name}-{i:08d}".encode() + pad
        i += 1
        try:
            r = await client.append(body)
        except quorumlog.QuorumLogError as e:
            history.unknown.add(body)
            history.errors[e.code.name] = history.errors.get(e.code.name, 0) + 1
            await asyncio.sleep(0.01)
            continue
        assert body not in history.acked
        history.acked[body] = r.index
        history.ack_times.append((time.monotonic(), r.index))
        if pause_s:
            await asyncio.sleep(pause_s)


def check_logs(history: History, logs: dict[str, list[Entry]], *, must_be_equal: bool = True) -> list[Entry]:
    """No acknowledged entry lost, none duplicated, one order on every node; returns the reference log."""
    assert logs
    ref = max(logs.values(), key=len)
    # Indexes strictly increase; gaps are new leaders' no-op entries, which readers never see.
    assert all(a.index < b.index for a, b in zip(ref, ref[1:])), "committed log out of index order"
    by_index = {e.index: e for e in ref}
    ref_view = [(e.index, e.term, e.body) for e in ref]
    for nid, log in logs.items():
        view = [(e.index, e.term, e.body) for e in log]
        assert view == ref_view[:len(view)], f"{nid}'s committed log diverges from the longest"
        if must_be_equal:
            assert len(view) == len(ref_view), f"{nid} has {len(view)} committed entries, another {len(ref_view)}"
    bodies = [e.body for e in ref]
    assert all(bodies), "an empty body reached a reader (no-op entries must be skipped)"
    assert len(set(bodies)) == len(bodies), "an entry is duplicated in the committed log"
    for body, index in history.acked.items():
        assert index in by_index, f"acknowledged entry {body[:40]!r} at {index} lost (log ends at {ref[-1].index})"
        assert by_index[index].body == body, f"acknowledged entry {body[:40]!r} not at its index {index}"
    return ref


async def time_to_first_write(client: Client, body: bytes, timeout_s: float = 10.0) -> float:
    """Seconds until an append of body is acknowledged (the client redirects/retries inside)."""
    t0 = time.monotonic()
    await asyncio.wait_for(client.append(body), timeout_s)
    return time.monotonic() - t0
