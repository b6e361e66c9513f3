"""The controller of a master/slave group (RocketMQ 5's controller; its state is meant to live in `_meta`):
the master, its epoch and the SyncStateSet, and the election when the master goes silent.

    c = HAController(["n0", "n1", "n2"], master_timeout_ms=3_000, lease_ms=2_000)
    c.on_heartbeat(member, now_ms, last_epoch, max_offset, restarted=False) -> lease end (master) or None
    c.alter_sync_state_set(master, epoch, members) -> bool     # the master grows or shrinks its set
    c.tick(now_ms) -> Elected | None                            # the master silent past master_timeout_ms
    c.request_switch(to)        # `ha elect --to ID`: no more lease for the master; tick elects `to` after it

Two rules keep acknowledged SYNC_MASTER writes and a single writable master:
- the master may accept writes only until the lease its last heartbeat got, and the controller elects
  another only after `master_timeout_ms` (> lease_ms) of silence: the old master's lease is over first, even if
  it is only partitioned (RocketMQ #6316: a returning old master was writable beside the new one);
- the new master comes from the SyncStateSet the controller accepted, the one with the highest
  (epoch, max offset); an unclean election (a member outside it) only with `enable_elect_unclean`.
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
    max_offset: int


class HAController:
    def __init__(self, members: list[str], *, master_timeout_ms: int = 3_000, lease_ms: int = 2_000,
                 enable_elect_unclean: bool = False) -> None:
        assert 0 < lease_ms < master_timeout_ms
        self.members = list(members)
        self.master_timeout_ms = master_timeout_ms
        self.lease_ms = lease_ms
        self.enable_elect_unclean = enable_elect_unclean
        self.master: str | None = None
        self.epoch = 0
        self.sync_state_set: frozenset[str] = frozenset()
        self.heard: dict[str, _Heard] = {}
        self.lease_end_ms = 0  # the last lease granted to the master
        self.switching_to: str | None = None
        self.master_restarted = False  # the master came back from a crash: elect again, it may have lost its tail

    def on_heartbeat(self, member: str, now_ms: int, last_epoch: int, max_offset: int,
                     restarted: bool = False) -> int | None:
        """`restarted`: the member's first heartbeat since its process started. A master that crashed never
        resumes its epoch: what it had not flushed is gone while its slaves may hold it and more, and they
        would truncate to it (RocketMQ #2706). The controller elects again once its last lease ran out."""
        self.heard[member] = _Heard(now_ms, last_epoch, max_offset)
        if restarted and member == self.master:
            self.master_restarted = True
        if member != self.master or self.switching_to is not None or self.master_restarted:
            return None
        self.lease_end_ms = now_ms + self.lease_ms
        return self.lease_end_ms

    def request_switch(self, to: str) -> None:
        if to not in self.members or to == self.master:
            raise ValueError(f"cannot switch to {to!r} (members {self.members}, master {self.master})")
        self.switching_to = to

    def alter_sync_state_set(self, master: str, epoch: int, members: set[str] | frozenset[str]) -> bool:
        if master != self.master or epoch != self.epoch or master not in members \
                or not set(members) <= set(self.members) or self.master_restarted:
            # (a master back from a crash may have lost a tail its set's slaves hold: it must not shrink the set
            # to itself before the election it is due)
            return False
        self.sync_state_set = frozenset(members)
        return True

    def _alive(self, now_ms: int) -> set[str]:
        return {m for m, h in self.heard.items() if now_ms - h.at_ms <= self.master_timeout_ms}

    def tick(self, now_ms: int) -> Elected | None:
        to = None
        if self.switching_to is not None:
            if now_ms < self.lease_end_ms:
                return None  # the master's last lease first runs out
            to = self.switching_to
        elif self.master is not None and self.master in self._alive(now_ms) and not self.master_restarted:
            return None
        elif now_ms < self.lease_end_ms:
            return None  # (silent, but its lease is not over yet)
        try:
            return self._elect(now_ms, to)
        except ValueError:
            return None  # nobody electable now: try again later
        finally:
            self.switching_to = None

    def _elect(self, now_ms: int, to: str | None) -> Elected:
        alive = self._alive(now_ms)
        if not self.master_restarted:
            alive.discard(self.master)  # type: ignore[arg-type]  (silent, or handing over)
        # (a master back from a crash may be elected again, with a new epoch, if its set has nobody better)
        clean = alive & self.sync_state_set if self.master is not None else alive
        pool, is_clean = (clean, True) if clean else ((alive, False) if self.enable_elect_unclean else (set(), True))
        if to is not None:
            if to not in pool:
                raise ValueError(f"{to} is not electable (alive {sorted(alive)}, "
                                 f"SyncStateSet {sorted(self.sync_state_set)})")
            pool = {to}
        if not pool:
            raise ValueError(f"no electable member (alive {sorted(alive)}, SyncStateSet {sorted(self.sync_state_set)})")
        new = max(pool, key=lambda m: (self.heard[m].last_epoch, self.heard[m].max_offset, m))
        self.master, self.epoch, self.sync_state_set = new, self.epoch + 1, frozenset({new})
        self.master_restarted = False
        return Elected(new, self.epoch, is_clean)
