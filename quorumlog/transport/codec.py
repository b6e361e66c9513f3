"""Hand-packed encoding of every peer and client message (struct; no pickle or json on the hot path).

    encode(msg) -> list of buffers: the frame header + message header as one bytes object, then the bodies
                   or Records chunks exactly as given (for transport.writelines: no per-entry copy).
    decode(kind, payload) -> msg: Records come back as one memoryview chunk of the payload; their
                   first/last index and size come from the header, never from parsing records.

Layout of every payload: a fixed struct, then variable fields in a fixed order — short strings
(u16 length, 0xFFFF = None), free text (u32 length), and last the raw bytes (records, bodies, JSON).
Integers are big-endian; indexes and terms i64, request and client ids u64, codes i32.

Any malformed payload raises RemoteProtocolError and nothing else: the decoder must survive garbage from the
network. Record *contents* are not checked here (the store checks magic, sizes, CRCs on append).
"""

from __future__ import annotations

import array
import struct
import sys
from typing import TYPE_CHECKING, Any, Callable

from ..codes import ResponseCode
from ..errors import CorruptEntry, LocalProtocolError, ProtocolError, RemoteProtocolError
from ..format.log_entry import Records
from ..format.producer_state import decode_snapshot
from ..wire.client import (
    AppendRequest, AppendResponse, ClientRequest, ClientResponse, ReadRequest, ReadResponse, StatusRequest,
    StatusResponse, TransferLeaderRequest, TransferLeaderResponse, MemberChangeRequest, MemberChangeResponse, GroupRequest,
    GroupResponse, KvItem, KvRequest, KvResponse, PackedMessages, TopicRequest, TopicResponse, ConsumerGroupRequest,
    ConsumerGroupResponse, HaControllerRequest, HaControllerResponse,
)
from .frames import FRAME_HEADER
from .kinds import Kind

if TYPE_CHECKING:
    from ..wire.ledger import BookieOp, BookieOpRequest, BookieOpResponse
    from ..wire.messages import (
        HaEpochs, HaReport, HaTransfer, HeartbeatRequest, HeartbeatResponse, Message, PushRequest, PushResponse,
        PushType, TakeLeadershipRequest, VoteRequest, VoteResponse, VoteResult,
    )

Buffer = bytes | bytearray | memoryview
AnyMessage = Any  # a peer Message, a ClientRequest or a ClientResponse

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_NONE_STR = 0xFFFF
MAX_SHORT_STR_BYTES = 0xFFFE
MAX_APPEND_BODIES = 1 << 20  # a sanity bound on one request's entry count (the runtime enforces its own)

_VOTE_REQ = struct.Struct(">qqqB")  # term, last_index, last_term, flags(pre_vote, leadership_transfer)
_VOTE_RESP = struct.Struct(">qBB")  # term, result, pre_vote
_HB_REQ = struct.Struct(">qq")  # term, committed_index
_HB_RESP = struct.Struct(">qi")  # term, code; optional read round u64
_HB_QUIESCE, _HB_READ_SEQ = 0x01, 0x02  # a heartbeat's optional flags byte
# term, push_type, committed_index, prev_index, prev_term, first_index, last_index,
# flags, records.first_index, records.last_index, records.size_bytes
_PUSH_REQ = struct.Struct(">qBqqqqqBqqQ")
_PUSH_HAS_RECORDS, _PUSH_HAS_PRODUCERS = 0x01, 0x02  # the flags byte (was has_records: 0 or 1)
_PUSH_RESP = struct.Struct(">qBiqqq")  # term, push_type, code, index, end_index, begin_index
_TAKE = struct.Struct(">q")  # term
_HA_REPORT = struct.Struct(">qqB")  # epoch, offset, hello
_HA_TRANSFER = struct.Struct(">qqqBI")  # epoch, offset, confirm offset, reset, data size
_HA_EPOCHS = struct.Struct(">qqI")  # epoch, max offset, entries; then (epoch, start offset) pairs
_HA_EPOCH_ENTRY = struct.Struct(">qq")
_APPEND_REQ = struct.Struct(">QQqI")  # request_id, client_id, seq, count; then count u32 sizes, then bodies
_APPEND_RESP = struct.Struct(">Qiqqq")  # request_id, code, first_index, last_index, term
_READ_REQ = struct.Struct(">Qqqqq")  # request_id, start, end, max_bytes, wait_ms; then an optional flags byte
_READ_LINEARIZABLE = 1
# request_id, code, begin_index, committed_index, has_records, records.first/last/size_bytes
_READ_RESP = struct.Struct(">QiqqBqqQ")
_STATUS_REQ = struct.Struct(">Q")
_STATUS_RESP = struct.Struct(">QiI")  # request_id, code, json size
_TRANSFER_REQ = struct.Struct(">Q")
_TRANSFER_RESP = struct.Struct(">Qi")
_MEMBER_REQ = struct.Struct(">Q")
_MEMBER_RESP = struct.Struct(">Qiq")
_GROUP_REQ = struct.Struct(">QI")  # request_id, body size; then op (short), body
# request_id, expected_version, revision, wait_ms, client_id, seq, value size; then op, key, value
_KV_REQ = struct.Struct(">QqqqQqI")
# request_id, code, version, revision, item count, data size; leader_id, message, items, data
_KV_RESP = struct.Struct(">QiqqII")
_KV_ITEM = struct.Struct(">qqqBI")  # version, create_revision, mod_revision, has_value, value size; key, value
# request_id, op, flags, ledger_id, entry_id, lac, data size; then data
_BOOKIE_REQ = struct.Struct(">QBBQqqI")
# request_id, code, op, ledger_id, entry_id, lac, data size; then data, message (text)
_BOOKIE_RESP = struct.Struct(">QiBQqqI")
_GROUP_RESP = struct.Struct(">QiI")  # request_id, code, body size; then body, message (text)
# request_id, queue_id, offset, max_messages, wait_ms, client_id, seq, body count; op, topic, tags, bodies
_TOPIC_REQ = struct.Struct(">QiqiiQqI")
# request_id, code, min_offset, max_offset, next_offset, offset count, message count; leader, message, ...
_TOPIC_RESP = struct.Struct(">QiqqqII")
_LITTLE_ENDIAN_HOST = sys.byteorder == "little"
# pulled messages, columnar: every message's queue_offset, index, term, store_timestamp_ms, body size as >q,
# then every body (one pack and one unpack per response, not one per message)
_PULLED_FIELDS = 5
_CG_REQ = struct.Struct(">QI")  # request_id, body size; then op (short), body (JSON)
_CG_RESP = struct.Struct(">QiI")  # request_id, code, body size; then leader_id (short), body, message (text)

