"""Auto-recovery (BookKeeper's Auditor and ReplicationWorker), run by every node beside its groups.

The auditor runs on the node that leads its `_meta` replica (the cluster's one elected place, as BookKeeper
elects its auditor through ZooKeeper; two auditors for a moment, around a leader change, only write the same
markers twice). Every `auditor_period_ms` it asks each registered bookie for INFO. A bookie silent for
`lost_bookie_recovery_delay_ms`, or marked decommissioned in its `bookies/ID` record, is lost: every ledger
with a fragment on it gets a marker `underreplicated/<ledger id>` = {lost, since_ms}; so does every ledger a
live bookie is in limbo for (its disk was wiped: BookKeeper would have it decommissioned and its ledgers
re-replicated, here it keeps serving and its lost copies are re-made elsewhere).

Every node's worker claims a marker by compare-and-set ({by, until}: a lease, so a worker that dies leaves
the marker to the next), then for each fragment on a lost bookie copies the entries that bookie held from the
surviving bookies of their write sets to a writable bookie not in the segment (adds with the recovery flag,
so a fenced ledger takes them), and replaces the bookie in the metadata by compare-and-set (ledger/
replication.py). The last segment of a ledger still OPEN has no end yet: its writer gets
`open_ledger_rereplication_grace_period_ms` (counted from the marker) to change its ensemble itself; after
that the worker fences and closes the ledger (ledger/driver.py's recovery) and copies it too. The marker is
deleted once the ledger names no lost bookie.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Callable

from ...codes import ResponseCode
from ...errors import MetadataVersionConflict, NoSuchLedger, NotEnoughBookies, QuorumLogError
from ...ledger.driver import recover
from ...ledger.metadata import LedgerMetadata, State, write_set_positions
from ...ledger.replication import Fragment, entries_to_copy, fragments_on, marker_lost, with_replacement
from ...config import NodeConfig
from ...wire.ledger import FLAG_RECOVERY, BookieOp, BookieOpRequest
from ..repeated_log import RepeatedLog
from .cluster_calls import INFO_TIMEOUT_MS, ClusterCalls

log = logging.getLogger(__name__)

UNDERREPLICATED_PREFIX = "underreplicated/"
CLAIM_LEASE_MS = 60_000
COPY_WINDOW = 64  # entries in flight while copying a fragment


def marker_key(ledger_id: int) -> str:
    return f"{UNDERREPLICATED_PREFIX}{ledger_id:020d}"


def wall_ms() -> int:
    return int(time.time() * 1000)  # markers are read by other nodes: wall clock, not the loop's


class ReplicationFailed(Exception):
    """This pass could not finish a ledger; the marker stays for a later pass."""


class AutoRecovery:
    def __init__(self, cfg: NodeConfig, calls: ClusterCalls, leads_meta: Callable[[], bool]) -> None:
        """`leads_meta`: whether this node leads the `_meta` group now (its auditor runs there)."""
        self._ended_early_log = RepeatedLog(log, every_s=60.0)  # (while `_meta` has no leader, every pass ends so)
        self.calls = calls
        self._leads_meta = leads_meta
        self.me = cfg.node_id
        self.lost_delay_ms = cfg.lost_bookie_recovery_delay_ms
        self.grace_ms = cfg.open_ledger_rereplication_grace_period_ms
        self.silent_since: dict[str, int] = {}  # auditor: bookie -> wall ms it was first found silent
        self.replicated = 0  # fragments copied by this node's worker (status)

    async def run_once(self) -> None:
        """One auditor pass (if we lead `_meta`) and one worker pass. Errors end the pass, not the task."""
        try:
            if self._leads_meta():
                await self.audit()
            await self.work()
        except (QuorumLogError, OSError, asyncio.TimeoutError) as e:
            self._ended_early_log.log("pass", logging.INFO, "auto-recovery pass on %s ended early: %s", self.me, e)

    # -- auditor -------------------------------------------------------------------------------------------
    async def lost_bookies(self) -> tuple[set[str], dict[str, set[int]], set[str]]:
        """The lost bookies; for each live bookie the ledgers it is in limbo for (its disk was wiped: the
        copies it held of them are gone, so their fragments on it are re-replicated like a lost bookie's); and
        the bookies that answer and know their limbo (back with what they hold, but their limbo)."""
        now_ms = wall_ms()
        lost, limbo, answering = set(), {}, set()
        for b, rec in (await self.calls.bookie_states()).items():
            if rec["state"] == "down":
                since = self.silent_since.setdefault(b, now_ms)
                if now_ms - since >= self.lost_delay_ms:
                    lost.add(b)
            else:
                self.silent_since.pop(b, None)
                if rec.get("limbo_ledgers"):
                    limbo[b] = set(rec["limbo_ledgers"])
                if rec.get("limbo_known") and not rec.get("decommissioned"):
                    answering.add(b)
            if rec.get("decommissioned"):
                lost.add(b)
        return lost, limbo, answering

    async def audit(self) -> None:
        lost, limbo, answering = await self.lost_bookies()
        markers = {it.key: it for it in await self.calls.meta_list(UNDERREPLICATED_PREFIX)}
        live = set()
        for md in await self.calls.ledgers():
            key = marker_key(md.ledger_id)
            live.add(key)
            gone = lost | {b for b, lids in limbo.items() if md.ledger_id in lids}
            on_lost = sorted({f.bookie for f in fragments_on(md, gone)})
            found = markers.get(key)
            if found is None:
                if not on_lost:
                    continue
                doc = {"ledger_id": md.ledger_id, "lost": on_lost, "since_ms": wall_ms()}
                try:
                    await self.calls.meta("put", key, json.dumps(doc).encode(), 0)
                    log.warning("auditor: ledger %d has fragments on lost bookies %s", md.ledger_id, on_lost)
                except MetadataVersionConflict:
                    pass  # another auditor pass wrote it
            else:
                doc = json.loads(found.value or b"{}")
                back = answering - gone
                kept = marker_lost(doc.get("lost", []), on_lost, back)
                if kept != sorted(doc.get("lost", [])):
                    doc["lost"] = kept  # (empty: the worker finds nothing to copy and removes the marker)
                    try:
                        await self.calls.meta("put", key, json.dumps(doc).encode(), found.version)
                    except MetadataVersionConflict:
                        pass  # a worker holds it: the next pass updates it
        for key, it in markers.items():
            if key not in live:  # the ledger was deleted
                try:
                    await self.calls.meta("delete", key, b"", it.version)
                except MetadataVersionConflict:
                    pass

    # -- worker --------------------------------------------------------------------------------------------
    async def work(self) -> None:
        for it in await self.calls.meta_list(UNDERREPLICATED_PREFIX):
            doc = json.loads(it.value or b"{}")
            if doc.get("by") not in (None, self.me) and doc.get("until", 0) > wall_ms():
                continue  # another worker's lease
            doc.update(by=self.me, until=wall_ms() + CLAIM_LEASE_MS)
            try:
                claimed = await self.calls.meta("put", it.key, json.dumps(doc).encode(), it.version)
            except MetadataVersionConflict:
                continue
            version = claimed.version
            try:
                done = await self.replicate(int(doc["ledger_id"]), set(doc["lost"]), int(doc["since_ms"]))
            except (ReplicationFailed, QuorumLogError, OSError, asyncio.TimeoutError) as e:
                log.warning("re-replication of ledger %s on %s failed this pass: %s", doc.get("ledger_id"), self.me, e)
                done = False
            try:
                if done:
                    await self.calls.meta("delete", it.key, b"", version)
                    log.info("ledger %s fully replicated again (worker %s)", doc["ledger_id"], self.me)
                else:  # release the lease so the next pass (ours or another's) picks it up
                    doc.pop("by"), doc.pop("until")
                    await self.calls.meta("put", it.key, json.dumps(doc).encode(), version)
            except MetadataVersionConflict:
                pass  # the auditor added a lost bookie meanwhile: the next pass sees it

    async def replicate(self, ledger_id: int, lost: set[str], since_ms: int) -> bool:
        """Copy every fragment of the ledger on a lost bookie; True once the metadata names none."""
        try:
            md = await self.calls.get(ledger_id)
        except NoSuchLedger:
            return True
        if md.state is not State.CLOSED and lost & set(md.last_ensemble):
            if wall_ms() - since_ms < self.grace_ms:
                # the writer may change its ensemble itself; copy what is closed meanwhile
                md = await self._copy_fragments(md, lost, closed_only=True)
                return False
            log.warning("ledger %d: still OPEN on lost bookies %s after the grace period: fencing and closing it",
                        ledger_id, sorted(lost & set(md.last_ensemble)))
            md = await recover(self.calls, md)
        md = await self._copy_fragments(md, lost, closed_only=False)
        return not fragments_on(md, lost)

    async def _copy_fragments(self, md: LedgerMetadata, lost: set[str], *, closed_only: bool) -> LedgerMetadata:
        for f in fragments_on(md, lost):
            if f.last_entry_id is None:
                continue  # the open last segment (closed_only): after the grace period
            for _ in range(4):
                md = await self.calls.get(md.ledger_id)
                current = [g for g in fragments_on(md, lost) if (g.segment, g.position) == (f.segment, f.position)]
                if not current:
                    break  # someone else replaced it
                target = await self._replacement(md, f, lost)
                await self._copy(md, f, target)
                try:
                    md = await self.calls.put(with_replacement(md, f, target))
                    self.replicated += 1
                    log.warning("ledger %d: fragment %d..%s of %s re-replicated to %s", md.ledger_id,
                                f.first_entry_id, f.last_entry_id, f.bookie, target)
                    break
                except (MetadataVersionConflict, ValueError):
                    continue  # the writer or another worker moved the metadata: plan again
            else:
                raise ReplicationFailed(f"ledger {md.ledger_id}: metadata kept changing")
        return md

    async def _replacement(self, md: LedgerMetadata, f: Fragment, lost: set[str]) -> str:
        try:
            return (await self.calls.place(1, set(md.ensembles[f.segment].bookies) | lost))[0]
        except NotEnoughBookies as e:
            raise ReplicationFailed(f"ledger {md.ledger_id}: {e}") from None

    async def _copy(self, md: LedgerMetadata, f: Fragment, target: str) -> None:
        entries = entries_to_copy(md, f)
        sem = asyncio.Semaphore(COPY_WINDOW)
        ensemble = md.ensembles[f.segment].bookies

        async def one(entry_id: int) -> None:
            async with sem:
                holders = [ensemble[p] for p in write_set_positions(entry_id, md.ensemble_size, md.write_quorum)
                           if p != f.position]
                data = await self._read_any(md.ledger_id, entry_id, holders + [f.bookie])
                resp = await self.calls.call(target, BookieOpRequest(
                    self.calls.request_id(), BookieOp.ADD, md.ledger_id, entry_id, -1, FLAG_RECOVERY, data))
                if resp.code != ResponseCode.SUCCESS:
                    raise ReplicationFailed(f"ledger {md.ledger_id} entry {entry_id}: {target} answered "
                                            f"{resp.code.name} {resp.message}")
        await asyncio.gather(*(one(e) for e in entries))

    async def _read_any(self, ledger_id: int, entry_id: int, holders: list[str]) -> bytes:
        answers = []
        for b in holders:
            try:
                resp = await self.calls.call(b, BookieOpRequest(self.calls.request_id(), BookieOp.READ, ledger_id,
                                                                entry_id), INFO_TIMEOUT_MS)
            except (QuorumLogError, OSError, asyncio.TimeoutError) as e:
                answers.append(f"{b}: {e}")
                continue
            if resp.code == ResponseCode.SUCCESS:
                return resp.data
            answers.append(f"{b}: {resp.code.name}")
        raise ReplicationFailed(f"ledger {ledger_id} entry {entry_id}: no copy readable ({'; '.join(answers)})")
