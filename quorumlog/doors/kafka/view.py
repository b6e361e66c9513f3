"""What a Kafka door tells its clients about the cluster: the brokers (nodes with a Kafka door, from `_meta`
`doors/kafka/*`) and who leads each group (a partition's leader is its queue's group's leader or master).

Learned through the own client (each node's status, as `quorumlog group list` does), cached, and refreshed every
REFRESH_INTERVAL_S in the background and at once (at most every MIN_REFRESH_INTERVAL_S) when a request found it
wrong: a NOT_LEADER answer makes a Kafka client ask Metadata again at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import zlib
from dataclasses import dataclass, field

from ...client.groups import GroupAdmin
from .. import DOORS_PREFIX

log = logging.getLogger(__name__)

KIND = "kafka"
REFRESH_INTERVAL_S = 2.0
MIN_REFRESH_INTERVAL_S = 0.2
META_GROUP = "_meta"


def broker_id_of(node_id: str) -> int:
    """A stable Kafka broker id for a node: the digits of `n<k>`-style ids, else a 31-bit hash of the id."""
    m = re.fullmatch(r"[A-Za-z_-]*(\d{1,9})", node_id)
    if m:
        return int(m.group(1))
    return (zlib.crc32(node_id.encode()) & 0x3FFFFFFF) + 1_000_000_000


@dataclass(frozen=True, slots=True)
class Broker:
    node_id: str
    broker_id: int
    host: str
    port: int


@dataclass(slots=True)
class ClusterView:
    brokers: dict[str, Broker] = field(default_factory=dict)  # node id -> its door
    leaders: dict[str, str] = field(default_factory=dict)  # group -> leading node id
    terms: dict[str, int] = field(default_factory=dict)  # group -> leader's term (or master epoch)
    members: dict[str, list[str]] = field(default_factory=dict)  # group -> member node ids
    live: set[str] = field(default_factory=set)  # nodes that answered the last status round
    refreshed_s: float = 0.0


class ViewKeeper:
    def __init__(self, admin: GroupAdmin, meta, self_broker: Broker) -> None:
        self._admin = admin
        self._meta = meta
        self.self_broker = self_broker
        self.view = ClusterView(brokers={self_broker.node_id: self_broker})
        self._refreshing: asyncio.Future | None = None
        self._last_start_s = 0.0

    def broker_of(self, node_id: str | None) -> Broker | None:
        return None if node_id is None else self.view.brokers.get(node_id)

    async def refresh(self, *, force: bool = False) -> ClusterView:
        """A fresh view (shared by concurrent callers); without force, a view younger than the minimum
        interval is kept."""
        if self._refreshing is not None and not self._refreshing.done():
            await asyncio.shield(self._refreshing)
            return self.view
        if not force and time.monotonic() - self.view.refreshed_s < MIN_REFRESH_INTERVAL_S:
            return self.view
        if time.monotonic() - self._last_start_s < MIN_REFRESH_INTERVAL_S and self.view.refreshed_s:
            return self.view
        self._last_start_s = time.monotonic()
        self._refreshing = asyncio.ensure_future(self._refresh())
        try:
            await asyncio.shield(self._refreshing)
        except Exception as e:  # noqa: BLE001 - a failed refresh keeps the old view
            log.debug("kafka door: cluster view refresh failed: %s", e)
        return self.view

    async def _refresh(self) -> None:
        statuses = await self._admin.cluster_status()
        leaders, terms, members, live = {}, {}, {}, set()
        named: dict[str, tuple[int, str]] = {}  # group -> (term, leader) as its followers name it
        for node_id, s in statuses.items():
            if not isinstance(s, dict):
                continue
            live.add(node_id)
            for g in s.get("groups", []):
                name = g["group"]
                members.setdefault(name, set()).add(g["id"])
                members[name].update(g.get("voters") or ())
                if g.get("role") in ("leader", "master") and g.get("term", -1) >= terms.get(name, -1):
                    leaders[name], terms[name] = g["id"], g.get("term", 0)
                elif g.get("leader_id") and g.get("term", -1) > named.get(name, (-2, ""))[0]:
                    named[name] = (g.get("term", -1), g["leader_id"])
        for name, (term, leader) in named.items():
            # A leader this door cannot ask (a node added after it started: not among its configured peers)
            # is still named by the followers it can ask.
            if name not in leaders and leader not in statuses:
                leaders[name], terms[name] = leader, term
                live.add(leader)
        brokers = dict(self.view.brokers)
        try:
            for kv in await asyncio.wait_for(self._meta.kv_list(f"{DOORS_PREFIX}{KIND}/"), 5):
                doc = json.loads(kv.value)
                nid = kv.key.rsplit("/", 1)[1]
                brokers[nid] = Broker(nid, int(doc["broker_id"]), doc["host"], int(doc["port"]))
        except Exception as e:  # noqa: BLE001 - `_meta` may not answer (no leader yet): keep the brokers we know
            log.debug("kafka door: cannot list the doors in _meta: %s", e)
        brokers[self.self_broker.node_id] = self.self_broker
        live |= {nid for nid in brokers if nid not in statuses}  # doors of nodes we cannot ask: assumed up
        self.view = ClusterView(brokers, leaders, terms, {k: sorted(v) for k, v in members.items()}, live,
                                time.monotonic())
