"""RocketMQ 5 "pop" consumption of one queue by one consumer group at one front door, sans-I/O.

ReceiveMessage hands out messages, each with a receipt handle and an invisible time; AckMessage with the handle
resolves the message; ChangeInvisibleDuration moves the invisible time and replaces the handle; a message not
acked before its invisible time ends is delivered again with delivery attempt + 1, and one that has been
delivered max_attempts times goes to the dead-letter queue (`%DLQ%<group>`) instead. Many consumers pop from one
queue at once, so progress is not a position but a set: `committed` (what the door persists) is the lowest
offset not yet resolved, and only moves over offsets that are acked, dead-lettered, rolled back or filtered out.

    q = PopQueue(committed=stored, fifo=False, max_attempts=16, nonce=secrets.token_hex(16))
    while q.wants_more(): q.offer(read(q.next_fetch), now_ms=now)      # the door reads, the core holds
    for d in q.receive(now, max_messages=32, invisible_ms=30_000): ...  # d.handle goes to the client
    q.ack(handle, now); q.change_invisible(handle, 60_000, now); q.forward_to_dead_letter(handle)
    for offset in q.dead_letters(): forward(offset); q.dead_lettered(offset)
    persist(q.committed)

A receipt handle is `<offset>.<serial>.<tag>`: the serial names one delivery (one per receive or change of
invisible time), the tag is an HMAC of both under the nonce, so a forged handle, one of an older delivery or
one of another PopQueue (another nonce) names nothing. It is valid from its delivery until the message is
acked, delivered again, sent to the dead-letter queue, or given a new handle: a late ack (after the invisible
time ended, before the message went out again) still counts, which saves a duplicate. The door wraps it with
its own routing data and must hand PopQueue back exactly what PopQueue issued.

Held in memory only: after a restart the door builds a new PopQueue from the persisted `committed` (with a new
nonce, so old handles die) and everything above it is delivered again from attempt 1 (at least once).
"""

from __future__ import annotations

import hashlib
import heapq
import hmac
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import Enum
from itertools import islice

MAX_HELD = 4096  # unresolved messages held; wants_more() turns false at it
MAX_EARLY_DECISIONS = 65_536  # transaction outcomes kept for offsets not yet offered; more are dropped
MAX_HANDLE_CHARS = 64  # two 19-digit numbers, the tag and dots fit; a longer handle is forged
TAG_HEX_CHARS = 16  # 64 bits of HMAC-SHA256
assert 2 * 19 + 2 + TAG_HEX_CHARS <= MAX_HANDLE_CHARS


@dataclass(frozen=True, slots=True)
class PopMessage:
    """A message the door read from the queue: only what pop decides on (the body stays with the door)."""
    offset: int  # queue offset (dense per queue)
    message_group: str = ""  # FIFO message group; with fifo=True "" is a group of its own too
    deliver_at_ms: int = 0  # delay/timer message: not deliverable before this (0: now)
    transactional: bool = False  # a half message: held until decide(offset, COMMIT / ROLLBACK)
    filtered: bool = False  # read, but not for this group's subscription (tag filter): resolved at once
    ref: object = field(default=None, compare=False)  # the door's own data, handed back in Delivery.message


class Decision(Enum):
    COMMIT = "commit"
    ROLLBACK = "rollback"


@dataclass(frozen=True, slots=True)
class Delivery:
    offset: int
    handle: str  # receipt handle: names this delivery only
    attempt: int  # RocketMQ's delivery_attempt, 1 for the first delivery
    invisible_until_ms: int
    message: PopMessage


class AckResult(Enum):
    OK = "ok"
    INVALID_HANDLE = "invalid_handle"  # forged, of another PopQueue, of an older delivery, or already resolved


def parse_handle(handle: str) -> tuple[int, int] | None:
    """(offset, serial) of a handle's syntax, None if it is not one; says nothing about validity."""
    if len(handle) > MAX_HANDLE_CHARS:
        return None
    parts = handle.split(".")
    if len(parts) != 3 or not all(p.isascii() and p.isdigit() for p in parts[:2]) or len(parts[2]) != TAG_HEX_CHARS:
        return None
    return int(parts[0]), int(parts[1])


