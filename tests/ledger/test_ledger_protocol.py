"""The ledger protocol (quorumlog/ledger) against real bookie storage, after BookKeeper's own tests:
TestFencing, LedgerRecoveryTest, ParallelLedgerRecoveryTest, and its TLA+ model's case "the first writer
cannot commit a write after the second writer closes"."""

from __future__ import annotations

from dataclasses import replace

import pytest

from quorumlog.codes import ResponseCode
from quorumlog.ledger import LedgerWriterCore, NeedClose
from quorumlog.ledger.metadata import LedgerMetadata, Segment, State
from quorumlog.sim.ledgers import plant_recovery_bugs
from quorumlog.wire.ledger import ReadEntry, ReadLac, unpack_entry

from .harness import Cluster

OK = ResponseCode.SUCCESS


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path, n=5)
    yield c
    c.close()


def _write(c: Cluster, w: LedgerWriterCore, bodies, first_rid: int = 1) -> list:
    for k, body in enumerate(bodies):
        w.add(first_rid + k, body)
    return c.pump_writer(w)


def _recover(c: Cluster, ledger_id: int, **kw) -> LedgerMetadata:
    r = c.begin_recovery(ledger_id, **kw)
    result = c.run_recovery(r)
    assert isinstance(result, NeedClose), result
    closed = c.cas(result.metadata)
    return closed or c.metadata[ledger_id]


def _read_all(c: Cluster, md: LedgerMetadata) -> list[bytes]:
    out = []
    for e in range(md.last_entry_id + 1):
        for b in md.write_set(e):
            resp = c.call(ReadEntry(b, md.ledger_id, e))
            if resp is not None and resp.code == OK:
                out.append(unpack_entry(resp.data)[2])
                break
        else:
            raise AssertionError(f"entry {e} on no bookie of its write set")
    return out


def test_metadata_stripes_round_robin_and_validates_quorums():
    md = LedgerMetadata(1, 3, 2, 2, (Segment(0, ("a", "b", "c")), Segment(10, ("a", "d", "c"))))
    assert [md.write_set(e) for e in range(4)] == [("a", "b"), ("b", "c"), ("c", "a"), ("a", "b")]
    assert md.write_set(10) == ("d", "c") and md.write_set(11) == ("c", "a")
    assert LedgerMetadata.from_json(md.to_json(), 3) == replace(md, version=3)
    with pytest.raises(ValueError):
        LedgerMetadata(1, 2, 3, 1, (Segment(0, ("a", "b")),))


def test_acks_follow_the_ack_quorum_in_order(cluster):
    md = cluster.create(3, 2, 2)
    w = LedgerWriterCore(md)
    cluster.hung.add("b1")  # entries 0 (b0,b1) and 1 (b1,b2) wait for b1; entry 2 (b2,b0) could complete
    done = _write(cluster, w, [b"e0", b"e1", b"e2"])
    assert done == [] and w.lac == -1  # nothing out of order: 2 waits for 0 and 1
    cluster.hung.clear()
    cluster.down.add("b1")  # it never answers: the writer replaces it and re-sends
    w.bookie_failed("b1")
    done = cluster.pump_writer(w)
    assert [(d.entry_id, d.code) for d in done] == [(0, OK), (1, OK), (2, OK)]
    assert cluster.metadata[md.ledger_id].ensembles[-1] == Segment(0, ("b0", "b3", "b2"))


def test_ensemble_change_mid_ledger_keeps_every_entry_readable(cluster):
    md = cluster.create(3, 2, 2)
    w = LedgerWriterCore(md)
    assert len(_write(cluster, w, [b"a%d" % i for i in range(10)])) == 10
    cluster.down.add("b2")
    done = _write(cluster, w, [b"b%d" % i for i in range(10)], first_rid=11)
    assert [d.entry_id for d in done] == list(range(10, 20)) and all(d.code == OK for d in done)
    segs = cluster.metadata[md.ledger_id].ensembles
    assert len(segs) == 2 and segs[1].first_entry_id == 10 and "b2" not in segs[1].bookies
    w.close(99)
    assert cluster.pump_writer(w)[-1].code == OK
    closed = cluster.metadata[md.ledger_id]
    assert (closed.state, closed.last_entry_id) == (State.CLOSED, 19)
    assert closed.length == sum(len(b) for b in [b"a%d" % i for i in range(10)] + [b"b%d" % i for i in range(10)])
    cluster.down.clear()
    assert _read_all(cluster, closed) == [b"a%d" % i for i in range(10)] + [b"b%d" % i for i in range(10)]


