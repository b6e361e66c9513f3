"""Where the ledger client places ensembles: writable bookies at random (BookKeeper's default placement), so
ledgers created together spread over the bookies instead of all taking the least loaded ones."""

from __future__ import annotations

import asyncio
import collections

import pytest

from quorumlog.client.ledger_registry import LedgerRegistry
from quorumlog.errors import NotEnoughBookies

BOOKIES = {"n0": {"state": "read_write", "ledgers": 9}, "n1": {"state": "read_write", "ledgers": 1},
           "n2": {"state": "read_write", "ledgers": 2}, "n3": {"state": "read_only", "ledgers": 0},
           "n4": {"state": "read_write", "ledgers": 3}, "n5": {"state": "down"},
           "n6": {"state": "read_write", "ledgers": 0, "decommissioned": True},
           "n7": {"state": "read_write", "ledgers": 5}}
WRITABLE = {"n0", "n1", "n2", "n4", "n7"}


def registry(infos: dict) -> LedgerRegistry:
    reg = LedgerRegistry({"n0": ("127.0.0.1", 1)}, timeout_ms=1000, bookie_timeout_ms=1000, client_name="test")

    async def bookies():
        return infos
    reg.bookies = bookies  # type: ignore[method-assign]
    return reg


def test_ledgers_created_together_spread_over_every_writable_bookie():
    reg = registry(BOOKIES)  # (the counts do not move between the calls, as when ledgers are created at once)
    counts: collections.Counter = collections.Counter()
    for _ in range(500):
        ensemble = asyncio.run(reg.place(3))
        assert len(set(ensemble)) == 3 and set(ensemble) <= WRITABLE
        counts.update(ensemble)
    assert set(counts) == WRITABLE
    assert min(counts.values()) > 200  # 300 expected each; the least loaded first would give n0 none


def test_placement_leaves_out_excluded_and_refuses_when_too_few_remain():
    reg = registry(BOOKIES)
    for _ in range(50):
        assert set(asyncio.run(reg.place(2, exclude={"n0", "n1", "n2"}))) == {"n4", "n7"}
    with pytest.raises(NotEnoughBookies):
        asyncio.run(reg.place(3, exclude={"n0", "n1", "n2"}))


def test_a_bookie_still_registering_takes_no_ledger_and_placement_waits_for_it():
    """A node just started answers INFO before its bookie registered in `_meta`; a ledger placed on it then would
    be in its limbo (absent entries answered UNKNOWN), and no recovery could close the ledger. Placement waits,
    within the timeout, until enough bookies registered; it refuses at once when too few could ever be."""
    infos = {"n0": {"state": "read_write", "limbo_known": True}, "n1": {"state": "read_write", "limbo_known": True},
             "n2": {"state": "read_write", "limbo_known": False}}
    reg = registry(infos)
    assert all("n2" not in asyncio.run(reg.place(2)) for _ in range(30))

    async def registers_soon():
        placing = asyncio.ensure_future(reg.place(3))
        await asyncio.sleep(0.3)
        assert not placing.done()  # waiting for n2
        infos["n2"]["limbo_known"] = True
        return await placing
    assert sorted(asyncio.run(registers_soon())) == ["n0", "n1", "n2"]
    infos["n2"]["limbo_known"] = False
    with pytest.raises(NotEnoughBookies, match="registering"):
        asyncio.run(reg.place(3))  # (the registry's timeout, 1 s, runs out)
    with pytest.raises(NotEnoughBookies):
        asyncio.run(reg.place(4))  # four could never be: no wait
