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
