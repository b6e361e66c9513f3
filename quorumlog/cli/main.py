"""The `quorumlog` command (typer + rich). Entry point: quorumlog.cli.main:main."""

from __future__ import annotations

import os
import sys
from typing import Optional

import typer

try:  # newer typers carry their own copy of click
    from typer._click import exceptions as click_exceptions
except ImportError:  # pragma: no cover
    from click import exceptions as click_exceptions

from .bench import bench
from .cluster import cluster_app
from ..transport.client_connection import TOKEN_ENV
from ..transport.tls import TLS_CA_ENV
from ..codes import ResponseCode
from .common import EXIT_USAGE, error_line, usage
from .data import append, read, status, transfer_leader
from .groups import group_app
from .kv import kv_app
from .ha import ha_app
from .ledgers import bookie_app, ledger_app
from .members import member_app
from .node import node_command
from .soak import soak
from .topics import consume, consumer_group_app, produce, topic_app

app = typer.Typer(name="quorumlog", help="A replicated, durable, ordered log (DLedger-style Raft).",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)


@app.callback()
def _global(token: Optional[str] = typer.Option(
        None, "--token", help="The cluster's shared token (visible to `ps`: prefer QUORUMLOG_TOKEN or --token-file)"),
        tls_ca: Optional[str] = typer.Option(
            None, "--tls-ca", help="Connect with TLS, verifying the nodes against this CA certificate (or set "
            "QUORUMLOG_TLS_CA; commands given --cluster D of a `cluster up --tls` cluster use its CA)"),
        token_file: Optional[str] = typer.Option(
        None, "--token-file", help="A file whose first line is the cluster's shared token (or set QUORUMLOG_TOKEN); "
        "every connection this command makes carries it, and `cluster up` / `cluster add-node` give it to the "
        "nodes they start")) -> None:
    """The token goes in the environment of this process (and of the nodes `cluster up` starts): never on a
    command line another user can read with `ps`, never in cluster.json."""
    if tls_ca is not None:
        if not os.path.isfile(tls_ca):
            usage(f"--tls-ca {tls_ca!r}: no such file")
        os.environ[TLS_CA_ENV] = os.path.abspath(tls_ca)
    if token is not None and token_file is not None:
        usage("--token and --token-file: give one of them")
    if token is not None:
        os.environ[TOKEN_ENV] = token
    if token_file is not None:
        try:
            with open(token_file, encoding="utf-8") as f:
                token = f.readline().strip()
        except OSError as e:
            usage(f"--token-file {token_file!r}: {e.strerror}")
        if not token:
            usage(f"--token-file {token_file!r}: empty")
        os.environ[TOKEN_ENV] = token
app.command("node", help="Run one node in the foreground until SIGTERM/SIGINT.")(node_command())
app.add_typer(cluster_app, name="cluster")
app.add_typer(group_app, name="group")
app.add_typer(kv_app, name="kv")
app.add_typer(ha_app, name="ha")
app.add_typer(ledger_app, name="ledger")
app.add_typer(bookie_app, name="bookie")
app.add_typer(member_app, name="member")
app.add_typer(topic_app, name="topic")
app.add_typer(consumer_group_app, name="consumer-group")
app.command("produce")(produce)
app.command("consume")(consume)
app.command("status")(status)
app.command("append")(append)
app.command("read")(read)
app.command("transfer-leader")(transfer_leader)
app.command("bench")(bench)
app.command("soak")(soak)


# The options of every command (the callback above): taken anywhere on the command line, as etcdctl and kubectl
# take theirs, and handed to the callback in front of the command.
GLOBAL_OPTIONS = ("--token", "--token-file", "--tls-ca")


def hoist_global_options(argv: list[str]) -> list[str]:
    """`quorumlog append --token T x` → `quorumlog --token T append x`: every GLOBAL_OPTIONS occurrence (as
    `--opt V` or `--opt=V`) before a `--` moves to the front, in order; the rest keeps its order."""
    front: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            rest.extend(argv[i:])
            break
        name = arg.split("=", 1)[0]
        if name in GLOBAL_OPTIONS:
            if "=" in arg:
                front.append(arg)
            else:
                front.extend(argv[i:i + 2])  # (a missing value: the callback's parser says so)
                i += 1
        else:
            rest.append(arg)
        i += 1
    return front + rest


def main(argv: list[str] | None = None) -> None:
    # No logging set up here: `node` configures its own from its log_level; the other commands call
    # setup_logging() (stderr, warnings) when they start.
    try:
        args = hoist_global_options(sys.argv[1:] if argv is None else list(argv))
        code = app(args=args, prog_name="quorumlog", standalone_mode=False)
    except getattr(click_exceptions, "NoArgsIsHelpError", ()) as e:  # `quorumlog ledger`: its help
        e.show()
        code = e.exit_code
    except click_exceptions.ClickException as e:
        # typer's own checks (an unknown option, a missing argument, a value out of range): the one error line
        # of every other failure, not click's box, so scripts read them all alike.
        ctx = getattr(e, "ctx", None)
        error_line(ResponseCode.BAD_REQUEST, (f"{ctx.command_path}: " if ctx is not None else "")
                   + e.format_message() + (" (see --help)" if ctx is not None else ""))
        code = EXIT_USAGE
    except click_exceptions.Abort:  # (stdin closed under a prompt)
        code = 1
    except SystemExit as e:
        code = e.code
    except KeyboardInterrupt:  # pragma: no cover
        code = 130
    raise SystemExit(code if isinstance(code, int) else 0)


__all__ = ["EXIT_USAGE", "app", "hoist_global_options", "main"]


if __name__ == "__main__":
    main()
