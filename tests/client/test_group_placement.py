"""Placement of a new group: the least-loaded nodes, and the member leading the fewest groups as its leader."""

import pytest

from quorumlog.client.groups import place, spread_leader
from quorumlog.errors import BadRequest


def test_place_picks_the_least_loaded_nodes_reproducibly():
    assert place({"n0": 3, "n1": 1, "n2": 2, "n3": 1}, 3) == ["n1", "n3", "n2"]
    assert place({"n2": 0, "n0": 0, "n1": 0}, 2) == ["n0", "n1"]


def test_place_refuses_more_replicas_than_nodes():
    with pytest.raises(BadRequest):
        place({"n0": 0, "n1": 0}, 3)
    with pytest.raises(ValueError):
        place({"n0": 0}, 0)


def test_leaders_spread_one_per_node_as_groups_are_created():
    leading: dict[str, int] = {}
    for _ in range(9):
        who = spread_leader(["n0", "n1", "n2"], leading)
        leading[who] = leading.get(who, 0) + 1
    assert leading == {"n0": 3, "n1": 3, "n2": 3}
