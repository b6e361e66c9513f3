"""`@frozen`: a frozen, slotted dataclass, made in a third of the time `@dataclass(frozen=True, slots=True)` takes.

A command imports the wire messages and records by the dozen, and on Python 3.11 each such dataclass compiled
six methods, one exec each (__init__, __repr__, __eq__, __hash__, __setattr__, __delattr__): 1.3 ms a class,
60 ms of `quorumlog status`. Here dataclass still records the fields (dataclasses.fields, replace and asdict
work as before) and makes the slots; one exec compiles the class's __init__, and the other methods are shared.

What a class gets is what the dataclass decorator gives it: __init__ by position or keyword with defaults and
default_factory, == and hash over the fields (compare=True), repr, FrozenInstanceError on assignment or
deletion, pickling and copying, __match_args__. Methods the class defines itself are kept. Not supported (a
TypeError at class creation): init=False or kw_only fields, InitVar, __post_init__.
"""

from __future__ import annotations

import dataclasses
from dataclasses import MISSING, FrozenInstanceError
from operator import attrgetter
from typing import Any, Callable, TypeVar

T = TypeVar("T", bound=type)


def frozen(cls: T) -> T:
    if not cls.__doc__:  # (else dataclass makes one with inspect.signature: a third of its time)
        cls.__doc__ = f"{cls.__name__}({', '.join(cls.__dict__.get('__annotations__', {}))})"
    own = set(cls.__dict__)
    if cls.__dict__.get("__hash__", 0) is None and "__eq__" in own:  # (Python's None for a class with its own
        own.discard("__hash__")  # __eq__: dataclass hashes it all the same)
    cls = dataclasses.dataclass(init=False, repr=False, eq=False, slots=True)(cls)
    fields = dataclasses.fields(cls)
    if hasattr(cls, "__post_init__") or any(not f.init or f.kw_only for f in fields):
        raise TypeError(f"{cls.__name__}: @frozen takes plain fields only (see quorumlog/frozen.py)")
    params = cls.__dataclass_params__  # what the class is, for dataclasses that derive from it
    params.init = params.repr = params.eq = params.frozen = True

    cls.__init__ = _init(cls, fields)
    cls.__frozen_fields__ = tuple(f.name for f in fields)
    cls.__frozen_repr__ = tuple(f.name for f in fields if f.repr)
    cls.__frozen_compare__ = staticmethod(_values(tuple(f.name for f in fields if f.compare)))
    hashed = tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash))
    cls.__frozen_hash__ = staticmethod(_values(hashed))
    for name, method in _SHARED.items():
        if name not in own:
            setattr(cls, name, method)
    return cls


def _init(cls: type, fields: tuple[dataclasses.Field, ...]) -> Callable[..., None]:
    """The class's __init__, as dataclass writes it for a frozen class (object.__setattr__ past our own)."""
    env: dict[str, Any] = {"_set": object.__setattr__, "_FACTORY": _HAS_FACTORY}
    params, lines = [], []
    for f in fields:
        if f.default is not MISSING:
            env[f"_default_{f.name}"] = f.default
            params.append(f"{f.name}=_default_{f.name}")
        elif f.default_factory is not MISSING:
            env[f"_factory_{f.name}"] = f.default_factory
            params.append(f"{f.name}=_FACTORY")
            lines.append(f"    if {f.name} is _FACTORY: {f.name} = _factory_{f.name}()")
        else:
            params.append(f.name)
        lines.append(f"    _set(self, {f.name!r}, {f.name})")
    source = f"def __init__(self, {', '.join(params)}):\n" + ("\n".join(lines) or "    pass") + "\n"
    exec(source, env)
    init = env["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__annotations__ = {**{f.name: f.type for f in fields}, "return": None}
    return init


class _HasFactory:
    def __repr__(self) -> str:
        return "<factory>"


_HAS_FACTORY = _HasFactory()


def _values(names: tuple[str, ...]) -> Callable[[Any], tuple]:
    """obj → the tuple of its `names` attributes (attrgetter gives a bare value for one name)."""
    if len(names) > 1:
        return attrgetter(*names)
    if names:
        get = attrgetter(names[0])
        return lambda obj: (get(obj),)
    return lambda obj: ()


def _repr(self) -> str:
    return f"{type(self).__qualname__}({', '.join(f'{n}={getattr(self, n)!r}' for n in self.__frozen_repr__)})"


def _eq(self, other: object) -> bool:
    if other.__class__ is self.__class__:
        return self.__frozen_compare__(self) == self.__frozen_compare__(other)
    return NotImplemented


def _hash(self) -> int:
    return hash(self.__frozen_hash__(self))


def _setattr(self, name: str, value: Any) -> None:
    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _delattr(self, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field {name!r}")


def _getstate(self) -> list:
    return [getattr(self, n) for n in self.__frozen_fields__]


def _setstate(self, state: list) -> None:
    for name, value in zip(self.__frozen_fields__, state):
        object.__setattr__(self, name, value)


_SHARED = {"__repr__": _repr, "__eq__": _eq, "__hash__": _hash, "__setattr__": _setattr, "__delattr__": _delattr,
           "__getstate__": _getstate, "__setstate__": _setstate}
