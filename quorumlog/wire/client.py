"""Client requests and responses (client ↔ any node). Pure data; the transport packs them.

Every request carries a request_id chosen by the client, echoed in its response, so many requests can be
in flight on one connection (pipelining).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from ..codes import ResponseCode
from ..format.log_entry import Records
from ..frozen import frozen


@frozen
class AppendRequest:
    request_id: int
    bodies: tuple[bytes, ...]
    client_id: int = 0  # 0: not idempotent
    seq: int = -1  # per-client batch sequence, increasing


@frozen
class AppendResponse:
    request_id: int
    code: ResponseCode
    leader_id: str | None = None  # set with NOT_LEADER when known
    first_index: int = -1
    last_index: int = -1
    term: int = -1
    message: str = ""
    # a master/slave group's master: each entry's physical offset (where its record begins in the log, as
    # RocketMQ's wroteOffset); empty from a Raft group
    offsets: tuple[int, ...] = ()


@frozen
class ReadRequest:
    """Committed entries from `start` (≤ end when end ≥ 0), at most max_bytes (at least one entry).

    wait_ms > 0: if nothing is committed at `start` yet, hold the request up to wait_ms and answer as soon
    as something commits (long-poll for `read --follow`), never by sleeping in a loop.
    linearizable: the leader first confirms with a quorum that it still leads (ReadIndex), so the answer holds
    every entry committed before the request was sent; a follower refuses it with NOT_LEADER.
    """

    request_id: int
    start: int
    end: int = -1
    max_bytes: int = 1024 * 1024
    wait_ms: int = 0
    linearizable: bool = False


@frozen
class ReadResponse:
    request_id: int
    code: ResponseCode
    begin_index: int = 0
    committed_index: int = -1
    records: Records | None = None  # raw stored records, as the store holds them
    message: str = ""
    # a master/slave group's master: this reader is so far behind (more than access_message_in_memory_max_ratio
    # of RAM) that its next reads should go to this slave (RocketMQ's suggestPullingFromSlave)
    suggest_slave: str | None = None


@frozen
class StatusRequest:
    request_id: int


@frozen
class StatusResponse:
    request_id: int
    code: ResponseCode
    status_json: bytes = b"{}"  # the same document as HTTP /status


@frozen
class TransferLeaderRequest:
    request_id: int
    to: str


@frozen
class TransferLeaderResponse:
    request_id: int
    code: ResponseCode
    leader_id: str | None = None
    message: str = ""


@frozen
class MemberChangeRequest:
    """Add a learner (with the address its peers reach it at), promote a learner, or remove a member
    (raft/membership.Change values); answered once the new configuration is committed."""

    request_id: int
    change: str
    node_id: str
    address: str = ""  # host:port, for add_learner


@frozen
class MemberChangeResponse:
    request_id: int
    code: ResponseCode
    leader_id: str | None = None
    index: int = -1  # the configuration entry's log index
    message: str = ""


@frozen
class GroupRequest:
    """Node administration of the groups it hosts (sent on a connection opened for the group NODE_LINK):
    op "create" (body {group, peers: {id: address}, preferred_leader_id}), "delete" (body {group}) or "list"
    (body {}). The body is JSON: these are rare, small and meant to grow."""

    request_id: int
    op: str
    body: bytes = b"{}"


@frozen
class GroupResponse:
    request_id: int
    code: ResponseCode
    body: bytes = b"{}"  # JSON: "list" answers {"groups": [status of each group here]}
    message: str = ""


@frozen
class KvItem:
    """A key as a list or get answers it, or one change as a watch does (value None: deleted)."""

    key: str
    value: bytes | None
    version: int
    create_revision: int
    mod_revision: int


@frozen
class KvRequest:
    """The metadata store (meta/kv.py) of the group the connection named, normally `_meta`. op "get" (key),
    "list" (key = prefix), "put" (key, value, expected_version), "delete" (key, expected_version), "watch"
    (key = prefix; changes after `revision`, held up to wait_ms while there are none) and "snapshot" (the
    state machine's snapshot, for a member whose log was reset past what it applied), or "snapshot_chunk"
    (the same in pieces: revision = its index or -1, expected_version = byte offset; server/services/kv.py).
    expected_version -1: unconditional; 0: the key must not exist."""

    request_id: int
    op: str
    key: str = ""
    value: bytes = b""
    expected_version: int = -1
    revision: int = 0
    wait_ms: int = 0
    client_id: int = 0  # put/delete: the client's producer id and sequence, so a retry is applied once
    seq: int = -1


@frozen
class KvResponse:
    request_id: int
    code: ResponseCode
    leader_id: str | None = None
    version: int = 0  # put/delete: the key's version after it (or as found, on METADATA_VERSION_CONFLICT)
    revision: int = 0  # the store's revision the answer reflects (watch: resume after it)
    items: tuple[KvItem, ...] = ()
    data: bytes = b""  # snapshot
    message: str = ""


@frozen
class TopicRequest:
    """Topic messages on a group that runs the topic dispatcher (quorumlog/topic/). op "send": `bodies` are
    encoded messages (topic/message.py; each names its topic and queue, which may differ: `topic` and
    `queue_id` only label the request) appended as one batch with the client's producer id and sequence (a
    retry is stored once); answered once dispatched, with each message's queue offset. op "pull": up to
    `max_messages` of queue (`topic`, `queue_id`) from queue offset `offset` whose tag is one of `tags`
    ("a||b"; "" or "*": all), held up to wait_ms while there are none (long polling). op "offsets": the
    queue's min and max offsets."""

    request_id: int
    op: str
    topic: str = ""
    queue_id: int = 0
    offset: int = 0
    max_messages: int = 0
    wait_ms: int = 0
    client_id: int = 0
    seq: int = -1
    tags: str = ""
    bodies: tuple[bytes, ...] = ()


