"""What the server, the peer links and the client connection share: socket options, write corking and
the defaults of connection handling."""

from __future__ import annotations

import asyncio
import socket

DEFAULT_MAX_CONNECTIONS = 1024
DEFAULT_MAX_IN_FLIGHT = 4096  # requests a client may have unanswered on one connection before we stop reading
DEFAULT_CONNECT_TIMEOUT_MS = 1_000
DEFAULT_WRITE_TIMEOUT_MS = 5_000  # a peer that accepts no bytes for this long gets a fresh connection
DEFAULT_RECONNECT_BACKOFF_MIN_MS = 20
DEFAULT_RECONNECT_BACKOFF_MAX_MS = 1_000  # well under the election timeout's scale of failover
DEFAULT_MAX_QUEUE_MESSAGES = 8192
DEFAULT_MAX_QUEUE_BYTES = 64 * 1024 * 1024
MAX_WRITE_BATCH_BYTES = 8 * 1024 * 1024  # one writelines call: enough to amortise, small enough to interleave
_WRITE_HIGH_WATER_BYTES = 4 * 1024 * 1024
_WRITE_LOW_WATER_BYTES = 1 * 1024 * 1024
_CORK_FLUSH_BYTES = 256 * 1024
TLS_RECORD_BYTES = 16 * 1024  # the most plaintext one TLS record carries
_MAX_DIRTY_CORKS = 4096
assert DEFAULT_RECONNECT_BACKOFF_MIN_MS < DEFAULT_RECONNECT_BACKOFF_MAX_MS



def _nodelay(transport: asyncio.BaseTransport) -> None:
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:  # pragma: no cover - a socket already closed
            pass


def _peername(transport: asyncio.BaseTransport) -> str:
    peer = transport.get_extra_info("peername")
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return str(peer)


def is_tls(transport: asyncio.BaseTransport) -> bool:
    return transport.get_extra_info("ssl_object") is not None


def tls_pieces(buffers: list) -> list:
    """`buffers` for a TLS transport's writelines: runs of small buffers joined (one copy) into pieces of at
    least a record's 16 KiB, big ones as they are. uvloop's TLS layer seals each buffer of a writelines call on
    its own (an SSL_write each), so a 1,024-entry append handed over as a header and 1,024 bodies went out as
    1,025 records of 1 KiB, each sealed, framed and on the other side opened by a call of its own; joined, it
    is 64 records."""
    out: list = []
    run: list = []
    run_bytes = 0
    for b in buffers:
        n = len(b)
        if n >= TLS_RECORD_BYTES:
            if run:
                out.append(b"".join(run) if len(run) > 1 else run[0])
                run, run_bytes = [], 0
            out.append(b)
            continue
        run.append(b)
        run_bytes += n
        if run_bytes >= TLS_RECORD_BYTES:
            out.append(b"".join(run))
            run, run_bytes = [], 0
    if run:
        out.append(b"".join(run) if len(run) > 1 else run[0])
    return out


class _WriteCork:
    """Coalesces the frames written during one loop iteration into one writelines (one syscall for many).

    Pipelined traffic is many small frames: one send() each would cost more than everything else per request.
    The cork is flushed by call_soon (so at most one loop iteration of added latency), at once when it holds
    more than _CORK_FLUSH_BYTES (so backpressure sees big writes), and before a graceful close.
    """

    __slots__ = ("transport", "pending", "pending_bytes", "scheduled", "dirty", "listed", "eager", "tls")

    def __init__(self, transport, dirty: list | None = None, eager: bool = False) -> None:
        self.transport = transport
        # eager (the client's side): the first frame of a loop turn is written at once, only the ones that
        # follow it in the same turn are corked; a lone caller waits for no loop turn.
        self.eager = eager
        self.tls = is_tls(transport)  # (buffers joined into whole records first: tls_pieces)
        self.pending: list = []
        self.pending_bytes = 0
        self.scheduled = False
        # The server's list of corks holding data: TransportServer.flush() empties them all at once when its
        # owner finished a unit of work (the node, after a step), before the call_soon would.
        self.dirty = dirty
        self.listed = False  # in `dirty` (at most once; the owner's flush clears it)

    def write(self, buffers: list, size: int) -> None:
        if self.eager and not self.scheduled:
            self.scheduled = True  # later frames of this turn are corked
            asyncio.get_running_loop().call_soon(self.flush)
            if not self.transport.is_closing():
                self.transport.writelines(tls_pieces(buffers) if self.tls else buffers)
            return
        self.pending.extend(buffers)
        self.pending_bytes += size
        if self.pending_bytes >= _CORK_FLUSH_BYTES:
            self.flush()
        elif not self.scheduled:
            self.scheduled = True
            dirty = self.dirty
            if dirty is not None and not self.listed:
                if len(dirty) >= _MAX_DIRTY_CORKS:  # an owner that never flushes: the list is only a shortcut
                    for cork in dirty:
                        cork.listed = False
                    dirty.clear()
                self.listed = True
                dirty.append(self)
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        self.scheduled = False
        if not self.pending:
            return
        buffers, self.pending, self.pending_bytes = self.pending, [], 0
        if not self.transport.is_closing():
            self.transport.writelines(tls_pieces(buffers) if self.tls else buffers)
