"""Peer messages of the replication protocol (DLedger's requests, in our shape).

Pure data: no encoding here (the transport packs them), no behaviour (the raft core makes and reads them).
Every peer message names its sender (`frm`), its receiver (`to`) and the sender's `term`.
"""

from __future__ import annotations

from enum import IntEnum

from ..codes import ResponseCode
from ..format.log_entry import Records
from ..frozen import frozen


class PushType(IntEnum):
    """DLedger's PushEntryRequest.Type."""

    APPEND = 0
    COMMIT = 1
    COMPARE = 2
    TRUNCATE = 3


class VoteResult(IntEnum):
    """DLedger's VoteResponse.RESULT."""

    UNKNOWN = 0
    ACCEPT = 1
    REJECT_UNKNOWN_LEADER = 2
    REJECT_UNEXPECTED_LEADER = 3
    REJECT_EXPIRED_VOTE_TERM = 4
    REJECT_ALREADY_VOTED = 5
    REJECT_ALREADY_HAS_LEADER = 6
    REJECT_TERM_NOT_READY = 7
    REJECT_TERM_SMALL_THAN_LEDGER = 8
    REJECT_EXPIRED_LEDGER_TERM = 9
    REJECT_SMALL_LEDGER_END_INDEX = 10
    REJECT_TAKING_LEADERSHIP = 11


@frozen
class VoteRequest:
    frm: str
    to: str
    term: int  # for a pre-vote: the term the candidate *would* campaign in; nothing is persisted
    last_index: int  # candidate's ledger_end_index
    last_term: int  # candidate's ledger_end_term
    pre_vote: bool = False
    leadership_transfer: bool = False  # sent on the leader's behalf: voters ignore their leader lease


@frozen
class VoteResponse:
    frm: str
    to: str
    term: int
    result: VoteResult
    pre_vote: bool = False

    @property
    def granted(self) -> bool:
        return self.result == VoteResult.ACCEPT


@frozen
class HeartbeatRequest:
    frm: str
    to: str
    term: int
    committed_index: int
    quiesce: bool = False  # the leader goes quiet after this one (raft/quiescence.py)
    read_seq: int = 0  # the leader's latest read round (raft/read_index.py), echoed in the answer


@frozen
class HeartbeatResponse:
    frm: str
    to: str
    term: int
    code: ResponseCode
    read_seq: int = 0  # the request's, echoed


@frozen
class PushRequest:
    """One push from a leader's EntryDispatcher to a follower's EntryHandler.

    COMPARE: does the follower hold entry `prev_index` with `prev_term`?
    TRUNCATE: keep entries ≤ `prev_index` (they match), drop the rest.
    APPEND: `records` hold entries first_index..last_index, which follow prev_index/prev_term.
    COMMIT: nothing to store; carries `committed_index` only.
    """

    frm: str
    to: str
    term: int
    push_type: PushType
    committed_index: int
    prev_index: int = -1
    prev_term: int = -1
    first_index: int = -1
    last_index: int = -2
    records: Records | None = None
    # A TRUNCATE that resets a follower whose log ends below our begin index: our producer table (a producer
    # state snapshot, quorumlog/format/producer_state.py), for the batches retention deleted.
    producers: bytes | None = None

    @property
    def count(self) -> int:
        return self.last_index - self.first_index + 1 if self.records is not None else 0


@frozen
class PushResponse:
    frm: str
    to: str
    term: int
    push_type: PushType
    code: ResponseCode
    index: int  # APPEND: last index now durable on the follower (its watermark); COMPARE/TRUNCATE: prev_index asked
    end_index: int  # follower's ledger_end_index, a hint for COMPARE
    begin_index: int = 0


@frozen
class TakeLeadershipRequest:
    """Leader → transferee: you are caught up; campaign now (DLedger's leadership transfer)."""

    frm: str
    to: str
    term: int


@frozen
class HaReport:
    """Slave → master of a master/slave group (RocketMQ's HAClient report): I hold every byte below `offset`."""

    frm: str
    to: str
    epoch: int
    offset: int
    hello: bool = False  # the first report of a (re)connection: the master starts a new HAConnection for it


@frozen
class HaTransfer:
    """Master → slave: the log's bytes from physical `offset` (none: a heartbeat, or with `reset` set: drop your
    log and restart at `offset`), and the master's confirm offset (what readers may see)."""

    frm: str
    to: str
    epoch: int
    offset: int
    confirm_offset: int
    data: bytes | memoryview = b""
    reset: bool = False


@frozen
class HaEpochs:
    """Master → slave, the answer to a slave's hello (RocketMQ 5's HA handshake): the master's epoch entries
    `(epoch, start_offset)` and its max offset. The slave truncates to the consistent point they give, then
    reports where it is and the transfer begins."""

    frm: str
    to: str
    epoch: int
    max_offset: int
    entries: tuple[tuple[int, int], ...] = ()


Message = (
    VoteRequest | VoteResponse | HeartbeatRequest | HeartbeatResponse | PushRequest | PushResponse
    | TakeLeadershipRequest | HaReport | HaTransfer | HaEpochs
)
