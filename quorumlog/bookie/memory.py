"""BookieStorage's interface in memory, for the simulator: an add, fence or LAC is durable once `sync()`
runs (the simulated journal fsync, whenever the simulator decides) and only then acknowledged; `crash()`
drops what was not synced, as a kill -9 before the journal's fsync does."""

from __future__ import annotations

from concurrent.futures import Future

from ..errors import LedgerFenced, NoSuchEntry, NoSuchLedger
from .index import LedgerState


class MemoryBookie:
    def __init__(self) -> None:
        self._durable_entries: dict[tuple[int, int], bytes] = {}
        self._durable_states: dict[int, LedgerState] = {}
        self.entries: dict[tuple[int, int], bytes] = {}
        self.states: dict[int, LedgerState] = {}
        self._unsynced: list[tuple[Future, object]] = []

    def _update(self, ledger_id: int, fenced: bool | None = None, lac: int | None = None) -> LedgerState:
        st = self.states.get(ledger_id, LedgerState())
        st = LedgerState(st.fenced if fenced is None else fenced, st.deleted,
                         st.explicit_lac if lac is None else max(lac, st.explicit_lac))
        self.states[ledger_id] = st
        return st

    def add_entry(self, ledger_id: int, entry_id: int, body: bytes, *, lac: int = -1, recovery: bool = False) -> Future:
        st = self.states.get(ledger_id)
        if st is not None and st.fenced and not recovery:
            raise LedgerFenced(f"ledger {ledger_id} is fenced")
        self._update(ledger_id, lac=lac)
        self.entries[(ledger_id, entry_id)] = bytes(body)
        f: Future = Future()
        self._unsynced.append((f, None))
        return f

    def fence(self, ledger_id: int) -> Future:
        st = self._update(ledger_id, fenced=True)
        f: Future = Future()
        self._unsynced.append((f, st.explicit_lac))
        return f

    def read_entry(self, ledger_id: int, entry_id: int) -> bytes:
        if ledger_id not in self.states:
            raise NoSuchLedger(f"no ledger {ledger_id}")
        body = self.entries.get((ledger_id, entry_id))
        if body is None:
            raise NoSuchEntry(f"no entry {entry_id} of ledger {ledger_id}")
        return body

    def last_add_confirmed(self, ledger_id: int) -> int:
        st = self.states.get(ledger_id)
        return -1 if st is None else st.explicit_lac

    def ledgers(self) -> list[int]:
        return sorted(self.states)

    def sync(self) -> None:
        """The journal's fsync: everything so far is durable, then acknowledged."""
        if not self._unsynced:
            return  # (every change comes with a future: nothing changed since the last sync)
        self._durable_entries = dict(self.entries)
        self._durable_states = dict(self.states)
        done, self._unsynced = self._unsynced, []
        for f, result in done:
            f.set_result(result)

    def crash(self) -> None:
        self.entries = dict(self._durable_entries)
        self.states = dict(self._durable_states)
        self._unsynced = []  # never acknowledged

    def wipe(self) -> None:
        self._durable_entries, self._durable_states = {}, {}
        self.crash()
