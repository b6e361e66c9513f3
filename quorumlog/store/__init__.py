"""The log store: segmented data files, fixed-width index, checkpoint, recovery (layer 1)."""

from .base import LogStore, LogView, ProducerBatch, Records
from .codec import Entry
from .memory import MemoryStore

__all__ = ["Entry", "LogStore", "LogView", "MemoryStore", "ProducerBatch", "Records"]
