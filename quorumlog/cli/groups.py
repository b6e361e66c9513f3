"""`quorumlog group create / list / describe / delete`: the groups a cluster's nodes host (client/groups.py).

`group create` places a group's replicas on the least-loaded nodes (or those named by --nodes) and spreads
leaders by giving each group the member that leads the fewest groups as its preferred leader; it returns once
the group has a leader.
"""

from __future__ import annotations

from typing import Optional

import typer

from ..client.groups import RESERVED_PREFIX, GroupAdmin, GroupPlacement
from ..ha.master import Ack
from .common import (ClusterOpt, JsonOpt, PeersOpt, TimeoutOpt, new_table, out_console, print_json, resolve_target,
                     run, usage)

group_app = typer.Typer(help="Create, list, describe or delete groups", no_args_is_help=True)


def _admin(peers: Optional[str], cluster: Optional[str], timeout_ms: int) -> GroupAdmin:
    t = resolve_target(peers, cluster, None)
    return GroupAdmin(t.peers, timeout_ms=timeout_ms)


def _show(p: GroupPlacement) -> None:
    out_console.print(f"group {p.group}: members {', '.join(p.members)}; leader {p.leader or '-'} "
                      f"(term {p.term}); committed {p.committed_index}", highlight=False)


@group_app.command("create")
def create(name: str = typer.Argument(..., help="Group name: letters, digits, . _ - (at most 64)"),
           replicas: int = typer.Option(3, "--replicas", min=1, help="How many nodes host it"),
           mode: str = typer.Option("raft", "--mode", help="raft, or master-slave (RocketMQ HA: one master, the "
                                                           "others slaves; docs/ha.md)"),
           ack: str = typer.Option("sync", "--ack", help="master-slave: sync (SYNC_MASTER: answered once "
                                                          "--min-in-sync-replicas members hold it) or async "
                                                          "(ASYNC_MASTER: after the master's own write)"),
           min_in_sync_replicas: Optional[int] = typer.Option(
               None, "--min-in-sync-replicas", min=1, help="master-slave, ack sync: members (master included) "
                                                           "that must hold an append (default 2)"),
           slave_read_enable: bool = typer.Option(False, "--slave-read-enable",
                                                  help="master-slave: slaves serve reads (up to the confirm "
                                                       "offset)"),
           nodes: Optional[str] = typer.Option(None, "--nodes", help="Place it on these nodes, e.g. n0,n1,n2"),
           segment_bytes: Optional[int] = typer.Option(None, "--segment-bytes", min=4096,
                                                       help="Data segment size (default 64 MiB)"),
           preallocate: bool = typer.Option(False, "--preallocate/--sparse",
                                            help="Reserve segments' blocks up front (faster fsyncs; idle groups "
                                                 "then cost their segments' size on disk)"),
           state_machine: Optional[str] = typer.Option(
               None, "--state-machine", help="topics: the group carries topic queues (its committed messages are "
                                             "dispatched to consume queues; docs/topics.md)"),
           peers: Optional[str] = PeersOpt, cluster: Optional[str] = ClusterOpt,
           timeout_ms: int = typer.Option(20_000, "--timeout-ms", min=1, help="Give up after this long"),
           json_out: bool = JsonOpt) -> None:
    """Create a group on the least-loaded nodes (or --nodes); prints {group, mode, members, leader}."""
    if name.startswith(RESERVED_PREFIX):
        usage(f"group name {name!r}: names beginning with {RESERVED_PREFIX!r} are reserved for the cluster's own "
              f"groups (`_meta` is made by `cluster up`)")
    if mode not in ("raft", "master-slave"):
        usage(f"--mode {mode!r}: raft or master-slave")
    if ack not in tuple(Ack):
        usage(f"--ack {ack!r}: sync or async")
    master_slave = {"ack": ack, "slave_read_enable": slave_read_enable,
                    "min_in_sync_replicas": min_in_sync_replicas or (2 if ack == Ack.SYNC else 1)}
    if state_machine not in (None, "topics"):
        usage(f"--state-machine {state_machine!r}: only topics (the key/value store is `_meta`'s)")
    named = [n.strip() for n in nodes.split(",") if n.strip()] if nodes else None

    async def go():
        async with _admin(peers, cluster, timeout_ms) as admin:
            return await admin.create(name, replicas=replicas, nodes=named, segment_bytes=segment_bytes,
                                      preallocate=preallocate, state_machine=state_machine, mode=mode,
                                      master_slave=master_slave if mode == "master-slave" else None)

    p = run(go())
    if json_out:
        print_json({k: v for k, v in p.to_dict().items() if k in ("group", "mode", "members", "leader")})
    else:
        _show(p)


@group_app.command("list")
def list_groups(peers: Optional[str] = PeersOpt, cluster: Optional[str] = ClusterOpt,
                timeout_ms: int = TimeoutOpt, json_out: bool = JsonOpt) -> None:
    """Every group the nodes host: members, leader, term, committed index."""
    async def go():
        async with _admin(peers, cluster, timeout_ms) as admin:
            return await admin.list()

    groups = run(go())
    if json_out:
        print_json([p.to_dict() for p in groups])
        return
    table = new_table(title="groups")
    for col in ("group", "members", "leader", "term", "committed"):
        table.add_column(col, justify="right" if col in ("term", "committed") else "left")
    for p in groups:
        table.add_row(p.group, ",".join(p.members), p.leader or "-", str(p.term), str(p.committed_index))
    out_console.print(table)


@group_app.command("describe")
def describe(name: str = typer.Argument(...), peers: Optional[str] = PeersOpt, cluster: Optional[str] = ClusterOpt,
             timeout_ms: int = TimeoutOpt, json_out: bool = JsonOpt) -> None:
    """One group: its members, leader, and each hosting node's status of it."""
    async def go():
        async with _admin(peers, cluster, timeout_ms) as admin:
            return await admin.describe(name)

    p = run(go())
    if json_out:
        print_json({**p.to_dict(), "nodes": p.rows})
        return
    _show(p)
    table = new_table(title=f"group {p.group}")
    for col in ("id", "role", "term", "leader", "end", "committed", "voters", "learners"):
        table.add_column(col)
    for r in sorted(p.rows, key=lambda r: r["id"]):
        table.add_row(r["id"], r["role"], str(r["term"]), r["leader_id"] or "-", str(r["end_index"]),
                      str(r["committed_index"]), ",".join(r["voters"]), ",".join(r["learners"]))
    out_console.print(table)


@group_app.command("delete")
def delete(name: str = typer.Argument(...), peers: Optional[str] = PeersOpt, cluster: Optional[str] = ClusterOpt,
           force: bool = typer.Option(False, "--force", help="Delete on the nodes that answer even if some do not"),
           timeout_ms: int = TimeoutOpt, json_out: bool = JsonOpt) -> None:
    """Delete a group and its data on every node that hosts it (refused while a node does not answer)."""
    async def go():
        async with _admin(peers, cluster, timeout_ms) as admin:
            return await admin.delete(name, force=force)

    deleted_on = run(go())
    if json_out:
        print_json({"group": name, "deleted_on": deleted_on})
    else:
        out_console.print(f"deleted group {name} on {', '.join(deleted_on)}", highlight=False)


__all__ = ["group_app"]
