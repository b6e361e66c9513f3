"""Errors carry a ResponseCode and say whether a retry may succeed (aiokafka's shape): one declared class per
code, registered by its code as it is declared, so `QuorumLogError.for_code(code)` gives the class a caller
catches. A protocol error says whose fault it was (h11's split): RemoteProtocolError when the peer sent
garbage (the connection is closed, nothing else), LocalProtocolError when this side tried to send what the
protocol cannot carry (our bug)."""

from __future__ import annotations

from typing import ClassVar

from .codes import ResponseCode


class QuorumLogError(Exception):
    """`outcome_unknown`: a request of the failed call reached a node and its outcome was never learned (no
    answer, or an answer that cannot tell: TIMEOUT, WAIT_QUORUM_ACK_TIMEOUT, TERM_CHANGED), so a write may have
    been applied, whatever the last attempt's error says. False: nothing was applied. A retry of an idempotent
    append (the same client_id and seq) is safe either way."""

    code: ClassVar[ResponseCode] = ResponseCode.UNKNOWN
    retriable: ClassVar[bool] = False
    outcome_unknown: bool = False
    _by_code: ClassVar[dict[ResponseCode, type["QuorumLogError"]]] = {}

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        # A class of this module that declares a code is the one for_code gives for it (once per code). A
        # subclass elsewhere (spark's DataLoss) is a kind of its parent, never what a code maps to.
        if "code" in cls.__dict__ and cls.__module__ == __name__:
            assert cls.code not in QuorumLogError._by_code, f"{cls.code.name} declared twice"
            QuorumLogError._by_code[cls.code] = cls

    def __init__(self, message: str = "", *, leader_id: str | None = None) -> None:
        super().__init__(message or self.code.name)
        self.leader_id = leader_id

    @staticmethod
    def for_code(code: int, message: str = "", *, leader_id: str | None = None) -> "QuorumLogError":
        rc = ResponseCode.of(code)
        cls = QuorumLogError._by_code.get(rc)
        if cls is None:  # a code without a class of its own (or from a newer peer): the base, with that code
            err = QuorumLogError(message or rc.name, leader_id=leader_id)
            err.code = rc  # type: ignore[misc]  (an instance attribute over the ClassVar, for this one only)
            return err
        return cls(message or rc.name, leader_id=leader_id)


class NotLeader(QuorumLogError):
    """This node does not lead the group; `leader_id` names the one it knows, if any."""
    code = ResponseCode.NOT_LEADER
    retriable = True


class UnknownGroup(QuorumLogError):
    """No group of that name is served by the node asked."""
    code = ResponseCode.UNKNOWN_GROUP


class UnknownMember(QuorumLogError):
    """The node, member or consumer named is not one the group knows."""
    code = ResponseCode.UNKNOWN_MEMBER


class DiskFull(QuorumLogError):
    """Refused before anything was written: the disk guard found too little space."""
    code = ResponseCode.DISK_FULL


class DiskError(QuorumLogError):
    """Refused before anything was written: the disk returned an error."""
    code = ResponseCode.DISK_ERROR


class TermChanged(QuorumLogError):
    """The leader's term moved on while the request waited."""
    code = ResponseCode.TERM_CHANGED
    retriable = True


class WaitQuorumAckTimeout(QuorumLogError):
    """Written, but not acknowledged by a quorum in time: the outcome is unknown, retry idempotently."""
    code = ResponseCode.WAIT_QUORUM_ACK_TIMEOUT
    retriable = True


class LeaderPendingFull(QuorumLogError):
    """The leader has too many requests waiting: back off and retry."""
    code = ResponseCode.LEADER_PENDING_FULL
    retriable = True


class LeaderTransferring(QuorumLogError):
    """Leadership is being handed over: retry at the new leader."""
    code = ResponseCode.LEADER_TRANSFERRING
    retriable = True


class EmptyBatch(QuorumLogError):
    """A request with no entries."""
    code = ResponseCode.REQUEST_WITH_EMPTY_BODYS


class IndexOutOfRange(QuorumLogError):
    """An index outside the log's [begin, end)."""
    code = ResponseCode.INDEX_OUT_OF_RANGE


class NotCommittedYet(IndexOutOfRange):
    """`get(i)`: i is past the committed index (not written yet, or not yet acknowledged by a majority)."""


class IndexGap(IndexOutOfRange):
    """`get(i)`: i is committed but holds no entry of a writer: a new leader's no-op or a membership change
    (indexes can have gaps, as Kafka's offsets do around control records)."""


class RemovedByRetention(IndexOutOfRange):
    """`get(i)`: i is before the log's begin index: retention removed it."""


class EntryTooLarge(QuorumLogError):
    """An entry or batch over its size limit."""
    code = ResponseCode.ENTRY_TOO_LARGE


class BadRequest(QuorumLogError):
    """The request is malformed or names impossible values."""
    code = ResponseCode.BAD_REQUEST


class CorruptEntry(QuorumLogError):
    """A record failed its CRC."""
    code = ResponseCode.CORRUPT_ENTRY


class ProtocolError(QuorumLogError):
    """Frames that break the wire protocol: see LocalProtocolError and RemoteProtocolError."""
    code = ResponseCode.PROTOCOL_ERROR


