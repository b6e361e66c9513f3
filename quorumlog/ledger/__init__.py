"""BookKeeper's ledgers on quorumlog (docs/interfaces.md "Ledgers"): metadata, and the writer and recovery as
sans-I/O state machines; bookies answer them through quorumlog/bookie."""

from .limbo import BookieLimbo
from .metadata import LedgerMetadata, Segment, State
from .recovery import LedgerRecoveryCore
from .writer import AddDone, LedgerWriterCore, NeedClose, NeedEnsembleChange

__all__ = ["AddDone", "BookieLimbo", "LedgerMetadata", "LedgerRecoveryCore", "LedgerWriterCore", "NeedClose",
           "NeedEnsembleChange", "Segment", "State"]
