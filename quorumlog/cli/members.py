"""`quorumlog member add / remove`: grow and shrink a group while it serves (raft/membership.py).

`member add` first adds the node as a learner (it receives the log, has no vote), waits until it holds the
group's committed log, then promotes it to voter; `member remove` removes a voter or a learner (the leader
too: it commits its own removal, hands over and steps down). One change at a time per group; both return once
the change is committed. The node must be running (`quorumlog cluster add-node` starts one with --join).
"""

from __future__ import annotations

import asyncio
import time
from typing import Optional

import typer

from ..client import Client
from ..client.groups import META_MAX_REPLICAS, GroupAdmin
from ..client.kv import META_GROUP
from ..errors import (BadRequest, GroupExists, LearnerNotCaughtUp, MemberExists, NetworkError, Timeout,
                      UnknownGroup)
from ..peers import format_address, parse_address
from .common import (ClusterOpt, GroupOpt, JsonOpt, PeersOpt, Target, out_console, print_json, resolve_target, run,
                     usage)

member_app = typer.Typer(help="Add or remove a member of a group", no_args_is_help=True)

CATCH_UP_POLL_S = 0.2


async def _leader_status(c: Client):
    leaders = [s for s in await c.status() if s.role == "leader"]
    return max(leaders, key=lambda s: s.term) if leaders else None


async def _membership(c: Client) -> dict:
    leader = await _leader_status(c)
    if leader is None:
        return {"leader": None, "voters": [], "learners": []}
    return {"leader": leader.id, "voters": leader.raw.get("voters", []), "learners": leader.raw.get("learners", [])}


async def _host_joining(t: Target, node_id: str, address: str, timeout_s: float) -> None:
    """A created group (client/groups.py) is hosted only where it was placed: the new member first hosts it
    with no vote (`join`), naming the current members, so it answers the leader that adds it. The node's own
    group (started with --join) is there already: GROUP_EXISTS."""
    nodes = {**t.peers, node_id: parse_address(address, what=f"--address of {node_id}")}
    async with GroupAdmin(nodes, timeout_ms=int(timeout_s * 1000)) as admin:
        placement = await admin.describe(t.group, [n for n in nodes if n != node_id])
        if node_id in placement.members:
            return
        members = {m: format_address(nodes[m]) for m in placement.members if m in nodes}
        definition = {"group": t.group, "peers": {**members, node_id: address}, "join": True}
        machine = next((r["state_machine"]["kind"] for r in placement.rows if r.get("state_machine")), None)
        if machine:
            definition["state_machine"] = machine  # (the `_meta` group's copy runs its key/value store too)
        try:
            await admin.call(node_id, "create", definition)
        except GroupExists:
            pass


async def _unhost_removed(t: Target, node_id: str, timeout_s: float) -> None:
    """A removed member's copy of a created group goes (its own group stays: it is the node's config)."""
    if node_id not in t.peers:
        return
    async with GroupAdmin(t.peers, timeout_ms=int(timeout_s * 1000)) as admin:
        try:
            await admin.call(node_id, "delete", {"group": t.group})
        except (BadRequest, UnknownGroup, NetworkError, Timeout):
            pass  # its own group, gone already, or the node is down (a dead node being replaced)


