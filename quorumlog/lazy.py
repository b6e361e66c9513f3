"""Package attributes imported at first use (PEP 562): a package's `__init__` names what it exports and where
from, and a program that needs one part does not pay at start-up for importing every other."""

from __future__ import annotations

from importlib import import_module
from typing import Any, Callable


def lazy_exports(package: str, where: dict[str, str]) -> Callable[[str], Any]:
    """The package's module `__getattr__`: `name` comes from the (relative) module `where[name]`, imported then,
    and is kept in the package's namespace so later lookups are plain attribute reads."""
    namespace = import_module(package).__dict__

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(module, package), name)
        namespace[name] = value
        return value

    return __getattr__
