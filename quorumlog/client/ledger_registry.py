"""Where a ledger client finds things: ledger metadata in `_meta` (changed only by compare-and-set, as
BookKeeper's ZooKeeper-backed LedgerManager does), ledger ids, and the bookies with their state.

Keys (docs/ledgers.md): `ledgers/<id, 20 digits>` = LedgerMetadata JSON (ledger/metadata.py), whose `_meta`
version is the metadata's version; `ledger_ids/next` = the next id to hand out (a counter moved by
compare-and-set, BookKeeper's ledger id generator on ZooKeeper); `nodes/ID` (written by `cluster up`) and
`bookies/ID` (written by each bookie, with its instance id) give the bookies and their addresses.

A bookie's state comes from asking it (BookieOp.INFO): `read_write`, `read_only` (disk past 95%), or
`down` when it does not answer within `info_timeout_ms`.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import replace
from typing import Any

from ..codes import ResponseCode
from ..errors import BadRequest, MetadataVersionConflict, NoSuchLedger, NotEnoughBookies, QuorumLogError
from ..ledger.metadata import LedgerMetadata, Segment
from ..peers import Address, parse_address
from ..transport.handshake import NODE_LINK
from ..wire.ledger import BookieOp, BookieOpRequest, BookieOpResponse
from .client import Client
from .kv import META_GROUP
from ..transport.tls import client_context as tls_client_context
from .pool import ConnectionPool

LEDGERS_PREFIX = "ledgers/"
NEXT_ID_KEY = "ledger_ids/next"
BOOKIES_PREFIX = "bookies/"
UNDERREPLICATED_PREFIX = "underreplicated/"  # markers written by the auditor (server/services/auto_recovery.py)
REGISTRATION_POLL_S = 0.2
INFO_TIMEOUT_MS = 1_000
MAX_CAS_ATTEMPTS = 64


def ledger_key(ledger_id: int) -> str:
    return f"{LEDGERS_PREFIX}{ledger_id:020d}"


class LedgerRegistry:
    def __init__(self, peers: dict[str, Address], *, timeout_ms: int, bookie_timeout_ms: int,
                 client_name: str, token: str | None = None, tls_ca: str | None = None) -> None:
        self.meta = Client(peers, group=META_GROUP, timeout_ms=timeout_ms, token=token, tls_ca=tls_ca)
        self.addresses: dict[str, Address] = dict(peers)
        self.bookie_timeout_ms = bookie_timeout_ms
        # every bookie request goes to the node as such (NODE_LINK), whatever groups it hosts
        self.pool = ConnectionPool(self.addresses, group=NODE_LINK, client_name=client_name, token=token,
                                   ssl_context=tls_client_context(tls_ca) if tls_ca else None)
        self._request_id = 0
        self._rng = random.Random()
        self.decommissioned: set[str] = set()  # bookies being drained (`bookie decommission`): no new ledgers

    async def close(self) -> None:
        await self.pool.close()
        await self.meta.close()

    # -- metadata ------------------------------------------------------------------------------------------
    async def get(self, ledger_id: int) -> LedgerMetadata:
        found = await self.meta.kv_get(ledger_key(ledger_id))
        if found is None:
            raise NoSuchLedger(f"ledger {ledger_id} does not exist")
        value, version = found
        return LedgerMetadata.from_json(value, version)

    async def put(self, md: LedgerMetadata) -> LedgerMetadata:
        """Write md if the stored version is still md.version (0: create). Raises MetadataVersionConflict."""
        version = await self.meta.kv_put(ledger_key(md.ledger_id), md.to_json(), expected_version=md.version)
        return replace(md, version=version)

    async def delete(self, md: LedgerMetadata) -> None:
        await self.meta.kv_delete(ledger_key(md.ledger_id), expected_version=md.version)

    async def list(self) -> list[LedgerMetadata]:
        return [LedgerMetadata.from_json(kv.value, kv.version) for kv in await self.meta.kv_list(LEDGERS_PREFIX)]

    async def next_ledger_id(self) -> int:
        for _ in range(MAX_CAS_ATTEMPTS):
            found = await self.meta.kv_get(NEXT_ID_KEY)
            value, version = found if found is not None else (b"1", 0)
            lid = int(value)
            try:
                await self.meta.kv_put(NEXT_ID_KEY, str(lid + 1).encode(), expected_version=version)
                return lid
            except MetadataVersionConflict:
                continue  # another client took it: read again
        raise MetadataVersionConflict(f"{NEXT_ID_KEY}: {MAX_CAS_ATTEMPTS} conflicting attempts")

    # -- bookies -------------------------------------------------------------------------------------------
    async def refresh_bookies(self) -> None:
        """Learn every bookie's address from `_meta` (`nodes/` and `bookies/`)."""
        decommissioned = set()
        for prefix in ("nodes/", "bookies/"):
            for kv in await self.meta.kv_list(prefix):
                try:
                    record = json.loads(kv.value)
                    if record.get("address"):
                        self.addresses[kv.key[len(prefix):]] = parse_address(record["address"])
                    if prefix == BOOKIES_PREFIX and record.get("decommissioned"):
                        decommissioned.add(kv.key[len(prefix):])
                except (ValueError, AttributeError):
                    continue  # a record we cannot read names no bookie we could use
        self.decommissioned = decommissioned

    async def call(self, bookie: str, request: BookieOpRequest, timeout_ms: float | None = None) -> BookieOpResponse:
        if bookie not in self.addresses:
            await self.refresh_bookies()
            if bookie not in self.addresses:
                raise BadRequest(f"bookie {bookie!r} has no known address")
        return await self.pool.call(bookie, request, timeout_ms or self.bookie_timeout_ms)

    def request_id(self) -> int:
        self._request_id += 1
        return self._request_id

    async def info(self, bookie: str, timeout_ms: float = INFO_TIMEOUT_MS) -> dict[str, Any]:
        """The bookie's INFO document, or {"bookie_id", "state": "down", "error"} when it does not answer."""
        try:
            resp = await self.call(bookie, BookieOpRequest(self.request_id(), BookieOp.INFO), timeout_ms)
            if resp.code != ResponseCode.SUCCESS:
                raise QuorumLogError.for_code(resp.code, resp.message)
            return json.loads(resp.data)
        except (QuorumLogError, OSError, ValueError) as e:
            return {"bookie_id": bookie, "state": "down", "error": str(e)}

    async def bookies(self) -> dict[str, dict[str, Any]]:
        await self.refresh_bookies()
        ids = sorted(self.addresses)
        infos = await asyncio.gather(*(self.info(b) for b in ids))
        return {b: {**info, "decommissioned": True} if b in self.decommissioned else info
                for b, info in zip(ids, infos)}

    async def underreplicated(self) -> list[dict[str, Any]]:
        """The auditor's markers: {ledger_id, lost, since_ms[, by, until]} per ledger being re-replicated."""
        return [json.loads(kv.value) for kv in await self.meta.kv_list(UNDERREPLICATED_PREFIX)]

    async def decommission(self, bookie: str) -> None:
        """Mark the bookie decommissioned in its `bookies/ID` record: no new ledger is placed on it and the
        auditor treats it as lost, so auto-recovery copies its fragments away (BookKeeper's decommissionBookie)."""
        key = BOOKIES_PREFIX + bookie
        for _ in range(MAX_CAS_ATTEMPTS):
            found = await self.meta.kv_get(key)
            if found is None:
                raise BadRequest(f"bookie {bookie!r} is not registered")
            record = json.loads(found[0])
            if record.get("decommissioned"):
                return
            try:
                await self.meta.kv_put(key, json.dumps({**record, "decommissioned": True}, sort_keys=True).encode(),
                                       expected_version=found[1])
                return
            except MetadataVersionConflict:
                continue
        raise MetadataVersionConflict(f"{key}: {MAX_CAS_ATTEMPTS} conflicting attempts")

    async def place(self, count: int, exclude: set[str] = frozenset()) -> list[str]:  # type: ignore[assignment]
        """`count` writable bookies not in `exclude`, at random: BookKeeper's default placement
        (DefaultEnsemblePlacementPolicy), read-only, down, decommissioned and not yet registered bookies left out
        (waiting, within the timeout, for ones still registering).

        Not the least loaded: a bookie's ledger count moves only once a ledger's first add reaches it, so every
        ledger created meanwhile picked the same ones (64 ledgers created together all went to the same 3 of 5)."""
        deadline = time.monotonic() + self.meta.timeout_ms / 1000
        while True:
            infos = await self.bookies()
            writable = [b for b, info in infos.items()
                        if b not in exclude and info.get("state") == "read_write" and not info.get("decommissioned")]
            # A bookie takes ledgers once it registered in `_meta` (its limbo is known): entries a ledger wrote
            # to it before would be in its limbo, answered UNKNOWN when absent, and no recovery could close it.
            usable = [b for b in writable if infos[b].get("limbo_known", True)]
            if len(usable) >= count:
                return self._rng.sample(sorted(usable), count)
            if len(writable) < count or time.monotonic() > deadline:
                states = ", ".join(f"{b}: {i.get('state')}{'' if i.get('limbo_known', True) else ' (registering)'}"
                                   for b, i in infos.items())
                raise NotEnoughBookies(f"need {count} writable bookies, have {len(usable)} ({states})")
            await asyncio.sleep(REGISTRATION_POLL_S)  # (a node just started registers its bookie within seconds)

    async def replace_bookies(self, md: LedgerMetadata, first_entry_id: int, failed: set[str]) -> LedgerMetadata:
        """md with a new segment from first_entry_id in which each failed bookie is replaced by a writable one
        not in the ensemble (the positions stay: striping is by position)."""
        ensemble = list(md.last_ensemble)
        fresh = await self.place(len(failed & set(ensemble)), exclude=set(ensemble) | failed)
        it = iter(fresh)
        new = tuple(next(it) if b in failed else b for b in ensemble)
        return md.with_ensemble(first_entry_id, new)


def new_metadata(ledger_id: int, ensemble: list[str], write_quorum: int, ack_quorum: int) -> LedgerMetadata:
    return LedgerMetadata(ledger_id, len(ensemble), write_quorum, ack_quorum, (Segment(0, tuple(ensemble)),))