class RemoteProtocolError(ProtocolError):
    """The peer sent bytes the protocol does not allow: its connection is closed, nothing else is touched."""


class LocalProtocolError(ProtocolError, ValueError):
    """This side tried to send what the protocol cannot carry (a field out of its wire range): a bug here.
    Also a ValueError, what encoders raised before it existed."""


class NetworkError(QuorumLogError):
    """The connection failed or closed."""
    code = ResponseCode.NETWORK_ERROR
    retriable = True


class Timeout(QuorumLogError):
    """No answer in time."""
    code = ResponseCode.TIMEOUT
    retriable = True


class DuplicateSequenceTooOld(QuorumLogError):
    """An idempotent retry older than the batches remembered for its client."""
    code = ResponseCode.DUPLICATE_SEQUENCE_TOO_OLD


class MetadataVersionConflict(QuorumLogError):
    """A compare-and-set lost: the key's version is not the one expected; `current_version` is the one found
    (0: no such key; None: not told, e.g. a conflict inside a multi-step operation)."""
    code = ResponseCode.METADATA_VERSION_CONFLICT

    def __init__(self, message: str = "", *, leader_id: str | None = None, current_version: int | None = None):
        super().__init__(message, leader_id=leader_id)
        self.current_version = current_version


class WatchCompacted(QuorumLogError):
    """A watch from a revision older than the kept history: list again, then watch."""
    code = ResponseCode.WATCH_COMPACTED


class NoSuchKey(QuorumLogError):
    """No such key in the metadata store."""
    code = ResponseCode.NO_SUCH_KEY


class ConfigChangeInProgress(QuorumLogError):
    """Another membership change has not finished."""
    code = ResponseCode.CONFIG_CHANGE_IN_PROGRESS
    retriable = True


class MemberExists(QuorumLogError):
    """The member is in the group already."""
    code = ResponseCode.MEMBER_EXISTS


class LearnerNotCaughtUp(QuorumLogError):
    """The learner does not hold every committed entry yet."""
    code = ResponseCode.LEARNER_NOT_CAUGHT_UP
    retriable = True


class LastVoter(QuorumLogError):
    """Removing it would leave the group without a voter."""
    code = ResponseCode.LAST_VOTER


class NewQuorumNotAlive(QuorumLogError):
    """The configuration asked for could not reach its own quorum."""
    code = ResponseCode.NEW_QUORUM_NOT_ALIVE


class NodeInUse(QuorumLogError):
    """The node still hosts groups or ledger fragments."""
    code = ResponseCode.NODE_IN_USE


class GroupExists(QuorumLogError):
    """A group of that name exists."""
    code = ResponseCode.GROUP_EXISTS


class LedgerFenced(QuorumLogError):
    """The ledger was fenced by a recovery: this writer may add no more."""
    code = ResponseCode.LEDGER_FENCED


class LedgerClosed(QuorumLogError):
    """The ledger is closed."""
    code = ResponseCode.LEDGER_CLOSED


class NoSuchLedger(QuorumLogError):
    """No such ledger."""
    code = ResponseCode.NO_SUCH_LEDGER


class NoSuchEntry(QuorumLogError):
    """No such entry in the ledger."""
    code = ResponseCode.NO_SUCH_ENTRY


class BookieReadOnly(QuorumLogError):
    """The bookie takes no adds (disk over its threshold)."""
    code = ResponseCode.BOOKIE_READ_ONLY
    retriable = True


class NotEnoughBookies(QuorumLogError):
    """Too few writable bookies for the ensemble."""
    code = ResponseCode.NOT_ENOUGH_BOOKIES
    retriable = True


class LedgerRecoveryFailed(QuorumLogError):
    """Recovery could not hear enough bookies."""
    code = ResponseCode.LEDGER_RECOVERY_FAILED
    retriable = True


class Unauthorized(QuorumLogError):
    """The token is missing or wrong."""
    code = ResponseCode.UNAUTHORIZED


class FlushSlaveTimeout(QuorumLogError):
    """Written, but not held by enough in-sync members in time (the entry stays)."""
    code = ResponseCode.FLUSH_SLAVE_TIMEOUT
    retriable = True


class SlaveNotAvailable(QuorumLogError):
    """No slave is connected to the master."""
    code = ResponseCode.SLAVE_NOT_AVAILABLE
    retriable = True


class InSyncReplicasNotEnough(QuorumLogError):
    """The SyncStateSet is smaller than min_in_sync_replicas."""
    code = ResponseCode.IN_SYNC_REPLICAS_NOT_ENOUGH
    retriable = True


class IllegalGeneration(QuorumLogError):
    """A consumer group's generation moved on: rejoin."""
    code = ResponseCode.ILLEGAL_GENERATION


class TopicNotExist(QuorumLogError):
    """No such topic."""
    code = ResponseCode.TOPIC_NOT_EXIST


class OffsetTooSmall(QuorumLogError):
    """A queue offset below the queue's first."""
    code = ResponseCode.OFFSET_TOO_SMALL


class OffsetTooBig(QuorumLogError):
    """A queue offset beyond the queue's end."""
    code = ResponseCode.OFFSET_TOO_BIG
