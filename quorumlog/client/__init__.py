"""The client layer: `Client` (asyncio) and `connect` (blocking), with their result types."""

from .blocking import BlockingClient, connect
from .client import Client
from .types import AppendResult, Entry, NodeStatus

__all__ = ["AppendResult", "BlockingClient", "Client", "Entry", "NodeStatus", "connect"]
