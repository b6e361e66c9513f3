"""What a member of a master/slave group decides under the controller, sans-I/O: the node runtime
(server/master_slave/member.py) and the switch simulator (sim/ha_switch.py) call these same rules, so the simulator's
checker judges the rules the nodes run.

    cut = handshake_cut(mine, my_max, master, master_max)   # a slave's new session: where to cut its log
    adopt_epochs(mine, master)                              # ... then the master's epochs after the cut
    begin_epoch(mine, epoch, my_max) -> bool                # elected: its own epoch entry
    sync_state_set_proposal(master_id, accepted, in_sync, offsets, acked_offset, confirmed) -> frozenset | None
    confirm_offset(end, accepted, master_id, offsets, confirmed) -> int

Each session with a new master begins with a handshake (RocketMQ 5's AutoSwitchHAClient): the master answers a
slave's hello with its epoch entries and max offset; the slave cuts its log to the consistent point — what an
old master wrote alone is dropped — and adopts the master's later epochs before it pulls.

The master grows and shrinks its SyncStateSet through the controller. A slave joins only while in sync **and**
holding every byte acknowledged or confirmed so far: the controller may elect any member of the set, and the one
it elects must hold every acknowledged append and everything a reader may have seen — a topic group's consume
queues are built up to the confirm offset, so a new master lacking confirmed bytes would hand their queue
offsets to other messages (found by the switch simulator; RocketMQ 5 checks a joining slave against its
confirm offset too). A member leaves once out of sync.

The confirm offset — what readers may see — is the lowest offset held across the accepted set; a member that has
not reported since its session began is taken at the previous confirm offset (it held that much when it was
counted), so the confirm offset never moves back.
"""

from __future__ import annotations

from typing import Collection, Mapping

from .epochs import EpochCache, consistent_point


def handshake_cut(mine: EpochCache, my_max: int, master: EpochCache, master_max: int) -> int:
    """The offset a slave cuts its log to before pulling from `master` (≤ my_max)."""
    if mine.entries:
        return min(my_max, consistent_point(mine, my_max, master, master_max))
    # (bytes without epoch entries — a member that lost its epochs file: keep only what the master's first epoch
    # cannot contradict)
    return min(my_max, master_max, master.entries[0].start_offset if master.entries else 0)


def adopt_epochs(mine: EpochCache, master: EpochCache) -> None:
    """After the cut: the master's epochs beyond the last one this log holds (the bytes it is about to pull)."""
    for e in master.entries:
        last = mine.entries[-1] if mine.entries else None
        if last is None or (e.epoch > last.epoch and e.start_offset >= last.start_offset):
            mine.begin(e.epoch, e.start_offset)


def begin_epoch(mine: EpochCache, epoch: int, max_offset: int) -> bool:
    """This member is master in `epoch` from its `max_offset`: forget adopted epochs whose bytes it never pulled
    (a master that died before this slave pulled from its first byte), then begin its own. A master restarted
    within its own epoch continues it. Returns whether the entries changed (to be saved)."""
    if mine.last_epoch == epoch:
        return False
    mine.truncate(max_offset + 1)
    mine.begin(epoch, max_offset)
    return True


def sync_state_set_proposal(master_id: str, accepted: Collection[str], in_sync: Collection[str],
                            offsets: Mapping[str, int], acked_offset: int, confirmed: int) -> frozenset[str] | None:
    """The set the master should ask the controller for, or None to keep `accepted`: the master, members of
    `accepted` still in sync, and slaves in sync that hold every acknowledged byte (`acked_offset`) and every
    confirmed one (`confirmed`). A set that loses a member keeps only members holding all of that: an ack was
    held by min_in_sync_replicas members of the old set, maybe by the very member that leaves, and the controller
    may elect any member of the new one (a paused member kept "in sync" beside a holder cut off was elected,
    and 640 acks were lost). A set that only grows keeps its laggards: every ack still has its holders in it."""
    bar = max(acked_offset, confirmed)
    kept = {s for s in in_sync if s in accepted}
    want = {master_id} | kept | {s for s in in_sync if offsets.get(s, -1) >= bar}
    if not set(accepted) - {master_id} <= kept:
        want = {master_id} | {s for s in want if offsets.get(s, -1) >= bar}
    return None if want == set(accepted) else frozenset(want)


