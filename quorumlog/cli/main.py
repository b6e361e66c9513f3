"""The `quorumlog` command (typer + rich). Entry point: quorumlog.cli.main:main."""

from __future__ import annotations

import sys

import typer

from .bench import bench
from .cluster import cluster_app
from .common import EXIT_USAGE
from .data import append, read, status, transfer_leader
from .groups import group_app
from .kv import kv_app
from .ledgers import bookie_app, ledger_app
from .members import member_app
from .node import node_command
from .soak import soak

app = typer.Typer(name="quorumlog", help="A replicated, durable, ordered log (DLedger-style Raft).",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
app.command("node", help="Run one node in the foreground until SIGTERM/SIGINT.")(node_command())
app.add_typer(cluster_app, name="cluster")
app.add_typer(group_app, name="group")
app.add_typer(kv_app, name="kv")
app.add_typer(ledger_app, name="ledger")
app.add_typer(bookie_app, name="bookie")
app.add_typer(member_app, name="member")
app.command("status")(status)
app.command("append")(append)
app.command("read")(read)
app.command("transfer-leader")(transfer_leader)
app.command("bench")(bench)
app.command("soak")(soak)


def main(argv: list[str] | None = None) -> None:
    # No logging set up here: `node` configures its own from its log_level; the other commands call
    # setup_logging() (stderr, warnings) when they start.
    try:
        app(args=argv, prog_name="quorumlog", standalone_mode=True)
    except SystemExit as e:
        # click reports bad usage with exit code 2 already; keep every other code as it is.
        raise SystemExit(e.code if e.code is not None else 0) from None
    except KeyboardInterrupt:  # pragma: no cover
        sys.exit(130)


__all__ = ["EXIT_USAGE", "app", "main"]


if __name__ == "__main__":
    main()