def test_basic_fencing(cluster):  # TestFencing.testBasicFencing
    md = cluster.create(3, 2, 2)
    w = LedgerWriterCore(md)
    _write(cluster, w, [b"x%d" % i for i in range(5)])
    closed = _recover(cluster, md.ledger_id)
    assert (closed.state, closed.last_entry_id) == (State.CLOSED, 4)
    done = _write(cluster, w, [b"late"], first_rid=50)
    assert [d.code for d in done] == [ResponseCode.LEDGER_FENCED]
    assert _read_all(cluster, closed) == [b"x%d" % i for i in range(5)]


def test_the_first_writer_cannot_commit_after_the_second_closes(cluster):  # BookKeeper's TLA+ model
    md = cluster.create(3, 3, 2)
    w = LedgerWriterCore(md)
    _write(cluster, w, [b"before"])
    w.add(2, b"racing")  # sent, not delivered yet: the recovery runs first
    closed = _recover(cluster, md.ledger_id)
    done = cluster.pump_writer(w) + _write(cluster, w, [b"after"], first_rid=3)
    acked = [d.entry_id for d in done if d.code == OK]
    assert all(e <= closed.last_entry_id for e in acked), (acked, closed.last_entry_id)
    assert all(d.code == ResponseCode.LEDGER_FENCED for d in done if d.code != OK)
    assert cluster.metadata[md.ledger_id] == closed  # a closed ledger never changes


def test_open_without_recovery_does_not_fence(cluster):  # TestFencing: no-recovery open
    md = cluster.create(3, 2, 2)
    w = LedgerWriterCore(md)
    for i, body in enumerate([b"a", b"b", b"c"]):  # one at a time: each add carries the LAC before it
        _write(cluster, w, [body], first_rid=i + 1)
    lacs = [cluster.call(ReadLac(b, md.ledger_id, fence=False)) for b in md.last_ensemble]
    assert max(r.lac for r in lacs) == 1  # the writer's LAC piggybacked on its last add
    assert [d.code for d in _write(cluster, w, [b"d"], first_rid=9)] == [OK]


def test_fencing_with_a_hung_bookie_needs_exactly_w_minus_a_plus_one_answers(cluster):
    md = cluster.create(3, 2, 2)  # W - A + 1 = 1 answer per write set
    w = LedgerWriterCore(md)
    _write(cluster, w, [b"p", b"q"])
    cluster.hung.add("b1")
    r = cluster.begin_recovery(md.ledger_id)
    assert cluster.run_recovery(r) is None  # it waits: entry 0's write-back needs b1 (A = 2)
    assert r.fenced  # but the ledger is fenced already, with one answer from each write set
    assert [d.code for d in _write(cluster, w, [b"r"], first_rid=5)] == [ResponseCode.LEDGER_FENCED]
    cluster.hung.clear()
    assert _recover(cluster, md.ledger_id).last_entry_id == 1  # a retry once b1 answers


def test_recovery_fails_with_fewer_than_w_minus_a_plus_one_answers(cluster):
    md = cluster.create(3, 3, 2)  # W - A + 1 = 2 answers per write set (every set is the whole ensemble)
    w = LedgerWriterCore(md)
    _write(cluster, w, [b"p"])
    cluster.down |= {"b0", "b1"}
    r = cluster.begin_recovery(md.ledger_id)
    assert cluster.run_recovery(r) == ResponseCode.LEDGER_RECOVERY_FAILED
    cluster.down.clear()
    closed = _recover(cluster, md.ledger_id)  # a retry once they are back
    assert closed.last_entry_id == 0


