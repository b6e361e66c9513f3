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

from ..lazy import lazy_exports

# Imported at first use: a client needs the codec and its connection, not the server or the peer links.
_LAZY = {
    "decode": ".codec", "encode": ".codec", "ClientConnection": ".client_connection",
    "PeerLinks": ".peer_links", "PeerLinkStats": ".peer_links",
    "ClientSession": ".server", "TransportServer": ".server", "TransportStats": ".server",
    "MAX_FRAME_BYTES": ".frames", "NEED_DATA": ".frames", "Frame": ".frames", "FrameDecoder": ".frames",
    "NODE_LINK": ".handshake", "PROTOCOL_VERSION": ".handshake", "Role": ".handshake",
    "install_event_loop_policy": ".loop", "run": ".loop",
}
__getattr__ = lazy_exports(__name__, _LAZY)

__all__ = [
    "ClientConnection", "ClientSession", "Frame", "FrameDecoder", "MAX_FRAME_BYTES", "NEED_DATA", "NODE_LINK",
    "PROTOCOL_VERSION", "PeerLinkStats", "PeerLinks", "Role", "TransportServer", "TransportStats", "decode",
    "encode", "install_event_loop_policy", "run",
]
