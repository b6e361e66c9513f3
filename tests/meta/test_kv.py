"""The `_meta` key/value state machine: compare-and-set, prefix lists, watch history, snapshots — against a
plain dict model, and replicas applying the same entries agree byte for byte."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quorumlog.codes import ResponseCode
from quorumlog.errors import BadRequest, CorruptEntry, WatchCompacted
from quorumlog.meta.kv import KVStore, encode_delete, encode_put
from quorumlog.meta.kv import MAX_KEY_BYTES, decode_command

OK, CONFLICT = ResponseCode.SUCCESS, ResponseCode.METADATA_VERSION_CONFLICT


def test_put_versions_and_revisions_follow_the_log():
    kv = KVStore()
    r = kv.apply(10, encode_put("nodes/n0", b"127.0.0.1:7000"))
    assert (r.code, r.version, r.revision) == (OK, 1, 10)
    r = kv.apply(11, encode_put("nodes/n0", b"127.0.0.1:7001"))
    assert (r.code, r.version, r.revision) == (OK, 2, 11)
    got = kv.get("nodes/n0")
    assert (got.value, got.version, got.create_revision, got.mod_revision) == (b"127.0.0.1:7001", 2, 10, 11)


def test_compare_and_set_create_only_update_and_delete():
    kv = KVStore()
    assert kv.apply(1, encode_put("ledgers/7", b"OPEN", expected_version=0)).code == OK
    lost = kv.apply(2, encode_put("ledgers/7", b"OPEN-again", expected_version=0))
    assert (lost.code, lost.version) == (CONFLICT, 1)  # create-only lost: the key exists at version 1
    assert kv.get("ledgers/7").value == b"OPEN"
    assert kv.apply(3, encode_put("ledgers/7", b"IN_RECOVERY", expected_version=1)).code == OK
    stale = kv.apply(4, encode_put("ledgers/7", b"CLOSED", expected_version=1))  # a second recovery, too late
    assert (stale.code, stale.version, kv.get("ledgers/7").value) == (CONFLICT, 2, b"IN_RECOVERY")
    assert kv.apply(5, encode_delete("ledgers/7", expected_version=1)).code == CONFLICT
    assert kv.apply(6, encode_delete("ledgers/7", expected_version=2)).code == OK
    assert kv.get("ledgers/7") is None
    assert kv.revision == 6


def test_prefix_list_is_in_key_order_and_exact_on_the_prefix():
    kv = KVStore()
    for i, key in enumerate(["groups/b", "groups/a", "groupsX", "nodes/n1", "groups/a/members"], start=1):
        kv.apply(i, encode_put(key, key.encode()))
    assert [e.key for e in kv.list("groups/")] == ["groups/a", "groups/a/members", "groups/b"]
    assert [e.key for e in kv.list("")] == sorted(["groups/b", "groups/a", "groupsX", "nodes/n1", "groups/a/members"])
    assert kv.list("topics/") == []


def test_watch_history_and_compaction():
    kv = KVStore(history_limit=3)
    for i in range(1, 6):
        kv.apply(i, encode_put(f"k{i % 2}", b"%d" % i))
    assert [c.revision for c in kv.changes_since(2)] == [3, 4, 5]
    assert [c.revision for c in kv.changes_since(3, prefix="k1")] == [5]
    with pytest.raises(WatchCompacted):
        kv.changes_since(1)  # revision 2 is no longer kept
    kv.apply(6, encode_delete("k1"))
    (last,) = kv.changes_since(5)
    assert (last.key, last.value, last.version) == ("k1", None, 0)


def test_a_snapshot_restores_the_same_store_and_its_watch_history():
    """A restart (or a snapshot install) keeps the watch history: a watcher resuming from revision 0 in a
    store of 40 revisions gets the changes, not WATCH_COMPACTED."""
    kv = KVStore()
    for i in range(1, 40):
        kv.apply(i, encode_put(f"k/{i % 7}", bytes([i]) * i))
    kv.apply(40, encode_delete("k/3"))
    snap = kv.snapshot()
    back = KVStore.restore(snap)
    assert back.snapshot() == snap
    assert (back.applied_index, back.revision) == (40, 40)
    assert back.list("k/") == kv.list("k/")
    assert back.changes_since(40) == []
    assert back.changes_since(0) == kv.changes_since(0) and len(back.changes_since(0)) == 40
    with pytest.raises(CorruptEntry):
        KVStore.restore(snap[:-1] + bytes([snap[-1] ^ 1]))


def test_a_snapshot_carries_the_history_that_fits_and_compacts_the_rest():
    from quorumlog.meta.kv import MAX_SNAPSHOT_HISTORY_BYTES, MAX_VALUE_BYTES
    assert 3 * MAX_VALUE_BYTES < MAX_SNAPSHOT_HISTORY_BYTES <= 4 * MAX_VALUE_BYTES
    kv = KVStore(history_limit=3)
    for i in range(1, 6):
        kv.apply(i, encode_put("k", b"%d" % i))
    back = KVStore.restore(kv.snapshot(), history_limit=3)  # the store's own compaction is kept
    assert [c.revision for c in back.changes_since(2)] == [3, 4, 5]
    with pytest.raises(WatchCompacted):
        back.changes_since(1)
    big = KVStore()
    value = b"v" * MAX_VALUE_BYTES
    for i in range(1, 6):
        big.apply(i, encode_put(f"k{i}", value))
    snap = big.snapshot()
    assert len(snap) < 5 * len(value) + MAX_SNAPSHOT_HISTORY_BYTES
    back = KVStore.restore(snap)
    assert [c.revision for c in back.changes_since(2)] == [3, 4, 5]  # the newest three fit
    with pytest.raises(WatchCompacted):
        back.changes_since(1)


def test_bad_commands_are_refused_before_the_log_and_answered_alike_after_it():
    with pytest.raises(BadRequest):
        encode_put("", b"x")
    with pytest.raises(BadRequest):
        encode_put("k" * (MAX_KEY_BYTES + 1), b"x")
    with pytest.raises(BadRequest):
        encode_delete("k", expected_version=-1)
    kv = KVStore()
    for i, junk in enumerate([b"", b"\x09" * 20, encode_put("k", b"v") + b"!", encode_put("k", b"v")[:-1]], 1):
        r = kv.apply(i, junk)
        assert r.code == ResponseCode.BAD_REQUEST and kv.list() == []
    with pytest.raises(ValueError):
        kv.apply(2, encode_put("k", b"v"))  # applied twice / out of order


keys = st.sampled_from(["a", "a/b", "a/c", "b", "é/ü"])
commands = st.lists(st.tuples(st.sampled_from(["put", "delete"]), keys, st.binary(max_size=8),
                              st.one_of(st.none(), st.integers(0, 3))), max_size=60)


@settings(max_examples=300, deadline=None)
@given(commands)
def test_matches_a_dict_model_and_replicas_agree(cmds):
    kv, replica = KVStore(history_limit=16), KVStore(history_limit=16)
    model: dict[str, tuple[bytes, int]] = {}
    for index, (op, key, value, expected) in enumerate(cmds, start=1):
        body = encode_put(key, value, expected) if op == "put" else encode_delete(key, expected)
        assert decode_command(body)[1:] == (key, value if op == "put" else None, expected)
        have = model.get(key, (b"", 0))[1]
        r = kv.apply(index, body)
        assert replica.apply(index, body) == r
        if expected is not None and expected != have:
            assert (r.code, r.version) == (CONFLICT, have)
        elif op == "put":
            model[key] = (value, have + 1)
            assert (r.code, r.version) == (OK, have + 1)
        else:
            model.pop(key, None)
            assert (r.code, r.version) == (OK, 0)
    assert {e.key: (e.value, e.version) for e in kv.list()} == model
    assert kv.snapshot() == replica.snapshot()
    assert KVStore.restore(kv.snapshot()).list() == kv.list()


def test_the_outcome_of_a_retried_write_whose_result_is_gone():
    from quorumlog.codes import ResponseCode
    from quorumlog.meta.kv import KVStore, encode_delete, encode_put
    kv = KVStore()
    kv.apply(0, encode_put("k", b"1"))
    kv.apply(1, encode_put("k", b"2", 7))  # conflicted
    kv.apply(2, encode_put("k", b"3", 1))  # took
    kv.apply(3, encode_delete("gone", 1))  # conflicted (absent)
    assert kv.retried_outcome(1, "put", "k", 7).code == ResponseCode.DUPLICATE_SEQUENCE_TOO_OLD
    assert kv.retried_outcome(2, "put", "k", 1).code == ResponseCode.SUCCESS
    assert kv.retried_outcome(3, "delete", "gone", 1).code == ResponseCode.DUPLICATE_SEQUENCE_TOO_OLD
    assert kv.retried_outcome(0, "put", "k", None).code == ResponseCode.SUCCESS
