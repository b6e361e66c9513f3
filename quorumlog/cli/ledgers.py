"""`quorumlog ledger ...` and `quorumlog bookie list`: BookKeeper's ledgers over the nodes' bookies
(client/ledgers.py; docs/interfaces.md "Ledgers")."""

from __future__ import annotations

import asyncio
import sys
from typing import Any, Optional

import typer

from ..errors import Timeout
from ..ledger.metadata import LedgerMetadata
from ..ledgers import LedgerClient
from .common import (ClusterOpt, JsonOpt, PeersOpt, TimeoutOpt, out_console, print_json, print_table, resolve_target,
                     run)

ledger_app = typer.Typer(help="Ledgers (BookKeeper): write, read, recover, describe, list, delete, "
                              "underreplicated", no_args_is_help=True)
bookie_app = typer.Typer(help="The bookies (every node is one): list, decommission", no_args_is_help=True)

IdOpt = typer.Option(..., "--id", min=1, help="Ledger id")


def _client(peers: Optional[str], cluster: Optional[str], timeout_ms: int) -> LedgerClient:
    return LedgerClient(resolve_target(peers, cluster, None).peers, timeout_ms=timeout_ms)


def metadata_doc(md: LedgerMetadata) -> dict[str, Any]:
    return {"ledger_id": md.ledger_id, "state": md.state.value, "ensemble_size": md.ensemble_size,
            "write_quorum": md.write_quorum, "ack_quorum": md.ack_quorum, "last_entry_id": md.last_entry_id,
            "length": md.length, "version": md.version,
            "ensembles": [{"first_entry_id": s.first_entry_id, "bookies": list(s.bookies)} for s in md.ensembles]}


def _text(body: bytes) -> str:
    try:
        return body.decode()
    except UnicodeDecodeError:
        return body.hex()


@ledger_app.command("write")
def write(values: list[str] = typer.Argument(None, help="Entries to add, one per argument"),
          file: Optional[str] = typer.Option(None, "--file", help="Add each line of this file (- for stdin)"),
          ensemble: int = typer.Option(3, "--ensemble", min=1, help="E: bookies the ledger is striped over"),
          write_quorum: int = typer.Option(2, "--write-quorum", min=1, help="W: copies of each entry"),
          ack_quorum: int = typer.Option(2, "--ack-quorum", min=1, help="A: copies stored before an ack"),
          peers: Optional[str] = PeersOpt, cluster: Optional[str] = ClusterOpt, timeout_ms: int = TimeoutOpt,
          json_out: bool = JsonOpt) -> None:
    """Create a ledger, add the entries, close it; prints {ledger_id, last_entry_id}."""
    bodies = [v.encode() for v in values or []]
    if file is not None:
        stream = sys.stdin.buffer if file == "-" else open(file, "rb")
        with stream:
            bodies += [line.rstrip(b"\n") for line in stream]

    async def go():
        async with _client(peers, cluster, timeout_ms) as lc:
            w = await lc.create_ledger(ensemble, write_quorum, ack_quorum)
            for b in bodies:
                await w.add_entry(b)
            last = await w.close()
            return {"ledger_id": w.ledger_id, "last_entry_id": last}

    doc = run(go())
    if json_out:
        print_json(doc)
    else:
        out_console.print(f"ledger {doc['ledger_id']}: last_entry_id {doc['last_entry_id']}", highlight=False)


@ledger_app.command("read")
def read(ledger_id: int = IdOpt, first: int = typer.Option(0, "--from", min=0, help="First entry id"),
         last: Optional[int] = typer.Option(None, "--to", help="Last entry id (default: the last add confirmed)"),
         recovery: bool = typer.Option(False, "--recover", help="Fence and recover an open ledger first"),
         peers: Optional[str] = PeersOpt, cluster: Optional[str] = ClusterOpt, timeout_ms: int = TimeoutOpt,
         json_out: bool = JsonOpt) -> None:
    """Print entries (without --recover an open ledger is read up to its last add confirmed, not fenced)."""
    async def go():
        async with _client(peers, cluster, timeout_ms) as lc:
            r = await lc.open_ledger(ledger_id, recovery=recovery)
            return [(e.entry_id, e.body) async for e in r.read(first, last)]

    entries = run(go())
    if json_out:
        print_json({"ledger_id": ledger_id, "entries": [{"entry_id": i, "body": _text(b)} for i, b in entries]})
        return
    print_table(["entry_id", "body"], [[i, _text(b)] for i, b in entries], ("entry_id",))


