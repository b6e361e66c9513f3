"""The auditor's under-replication markers: a bookie back with its data leaves a marker, so a ledger whose
fragments were on two bookies lost in turn still has a target on five bookies (the ledger soak's 110 cycles
ended with ten ledgers stuck: every bookie excluded, the two lost ones long since back)."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

from quorumlog.ledger.metadata import LedgerMetadata, Segment, State
from quorumlog.ledger.replication import marker_lost
from quorumlog.server.services.auto_recovery import AutoRecovery, marker_key


def test_a_bookie_back_with_its_data_leaves_the_marker_one_still_gone_stays():
    assert marker_lost(["n0", "n1"], ["n1"], back={"n0", "n2", "n3", "n4"}) == ["n1"]
    assert marker_lost(["n0", "n1"], [], back={"n0", "n1"}) == []  # nothing left to copy: the worker removes it
    assert marker_lost(["n0"], ["n1"], back=set()) == ["n0", "n1"]  # (still silent: it stays named)


class _Calls:
    """`_meta` and the bookies as the auditor sees them: n1 silent past the delay, n0 back (it was lost when
    the marker was written, and a fragment of it already moved to n3)."""

    def __init__(self, md: LedgerMetadata, marker: dict) -> None:
        self.md = md
        self.kv = {marker_key(md.ledger_id): (json.dumps(marker).encode(), 7)}

    async def bookie_states(self):
        up = {"state": "read_write", "limbo_ledgers": [], "limbo_known": True}
        return {"n0": up, "n1": {"state": "down"}, "n2": up, "n3": up, "n4": up}

    async def meta_list(self, prefix):
        return [SimpleNamespace(key=k, value=v, version=ver) for k, (v, ver) in self.kv.items() if k.startswith(prefix)]

    async def ledgers(self):
        return [self.md]

    async def meta(self, op, key, value, version):
        assert op == "put" and self.kv[key][1] == version
        self.kv[key] = (value, version + 1)
        return SimpleNamespace(version=version + 1)


def test_the_auditor_drops_a_bookie_that_came_back_from_a_marker():
    md = LedgerMetadata(9, 3, 2, 2, (Segment(0, ("n1", "n2", "n3")),), state=State.CLOSED, last_entry_id=99,
                        version=4)
    calls = _Calls(md, {"ledger_id": 9, "lost": ["n0", "n1"], "since_ms": 1})
    config = SimpleNamespace(node_id="n2", lost_bookie_recovery_delay_ms=0, open_ledger_rereplication_grace_period_ms=0)
    auditor = AutoRecovery(config, calls, lambda: True)

    async def twice():  # (the first pass starts n1's silence clock; with no delay it is lost at once)
        await auditor.audit()
        await auditor.audit()
    asyncio.run(twice())
    marker = json.loads(calls.kv[marker_key(9)][0])
    assert marker["lost"] == ["n1"]  # n0 is back: n1's fragment may go to n0 or n4, outside {n1, n2, n3}
