"""The adds of an ADD_BATCH request, or of one ADD_MULTI section, as a bookie takes them: checked where they are in
the request's buffer, then stored (storage._stage_adds) and answered with one C call each (bookie/_fastbookie.c)
instead of Python work per add. Without the compiled module (no C compiler, QUORUMLOG_PURE_PYTHON=1) they are
wire/ledger.py's (entry id, data view, lac) tuples, which stay the reference.

    adds = scan_adds(req.data)                  # ValueError: a malformed request, nothing stored
    storage.add_entries(ledger_id, adds)        # any iterable of (entry id, data, lac) works there too
    answer = adds.results(ResponseCode.SUCCESS)
"""

from __future__ import annotations

from typing import Iterator

from ..format.log_entry import load_compiled
from ..wire.ledger import MAX_ADD_BATCH, take_adds, pack_add_results, pack_multi_results, unpack_multi_adds


def _load_fast():
    return load_compiled("quorumlog.bookie._fastbookie")


_fast = _load_fast()


class AddItems:
    """`count` add items from `pos` of `buf`, checked; iterates as (entry id, data view, lac)."""

    __slots__ = ("buf", "pos", "count", "max_lac", "_items")

    def __init__(self, buf, pos: int, count: int, max_lac: int,
                 items: "list[tuple[int, memoryview, int]] | None" = None) -> None:
        self.buf, self.pos, self.count, self.max_lac, self._items = buf, pos, count, max_lac, items

    @property
    def compiled(self) -> bool:
        """Whether the C path takes them (storage._stage_adds)."""
        return self._items is None

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[tuple[int, memoryview, int]]:
        if self._items is None:
            self._items, _ = take_adds(memoryview(self.buf), self.pos, self.count)
        return iter(self._items)

    def stage(self, pos: int, count: int, ledger_id: int, log_id: int, log_offset: int, log_buffer: bytearray,
              log_limit: int):
        """Up to `count` of them from `pos` into the entry log's buffer: (journal records, entry log bytes,
        {(ledger, entry): location}, max entry id, how many, where the rest begin). See _fastbookie.c."""
        return _fast.stage_adds(self.buf, pos, count, ledger_id, log_id, log_offset, log_buffer, log_limit)

    def results(self, code: int, ledger_id: int | None = None) -> bytes:
        """The answer for every add with `code`: an ADD_BATCH's, or with ledger_id an ADD_MULTI section's."""
        if self._items is None:
            return _fast.add_results(self.buf, self.pos, self.count, int(code), -1 if ledger_id is None else ledger_id)
        if ledger_id is None:
            return pack_add_results([(entry_id, code) for entry_id, _, _ in self._items])
        return pack_multi_results([(ledger_id, entry_id, code) for entry_id, _, _ in self._items])


def _take(view: memoryview, pos: int, count: int | None) -> tuple[AddItems, int]:
    """take_adds's contract (the same checks and errors), the adds left in place when the C path is there."""
    if _fast is None:
        items, end = take_adds(view, pos, count)
        return AddItems(view, pos, len(items), max((lac for _, _, lac in items), default=-1), items), end
    end, n, max_lac = _fast.scan_adds(view, pos, -1 if count is None else count, MAX_ADD_BATCH)
    return AddItems(view, pos, n, max_lac), end


def scan_adds(data) -> AddItems:
    """An ADD_BATCH's adds. Raises ValueError on a malformed batch (wire.unpack_adds's checks)."""
    items, _ = _take(memoryview(data), 0, None)
    return items


def scan_multi_adds(data) -> list[tuple[int, AddItems]]:
    """An ADD_MULTI's sections (wire.unpack_multi_adds's checks)."""
    return unpack_multi_adds(data, _take)  # type: ignore[arg-type,return-value]