_FLAG_PRE_VOTE = 1
_FLAG_LEADERSHIP_TRANSFER = 2


# -- small helpers -----------------------------------------------------------------------------------
def _short(s: str | None) -> bytes:
    if s is None:
        return b"\xff\xff"
    raw = s.encode("utf-8")
    if len(raw) > MAX_SHORT_STR_BYTES:
        raise LocalProtocolError(f"string too long to encode ({len(raw)} bytes)")
    return _U16.pack(len(raw)) + raw


def _text(s: str) -> bytes:
    raw = s.encode("utf-8")
    return _U32.pack(len(raw)) + raw


class _Reader:
    """Reads variable fields after a payload's fixed struct; every overrun is a ProtocolError."""

    __slots__ = ("view", "pos")

    def __init__(self, view: memoryview, pos: int) -> None:
        self.view = view
        self.pos = pos

    def take(self, n: int) -> memoryview:
        end = self.pos + n
        if n < 0 or end > len(self.view):
            raise RemoteProtocolError(f"payload truncated: need {n} bytes at {self.pos}, have {len(self.view)}")
        out = self.view[self.pos:end]
        self.pos = end
        return out

    def short(self) -> str | None:
        (n,) = _U16.unpack_from(self.take(2))
        if n == _NONE_STR:
            return None
        return str(self.take(n), "utf-8")

    def short_str(self) -> str:
        s = self.short()
        if s is None:
            raise RemoteProtocolError("missing required string")
        return s

    def text(self) -> str:
        (n,) = _U32.unpack_from(self.take(4))
        return str(self.take(n), "utf-8")

    def end(self) -> None:
        if self.pos != len(self.view):
            raise RemoteProtocolError(f"{len(self.view) - self.pos} trailing bytes in payload")


def _frame(kind: Kind, head: bytes, tail: list[Buffer] | None = None, tail_size: int = 0) -> list[Buffer]:
    size = len(head) + tail_size
    out: list[Buffer] = [FRAME_HEADER.pack(size + 1, kind) + head]
    if tail:
        out.extend(tail)
    return out


def _chunks_of(records: Records | None) -> tuple[list[Buffer], int]:
    if records is None:
        return [], 0
    chunks = [c for c in records.chunks if len(c)]
    size = sum(memoryview(c).nbytes for c in chunks)
    assert size == records.size_bytes, f"Records.size_bytes {records.size_bytes} != chunk bytes {size}"
    return chunks, size


def _records(has: int, first: int, last: int, size: int, r: _Reader) -> Records | None:
    if not has:
        if first or last or size:
            raise RemoteProtocolError("record fields set without records")
        return None
    if size > len(r.view) - r.pos:
        raise RemoteProtocolError(f"records truncated: header says {size} bytes, {len(r.view) - r.pos} left")
    view = r.take(size)
    return Records(first, last, (view,) if size else (), size)


# -- encoders ----------------------------------------------------------------------------------------
def _enc_vote_req(m: VoteRequest) -> list[Buffer]:
    flags = (_FLAG_PRE_VOTE if m.pre_vote else 0) | (_FLAG_LEADERSHIP_TRANSFER if m.leadership_transfer else 0)
    return _frame(Kind.VOTE_REQUEST, _VOTE_REQ.pack(m.term, m.last_index, m.last_term, flags)
                  + _short(m.frm) + _short(m.to))


def _enc_vote_resp(m: VoteResponse) -> list[Buffer]:
    return _frame(Kind.VOTE_RESPONSE, _VOTE_RESP.pack(m.term, m.result, 1 if m.pre_vote else 0)
                  + _short(m.frm) + _short(m.to))


def _enc_hb_req(m: HeartbeatRequest) -> list[Buffer]:
    # Optional trailing fields, absent when unset so a plain heartbeat is what protocol 1 sent: a flags byte
    # (quiesce, read round present) and the read round (u64) if flagged.
    flags = (_HB_QUIESCE if m.quiesce else 0) | (_HB_READ_SEQ if m.read_seq else 0)
    tail = b"" if not flags else bytes((flags,)) + (_U64.pack(m.read_seq) if m.read_seq else b"")
    return _frame(Kind.HEARTBEAT_REQUEST, _HB_REQ.pack(m.term, m.committed_index) + _short(m.frm) + _short(m.to)
                  + tail)


def _enc_hb_resp(m: HeartbeatResponse) -> list[Buffer]:
    return _frame(Kind.HEARTBEAT_RESPONSE, _HB_RESP.pack(m.term, m.code) + _short(m.frm) + _short(m.to)
                  + (_U64.pack(m.read_seq) if m.read_seq else b""))


