"""`quorumlog node`: one node in the foreground. Its flags are generated from the configuration key table, so
every key (quorumlog/config.py) is a --flag here without a second list to keep in sync."""

from __future__ import annotations

import inspect
from typing import Any, Optional

import typer

from ..config import CONFIG_KEYS, ConfigError, load_config
from .common import usage


def _node(**flags: Any) -> None:
    config_file = flags.pop("config", None)
    try:
        cfg = load_config(config_file, flags=flags)
    except ConfigError as e:
        usage(str(e))
    from ..server import run_node  # the runtime is heavy; only `node` needs it

    result = run_node(cfg)
    if inspect.isawaitable(result):  # run_node may be a coroutine function; run it on our loop
        from .common import run

        result = run(result, long_running=True)
    raise typer.Exit(int(result or 0))


def _parameters() -> list[inspect.Parameter]:
    params = [inspect.Parameter(
        "config", inspect.Parameter.KEYWORD_ONLY, annotation=Optional[str],
        default=typer.Option(None, "--config", help="TOML file with any of the keys below (flags win)"))]
    for k in CONFIG_KEYS:
        names = [k.flag] + ["--" + a.replace("_", "-") for a in k.aliases]
        extra = f" One of: {', '.join(k.choices)}." if k.choices else ""
        default = "required" if k.required else repr(k.default)
        params.append(inspect.Parameter(
            k.name, inspect.Parameter.KEYWORD_ONLY, annotation=Optional[str],
            default=typer.Option(None, *names, metavar=k.type.upper(),
                                 help=f"{k.doc}{extra} [env {k.env}; default {default}]")))
    return params


def node_command() -> Any:
    def node(**flags: Any) -> None:
        """Run one node in the foreground until SIGTERM/SIGINT (clean shutdown: flush, checkpoint)."""
        _node(**flags)

    node.__signature__ = inspect.Signature(_parameters())  # typer reads the generated flags from here
    return node
