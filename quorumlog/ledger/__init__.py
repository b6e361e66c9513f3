"""BookKeeper's ledgers on quorumlog (INTERFACES.md "Ledgers"): metadata, and the writer and recovery as
sans-I/O state machines; bookies answer them through quorumlog/bookie."""

from .metadata import LedgerMetadata, Segment, State
from .recovery import LedgerRecoveryCore
from .writer import AddDone, LedgerWriterCore, NeedClose, NeedEnsembleChange

__all__ = ["AddDone", "LedgerMetadata", "LedgerRecoveryCore", "LedgerWriterCore", "NeedClose", "NeedEnsembleChange",
           "Segment", "State"]
