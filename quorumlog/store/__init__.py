"""The log store: segmented data files, fixed-width index, checkpoint, recovery (layer 1)."""

from ..format.log_entry import Entry, Records
from .base import LogStore, LogView, ProducerBatch
from .config import StoreConfig
from .file_store import FileStore
from .files import atomic_write_file
from .memory import MemoryStore
from .recovery import RecoveryError

__all__ = [
    "Entry", "FileStore", "LogStore", "LogView", "MemoryStore", "ProducerBatch", "Records", "RecoveryError",
    "StoreConfig", "atomic_write_file",
]
