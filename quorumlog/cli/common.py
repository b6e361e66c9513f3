"""What every command shares: finding the cluster (--peers or --cluster), JSON out, errors and exit codes.

Exit codes: 0 done; 1 the cluster failed the request (error printed); 2 bad input (peers, config, flags),
reported before anything is written or started. Either way stderr gets one line, `quorumlog: error: CODE: ...`
(docs/interfaces.md), CODE a ResponseCode name: scripts match on it.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import select
import sys
from typing import TYPE_CHECKING, Any, Coroutine, NoReturn

import typer

from ..codes import ResponseCode
from ..errors import QuorumLogError
from ..frozen import frozen
from ..peers import Address, format_peers, parse_peers
from ..transport.tls import TLS_CA_ENV

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

EXIT_FAILED = 1
EXIT_USAGE = 2
CLUSTER_FILE = "cluster.json"

# rich is imported at the first table or styled line, never before: it is a sixth of a command's start-up, and
# --json output and error lines do without it.
class _Out:
    """stdout's rich Console, made at first use: a pipe or file gets 160 columns instead of rich's 80, so
    tables stay one line per row in logs and `| less`."""

    _console: Console | None = None

    def print(self, *args, **kwargs) -> None:
        if self._console is None or self._console.file is not sys.stdout:
            from rich.console import Console
            self._console = Console(file=sys.stdout, width=None if sys.stdout.isatty() else 160)
        self._console.print(*args, **kwargs)


class _Err:
    """stderr's rich Console, made at first use."""

    _console: Console | None = None

    def print(self, *args, **kwargs) -> None:
        if self._console is None:
            from rich.console import Console
            self._console = Console(stderr=True)
        self._console.print(*args, **kwargs)


out_console = _Out()
err_console = _Err()


def new_table(*headers: str, **kwargs: Any) -> Table:
    """A rich Table (for out_console.print)."""
    from rich.table import Table
    return Table(*headers, **kwargs)


def error_line(code: ResponseCode, message: str) -> None:
    # Plain text, one line, never wrapped: scripts grep it and humans read it whole.
    one_line = " ".join(message.split())
    sys.stderr.write(f"quorumlog: error: {code.name}: {one_line}\n")
    sys.stderr.flush()


def die(code: ResponseCode, message: str, exit_code: int = EXIT_FAILED) -> NoReturn:
    error_line(code, message)
    raise typer.Exit(exit_code)


def usage(message: str) -> NoReturn:
    die(ResponseCode.BAD_REQUEST, message, EXIT_USAGE)


def setup_logging(level: str = "warning") -> None:
    """Logs go to stderr, so stdout holds only the command's output (one JSON document with --json)."""
    logging.basicConfig(level=getattr(logging, level.upper(), logging.WARNING), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")


def print_table(columns: list[str], rows: list[list[Any]], numeric: tuple[str, ...] = ()) -> None:
    """Rows as the other commands print them: a rich table, `numeric` columns right-aligned, None as "-"."""
    table = new_table()
    for col in columns:
        table.add_column(col, justify="right" if col in numeric else "left")
    for row in rows:
        table.add_row(*("-" if v is None else str(v) for v in row))
    out_console.print(table)


def print_json(doc: Any) -> None:
    write_stdout(json.dumps(doc, separators=(",", ":"), default=str) + "\n")


def write_stdout(text: str) -> None:
    """All of `text` to stdout, or an error. Unbuffered (PYTHONUNBUFFERED=1), Python's text layer hands a pipe
    to one raw write and drops what a short write left (a non-blocking pipe takes 64 KiB): loop until written."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (captured by a test runner): no short writes there
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    sys.stdout.flush()
    data = memoryview(text.encode())
    while data:
        try:
            data = data[os.write(fd, data):]
        except BlockingIOError:
            select.select([], [fd], [])


@frozen
class Target:
    """The cluster a command talks to."""

    peers: dict[str, Address]
    group: str
    cluster: dict | None = None  # cluster.json when given by --cluster

    @property
    def peers_text(self) -> str:
        return format_peers(self.peers)


def read_cluster_file(data_dir: str) -> dict:
    path = os.path.join(data_dir, CLUSTER_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except FileNotFoundError:
        usage(f"--cluster {data_dir!r}: no {CLUSTER_FILE} there (made by `quorumlog cluster up`)")
    except (OSError, ValueError) as e:
        usage(f"--cluster {data_dir!r}: cannot read {path}: {e}")
    if not isinstance(doc, dict) or "peers" not in doc:
        usage(f"--cluster {data_dir!r}: {path} has no `peers`")
    return doc


def resolve_target(peers: str | None, cluster: str | None, group: str | None) -> Target:
    """--peers P or --cluster D (exactly one); exits 2 naming the bad value."""
    setup_logging()
    if (peers is None) == (cluster is None):
        usage("give exactly one of --peers P or --cluster DIR")
    doc = None
    if cluster is not None:
        doc = read_cluster_file(cluster)
        peers = doc["peers"]
        group = group or doc.get("group")
        if doc.get("tls_ca"):  # a `cluster up --tls` cluster: verify its nodes with its CA
            os.environ.setdefault(TLS_CA_ENV, doc["tls_ca"])
    try:
        parsed = parse_peers(peers)
    except ValueError as e:
        usage(f"--peers {peers!r}: {e}")
    return Target(parsed, group or "default", doc)


def run(coro: Coroutine, *, long_running: bool = False) -> Any:
    """Run a command's coroutine; QuorumLogError → message and exit 1. A long-running one (a stream, a bulk
    load, a benchmark, a node) runs on uvloop when installed (transport/loop.py); a short one on asyncio's own
    loop: importing uvloop costs it more than a few round trips gain."""
    if long_running:
        from ..transport.loop import loop_factory
        runner = asyncio.Runner(loop_factory=loop_factory())
    else:
        runner = asyncio.Runner()
    try:
        with runner:
            return runner.run(coro)
    except QuorumLogError as e:
        die(e.code, str(e) if str(e) != e.code.name else "refused by the cluster (no detail given)")
    except KeyboardInterrupt:
        raise typer.Exit(130)


def body_fields(body: bytes) -> dict[str, str]:
    """An entry body for JSON: UTF-8 text as `body`, anything else base64 as `body_b64`."""
    try:
        return {"body": body.decode("utf-8")}
    except UnicodeDecodeError:
        return {"body_b64": base64.b64encode(body).decode("ascii")}


# Options shared by the commands that talk to a cluster.
PeersOpt = typer.Option(None, "--peers", help="Members, e.g. n0=127.0.0.1:7001,n1=127.0.0.1:7002")
ClusterOpt = typer.Option(None, "--cluster", help="A directory made by `quorumlog cluster up` (cluster.json)")
GroupOpt = typer.Option(None, "--group", help="Group name (default: the cluster's, else `default`)")
JsonOpt = typer.Option(False, "--json", help="Print exactly one JSON document on stdout")
TimeoutOpt = typer.Option(10_000, "--timeout-ms", min=1, help="Give up after this long (all retries)")
