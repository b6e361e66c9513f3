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
    from quorumlog.errors import _BY_CODE

    missing = [c.name for c in ResponseCode if c >= 1000 and c not in _BY_CODE]
    assert missing == []
