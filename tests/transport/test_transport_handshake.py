"""Handshake rules (pure) and encoding."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quorumlog.codes import ResponseCode
from quorumlog.errors import ProtocolError
from quorumlog.transport.frames import FrameDecoder
from quorumlog.transport.handshake import (
    ANY_MEMBER, NODE_LINK, PROTOCOL_VERSION, Hello, HelloError, HelloOk, Role, check_hello, decode_hello, decode_hello_error,
    decode_hello_ok, encode_hello, encode_hello_error, encode_hello_ok,
)
from quorumlog.transport.kinds import Kind

MEMBERS = {"n0", "n1", "n2"}


def payload_of(wire: bytes):
    dec = FrameDecoder()
    dec.feed(wire)
    return dec.next_frame()


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=30), st.text(max_size=30), st.sampled_from(list(Role)), st.none() | st.text(max_size=30),
       st.none() | st.text(max_size=30), st.sampled_from([1, 2, PROTOCOL_VERSION]))
def test_hello_round_trip(group, node_id, role, token, address, version):
    h = Hello(group, node_id, role, token, version, address=address if version >= 3 else None)
    kind, payload = payload_of(encode_hello(h))
    assert kind == Kind.HELLO and decode_hello(payload) == h


def test_a_joining_node_accepts_any_peer_but_still_checks_the_token():
    members_of = lambda g: ANY_MEMBER if g == NODE_LINK else None  # noqa: E731
    assert check_hello(Hello(NODE_LINK, "n7", Role.PEER, "t"), members_of=members_of, token="t") is None
    err = check_hello(Hello(NODE_LINK, "n7", Role.PEER, "x"), members_of=members_of, token="t")
    assert err is not None and err.code == ResponseCode.UNAUTHORIZED


def test_replies_round_trip():
    kind, p = payload_of(encode_hello_ok(HelloOk("g", "n0")))
    assert kind == Kind.HELLO_OK and decode_hello_ok(p) == HelloOk("g", "n0", PROTOCOL_VERSION)
    kind, p = payload_of(encode_hello_error(HelloError(ResponseCode.UNKNOWN_GROUP, "no such group")))
    assert kind == Kind.HELLO_ERROR and decode_hello_error(p) == HelloError(ResponseCode.UNKNOWN_GROUP, "no such group")


def _members_of(group):
    return MEMBERS if group in ("g", NODE_LINK) else None


@pytest.mark.parametrize("hello, code", [
    (Hello("g", "n1", Role.PEER), None),
    (Hello(NODE_LINK, "n1", Role.PEER), None),
    (Hello(NODE_LINK, "n9", Role.PEER), ResponseCode.UNKNOWN_MEMBER),
    (Hello("g", "n1", Role.PEER, version=1), None),
    (Hello("g", "anyone", Role.CLIENT), None),
    (Hello("g", "n1", Role.PEER, magic=b"HTTP"), ResponseCode.PROTOCOL_ERROR),
    (Hello("g", "n1", Role.PEER, version=PROTOCOL_VERSION + 1), ResponseCode.PROTOCOL_ERROR),
    (Hello("other", "n1", Role.PEER), ResponseCode.UNKNOWN_GROUP),
    (Hello("other", "c", Role.CLIENT), ResponseCode.UNKNOWN_GROUP),
    (Hello("g", "n9", Role.PEER), ResponseCode.UNKNOWN_MEMBER),
])
def test_check_hello(hello, code):
    err = check_hello(hello, members_of=_members_of)
    assert (err.code if err else None) == code


def test_token():
    assert check_hello(Hello("g", "c", Role.CLIENT, "s3cret"), members_of=_members_of, token="s3cret") is None
    for tok in (None, "wrong"):
        err = check_hello(Hello("g", "c", Role.CLIENT, tok), members_of=_members_of, token="s3cret")
        assert err is not None and err.code == ResponseCode.UNAUTHORIZED


def test_wrong_magic_decodes_to_a_refusable_hello():
    kind, p = payload_of(encode_hello(Hello("g", "n1", Role.PEER, magic=b"XXXX")))
    h = decode_hello(p)
    assert check_hello(h, members_of=_members_of).code == ResponseCode.PROTOCOL_ERROR


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=80))
def test_garbage_hello_raises_protocol_error_only(garbage):
    for fn in (decode_hello, decode_hello_ok, decode_hello_error):
        try:
            fn(garbage)
        except ProtocolError:
            pass
