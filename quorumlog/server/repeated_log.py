"""A warning that repeats while a condition lasts (a full disk refuses every write and every probe) is logged
at its level once per `every_s` per key, at DEBUG in between, with the count it stood for: an operator sees
the condition and how often it struck without a line per refusal (a full Raft follower is probed every
heartbeat; a full slave is greeted every 200 ms)."""

from __future__ import annotations

import logging
import time

EVERY_S = 10.0


class RepeatedLog:
    __slots__ = ("logger", "every_s", "_last", "_held")

    def __init__(self, logger: logging.Logger, every_s: float = EVERY_S) -> None:
        self.logger = logger
        self.every_s = every_s
        self._last: dict[object, float] = {}  # key -> when it was last logged at its level
        self._held: dict[object, int] = {}  # key -> lines sent to DEBUG since

    def log(self, key: object, level: int, msg: str, *args: object) -> None:
        now = time.monotonic()
        last = self._last.get(key)
        if last is not None and now - last < self.every_s:
            self._held[key] = self._held.get(key, 0) + 1
            self.logger.debug(msg, *args)
            return
        self._last[key] = now
        held = self._held.pop(key, 0)
        if held:
            self.logger.log(level, msg + " (and %d more like it in the last %.0f s)", *args, held, now - last)
        else:
            self.logger.log(level, msg, *args)
