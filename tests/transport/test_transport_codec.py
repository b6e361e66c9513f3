"""codec: decode(encode(x)) == x for every message; truncated, flipped or random payloads → ProtocolError only."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quorumlog.codes import ResponseCode
from quorumlog.errors import ProtocolError
from quorumlog.format.log_entry import Records, encode_batch, iter_records
from quorumlog.transport import codec
from quorumlog.transport.frames import FrameDecoder, NEED_DATA
from quorumlog.transport.kinds import Kind
from quorumlog.wire.client import AppendRequest, ReadRequest, ReadResponse
from quorumlog.wire.messages import HeartbeatRequest, HeartbeatResponse, PushRequest, PushType

from .strategies import messages, normalize

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _frame_of(msg) -> tuple[int, memoryview]:
    """Encode, then cut the wire bytes apart with the real frame decoder."""
    wire = b"".join(bytes(b) for b in codec.encode(msg))
    dec = FrameDecoder()
    dec.feed(wire)
    frame = dec.next_frame()
    assert frame is not NEED_DATA and dec.next_frame() is NEED_DATA
    return frame.kind, frame.payload


@SETTINGS
@given(messages)
def test_round_trip_every_message(msg):
    kind, payload = _frame_of(msg)
    assert kind == codec.KIND_OF[type(msg)]
    assert normalize(codec.decode(kind, payload)) == normalize(msg)


@SETTINGS
@given(messages, st.data())
def test_truncated_payload_raises_protocol_error(msg, data):
    kind, payload = _frame_of(msg)
    cut = data.draw(st.integers(0, len(payload) - 1)) if len(payload) else None
    if cut is None:
        return
    try:
        got = codec.decode(kind, payload[:cut])
    except ProtocolError:
        return
    # only an optional tail (a heartbeat's, a read's flags) may be cut off whole: then it reads as without it
    stripped = _without_optional_tail(msg)
    assert got == stripped and stripped != msg, (msg, cut)


def _without_optional_tail(msg):
    if isinstance(msg, HeartbeatRequest):
        return dataclasses.replace(msg, quiesce=False, read_seq=0)
    if isinstance(msg, HeartbeatResponse):
        return dataclasses.replace(msg, read_seq=0)
    if isinstance(msg, ReadRequest):  # (its flags byte travels only when a flag is set)
        return dataclasses.replace(msg, linearizable=False)
    return msg


@SETTINGS
@given(messages, st.data())
def test_trailing_bytes_raise_protocol_error(msg, data):
    kind, payload = _frame_of(msg)
    extra = data.draw(st.binary(min_size=1, max_size=9))
    try:
        got = codec.decode(kind, bytes(payload) + extra)
    except ProtocolError:
        return
    # only a message without its optional tail can take one, and then the bytes are exactly its encoding
    assert _without_optional_tail(msg) == msg != got
    assert _frame_of(got)[1] == bytes(payload) + extra


@SETTINGS
@given(messages, st.data())
def test_flipped_bytes_decode_or_raise_protocol_error_only(msg, data):
    kind, payload = _frame_of(msg)
    if not payload:
        return
    buf = bytearray(payload)
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(buf) - 1))
        buf[i] ^= data.draw(st.integers(1, 255))
    try:
        codec.decode(kind, memoryview(bytes(buf)))
    except ProtocolError:
        pass


@SETTINGS
@given(st.integers(0, 255), st.binary(max_size=200))
def test_random_payload_of_any_kind_raises_protocol_error_only(kind, payload):
    try:
        codec.decode(kind, payload)
    except ProtocolError:
        pass


def test_unknown_kind_is_protocol_error():
    with pytest.raises(ProtocolError):
        codec.decode(200, b"")


def test_push_records_travel_as_given_and_decode_as_one_view():
    """The stored record bytes are handed to writelines untouched and come back as a slice of the frame."""
    buf, sizes, _ = encode_batch(5, 3, [b"a" * 100, b"b" * 2000, b""], 1_700_000_000_000, 0, 0)
    first, second = memoryview(buf)[:sizes[0]], memoryview(buf)[sizes[0]:]
    rec = Records(5, 7, (first, second), len(buf))
    msg = PushRequest("n0", "n1", 3, PushType.APPEND, 4, 4, 3, 5, 7, rec)
    out = codec.encode(msg)
    assert out[1] is first and out[2] is second  # no copy, no re-encoding
    wire = b"".join(bytes(b) for b in out)
    assert len(wire) == codec.encoded_size(out) == len(out[0]) + len(buf)
    dec = FrameDecoder()
    dec.feed(wire)
    kind, payload = dec.next_frame()
    got = codec.decode(kind, payload)
    assert got.records.first_index == 5 and got.records.last_index == 7 and got.records.size_bytes == len(buf)
    (chunk,) = got.records.chunks
    assert isinstance(chunk, memoryview) and chunk.obj is payload.obj  # a slice of the frame, not a copy
    assert [h.index for h, _ in iter_records(chunk)] == [5, 6, 7]


def test_a_reset_truncate_carries_the_producer_table_and_a_garbled_one_is_refused():
    from quorumlog.format.producer_state import ProducerSnapshot, encode_snapshot
    buf, _, _ = encode_batch(10, 3, [b"a"], 1, 0, 0)
    table = encode_snapshot(ProducerSnapshot(9, {42: (-1, [(7, 0, 1)])}))
    msg = PushRequest("n0", "n1", 3, PushType.TRUNCATE, 9, 9, -1, 10, 10, Records(10, 10, (buf,), len(buf)), table)
    kind, payload = _frame_of(msg)
    got = codec.decode(kind, payload)
    assert got.producers == table and got.records.last_index == 10
    assert [h.index for h, _ in iter_records(got.records.chunks[0])] == [10]
    bad = PushRequest("n0", "n1", 3, PushType.TRUNCATE, 9, 9, -1, 10, 10, Records(10, 10, (buf,), len(buf)),
                      table[:-1] + bytes([table[-1] ^ 1]))
    kind, payload = _frame_of(bad)
    with pytest.raises(ProtocolError, match="producer state"):
        codec.decode(kind, payload)


def test_append_request_packs_count_sizes_then_bodies():
    bodies = (b"x" * 10, b"", b"yz")
    out = codec.encode(AppendRequest(9, bodies, client_id=77, seq=3))
    assert out[1:] == [b"x" * 10, b"yz"]  # the bodies themselves, empty ones skipped
    kind, payload = _frame_of(AppendRequest(9, bodies, 77, 3))
    assert kind == Kind.APPEND_REQUEST
    assert codec.decode(kind, payload) == AppendRequest(9, bodies, 77, 3)


def test_read_response_with_empty_records_and_none_differ():
    for rec in (None, Records(4, 3, (), 0)):
        msg = ReadResponse(1, ResponseCode.SUCCESS, 0, 3, rec, "")
        kind, payload = _frame_of(msg)
        assert codec.decode(kind, payload) == msg


def test_encode_rejects_out_of_range_fields():
    with pytest.raises(ValueError):
        codec.encode(AppendRequest(-1, (b"a",)))
    with pytest.raises(TypeError):
        codec.encode(object())
