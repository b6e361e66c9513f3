"""Kafka's wire protocol, sans I/O: frames, request headers, the API keys and versions this door serves, and
answers (docs/kafka.md "APIs").

The request and response layouts are not hand-written: they are kafka-python's classes, generated from Kafka's
own JSON message schemas (`kafka.protocol`), so every version's fields are right by construction. This module
picks the versions we serve (none flexible: no tagged fields, see SERVED) and wraps their encode/decode.

A frame is `size i32 | request header | body`; the request header (v1) is `api_key i16 | api_version i16 |
correlation_id i32 | client_id nullable string`. Answers keep the correlation id (response header v0).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from kafka.protocol.admin import (CreateTopicsRequest, CreateTopicsResponse, DeleteTopicsRequest,
                                  DeleteTopicsResponse, DescribeConfigsRequest, DescribeConfigsResponse,
                                  DescribeGroupsRequest, DescribeGroupsResponse, ListGroupsRequest, ListGroupsResponse)
from kafka.protocol.consumer import (FetchRequest, FetchResponse, HeartbeatRequest, HeartbeatResponse,
                                     JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest, LeaveGroupResponse,
                                     ListOffsetsRequest, ListOffsetsResponse, OffsetCommitRequest,
                                     OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse,
                                     SyncGroupRequest, SyncGroupResponse)
from kafka.protocol.metadata import (ApiVersionsRequest, ApiVersionsResponse, FindCoordinatorRequest,
                                     FindCoordinatorResponse, MetadataRequest, MetadataResponse)
from kafka.protocol.producer import (InitProducerIdRequest, InitProducerIdResponse, ProduceRequest,
                                     ProduceResponse)
from kafka.protocol.sasl import (SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
                                 SaslHandshakeResponse)

MAX_FRAME_BYTES = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes (100 MiB): a bigger size closes the link
_I32 = struct.Struct(">i")
_HEAD = struct.Struct(">hhi")

# error codes (Kafka's Errors.java)
NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
MESSAGE_TOO_LARGE = 10
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
INVALID_TOPIC_EXCEPTION = 17
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
UNSUPPORTED_VERSION = 35
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_REQUEST = 42
UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
SASL_AUTHENTICATION_FAILED = 58
UNKNOWN_SERVER_ERROR = -1
INVALID_RECORD = 87


class ProtocolError(ValueError):
    """The peer sent something that is not Kafka's protocol: its connection is closed."""


@dataclass(frozen=True, slots=True)
class Api:
    key: int
    name: str
    request: Any
    response: Any
    min_version: int
    max_version: int


# What we serve: non-flexible versions only (no tagged fields), enough for librdkafka 2.x, kafka-python 2.x/3.x,
# kcat and kafkajs, which all fall back to these through ApiVersions.
SERVED: dict[int, Api] = {a.key: a for a in (
    Api(0, "Produce", ProduceRequest, ProduceResponse, 3, 8),
    Api(1, "Fetch", FetchRequest, FetchResponse, 4, 11),
    Api(2, "ListOffsets", ListOffsetsRequest, ListOffsetsResponse, 1, 5),
    Api(3, "Metadata", MetadataRequest, MetadataResponse, 1, 8),
    Api(8, "OffsetCommit", OffsetCommitRequest, OffsetCommitResponse, 2, 7),
    Api(9, "OffsetFetch", OffsetFetchRequest, OffsetFetchResponse, 1, 5),
    Api(10, "FindCoordinator", FindCoordinatorRequest, FindCoordinatorResponse, 0, 2),
    Api(11, "JoinGroup", JoinGroupRequest, JoinGroupResponse, 0, 5),
    Api(12, "Heartbeat", HeartbeatRequest, HeartbeatResponse, 0, 3),
    Api(13, "LeaveGroup", LeaveGroupRequest, LeaveGroupResponse, 0, 3),
    Api(14, "SyncGroup", SyncGroupRequest, SyncGroupResponse, 0, 3),
    Api(15, "DescribeGroups", DescribeGroupsRequest, DescribeGroupsResponse, 0, 4),
    Api(16, "ListGroups", ListGroupsRequest, ListGroupsResponse, 0, 2),
    Api(17, "SaslHandshake", SaslHandshakeRequest, SaslHandshakeResponse, 0, 1),
    Api(18, "ApiVersions", ApiVersionsRequest, ApiVersionsResponse, 0, 2),
    Api(19, "CreateTopics", CreateTopicsRequest, CreateTopicsResponse, 0, 4),
    Api(20, "DeleteTopics", DeleteTopicsRequest, DeleteTopicsResponse, 0, 3),
    Api(22, "InitProducerId", InitProducerIdRequest, InitProducerIdResponse, 0, 1),
    Api(32, "DescribeConfigs", DescribeConfigsRequest, DescribeConfigsResponse, 0, 2),
    Api(36, "SaslAuthenticate", SaslAuthenticateRequest, SaslAuthenticateResponse, 0, 1),
)}
for _a in SERVED.values():
    assert _a.max_version <= _a.request.max_version and not _a.request.flexible_version_q(_a.max_version), _a
FETCH = 1
API_VERSIONS = 18


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int  # where the body starts in the frame


class FrameReader:
    """Bytes in, whole frames out (h11's shape): feed(data), then next_frame() until it returns None."""

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()

    def feed(self, data: bytes) -> None:
        self._buf += data

    def next_frame(self) -> bytes | None:
        if len(self._buf) < 4:
            return None
        (size,) = _I32.unpack_from(self._buf, 0)
        if size < 0 or size > self.max_frame_bytes:  # (a short frame may be a bare SASL token: parse_header checks)
            raise ProtocolError(f"frame size {size} outside 0..{self.max_frame_bytes}")
        if len(self._buf) < 4 + size:
            return None
        frame = bytes(self._buf[4:4 + size])
        del self._buf[:4 + size]
        return frame