def _enc_push_req(m: PushRequest) -> list[Buffer]:
    chunks, size = _chunks_of(m.records)
    rec = m.records
    flags = (_PUSH_HAS_RECORDS if rec is not None else 0) | (_PUSH_HAS_PRODUCERS if m.producers is not None else 0)
    head = _PUSH_REQ.pack(m.term, m.push_type, m.committed_index, m.prev_index, m.prev_term, m.first_index,
                          m.last_index, flags, rec.first_index if rec else 0,
                          rec.last_index if rec else 0, size) + _short(m.frm) + _short(m.to)
    if m.producers is not None:
        head += _U32.pack(len(m.producers)) + m.producers
    return _frame(Kind.PUSH_REQUEST, head, chunks, size)


def _enc_push_resp(m: PushResponse) -> list[Buffer]:
    return _frame(Kind.PUSH_RESPONSE, _PUSH_RESP.pack(m.term, m.push_type, m.code, m.index, m.end_index,
                                                      m.begin_index) + _short(m.frm) + _short(m.to))


def _enc_take(m: TakeLeadershipRequest) -> list[Buffer]:
    return _frame(Kind.TAKE_LEADERSHIP_REQUEST, _TAKE.pack(m.term) + _short(m.frm) + _short(m.to))


def _enc_ha_report(m: HaReport) -> list[Buffer]:
    return _frame(Kind.HA_REPORT, _HA_REPORT.pack(m.epoch, m.offset, m.hello) + _short(m.frm) + _short(m.to))


def _enc_ha_transfer(m: HaTransfer) -> list[Buffer]:
    size = memoryview(m.data).nbytes
    head = _HA_TRANSFER.pack(m.epoch, m.offset, m.confirm_offset, m.reset, size) + _short(m.frm) + _short(m.to)
    return _frame(Kind.HA_TRANSFER, head, [m.data] if size else None, size)


def _enc_ha_epochs(m: HaEpochs) -> list[Buffer]:
    head = _HA_EPOCHS.pack(m.epoch, m.max_offset, len(m.entries)) + b"".join(
        _HA_EPOCH_ENTRY.pack(e, s) for e, s in m.entries)
    return _frame(Kind.HA_EPOCHS, head + _short(m.frm) + _short(m.to))


def _enc_append_req(m: AppendRequest) -> list[Buffer]:
    bodies = m.bodies
    n = len(bodies)
    sizes = [len(b) for b in bodies]  # byte buffers: len is their size
    head = _APPEND_REQ.pack(m.request_id, m.client_id, m.seq, n) + struct.pack(f">{n}I", *sizes)
    return _frame(Kind.APPEND_REQUEST, head, [b for b in bodies if len(b)], sum(sizes))


def _enc_append_resp(m: AppendResponse) -> list[Buffer]:
    n = len(m.offsets)
    return _frame(Kind.APPEND_RESPONSE, _APPEND_RESP.pack(m.request_id, m.code, m.first_index, m.last_index,
                                                          m.term) + _short(m.leader_id) + _text(m.message)
                  + _U32.pack(n) + (struct.pack(f">{n}q", *m.offsets) if n else b""))


def _enc_read_req(m: ReadRequest) -> list[Buffer]:
    # (a trailing flags byte only when a flag is set: a node that predates it reads every other request)
    flags = _READ_LINEARIZABLE if m.linearizable else 0
    return _frame(Kind.READ_REQUEST, _READ_REQ.pack(m.request_id, m.start, m.end, m.max_bytes, m.wait_ms)
                  + (bytes((flags,)) if flags else b""))


def _enc_read_resp(m: ReadResponse) -> list[Buffer]:
    chunks, size = _chunks_of(m.records)
    rec = m.records
    head = _READ_RESP.pack(m.request_id, m.code, m.begin_index, m.committed_index, rec is not None,
                           rec.first_index if rec else 0, rec.last_index if rec else 0, size) + _text(m.message) \
        + _short(m.suggest_slave)
    return _frame(Kind.READ_RESPONSE, head, chunks, size)


def _enc_status_req(m: StatusRequest) -> list[Buffer]:
    return _frame(Kind.STATUS_REQUEST, _STATUS_REQ.pack(m.request_id))


def _enc_status_resp(m: StatusResponse) -> list[Buffer]:
    doc = bytes(m.status_json)
    return _frame(Kind.STATUS_RESPONSE, _STATUS_RESP.pack(m.request_id, m.code, len(doc)) + doc)


def _enc_transfer_req(m: TransferLeaderRequest) -> list[Buffer]:
    return _frame(Kind.TRANSFER_LEADER_REQUEST, _TRANSFER_REQ.pack(m.request_id) + _short(m.to))


def _enc_transfer_resp(m: TransferLeaderResponse) -> list[Buffer]:
    return _frame(Kind.TRANSFER_LEADER_RESPONSE, _TRANSFER_RESP.pack(m.request_id, m.code)
                  + _short(m.leader_id) + _text(m.message))


def _enc_member_req(m: MemberChangeRequest) -> list[Buffer]:
    return _frame(Kind.MEMBER_CHANGE_REQUEST, _MEMBER_REQ.pack(m.request_id) + _short(m.change) + _short(m.node_id)
                  + _short(m.address))


def _enc_member_resp(m: MemberChangeResponse) -> list[Buffer]:
    return _frame(Kind.MEMBER_CHANGE_RESPONSE, _MEMBER_RESP.pack(m.request_id, m.code, m.index)
                  + _short(m.leader_id) + _text(m.message))


def _enc_group_req(m: GroupRequest) -> list[Buffer]:
    return _frame(Kind.GROUP_REQUEST, _GROUP_REQ.pack(m.request_id, len(m.body)) + _short(m.op) + m.body)


def _enc_group_resp(m: GroupResponse) -> list[Buffer]:
    return _frame(Kind.GROUP_RESPONSE, _GROUP_RESP.pack(m.request_id, m.code, len(m.body)) + m.body
                  + _text(m.message))