class PulledMessage(NamedTuple):  # (a tuple: a pull carries thousands)
    queue_offset: int
    index: int  # the entry's log index
    term: int  # and its term
    store_timestamp_ms: int
    body: bytes  # the encoded message (topic/message.py)


_PULLED_HEAD = struct.Struct(">qqqqq")  # queue_offset, index, term, store_timestamp_ms, size


class PackedMessages:
    """Pulled messages as they travel: `head`, every message's (queue_offset, index, term, store_timestamp_ms,
    size) as big-endian int64s, and `blob`, their bodies back to back. The node packs them in C and Spark's
    reader unpacks them the same way, with no object per message; iterating gives PulledMessages. Both may be
    views (of the node's pull buffers, or of a received frame: nothing writes either again), not bytes."""

    __slots__ = ("count", "head", "blob")

    def __init__(self, count: int, head: bytes, blob: bytes) -> None:
        self.count, self.head, self.blob = count, head, blob

    @classmethod
    def of(cls, messages) -> "PackedMessages":
        messages = list(messages)
        return cls(len(messages), b"".join(_PULLED_HEAD.pack(m.queue_offset, m.index, m.term, m.store_timestamp_ms,
                                                            len(m.body)) for m in messages),
                   b"".join(m.body for m in messages))

    def __len__(self) -> int:
        return self.count

    def __iter__(self):
        blob, pos = self.blob if type(self.blob) is bytes else bytes(self.blob), 0  # (bodies as bytes)
        for q, index, term, ts, size in _PULLED_HEAD.iter_unpack(self.head):
            yield PulledMessage(q, index, term, ts, blob[pos:pos + size])
            pos += size

    def __getitem__(self, i: int) -> PulledMessage:
        return list(self)[i]

    def __eq__(self, other: object) -> bool:
        try:
            return list(self) == list(other)  # type: ignore[call-overload]
        except TypeError:
            return NotImplemented

    def __repr__(self) -> str:
        return f"PackedMessages({list(self)!r})"


@frozen
class TopicResponse:
    request_id: int
    code: ResponseCode
    leader_id: str | None = None
    min_offset: int = 0  # the queue's first kept offset
    max_offset: int = 0  # one past its last message
    next_offset: int = 0  # pull: where the next pull starts
    offsets: tuple[int, ...] = ()  # send: each message's queue offset
    messages: "tuple[PulledMessage, ...] | PackedMessages" = ()
    message: str = ""
    suggest_slave: str | None = None  # pull: as ReadResponse's (a master/slave group's master, a consumer far behind)


@frozen
class ConsumerGroupRequest:
    """A consumer group's coordinator, on the `_meta` group's leader (server/services/consumer_groups.py): op "join"
    ({group, member, topics, session_timeout_ms}), "heartbeat" ({group, member, generation}), "commit"
    ({group, member, generation, offsets: {"topic/queue": offset}}), "leave" ({group, member}), "describe"
    ({group}). The body is JSON: these are a few per consumer per second."""

    request_id: int
    op: str
    body: bytes = b"{}"


@frozen
class ConsumerGroupResponse:
    request_id: int
    code: ResponseCode
    leader_id: str | None = None
    body: bytes = b"{}"  # JSON: join/heartbeat {generation, queues: [[topic, queue], ...]}; describe {members, ...}
    message: str = ""


@frozen
class HaControllerRequest:
    """The master/slave groups' controller, on the `_meta` group's leader (server/services/ha_controller.py): op
    "heartbeat" ({group, member, epoch, max_offset, restarted}), "alter_sync_state_set" ({group, master, epoch,
    members}), "elect" ({group, to}), "describe" ({group}). JSON, like the consumer groups' coordinator's."""

    request_id: int
    op: str
    body: bytes = b"{}"


@frozen
class HaControllerResponse:
    request_id: int
    code: ResponseCode
    leader_id: str | None = None
    body: bytes = b"{}"  # JSON: {master, epoch, sync_state_set, lease_ms}
    message: str = ""


ClientRequest = (AppendRequest | ReadRequest | StatusRequest | TransferLeaderRequest | MemberChangeRequest
                 | GroupRequest | KvRequest | TopicRequest | ConsumerGroupRequest | HaControllerRequest)
ClientResponse = (AppendResponse | ReadResponse | StatusResponse | TransferLeaderResponse | MemberChangeResponse
                  | GroupResponse | KvResponse | TopicResponse | ConsumerGroupResponse | HaControllerResponse)
