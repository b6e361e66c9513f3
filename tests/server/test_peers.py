import pytest

from quorumlog.peers import format_peers, parse_peers


def test_both_forms_give_the_same_ordered_mapping():
    ours = parse_peers("n0=127.0.0.1:7001,n1=127.0.0.1:7002,n2=localhost:7003")
    dledger = parse_peers("n0-127.0.0.1:7001;n1-127.0.0.1:7002;n2-localhost:7003")
    assert ours == dledger == {"n0": ("127.0.0.1", 7001), "n1": ("127.0.0.1", 7002), "n2": ("localhost", 7003)}
    assert list(ours) == ["n0", "n1", "n2"]
    assert parse_peers(format_peers(ours)) == ours


def test_hostnames_with_dashes_and_ipv6():
    assert parse_peers("a=my-host:1,b=[::1]:2") == {"a": ("my-host", 1), "b": ("::1", 2)}
    assert parse_peers(format_peers({"b": ("::1", 2)})) == {"b": ("::1", 2)}


@pytest.mark.parametrize("text, names", [
    ("", "empty"),
    ("n0=127.0.0.1", "'127.0.0.1'"),
    ("n0=127.0.0.1:70x1", "'70x1'"),
    ("n0=127.0.0.1:0", "out of range"),
    ("n0=h:1,n0=h:2", "'n0' listed twice"),
    ("n0=h:1,n1=h:1", "h:1"),
    ("n0=h:1,=h:2", "'=h:2'"),
    ("n 0=h:1", "'n 0'"),
])
def test_bad_peers_name_the_bad_part(text, names):
    with pytest.raises(ValueError) as e:
        parse_peers(text)
    assert names in str(e.value)
