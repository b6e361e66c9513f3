"""Transport: length-prefixed binary frames over asyncio TCP, a versioned handshake, hand-packed messages.

    frames.py      sans-I/O FrameDecoder (feed / next_frame / NEED_DATA), MAX_FRAME_BYTES
    handshake.py   Hello / HelloOk / HelloError and the server's acceptance rules
    codec.py       encode(msg) -> buffers for writelines, decode(kind, payload) -> msg
    server.py      TransportServer: the listener, accepted peer and client connections
    peer_links.py  PeerLinks: one outbound link per peer node, shared by every group
    client_connection.py  ClientConnection: a client's pipelined connection
    _io.py         socket options and write corking shared by the three
    loop.py        uvloop when available: run(main), install_event_loop_policy()
"""

from .codec import decode, encode
from .client_connection import ClientConnection
from .peer_links import PeerLinks, PeerLinkStats
from .server import ClientSession, TransportServer, TransportStats
from .frames import MAX_FRAME_BYTES, NEED_DATA, Frame, FrameDecoder
from .handshake import NODE_LINK, PROTOCOL_VERSION, Role
from .loop import install_event_loop_policy, run

__all__ = [
    "ClientConnection", "ClientSession", "Frame", "FrameDecoder", "MAX_FRAME_BYTES", "NEED_DATA", "NODE_LINK",
    "PROTOCOL_VERSION", "PeerLinkStats", "PeerLinks", "Role", "TransportServer", "TransportStats", "decode",
    "encode", "install_event_loop_policy", "run",
]