def confirm_offset(end: int, accepted: Collection[str], master_id: str, offsets: Mapping[str, int],
                   confirmed: int) -> int:
    """The new confirm offset: the lowest of the master's `end` (what it holds, fsynced if it flushes so) and
    what each other member of `accepted` reported; never below `confirmed`."""
    held = [offsets[n] if offsets.get(n, -1) >= 0 else confirmed for n in accepted if n != master_id]
    return max(confirmed, min([end, *held]))


class MasterTerm:
    """What a member decides from the controller's answers, sans-I/O: whom it follows in which epoch, the lease
    under which it may write and open HA sessions as master, and when it proposes a new SyncStateSet. The node
    runtime (server/master_slave/member.py) and the switch simulator (sim/ha_switch.py) drive this same object.

        t = MasterTerm("n0", alter_interval_ms=500)
        t.on_view(master, epoch, sent_ms, lease_ms) -> bool    # True: a new master or epoch (become it / follow it)
        t.holds_lease(now_ms) -> bool                          # writes and new sessions only then
        t.proposal(now_ms, transfer, acked_offset, confirmed) -> (members, base_version) | None
        t.alter_answered(now_ms)                               # the controller's answer, or its failure

    A lease runs from the heartbeat's send time, never from its answer's arrival: the controller counts it from
    the request's arrival, later, so the member's lease ends first."""

    def __init__(self, node_id: str, master_id: str | None = None, *, alter_interval_ms: int) -> None:
        self.node_id = node_id
        self.master_id = master_id
        self.epoch = 0
        self.lease_until_ms = 0
        self.alter_interval_ms = alter_interval_ms
        self.altering = False  # a proposal awaits the controller's answer
        self.altered_at_ms: int | None = None

    @property
    def is_master(self) -> bool:
        return self.master_id == self.node_id and self.epoch > 0

    def on_view(self, master: str | None, epoch: int, sent_ms: int, lease_ms: int | None) -> bool:
        """The controller's committed master and epoch, and the lease it gave (None: none) to the heartbeat sent
        at `sent_ms`. An answer of an older epoch (late) changes nothing."""
        if master is None or epoch < self.epoch:
            return False
        changed = epoch > self.epoch or master != self.master_id
        if changed:
            self.master_id, self.epoch = master, epoch
            self.lease_until_ms, self.altering = 0, False
        if lease_ms is not None and master == self.node_id:
            self.lease_until_ms = max(self.lease_until_ms, sent_ms + lease_ms)
        return changed

    def drop_lease(self) -> None:
        self.lease_until_ms = 0

    def holds_lease(self, now_ms: int) -> bool:
        return self.is_master and now_ms < self.lease_until_ms

    def proposal(self, now_ms: int, transfer, acked_offset: int, confirmed: int) -> tuple[frozenset[str], int] | None:
        """A new SyncStateSet to send now, with the base version the controller must still hold, or None. One at
        a time, at most every alter_interval_ms, only under a lease; one whose answer never came is sent again.
        From now on only members of both sets count (GroupTransferService.propose)."""
        if self.altering or not self.holds_lease(now_ms) or (
                self.altered_at_ms is not None and now_ms - self.altered_at_ms < self.alter_interval_ms):
            return None
        want = transfer.pending_proposal or sync_state_set_proposal(
            self.node_id, transfer.accepted, transfer.in_sync(now_ms),
            {n: sl.offset for n, sl in transfer.slaves.items()}, acked_offset, confirmed)
        if want is None:
            return None
        self.altering, self.altered_at_ms = True, now_ms
        return want, transfer.propose(want)

    def alter_answered(self, now_ms: int) -> None:
        """The proposal's answer came (the runtime applies the set it carries), or the call failed."""
        self.altering, self.altered_at_ms = False, now_ms
