"""The `quorumlog` command (typer + rich). The console script enters through quorumlog.cli:entry."""

from __future__ import annotations

import os
import sys
from importlib import import_module
from typing import Optional

import typer

try:  # newer typers carry their own copy of click
    from typer._click import exceptions as click_exceptions
except ImportError:  # pragma: no cover
    from click import exceptions as click_exceptions

from ..codes import ResponseCode
from ..transport.client_connection import TOKEN_ENV
from ..transport.tls import TLS_CA_ENV
from .common import EXIT_USAGE, error_line, usage

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
# Every command: its name, the module defining it, the object there, and whether it is a command or a group of
# them. A run imports only the module of the command it runs (the whole list for --help or a mistyped name):
# importing all of them cost every command a third of a second before it did anything.
COMMANDS: tuple[tuple[str, str, str, str], ...] = (
    ("node", ".node", "node_command", "factory"),
    ("cluster", ".cluster", "cluster_app", "group"),
    ("certs", ".certs", "certs_app", "group"),
    ("group", ".groups", "group_app", "group"),
    ("kv", ".kv", "kv_app", "group"),
    ("ha", ".ha", "ha_app", "group"),
    ("ledger", ".ledgers", "ledger_app", "group"),
    ("bookie", ".ledgers", "bookie_app", "group"),
    ("member", ".members", "member_app", "group"),
    ("topic", ".topics", "topic_app", "group"),
    ("consumer-group", ".topics", "consumer_group_app", "group"),
    ("produce", ".topics", "produce", "command"),
    ("consume", ".topics", "consume", "command"),
    ("status", ".data", "status", "command"),
    ("append", ".data", "append", "command"),
    ("read", ".data", "read", "command"),
    ("transfer-leader", ".data", "transfer_leader", "command"),
    ("bench", ".bench", "bench", "command"),
    ("soak", ".soak", "soak", "command"),
)
_registered: set[str] = set()


def register(names: set[str] | None = None) -> typer.Typer:
    """Add the commands `names` (None: every one) to `app`, importing their modules now."""
    for name, module, attr, kind in COMMANDS:
        if name in _registered or (names is not None and name not in names):
            continue
        obj = getattr(import_module(module, __package__), attr)
        if kind == "factory":
            app.command(name, help="Run one node in the foreground until SIGTERM/SIGINT.")(obj())
        elif kind == "group":
            app.add_typer(obj, name=name)
        else:
            app.command(name)(obj)
        _registered.add(name)
    return app


def _command_of(args: list[str]) -> str | None:
    """The command a command line runs (its first word that is not a global option or its value)."""
    i = 0
    while i < len(args):
        if args[i] in GLOBAL_OPTIONS:
            i += 2
        elif args[i].startswith("-"):
            return None  # --help, or an option typer will refuse
        else:
            return args[i]
    return None


# The options of every command (the callback above): taken anywhere on the command line, as etcdctl and kubectl
# take theirs, and handed to the callback in front of the command.
GLOBAL_OPTIONS = ("--token", "--token-file", "--tls-ca")
OWN_TLS_AND_TOKEN = ("node",)  # commands with options of those names of their own


def hoist_global_options(argv: list[str]) -> list[str]:
    """`quorumlog append --token T x` → `quorumlog --token T append x`: every GLOBAL_OPTIONS occurrence (as
    `--opt V` or `--opt=V`) before a `--` moves to the front, in order; the rest keeps its order. Not for
    `node`, whose own --token, --token-file and --tls-ca are the node's settings."""
    if _command_of(argv) in OWN_TLS_AND_TOKEN:
        return list(argv)
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
        command = _command_of(args)
        register({command} if any(command == c[0] for c in COMMANDS) else None)
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
    except typer.Abort:  # (stdin closed under a prompt)
        code = 1
    except SystemExit as e:
        code = e.code
    except KeyboardInterrupt:  # pragma: no cover
        code = 130
    try:
        sys.stdout.flush()
    except BrokenPipeError:  # `quorumlog ... | head`: the reader left; say nothing more at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = code or 1
    raise SystemExit(code if isinstance(code, int) else 0)


def __getattr__(name: str):
    if name == "full_app":  # every command registered: what tests drive with typer's CliRunner
        return register()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["EXIT_USAGE", "app", "full_app", "hoist_global_options", "main", "register"]


if __name__ == "__main__":
    main()
