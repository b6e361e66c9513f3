"""A refused request is answered with its own response type, so the caller reads the code and the leader hint
where it looks for them (a KvRequest refused with a GroupResponse broke `_meta` calls that looked for leader_id)."""

from __future__ import annotations

import pytest

from quorumlog.codes import ResponseCode
from quorumlog.server.host import refusal as _refusal
from quorumlog.wire.client import (AppendRequest, AppendResponse, ConsumerGroupRequest, ConsumerGroupResponse,
                                   HaControllerRequest, HaControllerResponse, KvRequest, KvResponse, TopicRequest,
                                   TopicResponse)


@pytest.mark.parametrize("request_type, response_type", [
    (AppendRequest, AppendResponse), (KvRequest, KvResponse), (TopicRequest, TopicResponse),
    (ConsumerGroupRequest, ConsumerGroupResponse), (HaControllerRequest, HaControllerResponse)])
def test_a_refusal_answers_with_the_requests_own_response_type(request_type, response_type):
    request = request_type.__new__(request_type)
    object.__setattr__(request, "request_id", 7)
    r = _refusal(request, ResponseCode.UNKNOWN_GROUP, "group '_meta' is not hosted on n0")
    assert type(r) is response_type
    assert (r.request_id, r.code, r.message, r.leader_id) == (7, ResponseCode.UNKNOWN_GROUP,
                                                              "group '_meta' is not hosted on n0", None)