def parse_header(frame: bytes) -> RequestHeader:
    """The request header (v1 layout; a flexible request's header v2 only adds tagged fields after client_id,
    and those requests are answered without reading their body)."""
    if len(frame) < _HEAD.size + 2:
        raise ProtocolError("frame shorter than a request header")
    api_key, api_version, correlation_id = _HEAD.unpack_from(frame, 0)
    (n,) = struct.unpack_from(">h", frame, _HEAD.size)
    pos = _HEAD.size + 2
    if n < -1 or pos + max(n, 0) > len(frame):
        raise ProtocolError(f"client_id of {n} bytes beyond the frame")
    client_id = None if n == -1 else frame[pos:pos + n].decode("utf-8", "replace")
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos + max(n, 0))


def served(api_key: int, api_version: int) -> Api | None:
    api = SERVED.get(api_key)
    if api is None or not api.min_version <= api_version <= api.max_version:
        return None
    return api


def decode_request(api: Api, header: RequestHeader, frame: bytes) -> Any:
    try:
        return api.request.decode(memoryview(frame)[header.body_offset:], version=header.api_version)
    except Exception as e:  # noqa: BLE001 - the generated decoder raises struct/Index/Value/Unicode errors alike
        raise ProtocolError(f"{api.name} v{header.api_version}: cannot decode the body: {e!r}") from None


def build(cls: Any, fields: dict[str, Any]) -> Any:
    """An instance of the generated class `cls` (a response at a version, or one of its nested structs) from
    plain dicts and lists: nested structs by name, fields the version lacks dropped, absent ones defaulted."""
    out = {}
    known = cls.fields
    for name, value in fields.items():
        f = known.get(name)
        if f is None:
            raise KeyError(f"{getattr(cls, '__name__', cls)} has no field {name!r}")
        if f.is_struct_array():
            value = None if value is None else [build(f.data_class, v) for v in value]
        elif f.is_struct():
            value = build(f.data_class, value)
        out[name] = value
    return cls(**out)


def encode_response(api: Api, version: int, correlation_id: int, fields: dict[str, Any]) -> bytes:
    """A whole response frame (size, header v0, body) of `api` at `version`."""
    if api.key == FETCH:
        return encode_fetch_response(version, correlation_id, fields)
    msg = build(api.response[version], fields)
    body = msg.encode(version=version)
    return _I32.pack(len(body) + 4) + _I32.pack(correlation_id) + bytes(body)


_FETCH_PARTITION = struct.Struct(">ihqq")  # partition_index, error_code, high_watermark, last_stable_offset
_I16, _I64 = struct.Struct(">h"), struct.Struct(">q")


def encode_fetch_response(version: int, correlation_id: int, fields: dict[str, Any]) -> bytes:
    """encode_response for Fetch (v4..v11), written out: the records (megabytes per answer) are copied once,
    where kafka-python's generic encoder copies them several times over (tests hold the two equal)."""
    parts = [b"", _I32.pack(correlation_id), _I32.pack(fields["throttle_time_ms"])]
    if version >= 7:
        parts.append(_I16.pack(fields["error_code"]) + _I32.pack(fields["session_id"]))
    parts.append(_I32.pack(len(fields["responses"])))
    for topic in fields["responses"]:
        name = topic["topic"].encode("utf-8")
        parts.append(_I16.pack(len(name)) + name + _I32.pack(len(topic["partitions"])))
        for p in topic["partitions"]:
            parts.append(_FETCH_PARTITION.pack(p["partition_index"], p["error_code"], p["high_watermark"],
                                               p["last_stable_offset"]))
            if version >= 5:
                parts.append(_I64.pack(p["log_start_offset"]))
            aborted = p["aborted_transactions"]
            parts.append(_I32.pack(-1 if aborted is None else len(aborted)))
            for a in aborted or ():
                parts.append(_I64.pack(a["producer_id"]) + _I64.pack(a["first_offset"]))
            if version >= 11:
                parts.append(_I32.pack(p["preferred_read_replica"]))
            records = p["records"]
            parts.append(_I32.pack(-1 if records is None else len(records)))
            if records:
                parts.append(records)
    parts[0] = _I32.pack(sum(map(len, parts)))
    return b"".join(parts)


def api_versions_body(error_code: int) -> dict[str, Any]:
    return {"error_code": error_code, "throttle_time_ms": 0,
            "api_keys": [{"api_key": a.key, "min_version": a.min_version, "max_version": a.max_version}
                         for a in SERVED.values()]}


def unsupported_response(header: RequestHeader) -> bytes:
    """The answer to an API key or version we do not serve. ApiVersions at a version beyond ours: its v0 body
    with UNSUPPORTED_VERSION and our list (what brokers do; the client retries with a version we list). Any
    other: the API's own response at that version with UNSUPPORTED_VERSION where it has a top-level error
    code, else just the correlation id and the error code (the client asked for something ApiVersions never
    offered it)."""
    if header.api_key == API_VERSIONS:
        return encode_response(SERVED[API_VERSIONS], 0, header.correlation_id, api_versions_body(UNSUPPORTED_VERSION))
    return _I32.pack(6) + _I32.pack(header.correlation_id) + struct.pack(">h", UNSUPPORTED_VERSION)
