"""Running a node as a process: logging, the event loop (uvloop when installed), signals, exit codes."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from typing import Sequence

from ..config import ConfigError, NodeConfig, add_argparse_flags, load_config
from ..heap import keep_freed_buffers
from ..store import RecoveryError
from .long_lived import freeze_long_lived

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_CONFIG = 2


def setup_logging(config: NodeConfig) -> None:
    logging.basicConfig(
        level=getattr(logging, config.log_level.upper()), stream=sys.stderr,
        format=f"%(asctime)s %(levelname)s {config.node_id} %(name)s: %(message)s")


async def serve(config: NodeConfig, *, ready_file: str | None = None) -> int:
    """Run one node until SIGTERM/SIGINT, then shut down cleanly (stop accepting, flush, checkpoint)."""
    from ..doors import doors_for  # (the composition root: the server layer itself never imports doors/)
    from .node import Node

    try:
        doors = doors_for(config)
    except ImportError as e:  # (a door's libraries come with the `doors` extra)
        log.error("cannot start node=%s: a front door needs `pip install 'quorumlog[doors]'`: %s", config.node_id, e)
        return EXIT_BAD_CONFIG
    node = Node(config)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # A SIGSTOPped process (the soaks' pause faults) oversleeps without a stall of its own: loop_lag.py.
    loop.add_signal_handler(signal.SIGCONT, node.loop_lag.resumed)
    loop.add_signal_handler(signal.SIGUSR1, lambda: _dump_tasks(node))  # `kill -USR1 PID`: where is every task waiting?
    try:
        await node.start()
    except OSError as e:
        log.error("cannot start node=%s: %s", config.node_id, e)
        await node.stop()
        return EXIT_FAILED
    try:
        for door in doors:
            await door.start()
    except Exception as e:  # noqa: BLE001 - a port taken, a door that cannot start: stop what started, say why
        log.error("cannot start node=%s: its %s door: %s", config.node_id, door.kind, e,
                  exc_info=not isinstance(e, OSError))
        await _close_doors(doors)
        await node.stop()
        return EXIT_FAILED
    if doors:
        node.status_sources["doors"] = lambda: [door.status() for door in doors]
    freeze_long_lived()  # (what the node made to start lives until it stops: long_lived.py)
    log.info("node running node=%s address=%s:%d http_port=%d flush=%s", config.node_id, *config.address,
             config.http_port, config.flush)
    fatal = asyncio.ensure_future(node.fatal.wait())
    signalled = asyncio.ensure_future(stop.wait())
    await asyncio.wait([fatal, signalled], return_when=asyncio.FIRST_COMPLETED)
    fatal.cancel()
    signalled.cancel()
    if node.failed:
        log.error("node failed node=%s reason=%s", config.node_id, node.failed)
    else:
        log.info("signal received; shutting down node=%s", config.node_id)
        # A second signal skips the hand-over; the hand-over itself is bounded by 2 election timeouts.
        handover = asyncio.ensure_future(node.hand_over_leadership())
        stop.clear()
        again = asyncio.ensure_future(stop.wait())
        await asyncio.wait([handover, again], return_when=asyncio.FIRST_COMPLETED)
        again.cancel()
        if not handover.done():
            handover.cancel()
    await _close_doors(doors)
    await node.stop()
    return EXIT_FAILED if node.failed else EXIT_OK


async def _close_doors(doors: list) -> None:
    for door in doors:
        try:
            await door.close()
        except Exception:  # noqa: BLE001 - a door that fails to close must not keep the node from stopping
            log.exception("closing the %s door failed", door.kind)


def _dump_tasks(node=None) -> None:
    import io
    if node is not None:
        for peer, exc in node.dead_links().items():
            log.error("peer link task ended peer=%s", peer, exc_info=exc)
    for task in asyncio.all_tasks():
        out = io.StringIO()
        task.print_stack(limit=8, file=out)
        log.warning("task %s:\n%s", task.get_name(), out.getvalue())


def raise_open_files_limit() -> None:
    """Each group holds a few files open (its segments, index, checkpoint): take the hard limit on open files,
    as Kafka's and BookKeeper's operators are told to, so a thousand groups fit under the default soft one."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 1 << 20, hard))
        except (ValueError, OSError) as e:
            log.warning("cannot raise the open files limit from %d: %s", soft, e)


def run_node(config: NodeConfig) -> int:
    """Blocking: run a node in the foreground until SIGTERM/SIGINT; returns the process exit code."""
    setup_logging(config)
    raise_open_files_limit()
    keep_freed_buffers()
    try:
        import uvloop
    except ImportError:
        uvloop = None
    try:
        return (uvloop.run if uvloop is not None else asyncio.run)(serve(config))
    except RecoveryError as e:
        # The store will not open (corruption in the middle of the log, a checkpoint the data does not confirm):
        # say where, and exit without touching the files, so an operator can decide.
        log.critical("store cannot open node=%s: %s", config.node_id, e)
        print(f"quorumlog node: store cannot open: {e}", file=sys.stderr)
        return EXIT_FAILED


def parse_args(argv: Sequence[str] | None = None) -> NodeConfig:
    """argv → NodeConfig (flags > QUORUMLOG_* > --config file > defaults); raises ConfigError."""
    parser = argparse.ArgumentParser(prog="python -m quorumlog.server", description="Run one quorumlog node.")
    parser.add_argument("--config", default=None, help="TOML configuration file [env QUORUMLOG_CONFIG]")
    add_argparse_flags(parser)
    args = parser.parse_args(argv)
    flags = {k: v for k, v in vars(args).items() if v is not None}
    return load_config(flags=flags)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        config = parse_args(argv)
    except ConfigError as e:
        print(f"quorumlog node: bad configuration: {e}", file=sys.stderr)
        return EXIT_BAD_CONFIG
    return run_node(config)