def _enc_kv_req(m: KvRequest) -> list[Buffer]:
    return _frame(Kind.KV_REQUEST, _KV_REQ.pack(m.request_id, m.expected_version, m.revision, m.wait_ms,
                                                m.client_id, m.seq, len(m.value))
                  + _short(m.op) + _text(m.key) + bytes(m.value))


def _enc_kv_resp(m: KvResponse) -> list[Buffer]:
    parts = [_KV_RESP.pack(m.request_id, m.code, m.version, m.revision, len(m.items), len(m.data)),
             _short(m.leader_id), _text(m.message)]
    for it in m.items:
        value = it.value if it.value is not None else b""
        parts += [_KV_ITEM.pack(it.version, it.create_revision, it.mod_revision, it.value is not None, len(value)),
                  _text(it.key), bytes(value)]
    parts.append(bytes(m.data))
    return _frame(Kind.KV_RESPONSE, b"".join(parts))


def _enc_bookie_req(m: BookieOpRequest) -> list[Buffer]:
    return _frame(Kind.BOOKIE_REQUEST, _BOOKIE_REQ.pack(m.request_id, m.op, m.flags, m.ledger_id, m.entry_id, m.lac,
                                                        len(m.data)), [m.data], len(m.data))


def _enc_bookie_resp(m: BookieOpResponse) -> list[Buffer]:
    return _frame(Kind.BOOKIE_RESPONSE, _BOOKIE_RESP.pack(m.request_id, m.code, m.op, m.ledger_id, m.entry_id,
                                                          m.lac, len(m.data)) + bytes(m.data) + _text(m.message))


def _enc_topic_req(m: TopicRequest) -> list[Buffer]:
    if len(m.bodies) > MAX_APPEND_BODIES:
        raise LocalProtocolError(f"{len(m.bodies)} messages in one request")
    parts: list[Buffer] = [_TOPIC_REQ.pack(m.request_id, m.queue_id, m.offset, m.max_messages, m.wait_ms, m.client_id,
                                           m.seq, len(m.bodies)), _short(m.op), _short(m.topic), _text(m.tags)]
    for b in m.bodies:
        parts += [_U32.pack(len(b)), b]
    size = sum(len(x) for x in parts)
    return [FRAME_HEADER.pack(size + 1, Kind.TOPIC_REQUEST), *parts]


def _enc_topic_resp(m: TopicResponse) -> list[Buffer]:
    packed = m.messages if isinstance(m.messages, PackedMessages) else PackedMessages.of(m.messages)
    head = b"".join((_TOPIC_RESP.pack(m.request_id, m.code, m.min_offset, m.max_offset, m.next_offset,
                                      len(m.offsets), packed.count), _short(m.leader_id), _text(m.message),
                     _short(m.suggest_slave), struct.pack(f">{len(m.offsets)}q", *m.offsets), packed.head))
    return _frame(Kind.TOPIC_RESPONSE, head, [packed.blob], len(packed.blob))


def _enc_json_req(kind: Kind) -> Callable[[Any], list[Buffer]]:
    """Coordinators' requests (consumer groups, the HA controller): request_id, op, a JSON body."""
    def enc(m) -> list[Buffer]:
        return _frame(kind, _CG_REQ.pack(m.request_id, len(m.body)) + _short(m.op) + bytes(m.body))
    return enc


def _enc_json_resp(kind: Kind) -> Callable[[Any], list[Buffer]]:
    def enc(m) -> list[Buffer]:
        return _frame(kind, _CG_RESP.pack(m.request_id, m.code, len(m.body)) + _short(m.leader_id) + bytes(m.body)
                      + _text(m.message))
    return enc


_ENCODERS: dict[type, Callable[..., list[Buffer]]] = {
    AppendRequest: _enc_append_req,
    AppendResponse: _enc_append_resp,
    ReadRequest: _enc_read_req,
    ReadResponse: _enc_read_resp,
    StatusRequest: _enc_status_req,
    StatusResponse: _enc_status_resp,
    TransferLeaderRequest: _enc_transfer_req,
    TransferLeaderResponse: _enc_transfer_resp,
    MemberChangeRequest: _enc_member_req,
    MemberChangeResponse: _enc_member_resp,
    GroupRequest: _enc_group_req,
    GroupResponse: _enc_group_resp,
    KvRequest: _enc_kv_req,
    KvResponse: _enc_kv_resp,
    TopicRequest: _enc_topic_req,
    TopicResponse: _enc_topic_resp,
    ConsumerGroupRequest: _enc_json_req(Kind.CONSUMER_GROUP_REQUEST),
    ConsumerGroupResponse: _enc_json_resp(Kind.CONSUMER_GROUP_RESPONSE),
    HaControllerRequest: _enc_json_req(Kind.HA_CONTROLLER_REQUEST),
    HaControllerResponse: _enc_json_resp(Kind.HA_CONTROLLER_RESPONSE),
}

KIND_OF: dict[type, Kind] = {
    AppendRequest: Kind.APPEND_REQUEST, AppendResponse: Kind.APPEND_RESPONSE,
    ReadRequest: Kind.READ_REQUEST, ReadResponse: Kind.READ_RESPONSE,
    StatusRequest: Kind.STATUS_REQUEST, StatusResponse: Kind.STATUS_RESPONSE,
    TransferLeaderRequest: Kind.TRANSFER_LEADER_REQUEST, TransferLeaderResponse: Kind.TRANSFER_LEADER_RESPONSE,
    MemberChangeRequest: Kind.MEMBER_CHANGE_REQUEST, MemberChangeResponse: Kind.MEMBER_CHANGE_RESPONSE,
    GroupRequest: Kind.GROUP_REQUEST, GroupResponse: Kind.GROUP_RESPONSE,
    KvRequest: Kind.KV_REQUEST, KvResponse: Kind.KV_RESPONSE,
    TopicRequest: Kind.TOPIC_REQUEST, TopicResponse: Kind.TOPIC_RESPONSE,
    ConsumerGroupRequest: Kind.CONSUMER_GROUP_REQUEST, ConsumerGroupResponse: Kind.CONSUMER_GROUP_RESPONSE,
    HaControllerRequest: Kind.HA_CONTROLLER_REQUEST, HaControllerResponse: Kind.HA_CONTROLLER_RESPONSE,
}