def test_fence_survives_a_bookie_restart(cluster):
    md = cluster.create(3, 3, 3)
    w = LedgerWriterCore(md)
    _write(cluster, w, [b"a"])
    for b in md.last_ensemble:
        cluster.call(ReadLac(b, md.ledger_id, fence=True))
    for b in md.last_ensemble:
        cluster.restart(b)
    assert [d.code for d in _write(cluster, w, [b"b"], first_rid=7)] == [ResponseCode.LEDGER_FENCED]


def test_recovery_does_not_trust_a_single_no_such_entry(cluster):
    md = cluster.create(3, 3, 2)
    w = LedgerWriterCore(md)
    _write(cluster, w, [b"a"])
    cluster.hung.add("b2")  # entry 1 is acknowledged by b0 and b1 only
    assert [d.code for d in _write(cluster, w, [b"acked"], first_rid=5)] == [OK]
    cluster.hung.clear()

    def b2_first(messages):  # the bookie without the entry answers first
        return sorted(messages, key=lambda m: m.to != "b2")

    r = cluster.begin_recovery(md.ledger_id)
    plant_recovery_bugs(r, {"trust_one_no_such_entry"})
    lossy = cluster.run_recovery(r, order=b2_first)
    assert lossy.metadata.last_entry_id == 0  # the planted bug truncates an acknowledged entry
    r = LedgerRecoveryCoreFor(cluster, md.ledger_id)
    right = cluster.run_recovery(r, order=b2_first)
    assert right.metadata.last_entry_id == 1


def LedgerRecoveryCoreFor(cluster, ledger_id):
    from quorumlog.ledger import LedgerRecoveryCore
    return LedgerRecoveryCore(cluster.metadata[ledger_id])


def test_a_wiped_bookie_answers_unknown_and_never_shortens_the_ledger(cluster):
    md = cluster.create(3, 3, 2)
    w = LedgerWriterCore(md)
    cluster.hung.add("b2")
    _write(cluster, w, [b"a", b"b"])  # on b0 and b1 only
    cluster.hung.clear()
    cluster.wipe("b0")  # b0 lost its disk; b1 is down: only b2 (which never had them) and b0 answer
    cluster.down.add("b1")
    r = cluster.begin_recovery(md.ledger_id)
    result = cluster.run_recovery(r, order=lambda ms: sorted(ms, key=lambda m: m.to != "b2"))
    assert result == ResponseCode.LEDGER_RECOVERY_FAILED  # not "closed at -1": that would lose a and b
    cluster.down.clear()
    assert _recover(cluster, md.ledger_id).last_entry_id == 1


def test_parallel_recoveries_agree(cluster):  # ParallelLedgerRecoveryTest
    md = cluster.create(3, 2, 2)
    w = LedgerWriterCore(md)
    _write(cluster, w, [b"%d" % i for i in range(7)])
    first = cluster.begin_recovery(md.ledger_id)
    second = cluster.begin_recovery(md.ledger_id)  # it finds IN_RECOVERY already: recovers too
    a, b = cluster.run_recovery(first), cluster.run_recovery(second)
    assert a.metadata.last_entry_id == b.metadata.last_entry_id == 6
    assert cluster.cas(a.metadata) is not None and cluster.cas(b.metadata) is None  # one compare-and-set wins
    assert cluster.metadata[md.ledger_id].last_entry_id == 6


def test_a_bookie_failing_during_write_back_changes_the_ensemble(cluster):  # LedgerRecoveryTest
    """The write-back of a recovery goes to a replacement when a bookie of the write set fails (as
    BookKeeper's recovery does through its LedgerHandle), reads stay on the bookies that hold the entries,
    and the close carries the new segment."""
    md = cluster.create(3, 3, 3)
    w = LedgerWriterCore(md)
    _write(cluster, w, [b"a", b"b"])
    r = cluster.begin_recovery(md.ledger_id)
    r.start()
    for m in r.take():  # fence and LAC from every bookie
        r.on_read_lac(cluster.call(m))
    cluster.down.add("b2")  # then b2 fails: its write-back cannot be acknowledged
    result = cluster.run_recovery(r) if r.result is None else r.result
    assert isinstance(result, NeedClose), result
    assert [c.failed for c in cluster.recovery_changes] == [frozenset({"b2"})]
    closed = cluster.cas(result.metadata)
    assert closed.last_entry_id == 1
    first = cluster.recovery_changes[0].first_entry_id
    assert closed.ensembles[-1].first_entry_id == first and "b2" not in closed.ensembles[-1].bookies
    assert _read_all(cluster, closed) == [b"a", b"b"]  # the replacement holds what it must
    cluster.down.clear()


