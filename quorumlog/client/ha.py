"""Master/slave groups' controller, from a client (`quorumlog ha`): its state per group and a switch by hand.

The controller runs on the `_meta` group's leader (server/services/ha_controller.py); these calls go there like the
consumer groups' (client/consumer.py).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from ..errors import QuorumLogError
from ..codes import ResponseCode
from ..wire.client import HaControllerRequest
from .client import Client
from .kv import META_GROUP


async def controller_call(meta: Client, op: str, body: dict[str, Any]) -> dict[str, Any]:
    resp = await meta.call_leader(lambda rid: HaControllerRequest(rid, op, json.dumps(body).encode()),
                                  f"ha {op} {body.get('group')}")
    return json.loads(resp.body or b"{}")


async def describe(peers: Any, group: str, **kw: Any) -> dict[str, Any]:
    """The controller's committed state of `group`: master, epoch, sync_state_set, members, alive."""
    async with Client(peers, group=META_GROUP, **kw) as meta:
        return await controller_call(meta, "describe", {"group": group})


async def elect(peers: Any, group: str, to: str | None = None, *, wait_s: float = 10.0, **kw: Any) -> dict[str, Any]:
    """`ha elect`: make `to` (default: the most caught-up other member of the SyncStateSet) the master once the
    current master's lease ran out; returns the group's new state once `to` is master."""
    async with Client(peers, group=META_GROUP, **kw) as meta:
        state = await controller_call(meta, "describe", {"group": group})
        if to is None:
            candidates = [m for m in state["sync_state_set"] if m != state["master"]]
            if not candidates:
                raise QuorumLogError.for_code(ResponseCode.IN_SYNC_REPLICAS_NOT_ENOUGH,
                                              f"group {group}: no other member in its sync state set "
                                              f"{state['sync_state_set']}")
            async with Client(peers, group=group, **kw) as c:
                offsets = {s.id: s.raw.get("max_offset", -1) for s in await c.status() if s.reachable}
            to = max(candidates, key=lambda m: (offsets.get(m, -1), m))
        await controller_call(meta, "elect", {"group": group, "to": to})
        deadline = time.monotonic() + wait_s
        while True:
            state = await controller_call(meta, "describe", {"group": group})
            if state["master"] == to:
                return state
            if time.monotonic() > deadline:
                raise QuorumLogError.for_code(ResponseCode.TIMEOUT, f"group {group}: {to} is not master after "
                                                                    f"{wait_s} s (state {state})")
            await asyncio.sleep(0.1)
