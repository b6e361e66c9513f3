import pytest

from quorumlog.codes import ResponseCode
from quorumlog.errors import EntryTooLarge, NotLeader, QuorumLogError


def test_dledger_numbers_kept():
    assert ResponseCode.SUCCESS == 200
    assert ResponseCode.NOT_LEADER == 404
    assert ResponseCode.REPEATED_PUSH == 413
    assert ResponseCode.DISK_FULL == 415
    assert ResponseCode.REQUEST_WITH_EMPTY_BODYS == 420
    assert ResponseCode.LEADER_TRANSFERRING == 506
    assert all(c >= 1000 for c in ResponseCode if c.name in {"ENTRY_TOO_LARGE", "BAD_REQUEST", "UNAUTHORIZED"})


def test_error_for_code_maps_class_and_retriable():
    err = QuorumLogError.for_code(404, leader_id="n1")
    assert isinstance(err, NotLeader) and err.retriable and err.leader_id == "n1"
    assert isinstance(QuorumLogError.for_code(ResponseCode.ENTRY_TOO_LARGE), EntryTooLarge)
    unknown = QuorumLogError.for_code(99999)
    assert type(unknown) is QuorumLogError and unknown.code == ResponseCode.UNKNOWN


def test_every_code_of_ours_raises_its_own_error_class():
    # (DLedger's peer-protocol codes below 1000 stay generic: a client never acts on them one by one)
    from quorumlog.errors import QuorumLogError
    _BY_CODE = QuorumLogError._by_code

    missing = [c.name for c in ResponseCode if c >= 1000 and c not in _BY_CODE]
    assert missing == []


def test_a_protocol_error_says_whose_fault_it_was():
    """Garbage from the peer is a RemoteProtocolError; a message this side cannot encode is a
    LocalProtocolError (still a ValueError for older callers); both are ProtocolErrors with its code."""
    from quorumlog.errors import LocalProtocolError, ProtocolError, RemoteProtocolError
    from quorumlog.transport import codec
    from quorumlog.transport.frames import FrameDecoder
    from quorumlog.wire.client import StatusRequest

    buffers = codec.encode(StatusRequest(7))
    frame = b"".join(bytes(b) for b in buffers)
    kind = frame[4]
    with pytest.raises(RemoteProtocolError):
        codec.decode(kind, frame[5:] + b"trailing garbage")
    with pytest.raises(LocalProtocolError) as e:
        codec.encode(StatusRequest(-1))  # a request id is a u64 on the wire
    assert isinstance(e.value, ValueError) and isinstance(e.value, ProtocolError)
    assert e.value.code == ResponseCode.PROTOCOL_ERROR and type(QuorumLogError.for_code(e.value.code)) is ProtocolError
    d = FrameDecoder(max_frame_bytes=16)
    with pytest.raises(RemoteProtocolError):
        d.feed(b"\x7f\xff\xff\xff" + b"x")  # a length prefix nobody may trust
        d.next_frame()


def test_a_code_maps_to_the_class_the_errors_module_declares_for_it():
    """One class per code in quorumlog/errors.py (a second would fail at import); a subclass elsewhere that
    names a code (spark's DataLoss) never replaces it."""
    import quorumlog.errors as errors
    from quorumlog.spark.batch import DataLoss

    class Elsewhere(errors.QuorumLogError):
        code = ResponseCode.NOT_LEADER

    assert type(QuorumLogError.for_code(ResponseCode.NOT_LEADER)) is errors.NotLeader
    assert isinstance(DataLoss("x"), errors.IndexOutOfRange) and DataLoss.code == ResponseCode.INDEX_OUT_OF_RANGE
    assert type(QuorumLogError.for_code(ResponseCode.INDEX_OUT_OF_RANGE)) is errors.IndexOutOfRange
    assert Elsewhere.code == ResponseCode.NOT_LEADER