def test_a_write_back_with_no_bookie_to_replace_the_failed_one_fails_and_a_retry_closes(cluster):
    md = cluster.create(5, 5, 5)
    w = LedgerWriterCore(md)
    _write(cluster, w, [b"a", b"b"])
    r = cluster.begin_recovery(md.ledger_id)
    r.start()
    for m in r.take():
        r.on_read_lac(cluster.call(m))
    cluster.down.add("b4")  # no sixth bookie to take its place
    result = cluster.run_recovery(r) if r.result is None else r.result
    assert result == ResponseCode.LEDGER_RECOVERY_FAILED
    assert cluster.metadata[md.ledger_id].state is State.IN_RECOVERY  # nothing closed on a failure
    cluster.down.clear()
    assert _recover(cluster, md.ledger_id).last_entry_id == 1


def test_concurrent_recoveries_with_different_replacements_agree(cluster):  # ParallelLedgerRecoveryTest
    """Two recoveries, each changing the ensemble for its write-back to a different spare: only the close that
    wins the compare-and-set names its replacement, and the entries are readable from what it names."""
    md = cluster.create(3, 2, 2)
    w = LedgerWriterCore(md)
    _write(cluster, w, [b"%d" % i for i in range(5)])
    first, second = cluster.begin_recovery(md.ledger_id), cluster.begin_recovery(md.ledger_id)
    for r in (first, second):
        r.start()
        for m in r.take():
            r.on_read_lac(cluster.call(m))
    cluster.down.add("b1")
    a = cluster.run_recovery(first) if first.result is None else first.result
    cluster.ids.remove("b3")  # the second picks another spare
    cluster.ids.append("b3")
    b = cluster.run_recovery(second) if second.result is None else second.result
    assert isinstance(a, NeedClose) and isinstance(b, NeedClose)
    assert a.metadata.last_entry_id == b.metadata.last_entry_id == 4
    won = cluster.cas(a.metadata)
    assert won is not None and cluster.cas(b.metadata) is None
    cluster.down.clear()
    assert _read_all(cluster, won) == [b"%d" % i for i in range(5)]


@pytest.mark.parametrize("bad", [None, ResponseCode.LEDGER_FENCED, ResponseCode.NETWORK_ERROR])
def test_a_batchs_answers_taken_at_once_do_what_they_do_one_by_one(bad):
    """on_add_results (an ADD_BATCH's answers in one go, the LAC moved once) against on_response per entry:
    the same acknowledgements in the same order, the same LAC, the same failure handling when a bookie's
    answer in the middle of a batch is an error."""
    from quorumlog.wire.ledger import AddResponse

    md = LedgerMetadata(1, 3, 2, 2, (Segment(0, ("b0", "b1", "b2")),), version=1)
    one, batched = LedgerWriterCore(md), LedgerWriterCore(md)
    for w in (one, batched):
        for k in range(12):
            w.add(k + 1, b"x%d" % k)
        w.take()
    for bookie in ("b0", "b1", "b2"):
        answers = [(e, OK) for e in range(12) if bookie in md.write_set(e)]
        if bad is not None and bookie == "b1":
            answers[2] = (answers[2][0], bad)  # (b1's third entry)
        for e, code in answers:
            one.on_response(AddResponse(bookie, 1, e, code))
        batched.on_add_results(bookie, [(e, int(code)) for e, code in answers])
        assert batched.take() == one.take()
        assert (batched.lac, batched.error, batched.changing) == (one.lac, one.error, one.changing)
    # (b1's error comes at its entry 3, when entry 0 is in: a fenced ledger ends there, a failed bookie's acks of
    # entries 1 and 3 no longer count until the ensemble change re-sends them)
    assert one.lac == (11 if bad is None else 0)
    assert one.error == (ResponseCode.LEDGER_FENCED if bad is ResponseCode.LEDGER_FENCED else None)
    assert one.changing == (bad is ResponseCode.NETWORK_ERROR)
