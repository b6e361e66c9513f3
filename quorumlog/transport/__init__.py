"""Transport: length-prefixed binary frames over asyncio TCP, a versioned handshake, hand-packed messages.

    frames.py      sans-I/O FrameDecoder (feed / next_frame / NEED_DATA), MAX_FRAME_BYTES
    handshake.py   Hello / HelloOk / HelloError and the server's acceptance rules
    codec.py       encode(msg) -> buffers for writelines, decode(kind, payload) -> msg
    connection.py  TransportServer, PeerLinks, ClientConnection
    loop.py        uvloop when available: run(main), install_event_loop_policy()
"""

from .codec import decode, encode
from .connection import (
    ClientConnection, ClientSession, PeerLinks, PeerLinkStats, TransportServer, TransportStats,
)
from .frames import MAX_FRAME_BYTES, NEED_DATA, Frame, FrameDecoder
from .handshake import PROTOCOL_VERSION, Role
from .loop import install_event_loop_policy, run

__all__ = [
    "ClientConnection", "ClientSession", "Frame", "FrameDecoder", "MAX_FRAME_BYTES", "NEED_DATA",
    "PROTOCOL_VERSION", "PeerLinkStats", "PeerLinks", "Role", "TransportServer", "TransportStats", "decode",
    "encode", "install_event_loop_policy", "run",
]
