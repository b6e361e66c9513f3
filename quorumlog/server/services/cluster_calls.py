"""A node's own calls to the rest of the cluster, for what it runs beside its groups (its bookie's registration,
auto-recovery): kv requests to the `_meta` group's leader and bookie requests to other nodes, over the
transport's client connections (the server layer does not use the client package: ARCHITECTURE.md's arrows).

It is a LedgerIo (quorumlog/ledger/driver.py): the node recovers ledgers through the same driver as clients.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from dataclasses import replace
import ssl
from typing import Any, Callable

from ...codes import ResponseCode
from ...config import NodeConfig
from ...errors import MetadataVersionConflict, NoSuchLedger, NotEnoughBookies, QuorumLogError
from ...ledger.metadata import LedgerMetadata
from ...peers import parse_address
from ...transport import ClientConnection
from ...transport.handshake import NODE_LINK
from ...wire.client import HaControllerRequest, KvItem, KvRequest, KvResponse, StatusRequest
from ...wire.ledger import BookieOp, BookieOpRequest, BookieOpResponse

log = logging.getLogger(__name__)

META_GROUP = "_meta"
LEDGERS_PREFIX = "ledgers/"
BOOKIES_PREFIX = "bookies/"
META_CALL_TIMEOUT_MS = 5_000
BOOKIE_CALL_TIMEOUT_MS = 5_000
INFO_TIMEOUT_MS = 1_000
STATUS_TIMEOUT_MS = 1_000


def ledger_key(ledger_id: int) -> str:
    return f"{LEDGERS_PREFIX}{ledger_id:020d}"  # (client/ledger_registry.py writes the same keys)


class ClusterCalls:
    def __init__(self, config: NodeConfig, known_addresses: Callable[[], dict[str, tuple[str, int]]],
                 client_tls: Callable[[], ssl.SSLContext | bool]) -> None:
        """`known_addresses`: every node this node knows an address of; `client_tls`: the context of its own
        connections to them (both the node's, asked at each call)."""
        self.config = config
        self.known_addresses = known_addresses
        self.client_tls = client_tls
        self.name = f"{config.node_id}-node"
        self._conns: dict[tuple[str, str], ClientConnection] = {}
        self._request_id = 0
        self.bookie_addresses: dict[str, tuple[str, int]] = {}

    def request_id(self) -> int:
        self._request_id += 1
        return self._request_id

    async def close(self) -> None:
        conns, self._conns = list(self._conns.values()), {}
        for c in conns:
            try:
                await c.close()
            except Exception as e:  # noqa: BLE001 - closing a broken connection; nothing left to do
                log.debug("close: %r", e)

    async def _call(self, node_id: str, address: tuple[str, int], group: str, request: Any, timeout_ms: float) -> Any:
        key = (node_id, group)
        conn = self._conns.get(key)
        if conn is None:
            conn = await ClientConnection.open(*address, group=group, client_name=self.name,
                                               timeout_ms=max(1, int(timeout_ms)),
                                               token=self.config.auth_token() or "",
                                               ssl_context=self.client_tls(), server_hostname=node_id)
            self._conns[key] = conn
        try:
            return await conn.call(request, max(1, int(timeout_ms)))
        except (QuorumLogError, OSError, EOFError, RuntimeError):
            # (RuntimeError: uvloop's answer to a write on a transport the peer already closed; the connection
            # is as dead as after an OSError, and kept it would fail every later call the same way)
            if self._conns.get(key) is conn:
                del self._conns[key]
            await conn.close()
            raise

    # -- `_meta` ---------------------------------------------------------------------------------------------
    async def meta(self, op: str, key: str, value: bytes = b"", expected_version: int = -1) -> KvResponse:
        """One kv request to the `_meta` group's leader, found from the nodes this node knows. Raises
        MetadataVersionConflict, or QuorumLogError(TIMEOUT) when no leader answered."""
        return await self._to_meta_leader(lambda: KvRequest(self.request_id(), op, key, value, expected_version),
                                          key)

    async def ha_controller(self, op: str, body: dict, timeout_ms: float = META_CALL_TIMEOUT_MS) -> dict:
        """One request to the master/slave groups' controller on the `_meta` leader; its JSON answer."""
        resp = await self._to_meta_leader(
            lambda: HaControllerRequest(self.request_id(), op, json.dumps(body).encode()), op, timeout_ms,
            final=True)
        return json.loads(resp.body)

    async def _to_meta_leader(self, make_request: Any, what: str, timeout_ms: float = META_CALL_TIMEOUT_MS,
                              final: bool = False) -> Any:
        """`make_request()` to the `_meta` leader; `final`: a refusal other than "not the leader" is raised at
        once instead of asking the next node."""
        addresses = self.known_addresses()
        tried: list[str] = []
        target = next(iter(addresses), None)
        last = ""
        for _ in range(2 * len(addresses) + 1):
            if target is None:
                break
            tried.append(target)
            resp = None
            try:
                resp = await self._call(target, addresses[target], META_GROUP, make_request(), timeout_ms)
            except (QuorumLogError, OSError, EOFError, asyncio.TimeoutError, RuntimeError) as e:
                last = f"{target}: {e}"
            if resp is not None:
                if resp.code == ResponseCode.SUCCESS:
                    return resp
                last = f"{target}: {resp.code.name} {resp.message}"
                if resp.code == ResponseCode.METADATA_VERSION_CONFLICT:
                    raise MetadataVersionConflict(resp.message or what)
                if final and resp.code not in (ResponseCode.NOT_LEADER, ResponseCode.LEADER_NOT_READY,
                                               ResponseCode.UNKNOWN_GROUP):
                    raise QuorumLogError.for_code(resp.code, f"{what}: {resp.message}")
            leader = resp.leader_id if resp is not None else None
            untried = [a for a in addresses if a not in tried]
            target = leader if leader in addresses and leader != target else (untried[0] if untried else None)
        raise QuorumLogError.for_code(ResponseCode.TIMEOUT, f"no `_meta` leader answered: {last}")

    async def meta_get(self, key: str) -> KvItem | None:
        resp = await self.meta("get", key)
        return resp.items[0] if resp.items else None

    async def meta_list(self, prefix: str) -> list[KvItem]:
        return list((await self.meta("list", prefix)).items)

    # -- ledgers (LedgerIo) -----------------------------------------------------------------------------------
    async def get(self, ledger_id: int) -> LedgerMetadata:
        it = await self.meta_get(ledger_key(ledger_id))
        if it is None:
            raise NoSuchLedger(f"ledger {ledger_id} does not exist")
        return LedgerMetadata.from_json(it.value or b"{}", it.version)

    async def put(self, md: LedgerMetadata) -> LedgerMetadata:
        resp = await self.meta("put", ledger_key(md.ledger_id), md.to_json(), md.version)
        return replace(md, version=resp.version)

    async def ledgers(self) -> list[LedgerMetadata]:
        return [LedgerMetadata.from_json(it.value or b"{}", it.version) for it in await self.meta_list(LEDGERS_PREFIX)]

    # -- the status page -------------------------------------------------------------------------------------
    async def node_status(self, node_id: str, timeout_ms: float = STATUS_TIMEOUT_MS) -> dict:
        """Another node's status document (what its /status serves); {"id", "error"} if it does not answer."""
        address = self.known_addresses().get(node_id)
        try:
            if address is None:
                raise QuorumLogError.for_code(ResponseCode.NETWORK_ERROR, "no known address")
            resp = await self._call(node_id, address, NODE_LINK, StatusRequest(self.request_id()), timeout_ms)
            if resp.code != ResponseCode.SUCCESS:
                raise QuorumLogError.for_code(resp.code, "status refused")
            return json.loads(resp.status_json)
        except (QuorumLogError, OSError, EOFError, asyncio.TimeoutError, ValueError) as e:
            return {"id": node_id, "error": str(e) or type(e).__name__}

    # -- bookies ---------------------------------------------------------------------------------------------
    async def bookies(self) -> dict[str, dict]:
        """The registered bookies' records (`bookies/ID`), learning their addresses."""
        out = {}
        for it in await self.meta_list(BOOKIES_PREFIX):
            try:
                record = json.loads(it.value or b"{}")
                self.bookie_addresses[it.key[len(BOOKIES_PREFIX):]] = parse_address(record["address"])
            except (ValueError, KeyError, TypeError):
                continue
            out[it.key[len(BOOKIES_PREFIX):]] = record
        return out

    async def bookie_states(self) -> dict[str, dict]:
        """Every registered bookie's record with "state" from an INFO probe now ("down" if silent) and its
        "ledgers" count."""
        records = await self.bookies()

        async def probe(b: str) -> dict:
            try:
                resp = await self.call(b, BookieOpRequest(self.request_id(), BookieOp.INFO), INFO_TIMEOUT_MS)
                if resp.code == ResponseCode.SUCCESS:
                    return json.loads(resp.data)
            except (QuorumLogError, OSError, ValueError, asyncio.TimeoutError):
                pass
            return {"state": "down"}
        infos = await asyncio.gather(*(probe(b) for b in records))
        return {b: {**rec, "state": i.get("state", "down"), "ledgers": i.get("ledgers", 0),
                    "limbo_ledgers": i.get("limbo_ledgers", []), "limbo_known": i.get("limbo_known", False)}
                for (b, rec), i in zip(records.items(), infos)}

    async def place(self, count: int, exclude: set[str]) -> list[str]:
        """`count` writable bookies outside `exclude`, not decommissioned, at random (as the client places:
        LedgerRegistry.place; auto-recovery's workers on several nodes would otherwise all pick the same one)."""
        usable = sorted(b for b, rec in (await self.bookie_states()).items()  # (registered since it opened: as the
                        if b not in exclude and rec["state"] == "read_write"  # client's placement, for its limbo)
                        and rec.get("limbo_known") and not rec.get("decommissioned"))
        if len(usable) < count:
            raise NotEnoughBookies(f"need {count} writable bookies outside {sorted(exclude)}, have {len(usable)}")
        return random.sample(usable, count)

    async def replace_bookies(self, md: LedgerMetadata, first_entry_id: int, failed: set[str]) -> LedgerMetadata:
        ensemble = md.last_ensemble
        fresh = iter(await self.place(len(failed & set(ensemble)), set(ensemble) | failed))
        return md.with_ensemble(first_entry_id, tuple(next(fresh) if b in failed else b for b in ensemble))

    async def call(self, bookie: str, request: BookieOpRequest,
                   timeout_ms: float | None = None) -> BookieOpResponse:
        address = self.bookie_addresses.get(bookie) or self.known_addresses().get(bookie)
        if address is None:
            await self.bookies()
            address = self.bookie_addresses.get(bookie)
            if address is None:
                raise QuorumLogError.for_code(ResponseCode.NETWORK_ERROR, f"bookie {bookie!r} has no known address")
        return await self._call(bookie, address, NODE_LINK, request, timeout_ms or BOOKIE_CALL_TIMEOUT_MS)
