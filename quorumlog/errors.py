"""Errors carry a ResponseCode and say whether a retry may succeed (aiokafka's shape)."""

from __future__ import annotations

from .codes import ResponseCode


class QuorumLogError(Exception):
    code: ResponseCode = ResponseCode.UNKNOWN
    retriable: bool = False

    def __init__(self, message: str = "", *, leader_id: str | None = None) -> None:
        super().__init__(message or self.code.name)
        self.leader_id = leader_id

    @staticmethod
    def for_code(code: int, message: str = "", *, leader_id: str | None = None) -> "QuorumLogError":
        cls = _BY_CODE.get(ResponseCode.of(code), QuorumLogError)
        err = cls(message or ResponseCode.of(code).name, leader_id=leader_id)
        if cls is QuorumLogError:
            err.code = ResponseCode.of(code)
        return err


def _error(name: str, code: ResponseCode, retriable: bool) -> type[QuorumLogError]:
    return type(name, (QuorumLogError,), {"code": code, "retriable": retriable})


NotLeader = _error("NotLeader", ResponseCode.NOT_LEADER, True)
UnknownGroup = _error("UnknownGroup", ResponseCode.UNKNOWN_GROUP, False)
UnknownMember = _error("UnknownMember", ResponseCode.UNKNOWN_MEMBER, False)
DiskFull = _error("DiskFull", ResponseCode.DISK_FULL, False)
DiskError = _error("DiskError", ResponseCode.DISK_ERROR, False)
TermChanged = _error("TermChanged", ResponseCode.TERM_CHANGED, True)
WaitQuorumAckTimeout = _error("WaitQuorumAckTimeout", ResponseCode.WAIT_QUORUM_ACK_TIMEOUT, True)
LeaderPendingFull = _error("LeaderPendingFull", ResponseCode.LEADER_PENDING_FULL, True)
LeaderTransferring = _error("LeaderTransferring", ResponseCode.LEADER_TRANSFERRING, True)
EmptyBatch = _error("EmptyBatch", ResponseCode.REQUEST_WITH_EMPTY_BODYS, False)
IndexOutOfRange = _error("IndexOutOfRange", ResponseCode.INDEX_OUT_OF_RANGE, False)
EntryTooLarge = _error("EntryTooLarge", ResponseCode.ENTRY_TOO_LARGE, False)
BadRequest = _error("BadRequest", ResponseCode.BAD_REQUEST, False)
CorruptEntry = _error("CorruptEntry", ResponseCode.CORRUPT_ENTRY, False)
ProtocolError = _error("ProtocolError", ResponseCode.PROTOCOL_ERROR, False)
NetworkError = _error("NetworkError", ResponseCode.NETWORK_ERROR, True)
Timeout = _error("Timeout", ResponseCode.TIMEOUT, True)
DuplicateSequenceTooOld = _error("DuplicateSequenceTooOld", ResponseCode.DUPLICATE_SEQUENCE_TOO_OLD, False)
MetadataVersionConflict = _error("MetadataVersionConflict", ResponseCode.METADATA_VERSION_CONFLICT, False)
WatchCompacted = _error("WatchCompacted", ResponseCode.WATCH_COMPACTED, False)
NoSuchKey = _error("NoSuchKey", ResponseCode.NO_SUCH_KEY, False)
ConfigChangeInProgress = _error("ConfigChangeInProgress", ResponseCode.CONFIG_CHANGE_IN_PROGRESS, True)
MemberExists = _error("MemberExists", ResponseCode.MEMBER_EXISTS, False)
LearnerNotCaughtUp = _error("LearnerNotCaughtUp", ResponseCode.LEARNER_NOT_CAUGHT_UP, True)
LastVoter = _error("LastVoter", ResponseCode.LAST_VOTER, False)
NewQuorumNotAlive = _error("NewQuorumNotAlive", ResponseCode.NEW_QUORUM_NOT_ALIVE, False)
NodeInUse = _error("NodeInUse", ResponseCode.NODE_IN_USE, False)
GroupExists = _error("GroupExists", ResponseCode.GROUP_EXISTS, False)
LedgerFenced = _error("LedgerFenced", ResponseCode.LEDGER_FENCED, False)
LedgerClosed = _error("LedgerClosed", ResponseCode.LEDGER_CLOSED, False)
NoSuchLedger = _error("NoSuchLedger", ResponseCode.NO_SUCH_LEDGER, False)
NoSuchEntry = _error("NoSuchEntry", ResponseCode.NO_SUCH_ENTRY, False)
BookieReadOnly = _error("BookieReadOnly", ResponseCode.BOOKIE_READ_ONLY, True)
NotEnoughBookies = _error("NotEnoughBookies", ResponseCode.NOT_ENOUGH_BOOKIES, True)
LedgerRecoveryFailed = _error("LedgerRecoveryFailed", ResponseCode.LEDGER_RECOVERY_FAILED, True)
Unauthorized = _error("Unauthorized", ResponseCode.UNAUTHORIZED, False)
FlushSlaveTimeout = _error("FlushSlaveTimeout", ResponseCode.FLUSH_SLAVE_TIMEOUT, True)
SlaveNotAvailable = _error("SlaveNotAvailable", ResponseCode.SLAVE_NOT_AVAILABLE, True)
InSyncReplicasNotEnough = _error("InSyncReplicasNotEnough", ResponseCode.IN_SYNC_REPLICAS_NOT_ENOUGH, True)
IllegalGeneration = _error("IllegalGeneration", ResponseCode.ILLEGAL_GENERATION, False)
TopicNotExist = _error("TopicNotExist", ResponseCode.TOPIC_NOT_EXIST, False)
OffsetTooSmall = _error("OffsetTooSmall", ResponseCode.OFFSET_TOO_SMALL, False)
OffsetTooBig = _error("OffsetTooBig", ResponseCode.OFFSET_TOO_BIG, False)

_BY_CODE: dict[ResponseCode, type[QuorumLogError]] = {
    cls.code: cls
    for cls in (
        NotLeader, UnknownGroup, UnknownMember, DiskFull, DiskError, TermChanged, WaitQuorumAckTimeout,
        LeaderPendingFull, LeaderTransferring, EmptyBatch, IndexOutOfRange, EntryTooLarge, BadRequest,
        CorruptEntry, ProtocolError, NetworkError, Timeout, DuplicateSequenceTooOld, MetadataVersionConflict,
        WatchCompacted, NoSuchKey, ConfigChangeInProgress, MemberExists, LearnerNotCaughtUp, LastVoter,
        NewQuorumNotAlive, NodeInUse, GroupExists, LedgerFenced, LedgerClosed, NoSuchLedger, NoSuchEntry, BookieReadOnly,
        NotEnoughBookies, LedgerRecoveryFailed, Unauthorized, FlushSlaveTimeout, SlaveNotAvailable,
        InSyncReplicasNotEnough, IllegalGeneration, TopicNotExist, OffsetTooSmall, OffsetTooBig,
    )
}
