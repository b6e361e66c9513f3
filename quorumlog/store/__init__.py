"""The log store: segmented data files, fixed-width index, checkpoint, recovery (layer 1).

Its parts are imported at first use: a module that needs only `store.base` (the state machines, a client)
does not load the file store.
"""

from ..lazy import lazy_exports

_LAZY = {
    "Entry": "..format.log_entry", "Records": "..format.log_entry",
    "LogStore": ".base", "LogView": ".base", "ProducerBatch": ".base",
    "StoreConfig": ".config", "FileStore": ".file_store", "atomic_write_file": ".files",
    "MemoryStore": ".memory", "RecoveryError": ".recovery",
}
__getattr__ = lazy_exports(__name__, _LAZY)

__all__ = [
    "Entry", "FileStore", "LogStore", "LogView", "MemoryStore", "ProducerBatch", "Records", "RecoveryError",
    "StoreConfig", "atomic_write_file",
]
