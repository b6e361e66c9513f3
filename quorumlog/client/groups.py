"""Groups across a cluster's nodes: create (placed on the least-loaded nodes, leaders spread with preferred
leaders), list, describe, delete.

The nodes are the authority on what they host: each keeps the definition of every group it hosts
(data_dir/groups/NAME/group.json) and answers the node-level requests (GroupRequest, kinds 30/31) on a
connection opened for the group NODE_LINK. A GroupAdmin asks the nodes it is given, so it sees every group
placed on them. It also records the placement in the `_meta` group's key/value store (`nodes/ID`,
`groups/NAME`, JSON values) for the capabilities that read it from there; a cluster without `_meta` (made
before it existed) skips that.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from ..codes import ResponseCode
from ..errors import BadRequest, GroupExists, QuorumLogError, UnknownGroup
from ..peers import Address, format_address
from ..transport.handshake import NODE_LINK
from ..wire.client import GroupRequest, StatusRequest
from .kv import META_GROUP
from ..transport.tls import client_context as tls_client_context
from .pool import ConnectionPool
from .types import WRITABLE_ROLES

RESERVED_PREFIX = "_"  # the cluster's own groups: `_meta`, a master/slave cluster's `_nodes`

log = logging.getLogger(__name__)

LEADER_POLL_S = 0.05
META_MAX_REPLICAS = 5  # the `_meta` group lives on the first up to 5 nodes (docs/interfaces.md)


@dataclass(slots=True)
class GroupPlacement:
    """Where a group lives, as its members report it."""

    group: str
    members: list[str]  # the nodes that host it (its voters and learners once it has a leader)
    leader: str | None
    term: int = -1
    committed_index: int = -1
    rows: list[dict[str, Any]] = field(default_factory=list)  # each hosting node's status of the group

    def to_dict(self) -> dict[str, Any]:
        mode = next((r.get("mode", "raft") for r in self.rows), "raft")
        return {"group": self.group, "mode": mode, "members": self.members, "leader": self.leader,
                "term": self.term, "committed_index": self.committed_index}


def place(loads: dict[str, int], replicas: int) -> list[str]:
    """The `replicas` nodes hosting the fewest groups (ties by id, so a placement is reproducible)."""
    if replicas < 1:
        raise ValueError(f"replicas must be at least 1, not {replicas}")
    if replicas > len(loads):
        raise QuorumLogError.for_code(ResponseCode.BAD_REQUEST,
                                      f"{replicas} replicas asked, {len(loads)} nodes reachable")
    return sorted(sorted(loads), key=lambda n: loads[n])[:replicas]


def spread_leader(members: list[str], leading: dict[str, int]) -> str:
    """The member leading (or preferred for) the fewest groups: each new group moves leadership to the least
    busy of its members, so N groups on N nodes end with one leader per node."""
    return min(members, key=lambda n: (leading.get(n, 0), n))


class GroupAdmin:
    """Node-level requests to a cluster's nodes. `async with GroupAdmin(nodes) as admin:`."""

    def __init__(self, nodes: dict[str, Address], *, timeout_ms: int = 10_000, token: str | None = None,
                 tls_ca: str | None = None) -> None:
        self.nodes = dict(nodes)
        self.timeout_ms = timeout_ms
        self._token = token
        self._tls_ca = tls_ca
        self._pool = ConnectionPool(self.nodes, group=NODE_LINK, client_name="group-admin", token=token,
                                    ssl_context=tls_client_context(tls_ca) if tls_ca else None)
        self._request_id = 0
        self._meta: Any = None

    async def __aenter__(self) -> "GroupAdmin":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if self._meta is not None:
            await self._meta.close()
        await self._pool.close()

    # -- the record in `_meta` -------------------------------------------------------------------------
    def _meta_client(self) -> Any:
        if self._meta is None:
            from .client import Client
            self._meta = Client(self.nodes, group=META_GROUP, timeout_ms=self.timeout_ms, token=self._token,
                                tls_ca=self._tls_ca)
        return self._meta

    async def wait_answering(self, timeout_s: float) -> None:
        """Until every node answers status (a leader of a majority can exist while the rest still start, and
        `_meta` and a new group are placed on them too); TimeoutError naming the silent ones after timeout_s."""
        deadline = time.monotonic() + timeout_s
        while True:
            silent = [n for n, st in (await self.cluster_status()).items() if not isinstance(st, dict)]
            if not silent:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"not every node answered within {timeout_s:g} s: {', '.join(silent)}")
            await asyncio.sleep(LEADER_POLL_S)

    async def create_meta(self, *, segment_bytes: int | None = None) -> GroupPlacement:
        """Create the `_meta` group (its key/value store) on the first up to 5 nodes and record every node."""
        placement = await self._create(META_GROUP, nodes=list(self.nodes)[:META_MAX_REPLICAS], state_machine="kv",
                                       segment_bytes=segment_bytes)
        await self.record_nodes(self.nodes)
        return placement

    async def record_nodes(self, nodes: dict[str, Address]) -> None:
        for nid, address in nodes.items():
            await self._meta_client().kv_put(f"nodes/{nid}", json.dumps({"address": format_address(address)},
                                                                        sort_keys=True).encode())

    async def forget_node(self, node_id: str) -> None:
        await self._meta_client().kv_delete(f"nodes/{node_id}")

    async def record_group(self, name: str, members: list[str], mode: str = "raft") -> None:
        await self._meta_client().kv_put(f"groups/{name}", json.dumps({"members": sorted(members), "mode": mode},
                                                                      sort_keys=True).encode())

    async def record_quietly(self, coro: Any) -> None:
        """Best effort: the nodes hold the truth; a cluster without `_meta` has no record to keep."""
        try:
            await coro
        except UnknownGroup:
            pass
        except (QuorumLogError, OSError) as e:
            log.warning("could not update the `_meta` record: %s", e)

    async def call(self, node_id: str, op: str, body: dict | None = None) -> dict:
        """One GroupRequest to node_id; its answer's body, or the coded error it refused with."""
        self._request_id += 1
        resp = await self._pool.call(node_id, GroupRequest(self._request_id, op, json.dumps(body or {}).encode()),
                                     self.timeout_ms)
        if resp.code != ResponseCode.SUCCESS:
            raise QuorumLogError.for_code(resp.code, f"{node_id}: {resp.message}")
        return json.loads(resp.body or b"{}")

    async def node_status(self, node_id: str) -> dict:
        """The node and every group it hosts (`status --all-groups`)."""
        self._request_id += 1
        resp = await self._pool.call(node_id, StatusRequest(self._request_id), self.timeout_ms)
        if resp.code != ResponseCode.SUCCESS:
            raise QuorumLogError.for_code(resp.code, f"{node_id}: status refused")
        return json.loads(resp.status_json)

    async def cluster_status(self, nodes: list[str] | None = None) -> dict[str, dict | QuorumLogError]:
        """Every node's status (or those of `nodes`), or the error that kept it from answering."""
        nodes = list(self.nodes) if nodes is None else nodes
        return dict(zip(nodes, await asyncio.gather(*(self._status_or_error(n) for n in nodes))))

    # -- groups --------------------------------------------------------------------------------------------
    async def create(self, name: str, *, replicas: int = 3, nodes: list[str] | None = None,
                     wait_leader: bool = True, segment_bytes: int | None = None,
                     preallocate: bool | None = None, state_machine: str | None = None,
                     mode: str = "raft", master_slave: dict[str, Any] | None = None) -> GroupPlacement:
        """Create `name` on `nodes`, or on the `replicas` least-loaded reachable nodes; returns once it has a
        leader (its preferred leader when that one wins within the timeout). Segments are 64 MiB and sparse
        unless `segment_bytes` / `preallocate` say otherwise (server/node.py). A node that refuses undoes the
        create on the nodes that had made it (never a group that was there before). Names that begin with `_`
        are the cluster's own (`_meta`, `_nodes`): refused."""
        if name.startswith(RESERVED_PREFIX):
            raise BadRequest(f"group name {name!r}: names beginning with {RESERVED_PREFIX!r} are reserved for the "
                             f"cluster's own groups")
        return await self._create(name, replicas=replicas, nodes=nodes, wait_leader=wait_leader,
                                  segment_bytes=segment_bytes, preallocate=preallocate, state_machine=state_machine,
                                  mode=mode, master_slave=master_slave)

    async def _create(self, name: str, *, replicas: int = 3, nodes: list[str] | None = None,
                      wait_leader: bool = True, segment_bytes: int | None = None,
                      preallocate: bool | None = None, state_machine: str | None = None,
                      mode: str = "raft", master_slave: dict[str, Any] | None = None) -> GroupPlacement:
        statuses = await self.cluster_status()
        up = {n: s for n, s in statuses.items() if isinstance(s, dict)}
        hosts = [n for n, s in up.items() if any(g["group"] == name for g in s["groups"])]
        if hosts:
            raise GroupExists(f"group {name!r} exists on {', '.join(hosts)}")
        if nodes:
            unknown = [n for n in nodes if n not in self.nodes]
            if unknown:
                raise QuorumLogError.for_code(ResponseCode.UNKNOWN_MEMBER, f"no such nodes: {', '.join(unknown)}")
            down = [n for n in nodes if n not in up]
            if down:
                raise QuorumLogError.for_code(ResponseCode.NETWORK_ERROR,
                                              f"nodes not answering: {', '.join(down)} ({statuses[down[0]]})")
            members = list(dict.fromkeys(nodes))
        else:
            members = place({n: len(s["groups"]) for n, s in up.items()}, replicas)
        leading: dict[str, int] = {}
        for s in up.values():
            for g in s["groups"]:
                who = g.get("preferred_leader_id") or (g["id"] if g["role"] == "leader" else None)
                if who:
                    leading[who] = leading.get(who, 0) + 1
        preferred = spread_leader(members, leading)
        peers = {m: format_address(self.nodes[m]) for m in members}
        definition: dict[str, Any] = {"group": name, "peers": peers, "preferred_leader_id": preferred}
        if segment_bytes is not None:
            definition["segment_bytes"] = segment_bytes
        if preallocate is not None:
            definition["preallocate"] = preallocate
        if state_machine is not None:
            definition["state_machine"] = state_machine
        if mode != "raft":  # master/slave: the spread leader is the master (server/master_slave/member.py)
            definition["mode"] = mode
            definition["master_slave"] = {"master": preferred, **(master_slave or {})}
        created: list[str] = []
        try:
            for m in members:
                if (await self.call(m, "create", definition)).get("created"):
                    created.append(m)
        except BaseException:
            for m in created:
                try:
                    await self.call(m, "delete", {"group": name})
                except (QuorumLogError, OSError):
                    pass  # the node went away: `group delete` again removes what is left
            raise
        if not wait_leader:
            return GroupPlacement(name, members, None)
        placement = await self.wait_leader(name, members, preferred)
        if name != META_GROUP:
            await self.record_quietly(self.record_group(name, members, mode))
        return placement

    async def wait_leader(self, name: str, members: list[str], preferred: str | None = None) -> GroupPlacement:
        """Poll the members until one leads: the preferred one, or any once half the timeout has passed."""
        deadline = time.monotonic() + self.timeout_ms / 1000
        half = time.monotonic() + self.timeout_ms / 2000
        while True:
            placement = await self.describe(name, members)
            if placement.leader is not None and (placement.leader == preferred or preferred is None
                                                 or time.monotonic() > half):
                return placement
            if time.monotonic() > deadline:
                raise QuorumLogError.for_code(ResponseCode.TIMEOUT, f"group {name}: no leader within "
                                                                    f"{self.timeout_ms} ms")
            await asyncio.sleep(LEADER_POLL_S)

    async def describe(self, name: str, nodes: list[str] | None = None) -> GroupPlacement:
        """The group as its hosting nodes report it (asks every node when `nodes` is not given)."""
        return _placement(name, await self.cluster_status(nodes))

    async def list(self) -> list[GroupPlacement]:
        return sorted(_by_group(await self.cluster_status()).values(), key=lambda p: p.group)

    async def delete(self, name: str, *, force: bool = False) -> list[str]:
        """Delete the group on every node that hosts it; returns those nodes. Refused (NETWORK_ERROR) while a
        node does not answer, unless `force`: a copy left on it would campaign for a group that is gone."""
        statuses = await self.cluster_status()
        down = [n for n, s in statuses.items() if not isinstance(s, dict)]
        if down and not force:
            raise QuorumLogError.for_code(ResponseCode.NETWORK_ERROR,
                                          f"nodes not answering: {', '.join(down)}: they may host {name!r} "
                                          f"(--force deletes it on the others)")
        placement = _placement(name, statuses)
        for row in placement.rows:
            try:
                await self.call(row["id"], "delete", {"group": name})
            except UnknownGroup:
                pass  # deleted by an earlier attempt
        await self.record_quietly(self._meta_client().kv_delete(f"groups/{name}"))
        return [row["id"] for row in placement.rows]

    async def _status_or_error(self, node_id: str) -> dict | QuorumLogError:
        try:
            return await self.node_status(node_id)
        except QuorumLogError as e:
            return e


def _placement(name: str, statuses: dict[str, dict | QuorumLogError]) -> GroupPlacement:
    groups = _by_group(statuses)
    if name not in groups:
        raise UnknownGroup(f"group {name!r} is hosted on none of {', '.join(statuses)}")
    return groups[name]


def _by_group(statuses: dict[str, dict | QuorumLogError]) -> dict[str, GroupPlacement]:
    """Fold every node's rows into one placement per group: its leader is the newest term's."""
    out: dict[str, GroupPlacement] = {}
    for node_id, s in statuses.items():
        if not isinstance(s, dict):
            continue
        for g in s["groups"]:
            p = out.setdefault(g["group"], GroupPlacement(g["group"], [], None))
            p.rows.append(g)
            if g["role"] in WRITABLE_ROLES and g["term"] >= p.term:
                p.leader, p.term, p.committed_index = g["id"], g["term"], g["committed_index"]
    for p in out.values():
        hosts = sorted(r["id"] for r in p.rows)
        lead = next((r for r in p.rows if r["id"] == p.leader), None)
        p.members = sorted(set(lead["voters"]) | set(lead["learners"])) if lead else hosts
    return out


__all__ = ["GroupAdmin", "GroupPlacement", "place", "spread_leader"]
