"""Node-level liveness (raft/peer_liveness.py): a node silent past the timeout is reported once per silence."""

from quorumlog.raft.peer_liveness import PeerLiveness


def test_silence_is_reported_once_and_ends_when_the_node_speaks():
    lv = PeerLiveness(500)
    assert lv.newly_silent(["a", "b"], 0) == []  # first asked at 0: counts from there
    lv.heard("a", 400)
    assert lv.newly_silent(["a", "b"], 501) == ["b"]
    assert lv.newly_silent(["a", "b"], 901) == ["a"]
    assert lv.newly_silent(["a", "b"], 5_000) == []  # once per silence
    assert lv.heard("b", 5_001) is True and lv.heard("b", 5_002) is False
    assert lv.newly_silent(["a", "b"], 5_600) == ["b"]


def test_restart_gives_everyone_a_fresh_timeout():
    lv = PeerLiveness(500)
    lv.newly_silent(["a"], 0)
    assert lv.newly_silent(["a"], 600) == ["a"]
    lv.restart(700)
    assert lv.newly_silent(["a"], 1_100) == []
    assert lv.newly_silent(["a"], 1_201) == ["a"]
