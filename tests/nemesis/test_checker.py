"""The soak checker must catch each kind of wrong log, and pass a correct one."""

from __future__ import annotations

from quorumlog.soak.checker import FAILED, OK, UNKNOWN, Op, check


def _ok(client, value, t0, t1, index):
    return Op(client, value, t0, t1, OK, index)


def _clean():
    # a and b sequential on one client; c concurrent with b; d unknown (absent); e unknown (present); index 3 = no-op gap
    history = [
        _ok("c0", b"a", 0.0, 1.0, 0),
        _ok("c0", b"b", 1.1, 2.0, 1),
        _ok("c1", b"c", 1.05, 2.5, 2),
        Op("c1", b"d", 2.6, 3.0, UNKNOWN),
        Op("c2", b"e", 2.6, 3.0, UNKNOWN),
        Op("c2", b"f", 3.1, 3.2, FAILED),
        _ok("c0", b"g", 3.3, 4.0, 5),
    ]
    log = [(0, b"a"), (1, b"b"), (2, b"c"), (4, b"e"), (5, b"g")]
    return history, log


def _props(violations):
    return {v.property for v in violations}


def test_clean_history_passes():
    history, log = _clean()
    assert check(history, {"n0": log, "n1": list(log), "n2": list(log)}) == []


def test_concurrent_ops_may_land_in_either_order():
    history = [_ok("c0", b"a", 0.0, 2.0, 1), _ok("c1", b"b", 1.0, 3.0, 0)]
    log = [(0, b"b"), (1, b"a")]
    assert check(history, {"n0": log}) == []


def test_lost_entry_is_reported():
    history, log = _clean()
    log = [e for e in log if e[1] != b"b"]
    v = check(history, {"n0": log, "n1": log, "n2": log})
    assert _props(v) == {"lost"}, v
    assert "b'b'" in v[0].detail


def test_duplicated_entry_is_reported():
    history, log = _clean()
    log = log + [(6, b"c")]
    assert "duplicate" in _props(check(history, {"n0": log, "n1": log, "n2": log}))


def test_unknown_entry_present_twice_is_a_duplicate():
    history, log = _clean()
    log = log + [(6, b"e")]
    assert "duplicate" in _props(check(history, {"n0": log}))


def test_reordered_entry_is_reported():
    history, log = _clean()
    log = [(0, b"b"), (1, b"a"), (2, b"c"), (4, b"e"), (5, b"g")]  # a acked before b was invoked
    v = _props(check(history, {"n0": log}))
    assert "real_time_order" in v and "ack_index_mismatch" in v, v


def test_real_time_order_is_checked_even_when_acks_match_the_log():
    # the log agrees with the acks, but the acks themselves break real-time order
    history = [_ok("c0", b"a", 0.0, 1.0, 1), _ok("c1", b"b", 1.5, 2.0, 0)]
    assert _props(check(history, {"n0": [(0, b"b"), (1, b"a")]})) == {"real_time_order"}


def test_value_no_client_sent_is_reported():
    history, log = _clean()
    log = log + [(6, b"zz")]
    assert _props(check(history, {"n0": log})) == {"phantom"}


def test_failed_value_present_is_reported():
    history, log = _clean()
    log = log + [(6, b"f")]
    assert _props(check(history, {"n0": log})) == {"failed_present"}


def test_divergent_nodes_are_reported():
    history, log = _clean()
    other = [(0, b"a"), (1, b"b"), (2, b"c"), (4, b"d"), (5, b"g")]
    assert "divergent" in _props(check(history, {"n0": log, "n1": other}))


def test_shorter_node_is_reported_only_when_healed_logs_must_be_equal():
    history, log = _clean()
    assert _props(check(history, {"n0": log, "n1": log[:3]})) == {"divergent"}
    assert check(history, {"n0": log, "n1": log[:3]}, must_be_equal=False) == []


def test_index_order_is_reported():
    history, log = _clean()
    bad = [(0, b"a"), (2, b"c"), (1, b"b"), (4, b"e"), (5, b"g")]
    assert "index_order" in _props(check(history, {"n0": bad}))