def encode(msg: AnyMessage) -> list[Buffer]:
    """Whole frame(s) for msg as buffers for writelines. Raises LocalProtocolError (a ValueError) for a message we cannot
    encode (a field out of its wire range) — that is our bug, not the peer's."""
    enc = _ENCODERS.get(type(msg))
    if enc is None and not _node_kinds_loaded:
        _load_node_kinds()
        enc = _ENCODERS.get(type(msg))
    if enc is None:
        raise TypeError(f"not a wire message: {type(msg).__name__}")
    try:
        return enc(msg)
    except struct.error as e:
        raise LocalProtocolError(f"cannot encode {type(msg).__name__}: {e}") from None


def encoded_size(buffers: list[Buffer]) -> int:
    return sum(memoryview(b).nbytes for b in buffers)


# -- decoders ----------------------------------------------------------------------------------------
def _push_type(v: int) -> PushType:
    try:
        return PushType(v)
    except ValueError:
        raise RemoteProtocolError(f"unknown push type {v}") from None


def _dec_vote_req(p: memoryview) -> VoteRequest:
    term, last_index, last_term, flags = _VOTE_REQ.unpack_from(p)
    r = _Reader(p, _VOTE_REQ.size)
    frm, to = r.short_str(), r.short_str()
    r.end()
    if flags & ~(_FLAG_PRE_VOTE | _FLAG_LEADERSHIP_TRANSFER):
        raise RemoteProtocolError(f"unknown vote flags {flags:#x}")
    return VoteRequest(frm, to, term, last_index, last_term, bool(flags & _FLAG_PRE_VOTE),
                       bool(flags & _FLAG_LEADERSHIP_TRANSFER))


def _dec_vote_resp(p: memoryview) -> VoteResponse:
    term, result, pre_vote = _VOTE_RESP.unpack_from(p)
    r = _Reader(p, _VOTE_RESP.size)
    frm, to = r.short_str(), r.short_str()
    r.end()
    try:
        res = VoteResult(result)
    except ValueError:
        raise RemoteProtocolError(f"unknown vote result {result}") from None
    return VoteResponse(frm, to, term, res, bool(pre_vote))


def _dec_hb_req(p: memoryview) -> HeartbeatRequest:
    term, committed = _HB_REQ.unpack_from(p)
    r = _Reader(p, _HB_REQ.size)
    frm, to = r.short_str(), r.short_str()
    flags, read_seq = 0, 0
    if r.pos < len(p):
        flags = r.take(1)[0]
        if not flags or flags & ~(_HB_QUIESCE | _HB_READ_SEQ):
            raise RemoteProtocolError(f"heartbeat: bad flags {flags:#x}")
        if flags & _HB_READ_SEQ:
            (read_seq,) = _U64.unpack(r.take(_U64.size))
            if not read_seq:
                raise RemoteProtocolError("heartbeat: read round 0 is sent as no round")
    r.end()
    quiesce = bool(flags & _HB_QUIESCE)
    return HeartbeatRequest(frm, to, term, committed, quiesce, read_seq)


def _dec_hb_resp(p: memoryview) -> HeartbeatResponse:
    term, code = _HB_RESP.unpack_from(p)
    r = _Reader(p, _HB_RESP.size)
    frm, to = r.short_str(), r.short_str()
    read_seq = 0
    if r.pos < len(p):
        (read_seq,) = _U64.unpack(r.take(_U64.size))
        if not read_seq:
            raise RemoteProtocolError("heartbeat answer: read round 0 is sent as no round")
    r.end()
    return HeartbeatResponse(frm, to, term, ResponseCode.of(code), read_seq)


def _dec_push_req(p: memoryview) -> PushRequest:
    (term, push_type, committed, prev_index, prev_term, first, last, flags, r_first, r_last,
     size) = _PUSH_REQ.unpack_from(p)
    if flags & ~(_PUSH_HAS_RECORDS | _PUSH_HAS_PRODUCERS):
        raise RemoteProtocolError(f"unknown push flags {flags:#x}")
    r = _Reader(p, _PUSH_REQ.size)
    frm, to = r.short_str(), r.short_str()
    producers = None
    if flags & _PUSH_HAS_PRODUCERS:
        (n,) = _U32.unpack(r.take(_U32.size))
        producers = bytes(r.take(n))
        try:
            decode_snapshot(producers)
        except CorruptEntry as e:
            raise RemoteProtocolError(f"push carries a bad producer state: {e}") from None
    records = _records(flags & _PUSH_HAS_RECORDS, r_first, r_last, size, r)
    r.end()
    return PushRequest(frm, to, term, _push_type(push_type), committed, prev_index, prev_term, first, last,
                       records, producers)


def _dec_push_resp(p: memoryview) -> PushResponse:
    term, push_type, code, index, end_index, begin_index = _PUSH_RESP.unpack_from(p)
    r = _Reader(p, _PUSH_RESP.size)
    frm, to = r.short_str(), r.short_str()
    r.end()
    return PushResponse(frm, to, term, _push_type(push_type), ResponseCode.of(code), index, end_index,
                        begin_index)


def _dec_take(p: memoryview) -> TakeLeadershipRequest:
    (term,) = _TAKE.unpack_from(p)
    r = _Reader(p, _TAKE.size)
    frm, to = r.short_str(), r.short_str()
    r.end()
    return TakeLeadershipRequest(frm, to, term)


