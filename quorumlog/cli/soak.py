"""`quorumlog soak`: the Jepsen-style fault soak on real local nodes (quorumlog/soak). Starts 3 node processes,
runs the seeded fault schedule under concurrent writers, checks every acknowledgement, prints the figures.

Exit 0 when the run passed, 1 on a checker violation, a cycle after which writes did not resume, or a
failed leader that kept leading (a report directory is written), 2 on bad usage.
"""

from __future__ import annotations

import json
import os
from typing import Optional

import typer

from .common import EXIT_FAILED, JsonOpt, new_table, out_console, print_json, setup_logging, usage


def soak(seed: int = typer.Option(1, "--seed", help="Fixes the fault schedule (rerun a failing seed with it)"),
         cycles: int = typer.Option(20, "--cycles", min=1, max=100_000, help="Fault cycles (one fault each)"),
         kinds: Optional[str] = typer.Option(None, "--kinds", help="Comma-separated fault kinds (default: all "
                                                                   "that can run here)"),
         writers: int = typer.Option(4, "--writers", min=1, max=256, help="Concurrent appending clients"),
         network: str = typer.Option("auto", "--network", help="auto | netns (root: real packet loss) | proxy"),
         base_dir: Optional[str] = typer.Option(None, "--base-dir", help="Node data and logs (default: a temp "
                                                                         "dir, removed afterwards)"),
         report_dir: Optional[str] = typer.Option(None, "--report-dir", help="Where a failing run writes its "
                                                                             "report (default: the temp dir)"),
         out: Optional[str] = typer.Option(None, "--out", help="Also write the figures (JSON) to this file"),
         log_level: str = typer.Option("warning", "--log-level", help="Soak runner's log level"),
         tls: bool = typer.Option(False, "--tls", help="Run the nodes on mutual TLS with a token (a CA and "
                                  "certificates made under the base dir)"),
         mode: str = typer.Option("raft", "--mode", help="raft | master-slave: the writers' group (master-slave: "
                                                         "a SYNC_MASTER group and its controller; the kinds that "
                                                         "act on processes, disks and namespaces)"),
         json_out: bool = JsonOpt) -> None:
    """Run a fault soak on local node processes and check every acknowledged append."""
    from ..soak.runner import ALL_KINDS, FAULT_KINDS, IS_ROOT, run_soak

    chosen = tuple(k.strip() for k in kinds.split(",") if k.strip()) if kinds is not None else FAULT_KINDS
    if not chosen:
        usage("--kinds: no fault kind given")
    unknown = sorted(set(chosen) - set(ALL_KINDS))
    if unknown:
        usage(f"--kinds: unknown {', '.join(unknown)}; known: {', '.join(ALL_KINDS)}")
    if "disk_full" in chosen and not IS_ROOT:
        usage("--kinds: disk_full needs root (tmpfs mounts)")
    if mode not in ("raft", "master-slave"):
        usage(f"--mode must be raft or master-slave, got {mode!r}")
    if network not in ("auto", "netns", "proxy"):
        usage(f"--network must be auto, netns or proxy, got {network!r}")
    if network == "netns" and not IS_ROOT:
        usage("--network netns needs root")
    setup_logging(log_level)
    if base_dir is not None:
        os.makedirs(base_dir, exist_ok=True)
    result = run_soak(seed, cycles, base_dir=base_dir, report_root=report_dir, writers=writers, kinds=chosen,
                      network=network, tls=tls, mode=mode)
    figures = result.figures()
    figures["passed"] = result.passed
    figures["report_dir"] = result.report_dir
    if out:
        with open(out, "w") as f:
            f.write(json.dumps(figures, indent=1) + "\n")
    if json_out:
        print_json(figures)
    else:
        ops = figures["ops"]
        out_console.print(f"soak seed={seed} cycles={figures['cycles']} {figures['duration_s']} s — "
                          f"{figures['mechanism']}")
        out_console.print(f"ops ok={ops['ok']} failed={ops['failed']} unknown={ops['unknown']}  "
                          f"violations={len(figures['violations'])} not_recovered={len(figures['not_recovered'])} "
                          f"failed_leader_kept_leading={len(figures['failed_leader_kept_leading'])}")
        table = new_table("fault kind", "cycles", "median unavailable s", "max unavailable s")
        for kind, u in figures["unavailability_s"].items():
            table.add_row(kind, str(u["cycles"]), f"{u['median']:.3f}", f"{u['max']:.3f}")
        out_console.print(table)
        for v in figures["violations"]:
            out_console.print(f"VIOLATION {v}")
        if figures["skipped_kinds"]:
            out_console.print(f"skipped: {figures['skipped_kinds']}")
        if result.report_dir:
            out_console.print(f"report: {result.report_dir}")
    if not result.passed:
        raise typer.Exit(EXIT_FAILED)
