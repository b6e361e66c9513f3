"""The controller of a master/slave group (RocketMQ 5's controller; its state lives in `_meta`): the master, its
epoch and boot, the SyncStateSet and its version, and the election when the master goes silent or restarts.

    c = HAController(["n0", "n1", "n2"], master_timeout_ms=3_000, lease_ms=2_000, min_in_sync_replicas=2)
    c.on_heartbeat(member, now_ms, last_epoch, max_offset, boot=..., acked_offset=...) -> lease end or None
    c.alter_sync_state_set(master, epoch, members) -> bool     # the master grows or shrinks its set
    c.tick(now_ms) -> Elected | None                            # the master silent past master_timeout_ms
    c.request_switch(to)        # `ha elect --to ID`: no more lease for the master; tick elects `to` after it

`max_offset` is what the member holds durably (a power cut keeps it); `acked_offset`, from the master, is the
end of everything it acknowledged or let readers see; `boot` names the member's process (a new one at each
start). Three rules keep acknowledged SYNC_MASTER writes and a single writable master:
- the master may accept writes only until the lease its last heartbeat got, and the controller elects
  another only after `master_timeout_ms` (> lease_ms) of silence: the old master's lease is over first, even if
  it is only partitioned (RocketMQ #6316: a returning old master was writable beside the new one);
- a master whose boot is not the one its epoch was granted to restarted: it never resumes the epoch (what it had
  not flushed is gone while its slaves may hold it; RocketMQ #2706). The boot is kept with the epoch in `_meta`, so
  a new `_meta` leader sees the restart too, and an epoch entry the power cut took does not hide it;
- the new master holds every acknowledged byte. An append is acknowledged once `min_in_sync_replicas` (q)
  members of the SyncStateSet S hold it, so the controller elects only from live members of S heard since the
  master's writes stopped (the lease end: their reports include every ack), only when they are at least
  |S| - q + 1 (they meet every q members of S, so one of them holds each ack: Raft's quorum intersection), the
  one with the highest (epoch, max offset), and only if that reaches the acked offset the master reported. A
  hand switch waits for the same (a target that lacks an acked byte is not elected, and the switch is given up
  after master_timeout_ms). An unclean election (outside S) only with `enable_elect_unclean`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Elected:
    master: str
    epoch: int
    clean: bool = True


@dataclass(slots=True)
class _Heard:
    at_ms: int
    last_epoch: int
    max_offset: int  # held durably
    boot: str | None = None


class HAController:
    def __init__(self, members: list[str], *, master_timeout_ms: int = 3_000, lease_ms: int = 2_000,
                 enable_elect_unclean: bool = False, min_in_sync_replicas: int = 1) -> None:
        assert 0 < lease_ms < master_timeout_ms
        self.members = list(members)
        self.master_timeout_ms = master_timeout_ms
        self.lease_ms = lease_ms
        self.enable_elect_unclean = enable_elect_unclean
        self.min_in_sync_replicas = min_in_sync_replicas  # (1: ack async, or not told yet)
        self.master: str | None = None
        self.epoch = 0
        self.sync_state_set: frozenset[str] = frozenset()
        self.sync_state_set_epoch = 0  # grows with every change of the set: a stale view never restores an old one
        self.master_boot: str | None = None  # the master's process this epoch was granted to (None: not heard yet)
        self.acked_offset = 0  # the highest acknowledged (or confirmed) end the master reported
        self.heard: dict[str, _Heard] = {}
        self.lease_end_ms = 0  # the last lease granted to the master
        self.switching_to: str | None = None
        self._switch_due_ms: int | None = None  # a switch not possible by then is given up
        self.master_restarted = False  # the master came back from a crash: elect again, it may have lost its tail

    def on_heartbeat(self, member: str, now_ms: int, last_epoch: int, max_offset: int,
                     restarted: bool = False, *, boot: str | None = None, acked_offset: int = 0) -> int | None:
        """`restarted`: the member says it restarted (the simulators' and old members' way); `boot`: its process,
        compared with the epoch's. The controller elects again once the restarted master's last lease ran out."""
        self.heard[member] = _Heard(now_ms, last_epoch, max_offset, boot)
        if member != self.master:
            return None
        if restarted or (boot is not None and self.master_boot is not None and boot != self.master_boot):
            self.master_restarted = True
        if self.master_restarted:
            return None
        if self.master_boot is None and boot is not None:
            self.master_boot = boot  # (the runtime makes it durable before it hands out the lease)
        if last_epoch == self.epoch:
            self.acked_offset = max(self.acked_offset, acked_offset)
        if self.switching_to is not None:
            return None
        self.lease_end_ms = now_ms + self.lease_ms
        return self.lease_end_ms

    def request_switch(self, to: str) -> bool:
        """A hand switch to `to`; False when `to` is the master already and no other switch is pending (nothing
        to do: asking twice, or for the master placement chose, succeeds)."""
        if to not in self.members:
            raise ValueError(f"cannot switch to {to!r} (members {self.members}, master {self.master})")
        if to == self.master and self.switching_to is None:
            return False
        if to == self.master:
            raise ValueError(f"{to!r} is the master; a switch to {self.switching_to!r} is under way")
        self.switching_to = to
        self._switch_due_ms = None
        return True

    def alter_sync_state_set(self, master: str, epoch: int, members: set[str] | frozenset[str],
                             base_version: int | None = None) -> bool:
        """`base_version`: the set's version the master proposed from; refused if it moved since (a late copy of
        an earlier proposal must not undo a later one)."""
        if base_version is not None and base_version != self.sync_state_set_epoch \
                and frozenset(members) != self.sync_state_set:
            return False
        if master != self.master or epoch != self.epoch or master not in members \
                or not set(members) <= set(self.members) or self.master_restarted:
            # (a master back from a crash may have lost a tail its set's slaves hold: it must not shrink the set
            # to itself before the election it is due)
            return False
        if frozenset(members) != self.sync_state_set:
            self.sync_state_set = frozenset(members)
            self.sync_state_set_epoch += 1
        return True

    def _alive(self, now_ms: int) -> set[str]:
        return {m for m, h in self.heard.items() if now_ms - h.at_ms <= self.master_timeout_ms}

    def tick(self, now_ms: int) -> Elected | None:
        to = None
        if self.switching_to is not None:
            if now_ms < self.lease_end_ms:
                return None  # the master's last lease first runs out
            to = self.switching_to
            if self._switch_due_ms is None:
                self._switch_due_ms = now_ms + self.master_timeout_ms
        elif self.master is not None and self.master in self._alive(now_ms) and not self.master_restarted:
            return None
        elif now_ms < self.lease_end_ms:
            return None  # (silent, but its lease is not over yet)
        try:
            elected = self._elect(now_ms, to)
        except ValueError:
            if to is not None and now_ms >= self._switch_due_ms:  # type: ignore[operator]
                self.switching_to = self._switch_due_ms = None  # given up: the master takes leases again
            return None  # nobody electable now: try again later
        self.switching_to = self._switch_due_ms = None
        return elected

    def electable(self, now_ms: int, to: str | None = None) -> tuple[set[str], bool]:
        """The members the controller may elect now (every one holds each acknowledged byte), and whether the
        election is clean; raises ValueError saying why nobody is."""
        alive = self._alive(now_ms)
        if not self.master_restarted:
            alive.discard(self.master)  # type: ignore[arg-type]  (silent, or handing over)
        # (a master back from a crash may be elected again, with a new epoch, if its set has nobody better)
        # Only reports sent since the master's writes stopped: they include every acknowledged byte.
        fresh = {m for m in alive if self.heard[m].at_ms >= self.lease_end_ms}
        if self.master is None:  # (the group's first election: nothing acknowledged yet)
            return fresh, True
        clean = fresh & self.sync_state_set
        if clean and not self._meets_every_ack_quorum(clean, now_ms, to):
            clean = set()
        if clean:
            pool, is_clean = clean, True
        elif self.enable_elect_unclean and fresh:
            pool, is_clean = fresh, False
        else:
            raise ValueError(f"no electable member (alive {sorted(alive)}, SyncStateSet {sorted(self.sync_state_set)}"
                             f", min_in_sync_replicas {self.min_in_sync_replicas})")
        best = max(self.heard[m].max_offset for m in pool)
        if is_clean and not self._holds_acked(best):
            raise ValueError(f"no live member of the set holds the acknowledged offset {self.acked_offset} "
                             f"(best {best})")
        if to is not None:
            if to not in pool or (is_clean and not self._holds_acked(self.heard[to].max_offset, best)):
                raise ValueError(f"{to} is not electable (pool {sorted(pool)}, acked offset {self.acked_offset})")
            return {to}, is_clean
        return pool, is_clean

    def _holds_acked(self, max_offset: int, best: int = 0) -> bool:
        """A member reporting `max_offset` holds every acknowledged byte (and as much as the best candidate)."""
        return max_offset >= max(best, self.acked_offset)

    def _meets_every_ack_quorum(self, clean: set[str], now_ms: int, to: str | None) -> bool:
        """Whether `clean` holds a member of every q members of the set (each ack's holders), so its best member
        holds every ack. Not needed when the master itself told its final acked offset after its lease: a hand
        switch to a member that reports at least that."""
        q = self.min_in_sync_replicas
        if q <= 1:
            return True  # (ack async: an acknowledgement promises the master's write only)
        m = self.heard.get(self.master) if self.master is not None else None
        if to is not None and m is not None and m.at_ms >= self.lease_end_ms and not self.master_restarted:
            return True
        return len(clean) >= len(self.sync_state_set) - q + 1

    def _elect(self, now_ms: int, to: str | None) -> Elected:
        pool, is_clean = self.electable(now_ms, to)
        if not pool:
            raise ValueError("no member heard since the master's lease ended")
        new = max(pool, key=lambda m: (self.heard[m].last_epoch, self.heard[m].max_offset, m))
        self.master, self.epoch, self.sync_state_set = new, self.epoch + 1, frozenset({new})
        self.sync_state_set_epoch += 1
        self.master_boot = self.heard[new].boot
        if not is_clean:  # (what it lacks is lost: the offsets to come are its own)
            self.acked_offset = min(self.acked_offset, self.heard[new].max_offset)
        self.master_restarted = False
        return Elected(new, self.epoch, is_clean)
