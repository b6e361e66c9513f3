"""FrameDecoder: any chunking gives the same frames; bad lengths and half frames raise ProtocolError."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quorumlog.errors import ProtocolError
from quorumlog.transport.frames import FRAME_HEADER, NEED_DATA, FrameDecoder, encode_frame


def drain(dec: FrameDecoder) -> list[tuple[int, bytes]]:
    out = []
    while (f := dec.next_frame()) is not NEED_DATA:
        out.append((f.kind, bytes(f.payload)))
    return out


FRAMES = [(1, b""), (14, b"a" * 70_000), (20, b"hello"), (21, bytes(range(256)) * 300), (3, b"z")]
WIRE = b"".join(encode_frame(k, p) for k, p in FRAMES)


def test_fed_byte_by_byte():
    dec = FrameDecoder(1 << 20)
    got = []
    for i in range(len(WIRE)):
        dec.feed(WIRE[i:i + 1])
        got += drain(dec)
    assert got == FRAMES
    assert dec.at_frame_boundary
    dec.feed_eof()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 100_000), max_size=50), st.booleans())
def test_any_chunking_gives_the_same_frames(cuts, as_bytearray):
    dec = FrameDecoder(1 << 20)
    got, pos = [], 0
    for n in cuts + [len(WIRE)]:
        piece = WIRE[pos:pos + n]
        dec.feed(bytearray(piece) if as_bytearray else piece)
        got += drain(dec)
        pos += n
        if pos >= len(WIRE):
            break
    assert got == FRAMES


BIG_FRAMES = [(14, b"a" * 10), (15, bytes(range(256)) * 1200), (16, b""), (17, b"b" * 600_000), (3, b"z")]
BIG_WIRE = b"".join(encode_frame(k, p) for k, p in BIG_FRAMES)


def _socket_into(dec: FrameDecoder, wire: bytes, cuts: list[int]) -> list[tuple[int, bytes, memoryview]]:
    """What asyncio does with a BufferedProtocol: write at most len(get_buffer()) bytes into it, then
    buffer_updated(n); reads of the sizes in `cuts` (then the rest)."""
    got, pos, i = [], 0, 0
    while pos < len(wire):
        view = dec.get_buffer(-1)
        assert len(view) > 0
        want = cuts[i] if i < len(cuts) else len(wire)
        i += 1
        n = min(len(view), want, len(wire) - pos)
        view[:n] = wire[pos:pos + n]
        dec.buffer_updated(n)
        pos += n
        while (f := dec.next_frame()) is not NEED_DATA:
            got.append((f.kind, bytes(f.payload), f.payload))
    return got


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 300_000), max_size=40))
def test_buffered_reads_give_the_same_frames(cuts):
    """get_buffer()/buffer_updated() (BufferedProtocol): same frames for any read sizes, big frames received
    in place, and payloads handed out earlier are never overwritten by later reads."""
    dec = FrameDecoder(1 << 20)
    got = _socket_into(dec, BIG_WIRE, cuts)
    assert [(k, p) for k, p, _ in got] == BIG_FRAMES
    assert [(k, bytes(v)) for k, _, v in got] == BIG_FRAMES
    assert dec.at_frame_boundary
    dec.feed_eof()


def test_buffered_big_frame_lands_in_place_and_eof_inside_it_is_an_error():
    dec = FrameDecoder(1 << 20)
    wire = encode_frame(17, b"c" * 400_000)
    view = dec.get_buffer(-1)
    view[:1000] = wire[:1000]
    dec.buffer_updated(1000)
    assert dec.next_frame() is NEED_DATA
    rest = dec.get_buffer(-1)
    assert len(rest) == len(wire) - 1000  # exactly the rest of the frame: nothing of the next one
    rest[:len(rest) - 1] = wire[1000:-1]
    dec.buffer_updated(len(rest) - 1)
    assert dec.next_frame() is NEED_DATA and not dec.has_complete_frame
    assert dec.buffered_bytes == len(wire) - 1
    with pytest.raises(ProtocolError):
        dec.feed_eof()


def test_payload_views_stay_valid_after_more_data():
    """Handed-out payloads are never overwritten by later reads (the runtime may keep them)."""
    dec = FrameDecoder(1 << 20)
    big = encode_frame(14, b"A" * 100_000)
    small = encode_frame(20, b"B" * 10)
    dec.feed(big[:1000])
    dec.feed(big[1000:] + small[:3])
    f1 = dec.next_frame()
    dec.feed(small[3:] + big[:500])
    f2 = dec.next_frame()
    dec.feed(big[500:])
    f3 = dec.next_frame()
    assert bytes(f1.payload) == b"A" * 100_000 and bytes(f2.payload) == b"B" * 10
    assert bytes(f3.payload) == b"A" * 100_000


def test_absurd_length_rejected_from_the_prefix_alone():
    dec = FrameDecoder(1024)
    dec.feed(FRAME_HEADER.pack(1025, 1)[:4])  # the length prefix alone is enough to refuse
    with pytest.raises(ProtocolError):
        dec.next_frame()
    with pytest.raises(ProtocolError):
        dec.feed(b"more")


def test_zero_length_is_garbage():
    dec = FrameDecoder()
    dec.feed(b"\x00\x00\x00\x00\x01")
    with pytest.raises(ProtocolError):
        dec.next_frame()


def test_http_request_is_rejected():
    dec = FrameDecoder()
    dec.feed(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    with pytest.raises(ProtocolError):
        dec.next_frame()


def test_half_frame_at_eof():
    dec = FrameDecoder()
    dec.feed(encode_frame(20, b"abcdef")[:-2])
    assert dec.next_frame() is NEED_DATA
    with pytest.raises(ProtocolError):
        dec.feed_eof()


def test_buffering_is_bounded_by_one_frame():
    """A peer announcing a big-but-allowed frame makes us hold at most that frame, then it is released."""
    limit = 200_000
    dec = FrameDecoder(limit)
    frame = encode_frame(14, b"q" * (limit - 1))
    peak = 0
    for i in range(0, len(frame), 4096):
        dec.feed(frame[i:i + 4096])
        peak = max(peak, dec.buffered_bytes)
        if (f := dec.next_frame()) is not NEED_DATA:
            assert len(f.payload) == limit - 1
    assert peak <= len(frame) and dec.buffered_bytes == 0
