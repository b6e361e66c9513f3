"""Peers strings: `n0=127.0.0.1:7001,n1=127.0.0.1:7002` and DLedger's `n0-127.0.0.1:7001;n1-127.0.0.1:7002`.

One parser for the node, the client and the CLI, so every command reads a cluster the same way and a typo
is reported once, naming the part that is wrong.
"""

from __future__ import annotations

import re

Address = tuple[str, int]

_ID_RE = re.compile(r"^[A-Za-z0-9_.]+$")  # no '-': DLedger's form splits id from address at the first '-'


def parse_peers(text: str) -> dict[str, Address]:
    """Peers string → ordered {node_id: (host, port)}; raises ValueError naming the bad part."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("peers: empty peers string (expected e.g. n0=127.0.0.1:7001,n1=127.0.0.1:7002)")
    text = text.strip()
    dledger_form = ";" in text or ("=" not in text and "-" in text)
    parts = [p.strip() for p in re.split(r"[;,]" if dledger_form else r",", text)]
    peers: dict[str, Address] = {}
    for part in parts:
        if not part:
            continue  # a trailing separator is harmless
        sep = "=" if "=" in part else "-"
        node_id, found, address = part.partition(sep)
        node_id, address = node_id.strip(), address.strip()
        if not found or not node_id or not address:
            raise ValueError(f"peers: bad member {part!r} (expected id=host:port or id-host:port)")
        if not _ID_RE.match(node_id):
            raise ValueError(f"peers: bad node id {node_id!r} in {part!r} (letters, digits, '_' and '.' only)")
        host, port = parse_address(address, what=f"member {node_id!r}")
        if node_id in peers:
            raise ValueError(f"peers: node id {node_id!r} listed twice")
        if (host, port) in peers.values():
            raise ValueError(f"peers: address {host}:{port} of {node_id!r} listed twice")
        peers[node_id] = (host, port)
    if not peers:
        raise ValueError(f"peers: no members in {text!r}")
    return peers


def parse_address(address: str, *, what: str = "address") -> Address:
    """`host:port` (or `[v6]:port`) → (host, port); raises ValueError naming `what`."""
    host, sep, port_text = address.strip().rpartition(":")
    if not sep or not host:
        raise ValueError(f"peers: {what}: bad address {address!r} (expected host:port)")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"peers: {what}: bad port {port_text!r} in {address!r}") from None
    if not 0 < port < 65536:
        raise ValueError(f"peers: {what}: port {port} out of range 1..65535")
    return host, port


def format_address(address: Address) -> str:
    """`host:port` (an IPv6 host in brackets), which parse_address reads back."""
    h, p = address
    return f"{f'[{h}]' if ':' in h else h}:{p}"


def format_peers(peers: dict[str, Address]) -> str:
    """The canonical form (`id=host:port,...`), which parse_peers reads back."""
    return ",".join(f"{nid}={format_address(a)}" for nid, a in peers.items())
