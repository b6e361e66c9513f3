"""BookKeeper's ledgers on quorumlog (docs/interfaces.md "Ledgers"): the client API in one import.

    from quorumlog.ledgers import LedgerClient
"""

from .client.ledger_stream import LedgerStreamWriter, StreamEntry
from .client.ledgers import LedgerClient, LedgerEntry, LedgerReader, LedgerWriter
from .errors import (LedgerClosed, LedgerFenced, LedgerRecoveryFailed, MetadataVersionConflict, NoSuchEntry,
                     NoSuchLedger, NotEnoughBookies)
from .ledger.metadata import LedgerMetadata, Segment, State

__all__ = ["LedgerClient", "LedgerClosed", "LedgerEntry", "LedgerFenced", "LedgerMetadata", "LedgerReader",
           "LedgerRecoveryFailed", "LedgerStreamWriter", "LedgerWriter", "MetadataVersionConflict", "NoSuchEntry", "NoSuchLedger",
           "NotEnoughBookies", "Segment", "State", "StreamEntry"]
