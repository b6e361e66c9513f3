"""TLS for every port, with the standard library's `ssl` (docs/interfaces.md "Security").

A node's certificate names the node: its id as a DNS subjectAltName (and its address as an IP one). Peers
verify each other both ways (mutual TLS): a peer link checks that the server's certificate, issued by the
cluster CA, names the node it dialled (`server_hostname` = the node id); the server accepts a PEER Hello
only if the connection presented a certificate from the CA that names the id in the Hello
(`peer_names`). A plain client needs no certificate unless the node requires one
(`tls_require_client_cert`); it verifies the node's certificate against the CA. TLS 1.2 at least.
"""

from __future__ import annotations

import os
import ssl
from functools import lru_cache
from typing import Any

TLS_CA_ENV = "QUORUMLOG_TLS_CA"  # a client's CA file when none is given (the CLI's --tls-ca, cluster.json)


def server_context(cert: str, key: str, ca: str | None, *, require_client_cert: bool = False) -> ssl.SSLContext:
    """The node's listening context. With a CA, clients are asked for a certificate (peers must give one)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    if ca:
        ctx.load_verify_locations(ca)
        ctx.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_OPTIONAL
    return ctx


def http_context(cert: str, key: str) -> ssl.SSLContext:
    """The HTTP port's: no client certificate asked (a browser would prompt for one); the token guards it."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    return ctx


def client_context(ca: str | None, cert: str | None = None, key: str | None = None) -> ssl.SSLContext:
    """A connecting side's context: the server's certificate verified against `ca` (the system's roots if
    None) and its name checked; with cert/key, ours is presented (a node's peer links, or a client of a node
    that requires one)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if ca:
        ctx.load_verify_locations(ca)
    else:
        ctx.load_default_certs()
    if cert:
        ctx.load_cert_chain(cert, key)
    return ctx


@lru_cache(maxsize=8)
def _env_context(ca: str) -> ssl.SSLContext:
    return client_context(ca)


def default_client_context() -> ssl.SSLContext | None:
    """From QUORUMLOG_TLS_CA, if set (None: plain TCP)."""
    ca = os.environ.get(TLS_CA_ENV)
    return _env_context(ca) if ca else None


def peer_names(transport: Any) -> set[str]:
    """The names in the certificate the other side presented (DNS subjectAltNames and the common name); empty
    without TLS or without a certificate. The handshake already verified it against the CA."""
    cert = transport.get_extra_info("peercert") if transport is not None else None
    if not cert:
        return set()
    names = {v for k, v in cert.get("subjectAltName", ()) if k == "DNS"}
    names |= {v for rdn in cert.get("subject", ()) for k, v in rdn if k == "commonName"}
    return names


def describe_ssl_error(e: BaseException, host: str, port: int) -> str:
    text = str(e)
    if "WRONG_VERSION_NUMBER" in text or "wrong version number" in text:
        return f"{host}:{port} did not speak TLS ({text}): is it a plain port? (drop tls_ca / --tls-ca)"
    if "CERTIFICATE_VERIFY_FAILED" in text:
        return f"{host}:{port}: its certificate was not accepted ({text}): another CA, expired, or another name"
    return f"TLS handshake with {host}:{port} failed: {text}"
