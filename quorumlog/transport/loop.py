"""The event loop: uvloop when it is importable (libuv: fewer syscalls, faster transports), asyncio otherwise.

QUORUMLOG_EVENT_LOOP=asyncio forces the standard loop (to rule uvloop out when chasing a bug).
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any, Awaitable, Callable, Coroutine, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")

_uvloop = None
if os.environ.get("QUORUMLOG_EVENT_LOOP", "").lower() != "asyncio":
    try:  # pragma: no cover - depends on the platform
        import uvloop as _uvloop
    except ImportError:  # pragma: no cover
        _uvloop = None


def uvloop_available() -> bool:
    return _uvloop is not None


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """A callable making the best event loop (for asyncio.Runner(loop_factory=...))."""
    return _uvloop.new_event_loop if _uvloop is not None else asyncio.new_event_loop


def install_event_loop_policy() -> bool:
    """Make uvloop the default for asyncio.run and new loops; returns True when uvloop is in use."""
    if _uvloop is None:
        return False
    asyncio.set_event_loop_policy(_uvloop.EventLoopPolicy())
    return True


def run(main: Coroutine[Any, Any, T] | Callable[[], Awaitable[T]], *, debug: bool | None = None) -> T:
    """asyncio.run on the best loop. `main` is a coroutine or a zero-argument coroutine function."""
    coro = main() if callable(main) else main
    with asyncio.Runner(debug=debug, loop_factory=loop_factory()) as runner:
        return runner.run(coro)
