"""`quorumlog kv get|put|list|delete|watch`: the `_meta` group's key/value store (client/kv.py).

Reads are linearizable; `put --expected-version V` is a compare-and-set (0: create only) and a mismatch
exits 1 with METADATA_VERSION_CONFLICT; `watch` prints one line (or JSON document) per change until
interrupted or `--count` changes were printed.
"""

from __future__ import annotations

import base64
import json
import sys
from typing import Any, Optional

import typer

from ..client import Client
from ..codes import ResponseCode
from ..meta.kv import Change, KeyValue
from .common import (ClusterOpt, JsonOpt, die, PeersOpt, TimeoutOpt, out_console, print_json, print_table,
                     resolve_target, run)

kv_app = typer.Typer(help="The cluster's metadata store (the _meta group): get, put, list, delete, watch",
                     no_args_is_help=True)
ExpectedOpt = typer.Option(None, "--expected-version", min=0,
                           help="Compare-and-set: apply only if the key's version is this (0: it must not exist)")


def _client(peers: Optional[str], cluster: Optional[str], timeout_ms: int) -> Client:
    return Client(resolve_target(peers, cluster, None).peers, timeout_ms=timeout_ms)


def _text(value: bytes | None) -> Any:
    """A value as JSON can carry it: text when it is UTF-8, else {"base64": ...}."""
    if value is None:
        return None
    try:
        return value.decode()
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(value).decode()}


def _kv_doc(e: KeyValue) -> dict:
    return {"key": e.key, "value": _text(e.value), "version": e.version, "create_revision": e.create_revision,
            "mod_revision": e.mod_revision}


def _change_doc(c: Change) -> dict:
    return {"revision": c.revision, "key": c.key, "value": _text(c.value), "version": c.version,
            "type": "delete" if c.value is None else "put"}


@kv_app.command("get")
def get(key: str = typer.Argument(...), peers: Optional[str] = PeersOpt, cluster: Optional[str] = ClusterOpt,
        timeout_ms: int = TimeoutOpt, json_out: bool = JsonOpt) -> None:
    """Print a key's value (with --json: key, value, version, revisions); exits 1 when the key is absent."""
    async def go():
        async with _client(peers, cluster, timeout_ms) as c:
            return await c._kv().get_entry(key)

    e = run(go())
    if e is None:
        die(ResponseCode.NO_SUCH_KEY, f"kv get: no key {key!r}")
    if json_out:
        print_json(_kv_doc(e))
    else:
        out_console.print(str(_text(e.value)), highlight=False)


@kv_app.command("put")
def put(key: str = typer.Argument(...), value: str = typer.Argument(..., help="The value; - reads stdin"),
        expected_version: Optional[int] = ExpectedOpt, peers: Optional[str] = PeersOpt,
        cluster: Optional[str] = ClusterOpt, timeout_ms: int = TimeoutOpt, json_out: bool = JsonOpt) -> None:
    """Store a value; prints the key's new version."""
    raw = sys.stdin.buffer.read() if value == "-" else value.encode()

    async def go():
        async with _client(peers, cluster, timeout_ms) as c:
            return await c.kv_put(key, raw, expected_version)

    version = run(go())
    if json_out:
        print_json({"key": key, "version": version})
    else:
        out_console.print(f"{key}: version {version}", highlight=False)


@kv_app.command("delete")
def delete(key: str = typer.Argument(...), expected_version: Optional[int] = ExpectedOpt,
           peers: Optional[str] = PeersOpt, cluster: Optional[str] = ClusterOpt, timeout_ms: int = TimeoutOpt,
           json_out: bool = JsonOpt) -> None:
    """Delete a key (absent already: nothing to do); prints the store's revision."""
    async def go():
        async with _client(peers, cluster, timeout_ms) as c:
            return await c.kv_delete(key, expected_version)

    revision = run(go())
    if json_out:
        print_json({"key": key, "revision": revision})
    else:
        out_console.print(f"{key}: deleted (revision {revision})", highlight=False)


@kv_app.command("list")
def list_keys(prefix: str = typer.Argument("", help="Only keys starting with this"), peers: Optional[str] = PeersOpt,
              cluster: Optional[str] = ClusterOpt, timeout_ms: int = TimeoutOpt, json_out: bool = JsonOpt) -> None:
    """Every key under a prefix, in key order, with its version."""
    async def go():
        async with _client(peers, cluster, timeout_ms) as c:
            return await c._kv().list(prefix)

    entries, revision = run(go())
    if json_out:
        print_json({"revision": revision, "keys": [_kv_doc(e) for e in entries]})
        return
    print_table(["key", "value", "version"], [[e.key, _text(e.value), e.version] for e in entries], ("version",))


@kv_app.command("watch")
def watch(prefix: str = typer.Argument("", help="Only keys starting with this"),
          revision: Optional[int] = typer.Option(None, "--revision", help="Changes after this revision (default: "
                                                                          "from now)"),
          count: int = typer.Option(0, "--count", min=0, help="Stop after this many changes (0: never)"),
          peers: Optional[str] = PeersOpt, cluster: Optional[str] = ClusterOpt,
          timeout_ms: int = TimeoutOpt, json_out: bool = JsonOpt) -> None:
    """Print changes under a prefix as they commit (one JSON document per line with --json)."""
    async def go():
        seen = 0
        async with _client(peers, cluster, timeout_ms) as c:
            async for change in c.kv_watch(prefix, revision):
                doc = _change_doc(change)
                if json_out:
                    sys.stdout.write(json.dumps(doc) + "\n")
                    sys.stdout.flush()
                else:
                    out_console.print(f"{doc['revision']} {doc['type']} {change.key} {doc['value'] or ''}",
                                      highlight=False)
                seen += 1
                if count and seen >= count:
                    return

    run(go(), long_running=True)
