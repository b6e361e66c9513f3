"""Bookies (docs/interfaces.md "Ledgers"): every node is also a bookie that stores ledger entries. This package is
its storage (journal, entry logs, RocksDB index); the ledger protocol builds on it."""

from .storage import BookieConfig, BookieStorage

__all__ = ["BookieConfig", "BookieStorage"]