@ledger_app.command("recover")
def recover(ledger_id: int = IdOpt, peers: Optional[str] = PeersOpt, cluster: Optional[str] = ClusterOpt,
            timeout_ms: int = TimeoutOpt, json_out: bool = JsonOpt) -> None:
    """Fence the ledger (its writer gets LEDGER_FENCED), recover its last entries and close it."""
    async def go():
        async with _client(peers, cluster, timeout_ms) as lc:
            return (await lc.open_ledger(ledger_id, recovery=True)).metadata

    _print_metadata(run(go()), json_out)


@ledger_app.command("describe")
def describe(ledger_id: int = IdOpt, peers: Optional[str] = PeersOpt, cluster: Optional[str] = ClusterOpt,
             timeout_ms: int = TimeoutOpt, json_out: bool = JsonOpt) -> None:
    """State (OPEN / IN_RECOVERY / CLOSED), ensembles, last_entry_id, length, E, W, A."""
    async def go():
        async with _client(peers, cluster, timeout_ms) as lc:
            return await lc.describe(ledger_id)

    _print_metadata(run(go()), json_out)


def _print_metadata(md: LedgerMetadata, json_out: bool) -> None:
    doc = metadata_doc(md)
    if json_out:
        print_json(doc)
        return
    out_console.print(f"ledger {md.ledger_id}: {md.state.value} E={md.ensemble_size} W={md.write_quorum} "
                      f"A={md.ack_quorum} last_entry_id={md.last_entry_id} length={md.length}", highlight=False)
    for s in md.ensembles:
        out_console.print(f"  from entry {s.first_entry_id}: {', '.join(s.bookies)}", highlight=False)


@ledger_app.command("list")
def list_ledgers(peers: Optional[str] = PeersOpt, cluster: Optional[str] = ClusterOpt,
                 timeout_ms: int = TimeoutOpt, json_out: bool = JsonOpt) -> None:
    """Every ledger with its state."""
    async def go():
        async with _client(peers, cluster, timeout_ms) as lc:
            return await lc.list_ledgers()

    mds = run(go())
    if json_out:
        print_json({"ledgers": [metadata_doc(md) for md in mds]})
        return
    print_table(["ledger_id", "state", "last_entry_id", "bookies"],
                [[md.ledger_id, md.state.value, md.last_entry_id, ",".join(md.last_ensemble)] for md in mds],
                ("ledger_id", "last_entry_id"))


@ledger_app.command("delete")
def delete(ledger_id: int = IdOpt, peers: Optional[str] = PeersOpt, cluster: Optional[str] = ClusterOpt,
           timeout_ms: int = TimeoutOpt, json_out: bool = JsonOpt) -> None:
    """Delete the ledger's metadata; its bookies drop its entries at their next garbage collection."""
    async def go():
        async with _client(peers, cluster, timeout_ms) as lc:
            await lc.delete_ledger(ledger_id)

    run(go())
    if json_out:
        print_json({"ledger_id": ledger_id, "deleted": True})
    else:
        out_console.print(f"ledger {ledger_id}: deleted", highlight=False)


