"""quorumlog: a replicated, durable, ordered log (DLedger-style Raft) with a PySpark data pipeline.

The clients are imported at first use (`quorumlog.Client`, `from quorumlog import Producer`): a command that
needs none of them -- the CLI's, a node's -- does not pay for importing all of them at start-up.
"""

from .codes import ResponseCode
from .errors import (BadRequest, CorruptEntry, DiskError, DiskFull, DuplicateSequenceTooOld, EmptyBatch,
                     EntryTooLarge, IndexGap, IndexOutOfRange, LeaderPendingFull, LeaderTransferring,
                     MetadataVersionConflict, NetworkError, NotCommittedYet, NotLeader, ProtocolError, QuorumLogError,
                     RemovedByRetention, TermChanged, Timeout, UnknownGroup, UnknownMember, WaitQuorumAckTimeout)
from .lazy import lazy_exports

__version__ = "0.1.0"

_LAZY = {
    **dict.fromkeys(("AppendResult", "BlockingClient", "Client", "Entry", "NodeStatus", "connect"), ".client"),
    **dict.fromkeys(("LedgerClient", "LedgerEntry", "LedgerReader", "LedgerWriter"), ".client.ledgers"),
    "Consumer": ".client.consumer",
    **dict.fromkeys(("Producer", "SendResult", "TopicAdmin", "TopicClient", "TopicMessage"), ".client.topics"),
}
__getattr__ = lazy_exports(__name__, _LAZY)

__all__ = [
    "AppendResult", "BadRequest", "BlockingClient", "Client", "Consumer", "CorruptEntry", "DiskError", "DiskFull",
    "DuplicateSequenceTooOld", "EmptyBatch", "Entry", "EntryTooLarge", "IndexGap", "IndexOutOfRange",
    "LeaderPendingFull", "MetadataVersionConflict", "NotCommittedYet", "RemovedByRetention",
    "LedgerClient", "LedgerEntry", "LedgerReader", "LedgerWriter",
    "LeaderTransferring", "NetworkError", "NodeStatus", "NotLeader", "Producer", "ProtocolError", "QuorumLogError",
    "SendResult", "TopicAdmin", "TopicClient", "TopicMessage",
    "ResponseCode", "TermChanged", "Timeout", "UnknownGroup", "UnknownMember", "WaitQuorumAckTimeout",
    "__version__", "connect",
]


def __dir__() -> list[str]:
    return sorted(__all__)
