"""The raft core's contract: events in, one Ready out (etcd raft's shape, DLedger's names).

    ready = core.step(event)

The caller executes a Ready's fields in their order, and must not reorder them:
  1. hard_state       — persist term/vote durably (fsync) BEFORE anything below is sent: a vote granted
                        over the wire must survive a crash.
  2. truncate_after   — drop the local suffix after this index.
  3. appends          — write these entries to the store, then call core.step(Stored(end_index)).
                        Writes need not be durable yet; the runtime flushes (group commit) and then calls
                        core.step(Durable(index)). A follower only acknowledges durable entries, and the
                        leader counts itself in the quorum only up to its own durable index.
  4. messages         — send to peers (they never depend on anything not yet done in 1–3).
  5. completions      — answer client requests.
  6. committed_index  — the new commit point: tell the store (checkpoint) and wake readers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Sequence

from ..codes import ResponseCode
from ..wire.messages import Message

# Defaults: failover well under a second on a LAN. DLedger's are heartbeat 2000 ms and an election after
# 3 missed heartbeats ("leaks"), i.e. ~6 s; a LAN round trip is < 1 ms, so 100/500–1000 ms is ample.
HEARTBEAT_INTERVAL_MS = 100
ELECTION_TIMEOUT_MIN_MS = 500
ELECTION_TIMEOUT_MAX_MS = 1000
assert HEARTBEAT_INTERVAL_MS * 3 <= ELECTION_TIMEOUT_MIN_MS < ELECTION_TIMEOUT_MAX_MS


class Role(str, Enum):
    FOLLOWER = "follower"
    CANDIDATE = "candidate"
    LEADER = "leader"


@dataclass(frozen=True, slots=True)
class RaftConfig:
    node_id: str
    peers: tuple[str, ...]  # the bootstrap voters, self included (the log's membership entries override them)
    group: str = "default"
    heartbeat_interval_ms: int = HEARTBEAT_INTERVAL_MS
    election_timeout_min_ms: int = ELECTION_TIMEOUT_MIN_MS
    election_timeout_max_ms: int = ELECTION_TIMEOUT_MAX_MS
    pre_vote: bool = True
    check_quorum: bool = True
    max_pending_requests: int = 10_000  # DLedger maxPendingRequestsNum
    max_wait_ack_ms: int = 2_500  # DLedger maxWaitAckTimeMs
    max_push_timeout_ms: int = 1_000  # DLedger maxPushTimeOutMs
    max_push_batch_bytes: int = 1024 * 1024  # one APPEND push carries at most this many record bytes
    max_pending_pushes: int = 64  # pushes in flight per follower (DLedger's pending window)
    peer_push_throttle_point: int = 300 * 1024 * 1024  # DLedger: lag in bytes beyond which the quota applies
    peer_push_quota: int = 20 * 1024 * 1024  # DLedger: bytes per second per lagging follower
    learner_push_quota: int = 0  # bytes per second to a lagging learner; 0 = unlimited
    preferred_leader_id: str | None = None
    max_leadership_transfer_wait_index: int = 1_000  # DLedger: transferee must be this close to start
    # A node started to join a running group: it bootstraps with no configuration at all (never campaigns) and
    # learns its group's from the log the leader sends it once it was added as a learner. `peers` is then only
    # where to find the group.
    join: bool = False
    # Quiescence (CockroachDB's, for many groups per node): a leader with nothing to replicate sends one last
    # heartbeat marked quiesce and goes quiet; followers holding its whole log go quiet too. Quiet cores send
    # no heartbeats and their election timers stand still; any proposal or message wakes them, and PeerSilent
    # (the runtime's node-level liveness) wakes a quiet follower whose leader's node went silent.
    quiesce: bool = False

    def __post_init__(self) -> None:
        assert self.join or self.node_id in self.peers, f"{self.node_id} not in peers {self.peers}"
        assert len(set(self.peers)) == len(self.peers)
        assert self.heartbeat_interval_ms * 3 <= self.election_timeout_min_ms <= self.election_timeout_max_ms


@dataclass(frozen=True, slots=True)
class HardState:
    term: int = 0
    voted_for: str | None = None


# -- events ----------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Tick:
    """Time advanced to now_ms (monotonic, caller's clock)."""

    now_ms: int


@dataclass(frozen=True, slots=True)
class Receive:
    message: Message


@dataclass(frozen=True, slots=True)
class ClientAppend:
    """A client's batch: one log write. client_id/seq make it idempotent (client_id 0 = not idempotent)."""

    request_id: int
    bodies: Sequence[bytes]
    client_id: int = 0
    seq: int = -1


@dataclass(frozen=True, slots=True)
class Stored:
    """The runtime wrote the Ready's appends; the store's end_index is now end_index (not yet durable)."""

    end_index: int


@dataclass(frozen=True, slots=True)
class Durable:
    """The store made everything ≤ index durable (after fdatasync, or after write() in flush mode async)."""

    index: int


@dataclass(frozen=True, slots=True)
class StoreFailed:
    """A write or fsync failed (DISK_FULL, DISK_ERROR): a leader fails its pending requests and, for
    DISK_ERROR, gives up leadership rather than heart-beating on while unable to store anything."""

    code: ResponseCode
    reason: str = ""


@dataclass(frozen=True, slots=True)
class StoreRecovered:
    """The disk that refused writes has room again (the runtime's disk guard saw it): the holds a full disk set
    (appends refused, leadership not taken) end now rather than when they run out."""


@dataclass(frozen=True, slots=True)
class TransferLeadership:
    request_id: int
    to: str


@dataclass(frozen=True, slots=True)
class ChangeMembership:
    """Add a learner, promote a learner to voter, or remove a member (membership.Change); answered with a
    Completion once the new configuration's entry is committed (its index as first/last_index)."""

    request_id: int
    change: str  # a membership.Change value
    node_id: str
    address: str = ""  # where a new learner listens (host:port), recorded in the configuration


@dataclass(frozen=True, slots=True)
class PeerSilent:
    """The runtime heard nothing from node_id (on any group) for an election timeout: a quiet follower whose
    leader it is wakes and campaigns; a quiet leader wakes and counts its followers again (check-quorum)."""

    node_id: str


@dataclass(frozen=True, slots=True)
class ClientRead:
    """A linearizable read (raft/read_index.py): completed with SUCCESS and first_index = the read index once
    the leader confirmed its leadership with a quorum; the runtime answers once it applied that index."""

    request_id: int


@dataclass(frozen=True, slots=True)
class SnapshotNeeded:
    """This member's state machine cannot apply on from its log (the log was reset past what it applied): until
    it installed a snapshot (needed=False) it holds no state to lead with, so it takes no leadership — no
    campaign, no TakeLeadership — and a leader in that state hands leadership to a follower."""

    needed: bool


Event = (Tick | Receive | ClientAppend | ClientRead | Stored | Durable | StoreFailed | StoreRecovered
         | TransferLeadership | ChangeMembership | PeerSilent | SnapshotNeeded)


# -- actions ---------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class AppendBatch:
    """Leader: encode and write bodies as entries first_index.. (store.append_batch)."""

    first_index: int
    term: int
    bodies: Sequence[bytes]
    timestamp_ms: int
    producer: tuple[int, int] | None = None  # (client_id, seq)
    noop: bool = False  # a new leader's no-op entry: stored with CHANNEL_NOOP, skipped by readers
    # (a membership entry is a no-op with producer (MEMBERSHIP_PRODUCER_ID, version) and the configuration as body)


@dataclass(frozen=True, slots=True)
class AppendRecords:
    """Follower: write the leader's raw records first_index..last_index (store.append_records)."""

    first_index: int
    last_index: int
    data: bytes | memoryview


@dataclass(frozen=True, slots=True)
class Completion:
    """Answer to a ClientAppend or TransferLeadership. On SUCCESS for an append: entries
    first_index..last_index of `term` are committed."""

    request_id: int
    code: ResponseCode
    first_index: int = -1
    last_index: int = -1
    term: int = -1
    leader_id: str | None = None
    message: str = ""  # why it was refused, for the caller (a membership change's "n9 is not a member")


@dataclass(frozen=True, slots=True)
class Ready:
    hard_state: HardState | None = None
    truncate_after: int | None = None
    appends: tuple[AppendBatch | AppendRecords, ...] = ()
    messages: tuple[Message, ...] = ()
    completions: tuple[Completion, ...] = ()
    committed_index: int | None = None
    # Drop the whole log and start it empty at this index, before the appends (a follower whose log ends below
    # its leader's begin index: store.reset). Never together with truncate_after.
    reset_to: int | None = None
    reset_producers: bytes | None = None  # the leader's producer table, for store.reset(reset_to, ...)

    def __bool__(self) -> bool:
        return bool(self.hard_state or self.truncate_after is not None or self.appends or self.messages
                    or self.completions or self.committed_index is not None or self.reset_to is not None)


EMPTY_READY = Ready()


@dataclass(frozen=True, slots=True)
class NodeStatus:
    node_id: str
    role: Role
    term: int
    leader_id: str | None
    begin_index: int
    end_index: int
    committed_index: int
    watermarks: dict[str, int] = field(default_factory=dict)  # leader only: per-peer durable index
    transferring_to: str | None = None
    voters: tuple[str, ...] = ()
    learners: tuple[str, ...] = ()
    membership_index: int = -1  # the log index of the configuration in force (-1: the bootstrap one)
    quiet: bool = False  # quiescent (raft/quiescence.py)
