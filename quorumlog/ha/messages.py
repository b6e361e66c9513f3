"""What crosses an HA connection (RocketMQ's HAConnection/HAClient wire, as messages):

    slave -> master   SlaveReport(offset)          "I hold every byte below `offset`" (8 bytes in RocketMQ)
    master -> slave   Transfer(offset, data)       log bytes from physical `offset`; empty data = heartbeat
    master -> slave   Reset(offset)                your offset is not in my log: drop yours, restart at `offset`

and what either side's state machine asks of its runtime:

    Drop(reason)      close this connection (the slave reconnects)
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SlaveReport:
    offset: int


@dataclass(frozen=True, slots=True)
class Transfer:
    offset: int
    data: bytes | memoryview = b""  # (a view of the master's store: no copy)

    @property
    def heartbeat(self) -> bool:
        return not self.data


@dataclass(frozen=True, slots=True)
class Reset:
    offset: int


@dataclass(frozen=True, slots=True)
class Drop:
    reason: str
