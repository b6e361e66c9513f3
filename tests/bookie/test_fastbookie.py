"""A bookie's per-add work in C (quorumlog/bookie/_fastbookie.c, taken through add_items.py) against the Python
path it replaces: the same verdicts on every request, malformed ones included (same error, same message), the same
bytes in the journal and the entry logs, the same index, and the same answers."""

from __future__ import annotations

import importlib
import os
import shutil
import sysconfig

import pytest
from hypothesis import given, settings, strategies as st

from quorumlog.bookie import BookieConfig, BookieStorage, add_items
from quorumlog.codes import ResponseCode
from quorumlog.wire.ledger import (MAX_ADD_BATCH, AddEntry, take_adds, pack_add_results, pack_adds,
                                   pack_multi_adds, pack_multi_results, unpack_multi_adds)

try:
    fast = importlib.import_module("quorumlog.bookie._fastbookie")
except ImportError:  # pragma: no cover - only where the build had no C compiler
    fast = None

needs_fast = pytest.mark.skipif(fast is None, reason="quorumlog.bookie._fastbookie is not built")
SMALL = BookieConfig(entry_log_file_bytes=64 * 1024, journal_file_bytes=128 * 1024)

adds_st = st.lists(st.tuples(st.integers(0, 2 ** 63 - 1), st.binary(max_size=300), st.integers(-1, 2 ** 63 - 1)),
                   max_size=40)


def _items(adds) -> bytes:
    return pack_adds([AddEntry("b", 1, entry_id, data, lac) for entry_id, data, lac in adds])


def _python(monkeypatch) -> None:
    monkeypatch.setattr(add_items, "_fast", None)


def test_extension_is_built_where_it_can_be():
    compiler = shutil.which("gcc") or shutil.which("cc")
    header = os.path.join(sysconfig.get_paths()["include"], "Python.h")
    if not (compiler and os.path.exists(header)):
        pytest.skip("no C compiler or Python.h here: the pure-Python path is the expected outcome")
    assert fast is not None, "quorumlog.bookie._fastbookie missing: rebuild with `pip install -e .` and read its log"


def _verdict(f):
    try:
        return f()
    except ValueError as e:
        return ("ValueError", str(e))


@needs_fast
@settings(max_examples=300, deadline=None)
@given(adds=adds_st, cut=st.integers(0, 64), flip=st.integers(0, 10_000), count=st.none() | st.integers(0, 45))
def test_scan_gives_the_verdicts_of_take_adds(adds, cut, flip, count):
    """Valid, truncated, and damaged requests (a size or an entry id overwritten): the same adds or the same
    error, with or without an expected count."""
    data = bytearray(_items(adds))
    if data and flip % 3 == 1:
        at = flip % len(data)
        data[at] ^= 0xFF
    if data and flip % 3 == 2:
        del data[len(data) - min(cut, len(data)):]
    view = memoryview(bytes(data))

    def python():
        items, end = take_adds(view, 0, count)
        return end, len(items), max((lac for _, _, lac in items), default=-1)
    assert _verdict(lambda: fast.scan_adds(view, 0, -1 if count is None else count, MAX_ADD_BATCH)) == \
        _verdict(python)


@needs_fast
def test_scan_refuses_more_than_max_adds_as_take_adds_does():
    data = memoryview(_items([(e, b"", -1) for e in range(MAX_ADD_BATCH + 1)]))
    with pytest.raises(ValueError) as python:
        take_adds(data, 0, None)
    with pytest.raises(ValueError) as c:
        fast.scan_adds(data, 0, -1, MAX_ADD_BATCH)
    assert str(c.value) == str(python.value)


@needs_fast
@settings(max_examples=100, deadline=None)
@given(adds=adds_st, ledger=st.integers(1, 2 ** 63 - 1), code=st.sampled_from([c for c in ResponseCode if c >= 0]))
def test_answers_are_the_python_ones(adds, ledger, code):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(add_items, "_fast", fast)  # (the compiled path, even under QUORUMLOG_PURE_PYTHON=1)
        items = add_items.scan_adds(_items(adds))
        assert items.compiled
        assert items.results(code) == pack_add_results([(e, code) for e, _, _ in adds])
        assert items.results(code, ledger) == pack_multi_results([(ledger, e, code) for e, _, _ in adds])