async def add_member(t: Target, node_id: str, address: str, timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    await _host_joining(t, node_id, address, timeout_s)
    async with Client(t.peers, group=t.group, timeout_ms=int(timeout_s * 1000),
                      request_timeout_ms=3_000) as c:
        try:
            await c.change_member("add_learner", node_id, address)
        except MemberExists:
            # a retry of ours that went through, or an earlier `member add` that stopped half way: carry on
            # only if the node is a member now (a retired id stays refused)
            m = await _membership(c)
            if node_id in m["voters"]:
                return {"group": t.group, "node": node_id, **m}
            if node_id not in m["learners"]:
                raise
        while True:  # the leader promotes a learner only once it holds the committed log
            try:
                index = await c.change_member("promote", node_id)
                break
            except LearnerNotCaughtUp:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(CATCH_UP_POLL_S)
            except MemberExists:
                index = -1  # already a voter (our own earlier attempt)
                break
        return {"group": t.group, "node": node_id, "index": index, **(await _membership(c))}


async def remove_member(t: Target, node_id: str, timeout_s: float) -> dict:
    async with Client(t.peers, group=t.group, timeout_ms=int(timeout_s * 1000),
                      request_timeout_ms=3_000) as c:
        index = await c.change_member("remove", node_id)
        m = await _membership(c)
        for _ in range(int(timeout_s / CATCH_UP_POLL_S)):  # a removed leader hands over: wait for the next one
            if m["leader"] not in (None, node_id):
                break
            await asyncio.sleep(CATCH_UP_POLL_S)
            m = await _membership(c)
    await _unhost_removed(t, node_id, timeout_s)
    return {"group": t.group, "node": node_id, "index": index, **m}


def meta_size(nodes: int) -> int:
    """How many members `_meta` keeps with `nodes` live nodes: the most up to META_MAX_REPLICAS, odd (a fourth
    member tolerates no more failures than three, and every write waits for one more)."""
    n = min(META_MAX_REPLICAS, nodes)
    return n if n % 2 else max(1, n - 1)


async def keep_meta_size(peers: dict, timeout_s: float) -> str | None:
    """Add the least-loaded live node not hosting `_meta` while `_meta` has fewer members than meta_size() of the
    live nodes (after a member was removed, or a node added); returns the node added, or None."""
    async with GroupAdmin(peers, timeout_ms=10_000) as admin:
        live = {n: s for n, s in (await admin.cluster_status()).items() if isinstance(s, dict)}
    members = {m for s in live.values() for g in s["groups"] if g["group"] == META_GROUP and g["role"] == "leader"
               for m in (*g["voters"], *g["learners"])}
    candidates = sorted((n for n in live if n not in members), key=lambda n: (len(live[n]["groups"]), n))
    if not members or not candidates or len(members) >= meta_size(len(live)):
        return None
    t = Target(peers, META_GROUP)
    await record_members(t, await add_member(t, candidates[0], format_address(peers[candidates[0]]), timeout_s))
    return candidates[0]


async def record_members(t: Target, m: dict) -> None:
    """The group's members in the `_meta` record (groups/NAME), best effort."""
    async with GroupAdmin(t.peers, timeout_ms=10_000) as admin:
        await admin.record_quietly(admin.record_group(t.group, [*m["voters"], *m["learners"]]))


def _address_of(t: Target, node_id: str, address: Optional[str]) -> str:
    if address:
        return address
    if node_id in t.peers:
        return format_address(t.peers[node_id])
    usage(f"--node {node_id}: no address known (not in the cluster's peers): give --address HOST:PORT")


def _show(result: dict, json_out: bool, what: str) -> None:
    if json_out:
        print_json(result)
    else:
        out_console.print(f"{what} {result['node']} in group {result['group']}: voters {', '.join(result['voters'])}"
                          f"{'; learners ' + ', '.join(result['learners']) if result['learners'] else ''}; "
                          f"leader {result['leader']}", highlight=False)


@member_app.command("add")
def add(node: str = typer.Option(..., "--node", help="The node id to add (a running node, started with --join)"),
        address: Optional[str] = typer.Option(None, "--address", help="host:port it listens on (default: from "
                                                                      "the cluster's peers)"),
        peers: Optional[str] = PeersOpt, cluster: Optional[str] = ClusterOpt, group: Optional[str] = GroupOpt,
        timeout_s: float = typer.Option(60.0, "--timeout-s", min=0.1, help="Give up after this long"),
        json_out: bool = JsonOpt) -> None:
    """Add NODE as a learner, wait until it caught up, promote it to voter."""
    t = resolve_target(peers, cluster, group)
    result = run(add_member(t, node, _address_of(t, node, address), timeout_s))
    run(record_members(t, result))
    _show(result, json_out, "added")


@member_app.command("remove")
def remove(node: str = typer.Option(..., "--node", help="The member to remove (the leader too)"),
           peers: Optional[str] = PeersOpt, cluster: Optional[str] = ClusterOpt, group: Optional[str] = GroupOpt,
           timeout_s: float = typer.Option(30.0, "--timeout-s", min=0.1, help="Give up after this long"),
           json_out: bool = JsonOpt) -> None:
    """Remove NODE from the group (a removed leader hands over first). Its id is never used again. A member of
    `_meta` is replaced by a live node not hosting it, so `_meta` keeps its size."""
    t = resolve_target(peers, cluster, group)
    result = run(remove_member(t, node, timeout_s))
    run(record_members(t, result))
    if t.group == META_GROUP:
        result["replaced_by"] = run(keep_meta_size({n: a for n, a in t.peers.items() if n != node}, timeout_s))
    _show(result, json_out, "removed")
    if not json_out and result.get("replaced_by"):
        out_console.print(f"{META_GROUP} keeps its size: added {result['replaced_by']}", highlight=False)


__all__ = ["add_member", "keep_meta_size", "member_app", "remove_member"]