@dataclass(slots=True)
class _Slot:
    """An unresolved message: never delivered (fresh), in flight (serial != 0), or waiting for the DLQ (dead)."""
    message: PopMessage
    checked_ms: int  # when it was offered or last checked back (transactional, undecided)
    decision: Decision | None = None
    attempts: int = 0  # deliveries so far
    serial: int = 0  # the live delivery (its receipt handle); 0: none
    invisible_until_ms: int = 0
    dead: bool = False


class PopQueue:
    """One (consumer group, topic, queue) at one front door: see the module docstring."""

    def __init__(self, committed: int, *, fifo: bool, max_attempts: int, nonce: str) -> None:
        """committed: every offset below it is consumed (the group's stored progress). nonce: secret and unique
        to this instance (e.g. secrets.token_hex(16)); serials restart at 1, so a reused nonce revives old
        handles."""
        if committed < 0 or max_attempts < 1 or not nonce:
            raise ValueError(f"PopQueue: committed={committed} max_attempts={max_attempts} nonce={bool(nonce)}")
        self.fifo = fifo
        self.max_attempts = max_attempts
        self._key = nonce.encode()
        self._committed = committed
        self._next_fetch = committed
        self._slots: dict[int, _Slot] = {}  # every unresolved offset below next_fetch, in offset order
        self._fresh: dict[int, _Slot] = {}  # the never delivered ones, in offset order
        self._expiry: list[tuple[int, int, int]] = []  # heap (invisible_until_ms, offset, serial); stale entries stay
        self._busy_groups: set[str] = set()  # fifo: groups with a message delivered and unresolved
        self._dead: set[int] = set()
        self._early: dict[int, Decision] = {}  # decisions for offsets >= next_fetch
        self._serial = 0

    @property
    def committed(self) -> int:
        """The lowest offset not yet resolved: what the door persists as the group's progress."""
        return self._committed

    @property
    def next_fetch(self) -> int:
        """The offset from which the door reads and offers more."""
        return self._next_fetch

    def wants_more(self) -> bool:
        """Whether offering more is useful; the bound on what this queue holds (a batch may overshoot it).
        Delayed and undecided messages count too: a long delay near `committed` fills it."""
        return len(self._slots) < MAX_HELD

    def offer(self, messages: Sequence[PopMessage], *, now_ms: int) -> None:
        """Messages read from next_fetch on, contiguous; those below next_fetch are ignored (read twice)."""
        expect = self._next_fetch
        for m in messages:  # check the whole batch first: a refused batch changes nothing
            if m.offset > expect:
                raise ValueError(f"offer: offset {m.offset} where {expect} was expected (a gap)")
            expect = max(expect, m.offset + 1)
        for m in messages:
            if m.offset < self._next_fetch:
                continue
            self._next_fetch += 1
            decision = self._early.pop(m.offset, None)
            decision = decision if m.transactional else None
            if m.filtered or decision is Decision.ROLLBACK:
                continue  # resolved without a delivery
            self._slots[m.offset] = self._fresh[m.offset] = _Slot(m, now_ms, decision)
        self._advance()

    def receive(self, now_ms: int, max_messages: int, invisible_ms: int) -> list[Delivery]:
        """Expired deliveries first (attempt + 1; those out of attempts go to dead_letters() instead, however
        many), then fresh messages in offset order that are due, not undecided, and in FIFO the first unresolved
        of their message group."""
        if max_messages < 0 or invisible_ms < 0:
            raise ValueError(f"receive: max_messages={max_messages} invisible_ms={invisible_ms}")
        out: list[Delivery] = []
        later = []
        while self._expiry and self._expiry[0][0] <= now_ms:
            entry = heapq.heappop(self._expiry)
            slot = self._live(entry)
            if slot is None:
                continue
            if slot.attempts >= self.max_attempts:
                self._to_dead_letter(slot)
            elif len(out) < max_messages:
                out.append(self._deliver(slot, now_ms, invisible_ms))
            else:
                later.append(entry)
        for entry in later:
            heapq.heappush(self._expiry, entry)
        ready = (s for s in self._heads() if s.message.deliver_at_ms <= now_ms and self._decided(s))
        out += [self._deliver(s, now_ms, invisible_ms) for s in list(islice(ready, max_messages - len(out)))]
        return out

    def ack(self, handle: str, now_ms: int) -> AckResult:
        """AckMessage. now_ms is not needed: a handle stays valid past its invisible time until the message goes
        out again (see the module docstring)."""
        slot = self._lookup(handle)
        if slot is None:
            return AckResult.INVALID_HANDLE
        self._resolve(slot)
        return AckResult.OK

    def change_invisible(self, handle: str, invisible_ms: int, now_ms: int) -> Delivery | None:
        """ChangeInvisibleDuration: invisible until now + invisible_ms, same attempt, a new handle (the old one
        dies). None: an invalid handle. invisible_ms=0 is a nack: the next receive delivers it again."""
        if invisible_ms < 0:
            raise ValueError(f"change_invisible: invisible_ms={invisible_ms}")
        slot = self._lookup(handle)
        return None if slot is None else self._hand_out(slot, now_ms + invisible_ms)

    def forward_to_dead_letter(self, handle: str) -> AckResult:
        """ForwardMessageToDeadLetterQueue from the client: the delivered message goes to dead_letters()."""
        slot = self._lookup(handle)
        if slot is None:
            return AckResult.INVALID_HANDLE
        self._to_dead_letter(slot)
        return AckResult.OK

    def dead_letters(self) -> list[int]:
        """Offsets the door must write to %DLQ%<group> (then call dead_lettered); in FIFO each holds back its
        message group until then."""
        return sorted(self._dead)

    def dead_lettered(self, offset: int) -> None:
        """The door wrote `offset` to the dead-letter queue: resolved."""
        slot = self._slots.get(offset)
        if slot is None or not slot.dead:
            raise ValueError(f"dead_lettered: offset {offset} is not waiting for the dead-letter queue")
        self._resolve(slot)

    def decide(self, offset: int, decision: Decision) -> None:
        """A half message's outcome (EndTransaction or a check-back's answer). The first decision is final;
        later ones, and those for offsets resolved or not transactional, are ignored. One for an offset not yet
        offered (>= next_fetch) is kept until it is, up to MAX_EARLY_DECISIONS; past that it is dropped and
        the message shows up in undecided(), so a check-back asks again."""
        if offset >= self._next_fetch:
            if offset not in self._early and len(self._early) < MAX_EARLY_DECISIONS:
                self._early[offset] = decision
            return
        slot = self._fresh.get(offset)  # an undecided message is never delivered: it is fresh
        if slot is None or not slot.message.transactional or slot.decision is not None:
            return
        if decision is Decision.ROLLBACK:
            self._resolve(slot)
        else:
            slot.decision = decision

    def undecided(self, now_ms: int, older_than_ms: int) -> list[int]:
        """Half messages still undecided, neither offered nor checked back in the last older_than_ms: those to
        check back now. Call checked() for each one asked, so the next call leaves it out for a while."""
        return [o for o, s in self._fresh.items() if s.message.transactional and s.decision is None
                and now_ms - s.checked_ms >= older_than_ms]

    def checked(self, offset: int, now_ms: int) -> None:
        """The door sent a check-back for `offset` at now_ms (unknown or decided offsets are ignored)."""
        slot = self._fresh.get(offset)
        if slot is not None and slot.decision is None:
            slot.checked_ms = now_ms

    def next_wakeup_ms(self) -> int | None:
        """The earliest time receive has something (an expiry or a deliver_at; at or before now: right now), or
        None: nothing until an offer, ack or decision."""
        while self._expiry and self._live(self._expiry[0]) is None:
            heapq.heappop(self._expiry)
        times = [s.message.deliver_at_ms for s in self._heads() if self._decided(s)]
        if self._expiry:
            times.append(self._expiry[0][0])
        return min(times, default=None)

    def stats(self, now_ms: int) -> dict[str, int]:
        """Counts for status and metrics. in_flight counts expired deliveries not yet handed out again."""
        in_flight = [s for s in self._slots.values() if s.serial]
        ready = [s for s in self._heads() if s.message.deliver_at_ms <= now_ms and self._decided(s)]
        return {
            "committed": self._committed,
            "next_fetch": self._next_fetch,
            "held": len(self._slots),
            "in_flight": len(in_flight),
            "ready": len(ready) + sum(s.invisible_until_ms <= now_ms and s.attempts < self.max_attempts
                                      for s in in_flight),
            "delayed": sum(s.message.deliver_at_ms > now_ms for s in self._fresh.values()),
            "undecided": sum(s.message.transactional and s.decision is None for s in self._fresh.values()),
            "dead_letters": len(self._dead),
            "early_decisions": len(self._early),
        }

    # internals

    def _tag(self, offset: int, serial: int) -> str:
        return hmac.new(self._key, f"{offset}.{serial}".encode(), hashlib.sha256).hexdigest()[:TAG_HEX_CHARS]

    def _lookup(self, handle: str) -> _Slot | None:
        """The slot whose live delivery `handle` names, or None."""
        parsed = parse_handle(handle)
        if parsed is None:
            return None
        offset, serial = parsed
        if not hmac.compare_digest(handle.rpartition(".")[2], self._tag(offset, serial)):
            return None
        slot = self._slots.get(offset)
        return slot if slot is not None and slot.serial == serial else None

    def _live(self, entry: tuple[int, int, int]) -> _Slot | None:
        """The slot of an expiry entry if that delivery is still the live one."""
        slot = self._slots.get(entry[1])
        return slot if slot is not None and slot.serial == entry[2] else None

    @staticmethod
    def _decided(slot: _Slot) -> bool:
        return not slot.message.transactional or slot.decision is Decision.COMMIT

    def _heads(self) -> Iterator[_Slot]:
        """Fresh messages receive may consider: all, or in FIFO the first unresolved of each message group that
        has none delivered (an earlier one still held, delayed or undecided, holds its group back)."""
        blocked = set(self._busy_groups)
        for slot in self._fresh.values():
            if self.fifo:
                group = slot.message.message_group
                if group in blocked:
                    continue
                blocked.add(group)
            yield slot

    def _deliver(self, slot: _Slot, now_ms: int, invisible_ms: int) -> Delivery:
        assert slot.attempts < self.max_attempts and not slot.dead
        if slot.attempts == 0:
            del self._fresh[slot.message.offset]
            if self.fifo:
                assert slot.message.message_group not in self._busy_groups
                self._busy_groups.add(slot.message.message_group)
        slot.attempts += 1
        return self._hand_out(slot, now_ms + invisible_ms)

    def _hand_out(self, slot: _Slot, invisible_until_ms: int) -> Delivery:
        """A new live delivery of `slot` (a new serial: every earlier handle dies)."""
        self._serial += 1
        slot.serial, slot.invisible_until_ms = self._serial, invisible_until_ms
        offset = slot.message.offset
        heapq.heappush(self._expiry, (invisible_until_ms, offset, self._serial))
        if len(self._expiry) > 2 * len(self._slots) + 64:  # acked deliveries' entries: drop them
            self._expiry = [e for e in self._expiry if self._live(e) is not None]
            heapq.heapify(self._expiry)
        handle = f"{offset}.{self._serial}.{self._tag(offset, self._serial)}"
        return Delivery(offset, handle, slot.attempts, invisible_until_ms, slot.message)

    def _to_dead_letter(self, slot: _Slot) -> None:
        slot.serial, slot.dead = 0, True  # its group stays busy until dead_lettered
        self._dead.add(slot.message.offset)

    def _resolve(self, slot: _Slot) -> None:
        offset = slot.message.offset
        del self._slots[offset]
        self._fresh.pop(offset, None)
        self._dead.discard(offset)
        if self.fifo and slot.attempts:
            self._busy_groups.discard(slot.message.message_group)
        slot.serial = 0
        self._advance()

    def _advance(self) -> None:
        while self._committed < self._next_fetch and self._committed not in self._slots:
            self._committed += 1
