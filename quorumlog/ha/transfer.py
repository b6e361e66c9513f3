"""SYNC_MASTER's wait (RocketMQ's GroupTransferService, with 5.x's in-sync replicas): an append written to the
master's log completes once `min_in_sync_replicas` members (the master included) hold its end offset, or fails.

    g = GroupTransferService(min_in_sync_replicas=2, slave_timeout_ms=3000, not_catchup_ms=15000)
    g.on_slave_offset("n1", offset, master_max_offset, now_ms, skipped_to)   # each report (HAConnection's)
    g.on_slave_gone("n1")                                         # its connection dropped
    g.request(request_id, end_offset, now_ms, start_offset) -> TransferDone | None  # None: wait
    g.poll(now_ms) -> [TransferDone]     # acks and timeouts; call after reports and on a timer

A slave is in sync while it caught up with the master's end — or with the end the master had at its previous
report — within the last `not_catchup_ms` (RocketMQ's haMaxTimeSlaveNotCatchup); the SyncStateSet is the
master and those slaves, and the confirm offset (what readers may see) is the lowest offset held across it. Refused at once: SLAVE_NOT_AVAILABLE when no slave is
connected, IN_SYNC_REPLICAS_NOT_ENOUGH when fewer than `min_in_sync_replicas` members are in sync; after
`slave_timeout_ms` without enough acks, FLUSH_SLAVE_TIMEOUT (the bytes stay in the master's log, as in
RocketMQ; the idempotent producer's sequence numbers make the retry a no-op, not a duplicate).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..codes import ResponseCode


_EVERYTHING = 1 << 62  # (what the master counts for when master_held is None)

@dataclass(frozen=True, slots=True)
class TransferDone:
    request_id: int
    code: ResponseCode
    end_offset: int


@dataclass(slots=True)
class _Slave:
    offset: int = -1
    caught_up_ms: int | None = None  # the last time it held the master's end (or kept up with it, below)
    connected: bool = True
    target: int = -1  # the master's end at this slave's previous report
    # Where its copy (re)began past bytes it never got (HAConnection.skipped_to): it holds [skipped_to, offset),
    # so it counts only for appends that start there or later. Kept across its reconnections: the gap stays.
    skipped_to: int = 0


class GroupTransferService:
    def __init__(self, min_in_sync_replicas: int, slave_timeout_ms: int = 3_000,
                 not_catchup_ms: int = 15_000) -> None:
        assert min_in_sync_replicas >= 1
        self.min_in_sync_replicas = min_in_sync_replicas
        self.slave_timeout_ms = slave_timeout_ms
        self.not_catchup_ms = not_catchup_ms
        self.slaves: dict[str, _Slave] = {}
        self._waiting: dict[int, tuple[int, int, int]] = {}  # request id -> (start, end offset, deadline ms)
        self._now_ms = 0
        # With a controller: the SyncStateSet whose members' acks count (master included), so whichever member the
        # controller elects next holds every acknowledged byte. None: no controller. While a new set is on its way
        # to the controller (`propose`) only members of both count: the controller may have committed either.
        self.accepted: frozenset[str] | None = None
        self.accepted_version = -1  # the controller's version of the committed set (sync_state_set_epoch)
        self._committed: frozenset[str] | None = None
        self._proposed: frozenset[str] | None = None
        self._proposed_base = -1
        # What the master holds durably (its fsynced end, flush sync): it counts as one member for the appends
        # below it. None: the master counts for whatever it wrote (flush async, the simulators). An append
        # completes once min_in_sync_replicas members hold it — the master not necessarily among them, as a
        # Raft majority.
        self.master_held: int | None = None

    # -- the SyncStateSet whose acks count ------------------------------------------------------------------
    def set_committed(self, members: frozenset[str], version: int) -> bool:
        """The controller's committed set and its version, as an answer carried them. An answer older than the
        set this master applied (a late one, from a deposed `_meta` leader) is ignored: it would count a removed
        member again. A newer version than a pending proposal's base decides it (only this master changes the
        set within its epoch, and the controller takes a proposal only on its base version)."""
        if version < self.accepted_version:
            return False
        self.accepted_version, self._committed = version, frozenset(members)
        if self._proposed is not None and (version > self._proposed_base or self._committed == self._proposed):
            self._proposed = None
        self._refresh_accepted()
        return True

    def propose(self, members: frozenset[str]) -> int:
        """A new set is on its way to the controller: until the controller's answer says what it holds, count
        only members of both — a shrink applies before the controller commits it, never after. Returns the base
        version the controller must still hold to take it. A proposal whose answer never came stays pending
        (`pending_proposal`): send it again rather than another."""
        self._proposed, self._proposed_base = frozenset(members), self.accepted_version
        self._refresh_accepted()
        return self._proposed_base

    @property
    def pending_proposal(self) -> frozenset[str] | None:
        return self._proposed

    @property
    def possibly_accepted(self) -> frozenset[str] | None:
        """Every member the controller may hold in the set now (the committed set and a proposed one): the
        confirm offset, what readers may see, is what all of them hold, since the controller may elect any."""
        if self._committed is None:
            return self.accepted
        return self._committed | self._proposed if self._proposed is not None else self._committed

    def _refresh_accepted(self) -> None:
        if self._committed is not None:
            self.accepted = self._committed & self._proposed if self._proposed is not None else self._committed

    # -- what the slaves hold ----------------------------------------------------------------------------
    def on_slave_offset(self, slave: str, offset: int, master_max_offset: int, now_ms: int,
                        skipped_to: int = 0) -> None:
        """A slave's report; offset ≤ master_max_offset (the HAConnection refuses more). skipped_to: the
        connection's (> 0 when the master started the slave past bytes it holds)."""
        assert offset <= master_max_offset, (offset, master_max_offset)
        s = self.slaves.setdefault(slave, _Slave())
        s.connected = True
        # (simulator, seed 3000924: an empty slave started at the current segment reported past an append still
        # waiting from before it, and that append was acknowledged while only the master held it; seed 3000081:
        # the same after a Reset past what retention had deleted)
        s.skipped_to = max(s.skipped_to, skipped_to)
        s.offset = max(s.offset, offset)
        # Caught up: it holds the master's end, or — under a steady load, where the end always moves on before
        # a report comes back — everything the master held at its previous report (RocketMQ's
        # lastMasterMaxOffset). Else a slave keeping pace would drop out of sync after not_catchup_ms of load.
        if s.offset >= master_max_offset or 0 <= s.target <= s.offset:
            s.caught_up_ms = now_ms
        s.target = master_max_offset
        self._now_ms = max(self._now_ms, now_ms)

    def on_slave_connected(self, slave: str) -> None:
        """A new connection from `slave`: what it held before counts for nothing until it reports again (a
        slave that crashed may have lost its tail, and must not stay in sync on its old offset)."""
        old = self.slaves.get(slave)
        s = self.slaves[slave] = _Slave()
        s.connected = True
        if old is not None:
            s.skipped_to = old.skipped_to

    def on_slave_gone(self, slave: str) -> None:
        s = self.slaves.get(slave)
        if s is not None:
            s.connected = False

    def in_sync(self, now_ms: int) -> list[str]:
        return sorted(n for n, s in self.slaves.items() if s.connected and s.caught_up_ms is not None
                      and now_ms - s.caught_up_ms <= self.not_catchup_ms)

    def sync_state_set(self, master: str, now_ms: int) -> list[str]:
        return [master, *self.in_sync(now_ms)]

    def confirm_offset(self, master_max_offset: int, now_ms: int) -> int:
        """The lowest offset held across the SyncStateSet: readers never see beyond it."""
        return min([master_max_offset, *(self.slaves[n].offset for n in self.in_sync(now_ms))])

    # -- waiting appends ---------------------------------------------------------------------------------
    def refusal(self, now_ms: int) -> ResponseCode | None:
        """Why an append would be refused at once (checked before it is written, as RocketMQ's putMessage
        does), or None."""
        if self.min_in_sync_replicas <= 1:
            return None
        if not any(s.connected for s in self.slaves.values()):
            return ResponseCode.SLAVE_NOT_AVAILABLE
        if self._in_sync_count(now_ms) < self.min_in_sync_replicas:
            return ResponseCode.IN_SYNC_REPLICAS_NOT_ENOUGH
        return None

    def request(self, request_id: int, end_offset: int, now_ms: int, start_offset: int = 0) -> TransferDone | None:
        """Wait for the append whose bytes are [start_offset, end_offset) (start 0 when not known: then no slave
        whose copy began past 0 counts for it)."""
        code = self.refusal(now_ms)
        if code is not None:
            return TransferDone(request_id, code, end_offset)
        if self._acked(start_offset, end_offset, self._held_offset(), self._gaps_end()):
            return TransferDone(request_id, ResponseCode.SUCCESS, end_offset)
        self._waiting[request_id] = (start_offset, end_offset, now_ms + self.slave_timeout_ms)
        return None

    def poll(self, now_ms: int) -> list[TransferDone]:
        done = []
        held, gaps_end = self._held_offset(), self._gaps_end()
        for rid, (start, end, deadline) in list(self._waiting.items()):
            if self._acked(start, end, held, gaps_end):
                done.append(TransferDone(rid, ResponseCode.SUCCESS, end))
            elif now_ms >= deadline:
                done.append(TransferDone(rid, ResponseCode.FLUSH_SLAVE_TIMEOUT, end))
            else:
                continue
            del self._waiting[rid]
        return done

    def _counted(self) -> list[_Slave]:
        """The slaves whose reports count: connected, in the accepted set. A slave whose session ended may come
        back shorter (its unsynced tail lost) and is counted again only from its next report."""
        return [s for n, s in self.slaves.items() if s.connected and (self.accepted is None or n in self.accepted)]

    def _held_offset(self) -> int:
        """The highest offset that min_in_sync_replicas counted members report (-1: none): found once per poll,
        not per waiting append. Only connected members of the accepted SyncStateSet count, when there is one."""
        holds = [s.offset for s in self._counted()]
        holds.append(_EVERYTHING if self.master_held is None else self.master_held)
        if len(holds) < self.min_in_sync_replicas:
            return -1
        holds.sort(reverse=True)
        return holds[self.min_in_sync_replicas - 1]

    def _gaps_end(self) -> int:
        """Where the latest-beginning copy of a counted slave begins (0: every copy is whole, the usual case)."""
        return max((s.skipped_to for s in self._counted()), default=0)

    def _acked(self, start: int, end: int, held: int, gaps_end: int) -> bool:
        if end > held:
            return False
        if start >= gaps_end:
            return True
        # (rare: an append from before some slave's copy began) count its holders one by one, by where its bytes
        # start. Counting by when it was written instead (not after the master's end at the report that told of
        # the Reset) never counted that slave for the appends in flight then, though its copy held them: they
        # and every retry of them waited until FLUSH_SLAVE_TIMEOUT, for ever (e2e, a slave back after
        # retention: 2 runs in 51)
        n = 1 if self.master_held is None or end <= self.master_held else 0
        n += sum(1 for s in self._counted() if s.offset >= end and start >= s.skipped_to)
        return n >= self.min_in_sync_replicas

    def _in_sync_count(self, now_ms: int) -> int:
        if self.accepted is not None:
            return len(self.accepted)
        return 1 + len(self.in_sync(now_ms))