def _dec_ha_report(p: memoryview) -> HaReport:
    epoch, offset, hello = _HA_REPORT.unpack_from(p)
    r = _Reader(p, _HA_REPORT.size)
    frm, to = r.short_str(), r.short_str()
    r.end()
    if offset < 0 or hello > 1:
        raise RemoteProtocolError(f"HA report: bad offset {offset} or flag {hello}")
    return HaReport(frm, to, epoch, offset, bool(hello))


def _dec_ha_transfer(p: memoryview) -> HaTransfer:
    epoch, offset, confirm, reset, size = _HA_TRANSFER.unpack_from(p)
    r = _Reader(p, _HA_TRANSFER.size)
    frm, to = r.short_str(), r.short_str()
    data = r.take(size)
    r.end()
    if offset < 0 or reset > 1 or (reset and size):
        raise RemoteProtocolError(f"HA transfer: bad offset {offset}, reset flag {reset} or data with a reset")
    return HaTransfer(frm, to, epoch, offset, confirm, data, bool(reset))


def _dec_ha_epochs(p: memoryview) -> HaEpochs:
    epoch, max_offset, n = _HA_EPOCHS.unpack_from(p)
    r = _Reader(p, _HA_EPOCHS.size)
    entries = tuple(_HA_EPOCH_ENTRY.unpack(r.take(_HA_EPOCH_ENTRY.size)) for _ in range(n))
    frm, to = r.short_str(), r.short_str()
    r.end()
    return HaEpochs(frm, to, epoch, max_offset, entries)


def _dec_append_req(p: memoryview) -> AppendRequest:
    request_id, client_id, seq, n = _APPEND_REQ.unpack_from(p)
    if n > MAX_APPEND_BODIES or _APPEND_REQ.size + 4 * n > len(p):
        raise RemoteProtocolError(f"bad body count {n}")
    sizes = struct.unpack_from(f">{n}I", p, _APPEND_REQ.size)
    r = _Reader(p, _APPEND_REQ.size + 4 * n)
    if sum(sizes) != len(p) - r.pos:
        raise RemoteProtocolError(f"body sizes add up to {sum(sizes)}, payload has {len(p) - r.pos}")
    # bytes, as the contract says (callers may hash or sort them); sliced in a plain loop rather than
    # through _Reader.take (bounds are already checked by the sum above): ~20% less time for 1024 bodies.
    bodies = []
    append = bodies.append
    off = r.pos
    for size in sizes:
        end = off + size
        append(bytes(p[off:end]))
        off = end
    return AppendRequest(request_id, tuple(bodies), client_id, seq)


def _dec_append_resp(p: memoryview) -> AppendResponse:
    request_id, code, first, last, term = _APPEND_RESP.unpack_from(p)
    r = _Reader(p, _APPEND_RESP.size)
    leader_id = r.short()
    message = r.text()
    (n,) = _U32.unpack_from(r.take(4))
    offsets = struct.unpack(f">{n}q", r.take(8 * n)) if n else ()
    r.end()
    return AppendResponse(request_id, ResponseCode.of(code), leader_id, first, last, term, message, offsets)


def _dec_read_req(p: memoryview) -> ReadRequest:
    request_id, start, end, max_bytes, wait_ms = _READ_REQ.unpack_from(p)
    r = _Reader(p, _READ_REQ.size)
    flags = r.take(1)[0] if len(p) > _READ_REQ.size else None
    r.end()
    if flags is not None and (flags == 0 or flags & ~_READ_LINEARIZABLE):
        # (the byte travels only when a flag is set: a zero byte is no encoding of ours)
        raise RemoteProtocolError(f"read request: flags byte {flags:#x}")
    flags = flags or 0
    return ReadRequest(request_id, start, end, max_bytes, wait_ms, bool(flags & _READ_LINEARIZABLE))


def _dec_read_resp(p: memoryview) -> ReadResponse:
    request_id, code, begin_index, committed, has, r_first, r_last, size = _READ_RESP.unpack_from(p)
    r = _Reader(p, _READ_RESP.size)
    message = r.text()
    suggest_slave = r.short()
    records = _records(has, r_first, r_last, size, r)
    r.end()
    return ReadResponse(request_id, ResponseCode.of(code), begin_index, committed, records, message, suggest_slave)


def _dec_status_req(p: memoryview) -> StatusRequest:
    (request_id,) = _STATUS_REQ.unpack_from(p)
    _Reader(p, _STATUS_REQ.size).end()
    return StatusRequest(request_id)


def _dec_status_resp(p: memoryview) -> StatusResponse:
    request_id, code, n = _STATUS_RESP.unpack_from(p)
    r = _Reader(p, _STATUS_RESP.size)
    doc = bytes(r.take(n))
    r.end()
    return StatusResponse(request_id, ResponseCode.of(code), doc)


def _dec_transfer_req(p: memoryview) -> TransferLeaderRequest:
    (request_id,) = _TRANSFER_REQ.unpack_from(p)
    r = _Reader(p, _TRANSFER_REQ.size)
    to = r.short_str()
    r.end()
    return TransferLeaderRequest(request_id, to)


def _dec_transfer_resp(p: memoryview) -> TransferLeaderResponse:
    request_id, code = _TRANSFER_RESP.unpack_from(p)
    r = _Reader(p, _TRANSFER_RESP.size)
    leader_id = r.short()
    message = r.text()
    r.end()
    return TransferLeaderResponse(request_id, ResponseCode.of(code), leader_id, message)


def _dec_member_req(p: memoryview) -> MemberChangeRequest:
    (request_id,) = _MEMBER_REQ.unpack_from(p)
    r = _Reader(p, _MEMBER_REQ.size)
    change, node_id, address = r.short_str(), r.short_str(), r.short_str()
    r.end()
    return MemberChangeRequest(request_id, change, node_id, address)


