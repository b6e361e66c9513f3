"""@frozen behaves as @dataclass(frozen=True, slots=True): the two side by side on the same class."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
from dataclasses import FrozenInstanceError, dataclass, field

import pytest

from quorumlog.frozen import frozen


def shape(decorate, name: str) -> type:
    class Shape:
        request_id: int
        code: str
        leader_id: str | None = None
        offsets: tuple[int, ...] = ()
        watermarks: dict[str, int] = field(default_factory=dict)
        cached: int = field(default=0, compare=False, repr=False)

    Shape.__name__ = Shape.__qualname__ = name
    return decorate(Shape)


Fast = shape(frozen, "Fast")
Slow = shape(dataclass(frozen=True, slots=True), "Slow")


@frozen
class Point:
    x: int
    y: int = 0


def both(*args, **kwargs):
    return Fast(*args, **kwargs), Slow(*args, **kwargs)


def test_construction_fields_and_defaults_match_dataclass():
    for args, kwargs in (((1, "OK"), {}), ((1, "OK", "n1", (3,)), {"watermarks": {"n0": 2}}),
                         ((), {"code": "X", "request_id": 9, "cached": 4})):
        f, s = both(*args, **kwargs)
        assert dataclasses.astuple(f) == dataclasses.astuple(s)
    assert [x.name for x in dataclasses.fields(Fast)] == [x.name for x in dataclasses.fields(Slow)]
    assert str(inspect.signature(Fast)) == str(inspect.signature(Slow))
    assert Fast(1, "a").watermarks is not Fast(1, "a").watermarks  # a fresh dict each time
    assert Fast.__match_args__ == Slow.__match_args__ and Fast.__slots__ == Slow.__slots__
    with pytest.raises(TypeError):
        Fast(1)
    with pytest.raises(TypeError):
        Fast(1, "a", nope=2)


def test_eq_hash_and_repr_match_dataclass():
    f, s = both(7, "OK", None, (1, 2), cached=3)
    assert repr(f).replace("Fast", "Slow") == repr(s)
    assert f == Fast(7, "OK", None, (1, 2)) and f != Fast(8, "OK") and f != s  # (cached: compare=False)
    assert (f == (7, "OK")) is False
    with pytest.raises(TypeError):  # a dict field: unhashable, as with dataclass
        hash(f)
    assert hash(Point(1, 2)) == hash(Point(1, 2)) and len({Point(1, 2), Point(1, 2), Point(1)}) == 2
    assert repr(Point(3)) == "Point(x=3, y=0)"


def test_frozen_and_slotted():
    f = Fast(1, "a")
    with pytest.raises(FrozenInstanceError):
        f.code = "b"
    with pytest.raises(FrozenInstanceError):
        del f.code
    assert not hasattr(f, "__dict__")


def test_replace_asdict_pickle_and_copy():
    f = Fast(1, "a", "n1", (5,), {"n0": 1})
    assert dataclasses.replace(f, code="b") == Fast(1, "b", "n1", (5,), {"n0": 1})
    assert dataclasses.asdict(f) == dataclasses.asdict(Slow(1, "a", "n1", (5,), {"n0": 1}))
    assert dataclasses.is_dataclass(f) and Fast.__dataclass_params__.frozen
    assert pickle.loads(pickle.dumps(f)) == f
    assert copy.copy(f) == f and copy.deepcopy(f) == f


def test_own_methods_are_kept_and_unsupported_fields_refused():
    @frozen
    class Own:
        a: int

        def __repr__(self) -> str:
            return "own"

        @property
        def twice(self) -> int:
            return 2 * self.a

    assert repr(Own(1)) == "own" and Own(2).twice == 4 and Own(1) == Own(1)
    with pytest.raises(TypeError):
        @frozen
        class Late:
            a: int = field(default=0, init=False)

    @dataclass(frozen=True)
    class Derived(Own):  # a dataclass may derive from a @frozen one, as from a frozen dataclass
        b: int = 0

    assert Derived(1, 2).b == 2
