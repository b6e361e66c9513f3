"""quorumlog: a replicated, durable, ordered log (DLedger-style Raft) with a PySpark data pipeline."""

from .client import AppendResult, BlockingClient, Client, Entry, NodeStatus, connect
from .client.ledgers import LedgerClient, LedgerEntry, LedgerReader, LedgerWriter
from .client.consumer import Consumer
from .client.topics import Producer, SendResult, TopicAdmin, TopicClient, TopicMessage
from .codes import ResponseCode
from .errors import (BadRequest, CorruptEntry, DiskError, DiskFull, DuplicateSequenceTooOld, EmptyBatch,
                     EntryTooLarge, IndexOutOfRange, LeaderPendingFull, LeaderTransferring, NetworkError,
                     NotLeader, ProtocolError, QuorumLogError, TermChanged, Timeout, UnknownGroup, UnknownMember,
                     WaitQuorumAckTimeout)

__version__ = "0.1.0"
__all__ = [
    "AppendResult", "BadRequest", "BlockingClient", "Client", "Consumer", "CorruptEntry", "DiskError", "DiskFull",
    "DuplicateSequenceTooOld", "EmptyBatch", "Entry", "EntryTooLarge", "IndexOutOfRange", "LeaderPendingFull",
    "LedgerClient", "LedgerEntry", "LedgerReader", "LedgerWriter",
    "LeaderTransferring", "NetworkError", "NodeStatus", "NotLeader", "Producer", "ProtocolError", "QuorumLogError",
    "SendResult", "TopicAdmin", "TopicClient", "TopicMessage",
    "ResponseCode", "TermChanged", "Timeout", "UnknownGroup", "UnknownMember", "WaitQuorumAckTimeout",
    "__version__", "connect",
]