def _store_both(tmp_path, requests, monkeypatch):
    """The same ADD_BATCH / ADD_MULTI requests into a bookie through the C path and one through the Python path;
    returns both storages, their journals and entry logs flushed to the files."""
    stores = []
    for name, compiled in (("c", True), ("python", False)):
        monkeypatch.setattr(add_items, "_fast", fast if compiled else None)
        s = BookieStorage(str(tmp_path / name), SMALL)
        for kind, ledger, data in requests:  # (one at a time: a journal file rolls between groups)
            if kind == "batch":
                items = add_items.scan_adds(data)
                assert items.compiled == compiled
                s.add_entries(ledger, items).result(10)
            else:
                refused, fut = s.add_sections(add_items.scan_multi_adds(data))
                assert not refused
                fut.result(10)
        s.entry_log.flush_begin()
        stores.append(s)
    return stores


def _file_bytes(directory: str) -> dict[str, bytes]:
    out = {}
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), "rb") as f:
            out[name] = f.read()
    return out


@needs_fast
def test_the_c_path_writes_the_bytes_the_python_path_writes_and_replays_the_same(tmp_path, monkeypatch):
    """Batches of several ledgers, sections, entry logs rolling (64 KiB logs), then a crash and a replay."""
    requests = []
    for i in range(40):
        ledger = 1 + i % 3
        adds = [(i * 50 + k, b"%d/%d:" % (ledger, k) + bytes([k]) * (k * 61 % 1500), i * 50 + k - 1)
                for k in range(1 + i % 7)]
        requests.append(("batch", ledger, _items(adds)))
        requests.append(("multi", 0, pack_multi_adds([
            (10 + ledger, [AddEntry("b", 10 + ledger, e, data, lac) for e, data, lac in adds]),
            (20 + ledger, [AddEntry("b", 20 + ledger, e + 1, data[:5], lac) for e, data, lac in adds])])))
    c, python = _store_both(tmp_path, requests, monkeypatch)
    try:
        for sub in ("journal", "entrylogs"):
            assert _file_bytes(os.path.join(c.dir, sub)) == _file_bytes(os.path.join(python.dir, sub)), sub
        assert c.index._entries == python.index._entries and c.index._last == python.index._last
        assert c.index._states == python.index._states
        assert c.entry_log._ledger_bytes == python.entry_log._ledger_bytes
        assert c.journal.records == python.journal.records == sum(
            len(add_items.scan_adds(d)) if kind == "batch" else
            sum(len(a) for _, a in unpack_multi_adds(d)) for kind, _, d in requests)
        ledgers = sorted({lid for lid, _ in c.index._entries})
        for lid in ledgers:
            entries = [e for ledger, e in c.index._entries if ledger == lid]
            assert [c.read_entry(lid, e) for e in entries] == [python.read_entry(lid, e) for e in entries]
            assert c.last_add_confirmed(lid) == python.last_add_confirmed(lid)
    finally:
        for s in (c, python):  # a crash: neither checkpoints again, both replay their journals
            s.journal.close()
            s.entry_log.close()
            s.index.close()
    again = BookieStorage(c.dir, SMALL)
    try:
        assert again.replayed == c.journal.records
        for lid in ledgers:
            entries = [e for ledger, e in c.index._entries if ledger == lid]
            assert [again.read_entry(lid, e) for e in entries] == [python.read_entry(lid, e) for e in entries]
    finally:
        again.close()


def test_without_the_compiled_module_the_adds_are_the_wire_tuples(tmp_path, monkeypatch):
    _python(monkeypatch)
    data = _items([(3, b"three", 2), (4, b"four", 3)])
    items = add_items.scan_adds(data)
    assert not items.compiled and len(items) == 2 and items.max_lac == 3
    assert [(e, bytes(d), lac) for e, d, lac in items] == [(3, b"three", 2), (4, b"four", 3)]
    ok = ResponseCode.SUCCESS
    assert items.results(ok) == pack_add_results([(3, ok), (4, ok)])
    with pytest.raises(ValueError, match="truncated add batch"):
        add_items.scan_adds(data[:30])  # (the second add's head cut)
    s = BookieStorage(str(tmp_path), SMALL)
    try:
        s.add_entries(9, items).result(10)
        assert s.read_entry(9, 4) == b"four" and s.last_add_confirmed(9) == 3
    finally:
        s.close()
