"""Hypothesis strategies for every wire message, and a normaliser for comparing Records."""

from __future__ import annotations

import dataclasses

from hypothesis import strategies as st

from quorumlog.codes import ResponseCode
from quorumlog.format.log_entry import Records
from quorumlog.wire.client import (
    AppendRequest, AppendResponse, ReadRequest, ReadResponse, StatusRequest, StatusResponse,
    TransferLeaderRequest, TransferLeaderResponse, MemberChangeRequest, MemberChangeResponse, GroupRequest,
    GroupResponse, KvItem, KvRequest, KvResponse, PulledMessage, TopicRequest, TopicResponse, ConsumerGroupRequest,
    ConsumerGroupResponse, HaControllerRequest, HaControllerResponse,
)
from quorumlog.wire.ledger import BookieOp, BookieOpRequest, BookieOpResponse
from quorumlog.wire.messages import (
    HaEpochs, HaReport, HaTransfer, HeartbeatRequest, HeartbeatResponse, PushRequest, PushResponse, PushType,
    TakeLeadershipRequest, VoteRequest, VoteResponse, VoteResult,
)

i64 = st.integers(-(2**63), 2**63 - 1)
small = st.integers(-2, 10**12)
u64 = st.integers(0, 2**64 - 1)
ids = st.text(min_size=0, max_size=20)
codes = st.sampled_from(list(ResponseCode))
texts = st.text(max_size=200)
chunk_lists = st.lists(st.binary(max_size=300), max_size=4)


@st.composite
def records(draw) -> Records:
    chunks = draw(chunk_lists)
    first = draw(small)
    return Records(first, draw(small), tuple(chunks), sum(len(c) for c in chunks))


opt_records = st.none() | records()

peer_messages = st.one_of(
    st.builds(VoteRequest, ids, ids, i64, i64, i64, st.booleans(), st.booleans()),
    st.builds(VoteResponse, ids, ids, i64, st.sampled_from(list(VoteResult)), st.booleans()),
    st.builds(HeartbeatRequest, ids, ids, i64, i64, st.booleans(), u64),
    st.builds(HeartbeatResponse, ids, ids, i64, codes, u64),
    st.builds(PushRequest, ids, ids, i64, st.sampled_from(list(PushType)), i64, i64, i64, i64, i64, opt_records),
    st.builds(PushResponse, ids, ids, i64, st.sampled_from(list(PushType)), codes, i64, i64, i64),
    st.builds(TakeLeadershipRequest, ids, ids, i64),
    st.builds(HaReport, ids, ids, i64, st.integers(0, 2**63 - 1), st.booleans()),
    st.builds(HaTransfer, ids, ids, i64, st.integers(0, 2**63 - 1), i64, st.binary(max_size=300), st.just(False)),
    st.builds(HaTransfer, ids, ids, i64, st.integers(0, 2**63 - 1), i64, st.just(b""), st.just(True)),
    st.builds(HaEpochs, ids, ids, i64, i64, st.lists(st.tuples(i64, i64), max_size=5).map(tuple)),
)

client_messages = st.one_of(
    st.builds(AppendRequest, u64, st.lists(st.binary(max_size=200), max_size=20).map(tuple), u64, i64),
    st.builds(AppendResponse, u64, codes, st.none() | ids, i64, i64, i64, texts,
              st.lists(i64, max_size=5).map(tuple)),
    st.builds(ReadRequest, u64, i64, i64, i64, i64, st.booleans()),
    st.builds(ReadResponse, u64, codes, i64, i64, opt_records, texts, st.none() | ids),
    st.builds(StatusRequest, u64),
    st.builds(StatusResponse, u64, codes, st.binary(max_size=500)),
    st.builds(TransferLeaderRequest, u64, ids),
    st.builds(TransferLeaderResponse, u64, codes, st.none() | ids, texts),
    st.builds(MemberChangeRequest, u64, ids, ids, ids),
    st.builds(MemberChangeResponse, u64, codes, st.none() | ids, small, texts),
    st.builds(GroupRequest, u64, ids, st.binary(max_size=300)),
    st.builds(GroupResponse, u64, codes, st.binary(max_size=300), texts),
    st.builds(KvRequest, u64, ids, texts, st.binary(max_size=300), i64, i64, i64, u64, i64),
    st.builds(KvResponse, u64, codes, st.none() | ids, i64, i64,
              st.lists(st.builds(KvItem, texts, st.none() | st.binary(max_size=50), i64, i64, i64),
                       max_size=4).map(tuple), st.binary(max_size=100), texts),
    st.builds(BookieOpRequest, u64, st.sampled_from(list(BookieOp)), u64, i64, i64, st.integers(0, 255),
              st.binary(max_size=300)),
    st.builds(BookieOpResponse, u64, codes, st.sampled_from(list(BookieOp)), u64, i64, i64, st.binary(max_size=300),
              texts),
    st.builds(TopicRequest, u64, ids, ids, st.integers(-(2**31), 2**31 - 1), i64, st.integers(-(2**31), 2**31 - 1),
              st.integers(-(2**31), 2**31 - 1), u64, i64, texts,
              st.lists(st.binary(max_size=100), max_size=5).map(tuple)),
    st.builds(TopicResponse, u64, codes, st.none() | ids, i64, i64, i64, st.lists(i64, max_size=5).map(tuple),
              st.lists(st.builds(PulledMessage, i64, i64, i64, i64, st.binary(max_size=60)), max_size=4).map(tuple),
              texts, st.none() | ids),
    st.builds(ConsumerGroupRequest, u64, ids, st.binary(max_size=200)),
    st.builds(ConsumerGroupResponse, u64, codes, st.none() | ids, st.binary(max_size=200), texts),
    st.builds(HaControllerRequest, u64, ids, st.binary(max_size=200)),
    st.builds(HaControllerResponse, u64, codes, st.none() | ids, st.binary(max_size=200), texts),
)

messages = st.one_of(peer_messages, client_messages)


def normalize(msg):
    """Records compare by content: the decoder returns one chunk where the encoder may have had several."""
    if isinstance(msg, HaTransfer):  # (decoded data is a view of the frame)
        return dataclasses.replace(msg, data=bytes(msg.data))
    rec = getattr(msg, "records", None)
    if rec is None:
        return msg
    data = b"".join(bytes(c) for c in rec.chunks)
    return dataclasses.replace(msg, records=Records(rec.first_index, rec.last_index, (data,) if data else (),
                                                    rec.size_bytes))
