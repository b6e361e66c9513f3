"""The layers ARCHITECTURE.md draws, checked on the source: no import cycle inside server/ or client/, no core
importing what runs it, and in server/ no file reaching into another's private members.

Every import counts: module level, inside functions and under `if TYPE_CHECKING:` (a cycle that only type
checkers see is still two modules that must change together)."""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator

import pytest

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "quorumlog")
CORES = ("raft", "ha", "ledger", "topic", "meta")
ABOVE_CORES = ("server", "client", "cli", "sim", "soak")
# (module, attribute): private names a server file may read on another object, each with its reason.
PRIVATE_ALLOWED = frozenset({
    ("quorumlog.server.loop_lag", "_current_frames"),  # sys._current_frames: the documented way to a thread's stack
    ("quorumlog.server.metrics", "_metrics"),  # prometheus_client has no public way to a family's children
})


def _modules() -> dict[str, str]:
    """Every module under quorumlog/: dotted name -> path."""
    out = {}
    for root, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(root, f)
                rel = os.path.relpath(path, os.path.dirname(ROOT))[:-3].split(os.sep)
                if rel[-1] == "__init__":
                    rel = rel[:-1]
                out[".".join(rel)] = path
    return out


MODULES = _modules()
TREES = {name: ast.parse(open(path).read(), path) for name, path in MODULES.items()}


def _is_package(name: str) -> bool:
    return MODULES[name].endswith("__init__.py")


def _imports(name: str) -> Iterator[str]:
    """The quorumlog modules `name` imports, wherever in the file (`from .x import y` names x.y when that is a
    module, else x)."""
    package = name if _is_package(name) else name.rpartition(".")[0]
    for node in ast.walk(TREES[name]):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                base = ".".join(base + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in MODULES:
                t = t.rpartition(".")[0]
            if t and t != name:
                yield t


def _cycles(prefix: str) -> list[list[str]]:
    """Strongly connected components of more than one module among the modules under `prefix`."""
    nodes = [m for m in MODULES if m == prefix or m.startswith(prefix + ".")]
    edges = {m: sorted({t for t in _imports(m) if t in nodes and t != prefix}) for m in nodes}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in nodes:
        if v not in index:
            visit(v)
    return out


@pytest.mark.parametrize("package", ["quorumlog.server", "quorumlog.client"])
def test_no_import_cycle(package: str) -> None:
    assert _cycles(package) == []


@pytest.mark.parametrize("core", CORES)
def test_cores_import_nothing_above_them(core: str) -> None:
    above = tuple(f"quorumlog.{p}" for p in ABOVE_CORES)
    bad = sorted({(m, t) for m in MODULES if m == f"quorumlog.{core}" or m.startswith(f"quorumlog.{core}.")
                  for t in _imports(m) if t.startswith(above)})
    assert bad == []


def _defined_private_names(tree: ast.AST) -> set[str]:
    """Private names a file defines: its functions, classes and the attributes it assigns on anything."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def _is_private(attr: str) -> bool:
    return attr.startswith("_") and not attr.startswith("__")


def private_accesses() -> list[tuple[str, int, str]]:
    """In server/: `x._name` where x is not self/cls and no part of the same file defines `_name`."""
    out = []
    for name, tree in TREES.items():
        if not name.startswith("quorumlog.server"):
            continue
        own = _defined_private_names(tree)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and _is_private(node.attr)):
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            if node.attr in own or (name, node.attr) in PRIVATE_ALLOWED:
                continue
            out.append((name, node.lineno, node.attr))
        for node in ast.walk(tree):  # `from .x import _name`: a private name taken from another module
            if isinstance(node, ast.ImportFrom):
                out += [(name, node.lineno, a.name) for a in node.names if _is_private(a.name)]
    return sorted(out)


def test_no_private_member_reached_across_files_in_server() -> None:
    assert private_accesses() == []


def test_the_server_layer_imports_the_front_doors_only_at_its_composition_root() -> None:
    """doors/ sit above the client (they reach the groups as any client does); the node's process entry starts
    them, and nothing else in server/ may depend on them, nor they on server/."""
    up = sorted({(m, t) for m in MODULES if m.startswith("quorumlog.server") and m != "quorumlog.server.runtime"
                 for t in _imports(m) if t.startswith("quorumlog.doors")})
    down = sorted({(m, t) for m in MODULES if m.startswith("quorumlog.doors")
                   for t in _imports(m) if t.startswith("quorumlog.server")})
    assert (up, down) == ([], [])
