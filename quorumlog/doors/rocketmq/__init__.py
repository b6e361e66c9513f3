"""RocketMQ 5's gRPC front door (docs/rocketmq.md): RocketMQ 5 clients produce and consume on quorumlog
unchanged.

`RocketMqDoor` (door.py) is loaded on first use, so that the CLI's use of the door's `_meta` records
(metadata.py) does not import grpc.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RocketMqDoor"]


def __getattr__(name: str) -> Any:
    if name == "RocketMqDoor":
        from .door import RocketMqDoor
        return RocketMqDoor
    raise AttributeError(name)
