"""`status`, `append`, `read`, `transfer-leader`: the commands that talk to a running cluster."""

from __future__ import annotations

import asyncio
import sys
from typing import List, Optional

import typer

from ..client import Client
from ..codes import ResponseCode
from .common import (ClusterOpt, GroupOpt, JsonOpt, PeersOpt, Target, TimeoutOpt, body_fields, die, new_table,
                     out_console, print_json, resolve_target, run, usage)

APPEND_CHUNK_BYTES = 1024 * 1024  # a --file is sent as batches of about this size, several in flight


def _client(t: Target, timeout_ms: int) -> Client:
    return Client(t.peers, group=t.group, timeout_ms=timeout_ms,
                  request_timeout_ms=min(3_000, timeout_ms))


# -- status --------------------------------------------------------------------------------------------
def status(peers: Optional[str] = PeersOpt, cluster: Optional[str] = ClusterOpt, group: Optional[str] = GroupOpt,
           all_groups: bool = typer.Option(False, "--all-groups", help="One row per node per group it hosts"),
           json_out: bool = JsonOpt, timeout_ms: int = TimeoutOpt) -> None:
    """One row per node: id, role, term, leader, indexes, watermarks ("unreachable" if it does not answer)."""
    if all_groups:
        if group is not None:
            usage("give --group G or --all-groups, not both")
        return _status_all_groups(resolve_target(peers, cluster, None), json_out, timeout_ms)
    t = resolve_target(peers, cluster, group)

    async def go():
        async with _client(t, timeout_ms) as c:
            return await c.status()

    nodes = run(go())
    if json_out:
        print_json([n.to_dict() for n in nodes])
    else:
        table = new_table(title=f"group {t.group}")
        for col in ("id", "address", "role", "term", "leader", "begin", "end", "committed", "watermarks"):
            table.add_column(col, justify="right" if col in ("term", "begin", "end", "committed") else "left")
        for n in nodes:
            role = n.role if n.reachable else f"[red]{n.role}[/red]"
            if n.role == "leader":
                role = f"[green]{n.role}[/green]"
            marks = ",".join(f"{k}={v}" for k, v in n.watermarks.items())
            cells = [n.id, n.address, role] + (
                [str(n.term), n.leader_id or "-", str(n.begin_index), str(n.end_index), str(n.committed_index),
                 marks] if n.reachable else ["", "", "", "", "", n.error or ""])
            table.add_row(*cells)
        out_console.print(table)
    if not any(n.reachable for n in nodes):
        # The one --json command that prints on failure: the rows (every node `unreachable`, with its error)
        # are the diagnosis. Exit 1 and the usual error line on stderr say it failed.
        die(*_why_none_answered(nodes, f"no member of group {t.group} answered"))


def _why_none_answered(nodes, what: str) -> tuple[ResponseCode, str]:
    """Every member refused alike (UNAUTHORIZED: no or a wrong token): that code, not NETWORK_ERROR, which would
    send an operator looking at the network."""
    codes = {(n.error or "").split(":", 1)[0] for n in nodes}
    code = codes.pop() if len(codes) == 1 else ""
    if code in ResponseCode.__members__ and code not in ("SUCCESS", "NETWORK_ERROR"):
        return ResponseCode[code], f"{what}: {nodes[0].error}"
    return ResponseCode.NETWORK_ERROR, what


def _status_all_groups(t, json_out: bool, timeout_ms: int) -> None:
    from ..client.groups import GroupAdmin  # (only --all-groups needs it)

    async def go():
        async with GroupAdmin(t.peers, timeout_ms=timeout_ms) as admin:
            return await admin.cluster_status()

    statuses = run(go())
    rows = []
    for node_id, s in statuses.items():
        if not isinstance(s, dict):
            rows.append({"id": node_id, "group": None, "role": "unreachable", "error": str(s)})
            continue
        rows += [{**g, "address": s["address"]} for g in sorted(s["groups"], key=lambda g: g["group"])]
    if json_out:
        print_json(rows)
    else:
        table = new_table(title="all groups")
        for col in ("id", "group", "role", "term", "leader", "end", "committed"):
            table.add_column(col, justify="right" if col in ("term", "end", "committed") else "left")
        for r in rows:
            if r["group"] is None:
                table.add_row(r["id"], "-", "[red]unreachable[/red]", "", r["error"], "", "")
                continue
            role = f"[green]{r['role']}[/green]" if r["role"] == "leader" else r["role"]
            table.add_row(r["id"], r["group"], role, str(r["term"]), r["leader_id"] or "-", str(r["end_index"]),
                          str(r["committed_index"]))
        out_console.print(table)
    if all(r["group"] is None for r in rows):
        die(ResponseCode.NETWORK_ERROR, "no node answered")