@ledger_app.command("underreplicated")
def underreplicated(peers: Optional[str] = PeersOpt, cluster: Optional[str] = ClusterOpt,
                    timeout_ms: int = TimeoutOpt, json_out: bool = JsonOpt) -> None:
    """Ledgers with a fragment on a bookie that is down now (does not answer) or that the auditor found lost
    (its markers, while auto-recovery re-replicates them). Empty when every ledger is fully replicated."""
    async def go():
        async with _client(peers, cluster, timeout_ms) as lc:
            infos = await lc.bookies()
            return infos, await lc.list_ledgers(), await lc.underreplicated()

    infos, mds, markers = run(go())
    down = {b for b, info in infos.items() if info.get("state") == "down" or info.get("decommissioned")}
    marked = {m["ledger_id"]: m for m in markers}
    rows = []
    for md in mds:
        marker = marked.get(md.ledger_id, {})
        lost = down | set(marker.get("lost", []))
        fragments = [{"first_entry_id": s.first_entry_id, "lost": sorted(lost & set(s.bookies))}
                     for s in md.ensembles if lost & set(s.bookies)]
        if fragments:
            rows.append({"ledger_id": md.ledger_id, "state": md.state.value, "fragments": fragments,
                         "marked_since_ms": marker.get("since_ms"), "worker": marker.get("by")})
    if json_out:
        print_json({"down_bookies": sorted(down), "ledgers": rows})
        return
    if not rows:
        out_console.print("every ledger is fully replicated" + (f" (bookies down: {', '.join(sorted(down))}, "
                          "holding no fragment)" if down else ""), highlight=False)
    else:
        print_table(["ledger_id", "state", "fragments on lost bookies", "re-replicating on"],
                    [[row["ledger_id"], row["state"], "; ".join(f"from {f['first_entry_id']}: {','.join(f['lost'])}"
                                                                for f in row["fragments"]), row["worker"]]
                     for row in rows], ("ledger_id",))


@bookie_app.command("decommission")
def decommission(bookie: str = typer.Option(..., "--id", help="The bookie (node id) to drain"),
                 wait: bool = typer.Option(True, "--wait/--no-wait", help="Return once no ledger names it"),
                 wait_timeout_s: float = typer.Option(300.0, "--wait-timeout-s", min=0.0),
                 peers: Optional[str] = PeersOpt, cluster: Optional[str] = ClusterOpt,
                 timeout_ms: int = TimeoutOpt, json_out: bool = JsonOpt) -> None:
    """Drain a bookie (BookKeeper's decommissionbookie): no new ledger is placed on it and auto-recovery copies
    every fragment it holds to other bookies; with --wait, returns once no ledger's metadata names it."""
    async def go():
        async with _client(peers, cluster, timeout_ms) as lc:
            await lc.decommission_bookie(bookie)
            deadline = asyncio.get_running_loop().time() + wait_timeout_s
            remaining = await lc.ledgers_on(bookie)
            while wait and remaining:
                if asyncio.get_running_loop().time() > deadline:
                    raise Timeout(f"bookie {bookie}: {len(remaining)} ledgers still name it after "
                                  f"{wait_timeout_s:.0f} s: {remaining[:10]}")
                await asyncio.sleep(1.0)
                remaining = await lc.ledgers_on(bookie)
            return remaining

    remaining = run(go())
    doc = {"bookie_id": bookie, "decommissioned": True, "ledgers_remaining": remaining}
    if json_out:
        print_json(doc)
    else:
        out_console.print(f"{bookie}\tdecommissioned\tledgers naming it: {len(remaining)}", highlight=False)


@bookie_app.command("list")
def list_bookies(peers: Optional[str] = PeersOpt, cluster: Optional[str] = ClusterOpt,
                 timeout_ms: int = TimeoutOpt, json_out: bool = JsonOpt) -> None:
    """Every bookie: state (read_write / read_only / down), disk use, ledger count, and the failed write that
    made it read-only, while it has not repaired itself."""
    async def go():
        async with _client(peers, cluster, timeout_ms) as lc:
            return await lc.bookies()

    infos = run(go())
    if json_out:
        print_json({"bookies": [{"bookie_id": b, **info} for b, info in infos.items()]})
        return
    print_table(["bookie", "state", "disk used", "ledgers", "disk error"],
                [[b, info.get("state"), None if info.get("disk_used") is None else f"{info['disk_used']:.1%}",
                  info.get("ledgers"), info.get("disk_error")] for b, info in infos.items()],
                ("disk used", "ledgers"))