def _dec_member_resp(p: memoryview) -> MemberChangeResponse:
    request_id, code, index = _MEMBER_RESP.unpack_from(p)
    r = _Reader(p, _MEMBER_RESP.size)
    leader_id = r.short()
    message = r.text()
    r.end()
    return MemberChangeResponse(request_id, ResponseCode.of(code), leader_id, index, message)


def _dec_group_req(p: memoryview) -> GroupRequest:
    request_id, n = _GROUP_REQ.unpack_from(p)
    r = _Reader(p, _GROUP_REQ.size)
    op = r.short_str()
    body = bytes(r.take(n))
    r.end()
    return GroupRequest(request_id, op, body)


def _dec_group_resp(p: memoryview) -> GroupResponse:
    request_id, code, n = _GROUP_RESP.unpack_from(p)
    r = _Reader(p, _GROUP_RESP.size)
    body = bytes(r.take(n))
    message = r.text()
    r.end()
    return GroupResponse(request_id, ResponseCode.of(code), body, message)


def _dec_kv_req(p: memoryview) -> KvRequest:
    request_id, expected, revision, wait_ms, client_id, seq, n = _KV_REQ.unpack_from(p)
    r = _Reader(p, _KV_REQ.size)
    op = r.short_str()
    key = r.text()
    value = bytes(r.take(n))
    r.end()
    return KvRequest(request_id, op, key, value, expected, revision, wait_ms, client_id, seq)


def _dec_kv_resp(p: memoryview) -> KvResponse:
    request_id, code, version, revision, count, n = _KV_RESP.unpack_from(p)
    r = _Reader(p, _KV_RESP.size)
    leader_id = r.short()
    message = r.text()
    items = []
    for _ in range(count):
        (ver, create, mod, has_value, size) = _KV_ITEM.unpack_from(r.take(_KV_ITEM.size))
        if has_value > 1 or (not has_value and size):
            raise RemoteProtocolError("kv item: bad value flag")
        key = r.text()
        value = bytes(r.take(size))
        items.append(KvItem(key, value if has_value else None, ver, create, mod))
    data = bytes(r.take(n))
    r.end()
    return KvResponse(request_id, ResponseCode.of(code), leader_id, version, revision, tuple(items), data, message)


def _bookie_op(value: int) -> BookieOp:
    try:
        return BookieOp(value)
    except ValueError:
        raise RemoteProtocolError(f"unknown bookie op {value}") from None


def _dec_bookie_req(p: memoryview) -> BookieOpRequest:
    request_id, op, flags, ledger_id, entry_id, lac, n = _BOOKIE_REQ.unpack_from(p)
    r = _Reader(p, _BOOKIE_REQ.size)
    data = bytes(r.take(n))
    r.end()
    return BookieOpRequest(request_id, _bookie_op(op), ledger_id, entry_id, lac, flags, data)


def _dec_bookie_resp(p: memoryview) -> BookieOpResponse:
    request_id, code, op, ledger_id, entry_id, lac, n = _BOOKIE_RESP.unpack_from(p)
    r = _Reader(p, _BOOKIE_RESP.size)
    data = bytes(r.take(n))
    message = r.text()
    r.end()
    return BookieOpResponse(request_id, ResponseCode.of(code), _bookie_op(op), ledger_id, entry_id, lac, data, message)


def _dec_topic_req(p: memoryview) -> TopicRequest:
    request_id, queue_id, offset, max_messages, wait_ms, client_id, seq, n = _TOPIC_REQ.unpack_from(p)
    if n > MAX_APPEND_BODIES:
        raise RemoteProtocolError(f"{n} messages in one request")
    r = _Reader(p, _TOPIC_REQ.size)
    op = r.short_str()
    topic = r.short_str()
    tags = r.text()
    bodies = []
    for _ in range(n):
        (size,) = _U32.unpack_from(r.take(4))
        bodies.append(bytes(r.take(size)))
    r.end()
    return TopicRequest(request_id, op, topic, queue_id, offset, max_messages, wait_ms, client_id, seq, tags,
                        tuple(bodies))


def _dec_topic_resp(p: memoryview) -> TopicResponse:
    request_id, code, min_offset, max_offset, next_offset, n_offsets, n_messages = _TOPIC_RESP.unpack_from(p)
    r = _Reader(p, _TOPIC_RESP.size)
    leader_id = r.short()
    message = r.text()
    suggest_slave = r.short()
    offsets = struct.unpack(f">{n_offsets}q", r.take(8 * n_offsets))
    # head and blob stay views of the payload: a frame's payload is never written again (frames.py)
    head = r.take(8 * _PULLED_FIELDS * n_messages)
    fields = array.array("q")
    fields.frombytes(head)  # (an int per message is made below, not one per field)
    if _LITTLE_ENDIAN_HOST:
        fields.byteswap()
    sizes = fields[4::_PULLED_FIELDS]
    if min(sizes, default=0) < 0:
        raise RemoteProtocolError("pulled message: negative size")
    blob = r.take(sum(sizes))
    r.end()
    return TopicResponse(request_id, ResponseCode.of(code), leader_id, min_offset, max_offset, next_offset,
                         tuple(offsets), PackedMessages(n_messages, head, blob), message, suggest_slave)


def _dec_json_req(cls) -> Callable[[memoryview], Any]:
    def dec(p: memoryview):
        request_id, n = _CG_REQ.unpack_from(p)
        r = _Reader(p, _CG_REQ.size)
        op = r.short_str()
        body = bytes(r.take(n))
        r.end()
        return cls(request_id, op, body)
    return dec


def _dec_json_resp(cls) -> Callable[[memoryview], Any]:
    def dec(p: memoryview):
        request_id, code, n = _CG_RESP.unpack_from(p)
        r = _Reader(p, _CG_RESP.size)
        leader_id = r.short()
        body = bytes(r.take(n))
        message = r.text()
        r.end()
        return cls(request_id, ResponseCode.of(code), leader_id, body, message)
    return dec