# -- append --------------------------------------------------------------------------------------------
def append(values: Optional[List[str]] = typer.Argument(None, help="Entries to append (one atomic batch)"),
           file: Optional[str] = typer.Option(None, "--file", "-f", help="One entry per line ('-' = stdin)"),
           peers: Optional[str] = PeersOpt, cluster: Optional[str] = ClusterOpt, group: Optional[str] = GroupOpt,
           json_out: bool = JsonOpt, timeout_ms: int = TimeoutOpt) -> None:
    """Append entries; prints [{index, term}] once they are committed."""
    if bool(values) == (file is not None):
        usage("give VALUE ... or --file F (one entry per line), not both and not neither")
    t = resolve_target(peers, cluster, group)
    if file is not None:
        try:
            if file == "-":
                lines = sys.stdin.buffer.read().splitlines()
            else:
                with open(file, "rb") as f:
                    lines = f.read().splitlines()
        except OSError as e:
            usage(f"--file {file!r}: {e.strerror or e}")
        if not lines:
            usage(f"--file {file!r}: no lines to append")
        bodies = lines
    else:
        bodies = [v.encode() for v in values]

    async def go():
        async with _client(t, timeout_ms) as c:
            # A file becomes consecutive batches; they are sent together but each is atomic on its own.
            chunks, chunk, size = [], [], 0
            for b in bodies:
                if chunk and size + len(b) > APPEND_CHUNK_BYTES:
                    chunks.append(chunk)
                    chunk, size = [], 0
                chunk.append(b)
                size += len(b)
            chunks.append(chunk)
            results = []
            for rs in await asyncio.gather(*(c.append_batch(ch) for ch in chunks)):
                results.extend(rs)
            return results

    results = run(go(), long_running=file is not None)
    docs = [{"index": r.index, "term": r.term, **({"offset": r.offset} if r.offset >= 0 else {})} for r in results]
    if json_out:
        print_json(docs)
    else:
        table = new_table()
        table.add_column("index", justify="right")
        table.add_column("term", justify="right")
        for d in docs:
            table.add_row(str(d["index"]), str(d["term"]))
        out_console.print(table)


# -- read ----------------------------------------------------------------------------------------------
def read(start: int = typer.Option(..., "--from", min=0, help="First index"),
         end: Optional[int] = typer.Option(None, "--to", min=0, help="Last index (inclusive)"),
         node: Optional[str] = typer.Option(None, "--node", help="Read from this member (default: the leader)"),
         follow: bool = typer.Option(False, "--follow", help="Keep printing entries as they commit"),
         peers: Optional[str] = PeersOpt, cluster: Optional[str] = ClusterOpt, group: Optional[str] = GroupOpt,
         json_out: bool = JsonOpt, timeout_ms: int = TimeoutOpt) -> None:
    """Print committed entries {index, term, timestamp, body} (body_b64 when the body is not UTF-8).

    With --json: one JSON array; with --json --follow: one JSON object per line (the stream never ends).
    """
    t = resolve_target(peers, cluster, group)
    if node is not None and node not in t.peers:
        usage(f"--node {node!r}: not a member ({', '.join(t.peers)})")
    if end is not None and end < start:
        usage(f"--to {end}: before --from {start}")

    def doc(e) -> dict:
        return {"index": e.index, "term": e.term, "timestamp": e.timestamp.isoformat(timespec="milliseconds"),
                **body_fields(e.body)}

    async def go():
        async with _client(t, timeout_ms) as c:
            if follow:
                async for e in c.read(start, end, True, node):
                    d = doc(e)
                    if json_out:
                        print_json(d)
                    else:
                        out_console.print(f"{d['index']}\t{d['term']}\t{d['timestamp']}\t"
                                          f"{d.get('body', d.get('body_b64'))}", highlight=False, markup=False)
                return [], c.suggested_slave
            return [doc(e) async for e in c.read(start, end, False, node)], c.suggested_slave

    docs, suggested = run(go(), long_running=follow)
    if suggested:  # (the reads went there: a master/slave group's master found this reader far behind)
        print(f"suggest_slave: {suggested}", file=sys.stderr)
    if follow:
        return
    if json_out:
        print_json(docs)
    else:
        table = new_table()
        for col in ("index", "term", "timestamp", "body"):
            table.add_column(col, justify="right" if col in ("index", "term") else "left")
        for d in docs:
            body = d["body"] if "body" in d else f"(base64) {d['body_b64']}"
            table.add_row(str(d["index"]), str(d["term"]), d["timestamp"], body)
        out_console.print(table)


# -- transfer-leader -------------------------------------------------------------------------------------
def transfer_leader(to: str = typer.Option(..., "--to", help="The member to hand leadership to"),
                    peers: Optional[str] = PeersOpt, cluster: Optional[str] = ClusterOpt,
                    group: Optional[str] = GroupOpt, json_out: bool = JsonOpt, timeout_ms: int = TimeoutOpt) -> None:
    """Hand leadership over to member --to."""
    t = resolve_target(peers, cluster, group)
    if to not in t.peers:
        usage(f"--to {to!r}: not a member ({', '.join(t.peers)})")

    async def go():
        async with _client(t, timeout_ms) as c:
            return await c.transfer_leader(to)

    leader = run(go())
    if json_out:
        print_json({"leader_id": leader, "requested": to})
    else:
        out_console.print(f"leader: [bold]{leader}[/bold]")
    if leader != to:
        die(ResponseCode.TAKE_LEADERSHIP_FAILED, f"leadership went to {leader}, not {to}")
