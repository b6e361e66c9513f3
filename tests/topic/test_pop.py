"""Pop consumption of one queue (quorumlog/topic/pop.py): each rule alone, then a hypothesis state machine that
drives random offers, receives, acks, changes of invisible time, forged and stale handles, decisions and time,
checks every invariant after every step, and at the end acks everything until every offered message is resolved.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from quorumlog.topic.pop import (
    MAX_HELD,
    AckResult,
    Decision,
    PopMessage,
    PopQueue,
    parse_handle,
)

OK, INVALID = AckResult.OK, AckResult.INVALID_HANDLE


def queue(n: int = 0, *, committed: int = 0, fifo: bool = False, max_attempts: int = 3, **kw) -> PopQueue:
    q = PopQueue(committed, fifo=fifo, max_attempts=max_attempts, nonce="test-nonce")
    q.offer([PopMessage(committed + i, **kw) for i in range(n)], now_ms=0)
    return q


def test_a_message_not_acked_is_delivered_again_after_its_invisible_time_with_the_attempt_counted():
    q = queue(1)
    [d1] = q.receive(0, 10, 100)
    assert (d1.offset, d1.attempt, d1.invisible_until_ms) == (0, 1, 100)
    assert q.receive(99, 10, 100) == []
    assert q.next_wakeup_ms() == 100
    [d2] = q.receive(100, 10, 100)
    assert (d2.offset, d2.attempt, d2.invisible_until_ms) == (0, 2, 200) and d2.handle != d1.handle
    assert q.ack(d1.handle, 100) is INVALID  # the first delivery's handle died with the second delivery
    assert q.ack(d2.handle, 100) is OK and q.committed == 1


def test_expired_deliveries_go_out_before_fresh_messages():
    q = queue(3)
    [d0] = q.receive(0, 1, 10)
    got = q.receive(10, 2, 10)
    assert [(d.offset, d.attempt) for d in got] == [(0, 2), (1, 1)]
    assert d0.offset == 0


def test_a_late_ack_counts_until_the_message_goes_out_again():
    q = queue(1)
    [d] = q.receive(0, 1, 100)
    assert q.ack(d.handle, 5_000) is OK and q.receive(5_000, 1, 100) == [] and q.committed == 1


def test_after_change_invisible_the_old_handle_acks_nothing_and_the_new_one_acks():
    q = queue(1)
    [d] = q.receive(0, 1, 100)
    d2 = q.change_invisible(d.handle, 1_000, 50)
    assert d2 is not None and (d2.offset, d2.attempt, d2.invisible_until_ms) == (0, 1, 1_050)
    assert d2.handle != d.handle
    assert q.ack(d.handle, 60) is INVALID and q.committed == 0 and q.stats(60)["in_flight"] == 1
    assert q.change_invisible(d.handle, 10, 60) is None
    assert q.receive(1_000, 1, 100) == []  # the old invisible time no longer applies
    assert q.ack(d2.handle, 60) is OK and q.committed == 1
    assert q.ack(d2.handle, 61) is INVALID  # acked already


def test_change_invisible_to_zero_is_a_nack():
    q = queue(1)
    [d] = q.receive(0, 1, 100)
    q.change_invisible(d.handle, 0, 10)
    [again] = q.receive(10, 1, 100)
    assert again.attempt == 2


@pytest.mark.parametrize("forge", [
    lambda h: "",
    lambda h: "garbage",
    lambda h: "0.1.0000000000000000",
    lambda h: h[:-1] + ("0" if h[-1] != "0" else "1"),  # one flipped character of the tag
    lambda h: "1." + h.partition(".")[2],  # another offset, same serial and tag
    lambda h: h.replace(".1.", ".2.", 1),  # another serial
    lambda h: "door-7/T/0/" + h,  # a door's routing prefix left on
    lambda h: h + ".0",
    lambda h: "9" * 5000 + h,  # int() of a 5000-digit string would raise; it must not
    lambda h: "٣.1." + h.rpartition(".")[2],  # a non-ASCII digit
])
def test_a_forged_handle_acks_nothing(forge):
    q = queue(2)
    [d, _] = q.receive(0, 2, 100)
    assert d.offset == 0 and d.handle.startswith("0.1.")
    forged = forge(d.handle)
    assert q.ack(forged, 1) is INVALID
    assert q.change_invisible(forged, 10, 1) is None
    assert q.forward_to_dead_letter(forged) is INVALID
    assert q.committed == 0 and q.stats(1)["in_flight"] == 2 and q.dead_letters() == []


def test_a_handle_of_another_pop_queue_is_forged_here():
    a, b = queue(1), PopQueue(0, fifo=False, max_attempts=3, nonce="other")
    b.offer([PopMessage(0)], now_ms=0)
    [da], [db] = a.receive(0, 1, 100), b.receive(0, 1, 100)
    assert parse_handle(da.handle) == parse_handle(db.handle) == (0, 1)
    assert a.ack(db.handle, 1) is INVALID and a.ack(da.handle, 1) is OK


def test_parse_handle():
    q = queue(1)
    [d] = q.receive(0, 1, 100)
    assert parse_handle(d.handle) == (0, 1)
    assert parse_handle("x.1.0123456789abcdef") is None and parse_handle("1.2") is None


def test_a_message_out_of_attempts_goes_to_the_dead_letter_queue_and_holds_committed_until_forwarded():
    q = queue(2, max_attempts=2)
    for t in (0, 10):
        got = q.receive(t, 1, 10)
        assert [(d.offset, d.attempt) for d in got] == [(0, t // 10 + 1)]
    assert q.dead_letters() == []
    [d] = q.receive(20, 1, 10)  # 0 is out of attempts: not delivered, and it takes no room
    assert (d.offset, d.attempt) == (1, 1)
    assert q.dead_letters() == [0] and q.committed == 0 and q.stats(20)["dead_letters"] == 1
    assert q.ack(d.handle, 20) is OK and q.committed == 0
    q.dead_lettered(0)
    assert q.dead_letters() == [] and q.committed == 2
    with pytest.raises(ValueError):
        q.dead_lettered(0)


def test_forward_to_dead_letter_by_the_client():
    q = queue(1)
    [d] = q.receive(0, 1, 100)
    assert q.forward_to_dead_letter(d.handle) is OK and q.dead_letters() == [0]
    assert q.ack(d.handle, 1) is INVALID and q.receive(1_000, 1, 100) == []
    q.dead_lettered(0)
    assert q.committed == 1


def test_fifo_one_message_in_flight_per_group_and_the_order_of_the_group_kept():
    q = PopQueue(0, fifo=True, max_attempts=5, nonce="n")
    q.offer([PopMessage(i, message_group=g) for i, g in enumerate("aabab")], now_ms=0)
    got = q.receive(0, 10, 100)
    assert [d.offset for d in got] == [0, 2]  # the heads of a and b only
    assert q.receive(50, 10, 100) == []
    da, db = got
    assert q.ack(db.handle, 50) is OK
    assert [d.offset for d in q.receive(50, 10, 100)] == [4]  # b moves on, a waits for 0
    [again] = q.receive(100, 10, 100)  # 0 expired: a's head again, not 1
    assert (again.offset, again.attempt) == (0, 2)
    assert q.ack(again.handle, 100) is OK
    assert [d.offset for d in q.receive(100, 10, 100)] == [1]


def test_fifo_a_delayed_or_undecided_message_holds_back_its_group_only():
    q = PopQueue(0, fifo=True, max_attempts=5, nonce="n")
    q.offer([PopMessage(0, "a", deliver_at_ms=500), PopMessage(1, "a"), PopMessage(2, "b", transactional=True),
             PopMessage(3, "b"), PopMessage(4, "c")], now_ms=0)
    assert [d.offset for d in q.receive(0, 10, 1_000)] == [4]
    assert q.next_wakeup_ms() == 500
    q.decide(2, Decision.ROLLBACK)
    assert [d.offset for d in q.receive(0, 10, 1_000)] == [3]
    assert [d.offset for d in q.receive(500, 10, 100)] == [0]


def test_fifo_a_dead_letter_holds_back_its_group_until_forwarded():
    q = PopQueue(0, fifo=True, max_attempts=1, nonce="n")
    q.offer([PopMessage(0, "a"), PopMessage(1, "a")], now_ms=0)
    assert [d.offset for d in q.receive(0, 10, 100)] == [0]
    assert q.receive(100, 10, 100) == [] and q.dead_letters() == [0]
    q.dead_lettered(0)
    assert [d.offset for d in q.receive(100, 10, 100)] == [1]


def test_a_delayed_message_is_held_until_its_time():
    q = PopQueue(0, fifo=False, max_attempts=3, nonce="n")
    q.offer([PopMessage(0, deliver_at_ms=1_000), PopMessage(1)], now_ms=0)
    assert [d.offset for d in q.receive(0, 10, 100)] == [1]
    assert q.stats(0)["delayed"] == 1
    assert q.next_wakeup_ms() == 100  # 1's expiry comes first
    assert q.receive(999, 10, 5_000)[0].offset == 1
    assert q.next_wakeup_ms() == 1_000
    assert [d.offset for d in q.receive(1_000, 10, 100)] == [0]


def test_undecided_and_rolled_back_half_messages_are_never_delivered_and_committed_ones_are():
    q = PopQueue(0, fifo=False, max_attempts=3, nonce="n")
    q.offer([PopMessage(i, transactional=True) for i in range(3)], now_ms=0)
    assert q.receive(0, 10, 100) == [] and q.next_wakeup_ms() is None
    assert q.stats(0)["undecided"] == 3
    q.decide(0, Decision.ROLLBACK)
    q.decide(1, Decision.COMMIT)
    q.decide(1, Decision.ROLLBACK)  # the first decision is final
    q.decide(0, Decision.COMMIT)
    assert q.committed == 1
    assert [d.offset for d in q.receive(0, 10, 100)] == [1]
    assert q.receive(10_000, 10, 100)[0].offset == 1  # 2 is still undecided
    assert q.stats(10_000)["undecided"] == 1


def test_a_decision_before_the_offer_is_remembered():
    q = PopQueue(0, fifo=False, max_attempts=3, nonce="n")
    q.decide(0, Decision.COMMIT)
    q.decide(1, Decision.ROLLBACK)
    q.decide(2, Decision.COMMIT)  # 2 turns out not to be a half message: dropped
    assert q.stats(0)["early_decisions"] == 3
    q.offer([PopMessage(0, transactional=True), PopMessage(1, transactional=True), PopMessage(2)], now_ms=0)
    assert q.stats(0)["early_decisions"] == 0
    assert [d.offset for d in q.receive(0, 10, 100)] == [0, 2] and q.committed == 0


def test_undecided_lists_half_messages_for_check_back_and_checked_quiets_them():
    q = PopQueue(0, fifo=False, max_attempts=3, nonce="n")
    q.offer([PopMessage(0, transactional=True), PopMessage(1), PopMessage(2, transactional=True)], now_ms=100)
    assert q.undecided(5_000, older_than_ms=6_000) == []
    assert q.undecided(6_100, older_than_ms=6_000) == [0, 2]
    q.checked(0, 6_100)
    assert q.undecided(6_200, older_than_ms=6_000) == [2]
    q.decide(2, Decision.COMMIT)
    assert q.undecided(20_000, older_than_ms=6_000) == [0]


def test_committed_moves_only_over_resolved_offsets():
    q = queue(5, committed=10)
    assert (q.committed, q.next_fetch) == (10, 15)
    ds = {d.offset: d for d in q.receive(0, 10, 100)}
    for offset, committed in [(11, 10), (13, 10), (10, 12), (14, 12), (12, 15)]:
        assert q.ack(ds[offset].handle, 1) is OK and q.committed == committed


def test_offer_ignores_what_was_offered_and_refuses_a_gap():
    q = queue(2)
    q.offer([PopMessage(0), PopMessage(1), PopMessage(2)], now_ms=0)
    assert q.next_fetch == 3
    with pytest.raises(ValueError):
        q.offer([PopMessage(3), PopMessage(5)], now_ms=0)
    assert q.next_fetch == 3  # the refused batch changed nothing
    q.offer([PopMessage(3, filtered=True), PopMessage(4)], now_ms=0)
    assert q.next_fetch == 5 and q.stats(0)["held"] == 4


def test_filtered_messages_are_resolved_at_once():
    q = PopQueue(0, fifo=False, max_attempts=3, nonce="n")
    q.offer([PopMessage(i, filtered=True) for i in range(3)], now_ms=0)
    assert q.committed == 3 and q.receive(0, 10, 10) == []


def test_wants_more_bounds_what_is_held():
    q = PopQueue(0, fifo=False, max_attempts=3, nonce="n")
    q.offer([PopMessage(i) for i in range(MAX_HELD - 1)], now_ms=0)
    assert q.wants_more()
    q.offer([PopMessage(MAX_HELD - 1)], now_ms=0)
    assert not q.wants_more()
    assert q.ack(q.receive(0, 1, 10)[0].handle, 0) is OK and q.wants_more()


def test_receive_gives_back_the_door_s_ref():
    q = PopQueue(0, fifo=False, max_attempts=3, nonce="n")
    q.offer([PopMessage(0, ref=("log index", 42))], now_ms=0)
    assert q.receive(0, 1, 10)[0].message.ref == ("log index", 42)


def test_stats():
    q = PopQueue(0, fifo=False, max_attempts=3, nonce="n")
    q.offer([PopMessage(0), PopMessage(1, deliver_at_ms=50), PopMessage(2, transactional=True), PopMessage(3)],
            now_ms=0)
    q.receive(0, 1, 10)
    assert q.stats(5) == {"committed": 0, "next_fetch": 4, "held": 4, "in_flight": 1, "ready": 1, "delayed": 1,
                          "undecided": 1, "dead_letters": 0, "early_decisions": 0}
    assert q.stats(60)["ready"] == 3  # 0 expired, 1 due, 3


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError):
        PopQueue(0, fifo=False, max_attempts=0, nonce="n")
    with pytest.raises(ValueError):
        PopQueue(0, fifo=False, max_attempts=1, nonce="")
    q = queue(1)
    with pytest.raises(ValueError):
        q.receive(0, -1, 10)
    with pytest.raises(ValueError):
        q.receive(0, 1, -10)


# The state machine: a model of what must be true, kept from the results the test saw.

GROUPS = "abc"


class PopMachine(RuleBasedStateMachine):
    @initialize(fifo=st.booleans(), max_attempts=st.integers(1, 3), committed=st.integers(0, 3))
    def start(self, fifo, max_attempts, committed):
        self.q = PopQueue(committed, fifo=fifo, max_attempts=max_attempts, nonce="machine")
        self.other = PopQueue(committed, fifo=fifo, max_attempts=max_attempts, nonce="another")  # forged handles
        self.fifo, self.max_attempts, self.first = fifo, max_attempts, committed
        self.now = 0
        self.offered: dict[int, PopMessage] = {}
        self.resolved: set[int] = set()  # acked, dead-lettered, rolled back, filtered
        self.decisions: dict[int, Decision] = {}  # the first decision for each offset
        self.live: dict[int, str] = {}  # offset -> the one handle that must be valid
        self.until: dict[int, int] = {}  # offset -> invisible_until_ms of its live handle
        self.stale: list[str] = []  # handles that must be invalid
        self.delivered = Counter()
        self.dead: set[int] = set()
        self.checked_ms: dict[int, int] = {}

    # what the model says

    def unresolved(self) -> list[int]:
        return sorted(o for o in self.offered if o not in self.resolved)

    def decided(self, o: int) -> bool:
        return not self.offered[o].transactional or self.decisions.get(o) is Decision.COMMIT

    def ready_fresh(self) -> list[int]:
        """Never delivered, due, decided, and in FIFO with nothing earlier of its group unresolved."""
        out, blocked = [], set()
        for o in self.unresolved():
            m = self.offered[o]
            if self.fifo and m.message_group in blocked:
                continue
            if not self.delivered[o] and m.deliver_at_ms <= self.now and self.decided(o):
                out.append(o)
            if self.fifo:
                blocked.add(m.message_group)
        return out

    def expired(self) -> list[int]:
        return [o for o in self.live if self.until[o] <= self.now]

    def kill(self, o: int) -> None:
        """o's live handle dies."""
        self.stale.append(self.live.pop(o))
        del self.until[o]

    def sync_dead_letters(self) -> None:
        for o in set(self.q.dead_letters()) - self.dead:
            assert o in self.live and (self.delivered[o] == self.max_attempts or o in self.dead), o
            self.dead.add(o)
            self.kill(o)

    def refused(self, handle: str) -> None:
        """No call takes `handle`, and nothing changes."""
        before = (self.q.committed, self.q.stats(self.now), self.q.dead_letters(), self.q.next_wakeup_ms())
        assert self.q.ack(handle, self.now) is INVALID, handle
        assert self.q.change_invisible(handle, 5, self.now) is None, handle
        assert self.q.forward_to_dead_letter(handle) is INVALID, handle
        assert (self.q.committed, self.q.stats(self.now), self.q.dead_letters(), self.q.next_wakeup_ms()) == before

    # rules

    @precondition(lambda self: self.q.wants_more())
    @rule(batch=st.lists(st.tuples(st.sampled_from(GROUPS), st.sampled_from([0, 0, 0, 5, 40]),
                                   st.sampled_from([False] * 4 + [True]), st.sampled_from([False] * 6 + [True])),
                         max_size=5), overlap=st.integers(0, 2))
    def offer(self, batch, overlap):
        start = self.q.next_fetch
        messages = [PopMessage(start + i, group, deliver_at_ms=self.now + delay if delay else 0,
                               transactional=txn, filtered=filtered)
                    for i, (group, delay, txn, filtered) in enumerate(batch)]
        again = [self.offered[o] for o in range(max(self.first, start - overlap), start)]  # ignored
        self.q.offer(again + messages, now_ms=self.now)
        for m in messages:
            self.offered[m.offset] = m
            self.checked_ms[m.offset] = self.now
            if m.filtered or (m.transactional and self.decisions.get(m.offset) is Decision.ROLLBACK):
                self.resolved.add(m.offset)
            if m.offset in self.decisions and not m.transactional:
                del self.decisions[m.offset]  # an early decision for a message that is not a half message
        assert self.q.next_fetch == start + len(messages)

    @rule(max_messages=st.integers(0, 4), invisible_ms=st.sampled_from([0, 10, 30]))
    def receive(self, max_messages, invisible_ms):
        ready, expired = self.ready_fresh(), self.expired()
        exhausted = {o for o in expired if self.delivered[o] >= self.max_attempts}
        got = self.q.receive(self.now, max_messages, invisible_ms)
        assert len(got) <= max_messages
        for d in got:
            o, m = d.offset, self.offered.get(d.offset)
            assert m is not None and o not in self.resolved and o not in self.dead, o
            assert m.deliver_at_ms <= self.now and self.decided(o), o  # never early, never undecided
            assert o in expired or o in ready, o  # expired redelivered, or fresh and its group's head
            self.delivered[o] += 1
            assert d.attempt == self.delivered[o] <= self.max_attempts
            assert d.invisible_until_ms == self.now + invisible_ms
            if o in self.live:
                self.kill(o)
            self.live[o], self.until[o] = d.handle, d.invisible_until_ms
        self.sync_dead_letters()
        if self.fifo:
            for d in got:  # nothing earlier of its group unresolved
                g = self.offered[d.offset].message_group
                assert not [o for o in self.unresolved() if o < d.offset and self.offered[o].message_group == g]
        assert exhausted <= self.dead  # out of attempts: to the dead-letter queue, however little room
        if len(got) < max_messages:  # room left: everything due went out
            assert set(ready) | (set(expired) - exhausted) <= {d.offset for d in got}

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def ack(self, data):
        o = data.draw(st.sampled_from(sorted(self.live)))
        handle = self.live[o]
        assert self.q.ack(handle, self.now) is OK
        self.kill(o)
        self.resolved.add(o)

    @precondition(lambda self: self.stale)
    @rule(data=st.data())
    def ack_stale(self, data):
        handle = data.draw(st.sampled_from(self.stale))
        self.refused(handle)

    @precondition(lambda self: self.live)
    @rule(data=st.data(), invisible_ms=st.sampled_from([0, 10, 30]))
    def change_invisible(self, data, invisible_ms):
        o = data.draw(st.sampled_from(sorted(self.live)))
        d = self.q.change_invisible(self.live[o], invisible_ms, self.now)
        assert d is not None and d.offset == o and d.attempt == self.delivered[o]
        assert d.invisible_until_ms == self.now + invisible_ms
        self.kill(o)
        self.live[o], self.until[o] = d.handle, d.invisible_until_ms

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def forward_to_dead_letter(self, data):
        o = data.draw(st.sampled_from(sorted(self.live)))
        assert self.q.forward_to_dead_letter(self.live[o]) is OK
        self.dead.add(o)
        self.kill(o)
        assert self.q.dead_letters() == sorted(self.dead)

    @precondition(lambda self: self.dead)
    @rule(data=st.data())
    def dead_lettered(self, data):
        o = data.draw(st.sampled_from(sorted(self.dead)))
        self.q.dead_lettered(o)
        self.dead.discard(o)
        self.resolved.add(o)

    @rule(data=st.data(), how=st.sampled_from(["tag", "serial", "offset", "other", "text"]))
    def forged(self, data, how):
        handles = list(self.live.values()) + self.stale
        if how == "text" or not handles:
            handle = data.draw(st.text(max_size=40))
        else:
            h = data.draw(st.sampled_from(handles))
            offset, serial = parse_handle(h)
            tag = h.rpartition(".")[2]
            handle = {"tag": f"{offset}.{serial}.{tag[::-1] if tag[::-1] != tag else '0' * 16}",
                      "serial": f"{offset}.{serial + 1}.{tag}",
                      "offset": f"{offset + 1}.{serial}.{tag}",
                      "other": f"{offset}.{serial}.{self.other._tag(offset, serial)}"}[how]
        self.refused(handle)

    @rule(ms=st.sampled_from([1, 5, 20, 60]))
    def advance(self, ms):
        self.now += ms

    @rule(data=st.data(), decision=st.sampled_from(Decision))
    def decide(self, data, decision):
        o = data.draw(st.integers(self.first, self.q.next_fetch + 3))
        self.q.decide(o, decision)
        if o >= self.q.next_fetch:
            self.decisions.setdefault(o, decision)
        elif self.offered[o].transactional and o not in self.resolved and o not in self.decisions:
            self.decisions[o] = decision
            if decision is Decision.ROLLBACK:
                self.resolved.add(o)

    @rule(older_than_ms=st.sampled_from([0, 10, 50]), data=st.data())
    def check_back(self, older_than_ms, data):
        want = [o for o in self.unresolved() if self.offered[o].transactional and o not in self.decisions
                and self.now - self.checked_ms[o] >= older_than_ms]
        assert self.q.undecided(self.now, older_than_ms) == want
        for o in data.draw(st.lists(st.sampled_from(want), unique=True)) if want else []:
            self.q.checked(o, self.now)
            self.checked_ms[o] = self.now

    # invariants, after every step

    @invariant()
    def committed_is_the_lowest_unresolved_offset(self):
        assert self.q.committed == min(self.unresolved(), default=self.q.next_fetch)

    @invariant()
    def dead_letters_and_holdings_agree(self):
        assert self.q.dead_letters() == sorted(self.dead)
        stats = self.q.stats(self.now)
        assert stats["held"] == len(self.unresolved()) and stats["in_flight"] == len(self.live)

    @invariant()
    def at_most_max_attempts_deliveries(self):
        assert all(n <= self.max_attempts for n in self.delivered.values())

    @invariant()
    def fifo_at_most_one_delivered_message_per_group(self):
        if self.fifo:
            groups = Counter(self.offered[o].message_group for o in list(self.live) + list(self.dead))
            assert all(n == 1 for n in groups.values()), groups

    @invariant()
    def next_wakeup_says_whether_something_is_due(self):
        due = bool(self.expired() or self.ready_fresh())
        wakeup = self.q.next_wakeup_ms()
        assert (wakeup is not None and wakeup <= self.now) == due, (wakeup, self.now)

    def teardown(self):
        """Liveness: decide every half message and ack everything received as time passes: all is resolved."""
        if not hasattr(self, "q"):
            return
        for o in self.unresolved():
            self.decide_all(o)
        for _ in range(len(self.offered) + 2 * self.max_attempts + 2):
            if self.q.committed == self.q.next_fetch:
                break
            self.now += 1_000
            for d in self.q.receive(self.now, 1_000, 10):
                assert d.attempt <= self.max_attempts
                assert self.q.ack(d.handle, self.now) is OK
            for o in self.q.dead_letters():
                self.q.dead_lettered(o)
        assert self.q.committed == self.q.next_fetch, self.q.stats(self.now)
        assert self.q.stats(self.now)["held"] == 0

    def decide_all(self, o: int) -> None:
        self.q.decide(o, Decision.COMMIT if o % 2 else Decision.ROLLBACK)


TestPopMachine = PopMachine.TestCase
TestPopMachine.settings = settings(max_examples=200, stateful_step_count=40, deadline=None,
                                   suppress_health_check=[HealthCheck.too_slow])
