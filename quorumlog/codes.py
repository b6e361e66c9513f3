"""Response codes: DLedger's names and numbers (DLedgerResponseCode), ours above 1000."""

from __future__ import annotations

from enum import IntEnum


class ResponseCode(IntEnum):
    # DLedger's codes, same names and numbers.
    UNKNOWN = -1
    SUCCESS = 200
    TIMEOUT = 300
    METADATA_ERROR = 301
    NETWORK_ERROR = 302
    UNSUPPORTED = 303
    UNKNOWN_GROUP = 400
    UNKNOWN_MEMBER = 401
    UNEXPECTED_MEMBER = 402
    EXPIRED_TERM = 403
    NOT_LEADER = 404
    NOT_FOLLOWER = 405
    INCONSISTENT_STATE = 406
    INCONSISTENT_TERM = 407
    INCONSISTENT_INDEX = 408
    INCONSISTENT_LEADER = 409
    INDEX_OUT_OF_RANGE = 410
    UNEXPECTED_ARGUMENT = 411
    REPEATED_REQUEST = 412
    REPEATED_PUSH = 413
    DISK_ERROR = 414
    DISK_FULL = 415
    TERM_NOT_READY = 416
    FALL_BEHIND_TOO_MUCH = 417
    TAKE_LEADERSHIP_FAILED = 418
    INDEX_LESS_THAN_LOCAL_BEGIN = 419
    REQUEST_WITH_EMPTY_BODYS = 420
    INTERNAL_ERROR = 500
    TERM_CHANGED = 501
    WAIT_QUORUM_ACK_TIMEOUT = 502
    LEADER_PENDING_FULL = 503
    ILLEGAL_MEMBER_STATE = 504
    LEADER_NOT_READY = 505
    LEADER_TRANSFERRING = 506

    # quorumlog's own codes.
    ENTRY_TOO_LARGE = 1001
    BAD_REQUEST = 1002
    UNAUTHORIZED = 1003
    CORRUPT_ENTRY = 1004
    PROTOCOL_ERROR = 1005
    DUPLICATE_SEQUENCE_TOO_OLD = 1006  # an idempotent retry older than the dedup window
    # The metadata store (`_meta`): a compare-and-set lost; a watch from a revision no longer kept; `kv get` of
    # an absent key (the CLI's error: the client's kv_get returns None).
    METADATA_VERSION_CONFLICT = 1100
    WATCH_COMPACTED = 1101
    NO_SUCH_KEY = 1102
    # Membership and placement (docs/interfaces.md "Nodes, groups, members"): a change while another is uncommitted
    # (or before the leader committed an entry of its term: retry), an id in use or retired, a learner not yet
    # holding the committed log, removing the last voter, a change whose new majority is not live right now.
    CONFIG_CHANGE_IN_PROGRESS = 1200
    MEMBER_EXISTS = 1201
    LEARNER_NOT_CAUGHT_UP = 1202
    LAST_VOTER = 1203
    NEW_QUORUM_NOT_ALIVE = 1204
    NODE_IN_USE = 1205
    GROUP_EXISTS = 1206
    # Ledgers (docs/interfaces.md "Ledgers"; BookKeeper's BKException names): a fenced ledger refuses its old
    # writer; adds to a closed ledger; no such ledger / entry on a bookie; a bookie whose disk passed its
    # threshold takes no new adds; too few bookies for an ensemble; a recovery that could not decide the end.
    LEDGER_FENCED = 1300
    LEDGER_CLOSED = 1301
    NO_SUCH_LEDGER = 1302
    NO_SUCH_ENTRY = 1303
    BOOKIE_READ_ONLY = 1304
    NOT_ENOUGH_BOOKIES = 1305
    LEDGER_RECOVERY_FAILED = 1306
    # Master/slave groups (docs/interfaces.md "Master/slave groups"; RocketMQ's PutMessageStatus names): too few
    # slave acks within slave_timeout_ms; no slave connected; fewer in-sync members than min_in_sync_replicas.
    FLUSH_SLAVE_TIMEOUT = 1400
    SLAVE_NOT_AVAILABLE = 1401
    IN_SYNC_REPLICAS_NOT_ENOUGH = 1402
    # Topics and consumer groups (docs/interfaces.md "Topics, queues and consumer groups"): a pull or commit from
    # a generation that is no longer current (Kafka's name); a topic that does not exist (RocketMQ's);
    # a consumer offset below what retention kept (RocketMQ's OFFSET_TOO_SMALL); a pull from beyond the end
    # of a queue whose leader holds everything committed (RocketMQ's OFFSET_OVERFLOW_BADLY: a bad commit).
    ILLEGAL_GENERATION = 1500
    TOPIC_NOT_EXIST = 1501
    OFFSET_TOO_SMALL = 1502
    OFFSET_TOO_BIG = 1503

    @classmethod
    def of(cls, value: int) -> "ResponseCode":
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN
