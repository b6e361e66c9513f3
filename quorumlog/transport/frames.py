"""Sans-I/O frame codec (h11's shape): bytes in with feed(), whole frames out with next_frame().

A frame on the wire:

    length u32 (big-endian, counts kind + payload) | kind u8 | payload

The decoder never trusts a length beyond `max_frame_bytes` (an HTTP request or random bytes read as a
length is usually hundreds of MiB), so one connection can make us buffer at most one maximal frame plus one
read chunk. Payloads come out as memoryviews that nobody mutates afterwards: a slice of the immutable
`bytes` chunk the socket gave us when a frame arrived whole, or a view of a retired receive buffer when it
arrived in pieces — big frames (pushes, 1 MiB batches) are therefore never copied after the socket read.

A reader on asyncio.BufferedProtocol (the client: 4 MiB read pages) uses get_buffer()/buffer_updated()
instead of feed(): once a big frame's header is known, the socket writes the rest of it straight into one
buffer of exactly its size — no bytes object per read and no growing buffer (py-spy put a quarter of a Spark
reader's CPU in those copies).
"""

from __future__ import annotations

import struct
from typing import Final, NamedTuple

from ..errors import LocalProtocolError, RemoteProtocolError

FRAME_HEADER = struct.Struct(">IB")  # length (kind + payload), kind
FRAME_HEADER_SIZE = FRAME_HEADER.size
assert FRAME_HEADER_SIZE == 5
_LENGTH = struct.Struct(">I")

# One APPEND push carries at most max_push_batch_bytes (1 MiB default) of records and a client batch at most
# a few max_entry_bytes (4 MiB each); 64 MiB leaves a wide margin for operators who raise either.
MAX_FRAME_BYTES: Final = 64 * 1024 * 1024 + 64 * 1024
MIN_FRAME_BYTES: Final = 1  # the kind byte
# Frames smaller than this that arrive in pieces are copied out of the receive buffer; bigger ones take the
# buffer with them (no copy) and a fresh buffer starts from the tail.
_COPY_BELOW_BYTES: Final = 64 * 1024
# BufferedProtocol readers: frames at least this big are received in place, into a buffer of their size;
# everything else goes through a scratch buffer of this size and feed().
_DIRECT_FROM_BYTES: Final = 256 * 1024
SCRATCH_BYTES: Final = 256 * 1024


class _NeedData:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Final = _NeedData()


class Frame(NamedTuple):
    kind: int
    payload: memoryview


def frame_header(kind: int, payload_size_bytes: int) -> bytes:
    """The 5 bytes that precede a payload of payload_size_bytes."""
    return FRAME_HEADER.pack(payload_size_bytes + 1, kind)


def encode_frame(kind: int, payload: bytes | bytearray | memoryview = b"") -> bytes:
    """One frame as one bytes object (handshakes, tests); the hot path writes header + chunks instead."""
    return frame_header(kind, len(payload)) + bytes(payload)


class FrameDecoder:
    """Splits a byte stream into frames; raises ProtocolError on a length prefix it must not trust.

    `feed(data)` then `next_frame()` until it returns NEED_DATA. `max_frame_bytes` may be lowered or raised
    between frames (a server accepts only small frames before the handshake).
    """

    __slots__ = ("max_frame_bytes", "_chunk", "_chunk_pos", "_buf", "_buf_pos", "_eof", "_broken", "_direct",
                 "_direct_fill", "_scratch")

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES, scratch: bytearray | None = None) -> None:
        """`scratch`: get_buffer's buffer, which may be shared by the decoders of one event loop (a server's
        connections): buffer_updated copies out of it at once, before any other protocol reads."""
        assert max_frame_bytes >= MIN_FRAME_BYTES
        self.max_frame_bytes = max_frame_bytes
        self._chunk: bytes | None = None  # an immutable chunk parsed in place while nothing else is buffered
        self._chunk_pos = 0
        self._buf = bytearray()  # a partial frame (and whatever followed it)
        self._buf_pos = 0
        self._eof = False
        self._broken = False
        self._direct: bytearray | None = None  # a big frame (from its header on) being received in place
        self._direct_fill = 0
        self._scratch = scratch  # get_buffer's buffer outside big frames (made on first use unless given)

    @property
    def buffered_bytes(self) -> int:
        n = len(self._buf) - self._buf_pos + self._direct_fill
        if self._chunk is not None:
            n += len(self._chunk) - self._chunk_pos
        return n

    @property
    def at_frame_boundary(self) -> bool:
        """True when no partial frame is buffered (so an EOF now is clean)."""
        return self.buffered_bytes == 0

    @property
    def has_complete_frame(self) -> bool:
        """True when next_frame() would return a frame (without consuming it)."""
        if self._direct is not None:
            return False  # still receiving a big frame (buffer_updated makes it a chunk once whole)
        for buf, pos in ((self._chunk, self._chunk_pos), (self._buf, self._buf_pos)):
            if buf is not None and len(buf) - pos >= FRAME_HEADER_SIZE:
                (length,) = _LENGTH.unpack_from(buf, pos)
                return MIN_FRAME_BYTES <= length <= self.max_frame_bytes and pos + 4 + length <= len(buf)
            if buf is not None and len(buf) - pos > 0:
                return False
        return False

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        if self._broken:
            raise LocalProtocolError("decoder already failed")
        if self._eof:
            raise LocalProtocolError("data after end of stream")
        if not data:
            return
        assert self._direct is None, "feed() while a frame is received in place (use buffer_updated)"
        self._park_chunk()
        if len(self._buf) == self._buf_pos and type(data) is bytes:
            self._buf.clear()
            self._buf_pos = 0
            self._chunk, self._chunk_pos = data, 0
        else:
            self._compact()
            self._buf += data

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """asyncio.BufferedProtocol: where the socket writes next — the rest of the big frame being received
        in place, else a scratch buffer whose bytes buffer_updated() feeds."""
        if self._direct is not None:
            return memoryview(self._direct)[self._direct_fill:]
        if self._scratch is None:
            self._scratch = bytearray(SCRATCH_BYTES)
        return memoryview(self._scratch)

    def buffer_updated(self, nbytes: int) -> None:
        """asyncio.BufferedProtocol: the socket wrote nbytes into get_buffer()'s buffer."""
        if self._direct is None:
            assert self._scratch is not None
            self.feed(bytes(memoryview(self._scratch)[:nbytes]))
            return
        self._direct_fill += nbytes
        if self._direct_fill == len(self._direct):  # whole: parsed in place, never written again
            self._chunk, self._chunk_pos = self._direct, 0
            self._direct, self._direct_fill = None, 0

    def _receive_in_place(self, buf: bytearray, pos: int, length: int) -> None:
        """The frame at buf[pos:] is big and incomplete: move what we have into a buffer of its size, which
        get_buffer() hands to the socket from now on."""
        have = len(buf) - pos
        direct = bytearray(4 + length)
        direct[:have] = memoryview(buf)[pos:]
        buf.clear()
        self._buf_pos = 0
        self._direct, self._direct_fill = direct, have

    def feed_eof(self) -> None:
        """The peer closed its side. Raises ProtocolError if a frame was cut in half."""
        self._eof = True
        if self.buffered_bytes:
            raise RemoteProtocolError(f"connection closed inside a frame ({self.buffered_bytes} bytes pending)")

    def next_frame(self) -> Frame | _NeedData:
        if self._broken:
            raise LocalProtocolError("decoder already failed")
        if self._chunk is not None:
            frame = self._from_chunk()
            if frame is not NEED_DATA:
                return frame
            self._park_chunk()
        return self._from_buf()

    # -- internals ---------------------------------------------------------------------------------
    def _check_length(self, length: int) -> None:
        if length < MIN_FRAME_BYTES or length > self.max_frame_bytes:
            self._broken = True
            raise RemoteProtocolError(f"bad frame length {length} (max_frame_bytes={self.max_frame_bytes})")

    def _from_chunk(self) -> Frame | _NeedData:
        chunk, pos = self._chunk, self._chunk_pos
        assert chunk is not None
        avail = len(chunk) - pos
        if avail < FRAME_HEADER_SIZE:
            if avail >= 4:
                self._check_length(_LENGTH.unpack_from(chunk, pos)[0])
            return NEED_DATA
        length, kind = FRAME_HEADER.unpack_from(chunk, pos)
        self._check_length(length)
        end = pos + 4 + length
        if end > len(chunk):
            return NEED_DATA
        self._chunk_pos = end
        if end == len(chunk):
            self._chunk, self._chunk_pos = None, 0
        return Frame(kind, memoryview(chunk)[pos + FRAME_HEADER_SIZE:end])

    def _park_chunk(self) -> None:
        """Move the unparsed rest of the current chunk into the buffer (it holds a partial frame)."""
        if self._chunk is None:
            return
        rest = memoryview(self._chunk)[self._chunk_pos:]
        self._chunk, self._chunk_pos = None, 0
        if rest:
            self._compact()
            self._buf += rest

    def _compact(self) -> None:
        if self._buf_pos:
            del self._buf[:self._buf_pos]
            self._buf_pos = 0

    def _from_buf(self) -> Frame | _NeedData:
        buf, pos = self._buf, self._buf_pos
        avail = len(buf) - pos
        if avail < FRAME_HEADER_SIZE:
            if avail >= 4:
                self._check_length(_LENGTH.unpack_from(buf, pos)[0])
            if avail == 0 and pos:
                buf.clear()
                self._buf_pos = 0
            return NEED_DATA
        length, kind = FRAME_HEADER.unpack_from(buf, pos)
        self._check_length(length)
        end = pos + 4 + length
        if end > len(buf):
            if length >= _DIRECT_FROM_BYTES and self._scratch is not None:  # a BufferedProtocol reader
                self._receive_in_place(buf, pos, length)
            return NEED_DATA
        start = pos + FRAME_HEADER_SIZE
        if length < _COPY_BELOW_BYTES:
            payload = memoryview(bytes(buf[start:end]))
            self._buf_pos = end
            if end == len(buf):
                buf.clear()
                self._buf_pos = 0
            return Frame(kind, payload)
        # Hand the whole buffer to the frame; keep only its tail. The old buffer is never touched again.
        self._buf = bytearray(memoryview(buf)[end:])
        self._buf_pos = 0
        return Frame(kind, memoryview(buf)[start:end])
