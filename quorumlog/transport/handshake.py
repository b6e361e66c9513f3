"""The handshake: the first frame on every connection is a Hello; the server answers HelloOk or HelloError.

    Hello       magic b"QLOG" | version u16 | role u8 | group | node_id | token | address (short strings; token
                and address may be None; address, since version 3: where a PEER listens, host:port)
    HelloOk     version u16 | group | node_id (the server's member id)
    HelloError  code i32 | message (u32 text); the server closes the connection after sending it
    GroupSelect group (short string): on a peer connection, the frames that follow belong to this group

For role PEER, node_id is the sender's member id and must be in the server's member list (UNKNOWN_MEMBER
otherwise). A peer link between two nodes is shared by every group they both host: it opens with the group
NODE_LINK ("*": any node that is a member of some group here) and a GroupSelect precedes a message of
another group than the one before it. For role CLIENT node_id is a free-form client name and the group is
the one its requests are for. A wrong magic or an unsupported version is PROTOCOL_ERROR, a group not hosted
here UNKNOWN_GROUP, a wrong token UNAUTHORIZED. `check_hello` is pure so the rules are tested without sockets.
A peer's address tells a node that is still joining where the leader that added it listens: that leader may be
a node its own bootstrap peers do not name, and only that leader can send it the log that would name it.
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import Callable

from ..codes import ResponseCode
from ..errors import ProtocolError, RemoteProtocolError
from ..frozen import frozen
from .frames import FRAME_HEADER
from .kinds import Kind

MAGIC = b"QLOG"
PROTOCOL_VERSION = 3  # 2: GroupSelect frames on peer links (many groups per node); 3: the peer's address
SUPPORTED_VERSIONS = frozenset({1, 2, 3})  # a version-1 peer or client simply never selects a group
NODE_LINK = "*"  # the group a shared peer link opens with
# A Hello is three short strings and a few bytes; before the handshake a connection may not make us buffer more.
MAX_HELLO_FRAME_BYTES = 4096
DEFAULT_HANDSHAKE_TIMEOUT_MS = 3_000

_HELLO = struct.Struct(">4sHB")
_HELLO_OK = struct.Struct(">H")
_HELLO_ERROR = struct.Struct(">iI")
_U16 = struct.Struct(">H")


class _AnyMember(frozenset):
    """What `members_of` answers while this node still waits for the configuration that adds it: the leader
    that added it may be a node its bootstrap peers do not name, so it accepts any peer (the token and, with
    TLS, the cluster CA still guard the port)."""

    def __contains__(self, node_id: object) -> bool:
        return True


ANY_MEMBER: frozenset[str] = _AnyMember()


class Role(IntEnum):
    CLIENT = 0
    PEER = 1


@frozen
class Hello:
    group: str
    node_id: str
    role: Role
    token: str | None = None
    version: int = PROTOCOL_VERSION
    magic: bytes = MAGIC
    address: str | None = None


@frozen
class HelloOk:
    group: str
    node_id: str
    version: int = PROTOCOL_VERSION


@frozen
class HelloError:
    code: ResponseCode
    message: str = ""


def _short(s: str | None) -> bytes:
    if s is None:
        return b"\xff\xff"
    raw = s.encode("utf-8")
    if len(raw) >= 0xFFFF:
        raise ValueError("string too long for a handshake")
    return _U16.pack(len(raw)) + raw


def _read_short(p: memoryview, pos: int) -> tuple[str | None, int]:
    (n,) = _U16.unpack_from(p, pos)
    pos += 2
    if n == 0xFFFF:
        return None, pos
    if pos + n > len(p):
        raise RemoteProtocolError("handshake string truncated")
    return str(p[pos:pos + n], "utf-8"), pos + n


def _frame(kind: Kind, payload: bytes) -> bytes:
    return FRAME_HEADER.pack(len(payload) + 1, kind) + payload


def encode_hello(h: Hello) -> bytes:
    payload = _HELLO.pack(h.magic, h.version, h.role) + _short(h.group) + _short(h.node_id) + _short(h.token)
    if h.version >= 3:
        payload += _short(h.address)
    return _frame(Kind.HELLO, payload)


def encode_hello_ok(h: HelloOk) -> bytes:
    return _frame(Kind.HELLO_OK, _HELLO_OK.pack(h.version) + _short(h.group) + _short(h.node_id))


def encode_hello_error(h: HelloError) -> bytes:
    raw = h.message.encode("utf-8")[:1024]
    return _frame(Kind.HELLO_ERROR, _HELLO_ERROR.pack(h.code, len(raw)) + raw)


def encode_group_select(group: str) -> bytes:
    return _frame(Kind.GROUP_SELECT, _short(group))


def _guard(fn):
    def wrapped(payload):
        p = payload if isinstance(payload, memoryview) else memoryview(payload)
        try:
            return fn(p)
        except ProtocolError:
            raise
        except (struct.error, ValueError, UnicodeDecodeError, IndexError) as e:
            raise RemoteProtocolError(f"malformed handshake: {e}") from None
    wrapped.__name__ = fn.__name__
    wrapped.__doc__ = fn.__doc__
    return wrapped


@_guard
def decode_hello(p: memoryview) -> Hello:
    """A Hello, whatever its magic and version (check_hello judges them); ProtocolError if unreadable."""
    magic, version, role = _HELLO.unpack_from(p)
    if magic != MAGIC:
        # Another protocol's bytes: do not try to read the rest.
        return Hello("", "", Role.CLIENT, None, version, bytes(magic))
    pos = _HELLO.size
    group, pos = _read_short(p, pos)
    node_id, pos = _read_short(p, pos)
    token, pos = _read_short(p, pos)
    address = None
    if version >= 3:
        address, pos = _read_short(p, pos)
    if pos != len(p):
        raise RemoteProtocolError("trailing bytes in Hello")
    if group is None or node_id is None:
        raise RemoteProtocolError("Hello without group or node id")
    try:
        r = Role(role)
    except ValueError:
        raise RemoteProtocolError(f"unknown role {role}") from None
    return Hello(group, node_id, r, token, version, bytes(magic), address)


@_guard
def decode_hello_ok(p: memoryview) -> HelloOk:
    (version,) = _HELLO_OK.unpack_from(p)
    group, pos = _read_short(p, _HELLO_OK.size)
    node_id, pos = _read_short(p, pos)
    if pos != len(p) or group is None or node_id is None:
        raise RemoteProtocolError("malformed HelloOk")
    return HelloOk(group, node_id, version)


@_guard
def decode_hello_error(p: memoryview) -> HelloError:
    code, n = _HELLO_ERROR.unpack_from(p)
    if _HELLO_ERROR.size + n != len(p):
        raise RemoteProtocolError("malformed HelloError")
    return HelloError(ResponseCode.of(code), str(p[_HELLO_ERROR.size:], "utf-8", "replace"))


@_guard
def decode_group_select(p: memoryview) -> str:
    group, pos = _read_short(p, 0)
    if group is None or pos != len(p):
        raise RemoteProtocolError("malformed GroupSelect")
    return group


def check_hello(h: Hello, *, members_of: Callable[[str], "frozenset[str] | set[str] | None"],
                token: str | None = None) -> HelloError | None:
    """None if the server accepts this Hello, else the error to answer with before closing. `members_of(g)`
    gives the members of group g hosted here (for NODE_LINK: every node that is a member of any), None if
    g is not hosted here."""
    if h.magic != MAGIC:
        return HelloError(ResponseCode.PROTOCOL_ERROR, f"bad magic {h.magic!r}")
    if h.version not in SUPPORTED_VERSIONS:
        return HelloError(ResponseCode.PROTOCOL_ERROR,
                          f"protocol version {h.version} not supported (server speaks {PROTOCOL_VERSION})")
    members = members_of(h.group)
    if members is None:
        return HelloError(ResponseCode.UNKNOWN_GROUP, f"group {h.group!r} is not served here")
    if h.role == Role.PEER and h.node_id not in members:
        what = "any group here" if h.group == NODE_LINK else f"group {h.group!r}"
        return HelloError(ResponseCode.UNKNOWN_MEMBER, f"node {h.node_id!r} is not a member of {what}")
    if token is not None and not _same_secret(h.token or "", token):
        return HelloError(ResponseCode.UNAUTHORIZED, "bad or missing token")
    return None


def _same_secret(given: str, token: str) -> bool:
    """Compared in constant time. (hmac is imported here, on the node's side: with hashlib it costs every
    command 10 ms at start-up, and a client never checks a token.)"""
    import hmac
    return hmac.compare_digest(given.encode(), token.encode())