_DECODERS: dict[int, Callable[[memoryview], AnyMessage]] = {
    Kind.APPEND_REQUEST: _dec_append_req,
    Kind.APPEND_RESPONSE: _dec_append_resp,
    Kind.READ_REQUEST: _dec_read_req,
    Kind.READ_RESPONSE: _dec_read_resp,
    Kind.STATUS_REQUEST: _dec_status_req,
    Kind.STATUS_RESPONSE: _dec_status_resp,
    Kind.TRANSFER_LEADER_REQUEST: _dec_transfer_req,
    Kind.TRANSFER_LEADER_RESPONSE: _dec_transfer_resp,
    Kind.MEMBER_CHANGE_REQUEST: _dec_member_req,
    Kind.MEMBER_CHANGE_RESPONSE: _dec_member_resp,
    Kind.GROUP_REQUEST: _dec_group_req,
    Kind.GROUP_RESPONSE: _dec_group_resp,
    Kind.KV_REQUEST: _dec_kv_req,
    Kind.KV_RESPONSE: _dec_kv_resp,
    Kind.TOPIC_REQUEST: _dec_topic_req,
    Kind.TOPIC_RESPONSE: _dec_topic_resp,
    Kind.CONSUMER_GROUP_REQUEST: _dec_json_req(ConsumerGroupRequest),
    Kind.HA_CONTROLLER_REQUEST: _dec_json_req(HaControllerRequest),
    Kind.CONSUMER_GROUP_RESPONSE: _dec_json_resp(ConsumerGroupResponse),
    Kind.HA_CONTROLLER_RESPONSE: _dec_json_resp(HaControllerResponse),
}


# Peer messages (Raft, HA) and bookie ops: only nodes and the ledger client exchange them, so their classes are
# imported at the first such frame, and a command that only asks a node something does not build them (a
# quarter of its start-up). The functions above name them as module globals, bound here.
_node_kinds_loaded = False


def _load_node_kinds() -> None:
    global _node_kinds_loaded
    if _node_kinds_loaded:
        return
    from ..wire import ledger, messages
    globals().update({name: getattr(messages, name) for name in _PEER_NAMES})
    globals().update({name: getattr(ledger, name) for name in ("BookieOp", "BookieOpRequest", "BookieOpResponse")})
    _ENCODERS.update({
        VoteRequest: _enc_vote_req,
        VoteResponse: _enc_vote_resp,
        HeartbeatRequest: _enc_hb_req,
        HeartbeatResponse: _enc_hb_resp,
        PushRequest: _enc_push_req,
        PushResponse: _enc_push_resp,
        TakeLeadershipRequest: _enc_take,
        HaReport: _enc_ha_report,
        HaTransfer: _enc_ha_transfer,
        HaEpochs: _enc_ha_epochs,
        BookieOpRequest: _enc_bookie_req,
        BookieOpResponse: _enc_bookie_resp,
    })
    KIND_OF.update({
        VoteRequest: Kind.VOTE_REQUEST, VoteResponse: Kind.VOTE_RESPONSE,
        HeartbeatRequest: Kind.HEARTBEAT_REQUEST, HeartbeatResponse: Kind.HEARTBEAT_RESPONSE,
        PushRequest: Kind.PUSH_REQUEST, PushResponse: Kind.PUSH_RESPONSE,
        TakeLeadershipRequest: Kind.TAKE_LEADERSHIP_REQUEST,
        HaReport: Kind.HA_REPORT, HaTransfer: Kind.HA_TRANSFER, HaEpochs: Kind.HA_EPOCHS,
        BookieOpRequest: Kind.BOOKIE_REQUEST, BookieOpResponse: Kind.BOOKIE_RESPONSE,
    })
    _DECODERS.update({
        Kind.VOTE_REQUEST: _dec_vote_req,
        Kind.VOTE_RESPONSE: _dec_vote_resp,
        Kind.HEARTBEAT_REQUEST: _dec_hb_req,
        Kind.HEARTBEAT_RESPONSE: _dec_hb_resp,
        Kind.PUSH_REQUEST: _dec_push_req,
        Kind.PUSH_RESPONSE: _dec_push_resp,
        Kind.TAKE_LEADERSHIP_REQUEST: _dec_take,
        Kind.HA_REPORT: _dec_ha_report,
        Kind.HA_TRANSFER: _dec_ha_transfer,
        Kind.HA_EPOCHS: _dec_ha_epochs,
        Kind.BOOKIE_REQUEST: _dec_bookie_req,
        Kind.BOOKIE_RESPONSE: _dec_bookie_resp,
    })
    _node_kinds_loaded = True


_PEER_NAMES = ("HaEpochs", "HaReport", "HaTransfer", "HeartbeatRequest", "HeartbeatResponse", "PushRequest",
               "PushResponse", "PushType", "TakeLeadershipRequest", "VoteRequest", "VoteResponse", "VoteResult")


def decode(kind: int, payload: Buffer) -> AnyMessage:
    """The message in one frame's payload. Raises ProtocolError (only) when it is not a valid message."""
    dec = _DECODERS.get(kind)
    if dec is None and not _node_kinds_loaded:
        _load_node_kinds()
        dec = _DECODERS.get(kind)
    if dec is None:
        raise RemoteProtocolError(f"unknown frame kind {kind}")
    view = payload if isinstance(payload, memoryview) else memoryview(payload)
    try:
        return dec(view)
    except ProtocolError:
        raise
    except (struct.error, ValueError, UnicodeDecodeError, IndexError, OverflowError, TypeError) as e:
        raise RemoteProtocolError(f"malformed {Kind(kind).name} payload: {e}") from None
