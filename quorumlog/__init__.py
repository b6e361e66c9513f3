"""quorumlog: a replicated, durable, ordered log (DLedger-style Raft) with a PySpark data pipeline."""

from .codes import ResponseCode
from .errors import QuorumLogError

__version__ = "0.1.0"
__all__ = ["QuorumLogError", "ResponseCode", "__version__"]
