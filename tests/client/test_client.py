"""quorumlog.Client against an in-process fake group on real loopback sockets (TransportServer)."""

from __future__ import annotations

import asyncio
import gc
import socket
import time
import warnings
from datetime import datetime, timezone

import pytest

import quorumlog
from quorumlog.codes import ResponseCode
from quorumlog.errors import (EntryTooLarge, IndexGap, IndexOutOfRange, LeaderPendingFull, NetworkError,
                              NotCommittedYet, NotLeader, QuorumLogError, RemovedByRetention, Timeout, UnknownGroup)
from quorumlog.wire.client import AppendRequest

from .fake_cluster import TIMESTAMP_MS, FakeCluster

pytestmark = pytest.mark.timeout(60)


def run(coro, timeout_s: float = 20):
    async def bounded():
        return await asyncio.wait_for(coro, timeout_s)
    return asyncio.run(bounded())


def test_append_get_read_roundtrip():
    async def go():
        async with FakeCluster() as fc, quorumlog.Client(fc.peers_text) as c:
            r = await c.append(b"hello")
            assert r == quorumlog.AppendResult(0, 1)
            rs = await c.append_batch([b"a", b"b", "text"])
            assert [x.index for x in rs] == [1, 2, 3]
            e = await c.get(2)
            assert (e.index, e.term, e.body) == (2, 1, b"b")
            assert e.timestamp == datetime.fromtimestamp(TIMESTAMP_MS / 1000, timezone.utc)
            assert e.timestamp_ms == TIMESTAMP_MS
            assert [x.body async for x in c.read(1)] == [b"a", b"b", b"text"]
            assert [x.index async for x in c.read(0, 1)] == [0, 1]
            with pytest.raises(IndexOutOfRange):
                await c.get(99)
            # the batch's own idempotence tag never shows in a body
            assert fc.group.bodies == [b"hello", b"a", b"b", b"text"]
    run(go())


def test_get_of_an_acknowledged_index_waits_for_a_new_leaders_commit():
    """Right after a failover the new leader's committed index lags its log until its no-op
    commits; `get` of an index this client had acknowledged raised IndexOutOfRange. It now waits for it."""
    async def go():
        async with FakeCluster() as fc, quorumlog.Client(fc.peers_text) as c:
            acked = (await c.append(b"mine")).index
            fc.group.leader_id = "n1"  # failover: the new leader has the entry but has not committed it yet
            fc.group.commit_lag = 1
            getting = asyncio.ensure_future(c.get(acked))
            await asyncio.sleep(0.05)
            assert not getting.done()  # waiting, not failing
            fc.group.catch_up_commit()
            e = await asyncio.wait_for(getting, 5)
            assert (e.index, e.body) == (acked, b"mine")
            fc.group.commit_lag = 1  # an index nobody acknowledged to us: answered at once, as before
            fc.group.store((b"other",), None)
            with pytest.raises(IndexOutOfRange):
                await asyncio.wait_for(c.get(acked + 1), 1)
    run(go())


def test_not_leader_redirects_to_the_named_leader_at_once():
    async def go():
        async with FakeCluster() as fc, quorumlog.Client(fc.peers_text) as c:
            await c.append(b"first")
            assert c.leader_id == "n0"
            fc.group.leader_id = "n2"  # leadership moved; the client still believes n0
            r = await c.append(b"second")
            assert r.index == 1 and c.leader_id == "n2"
            # straight to the named leader: no rediscovery (status) and no detour via n1
            assert [len(fc.group.appends(n)) for n in ("n0", "n1", "n2")] == [2, 0, 1]
            assert sum(1 for s in fc.group.seen if type(s.request).__name__ == "StatusRequest") == 3
            assert fc.group.bodies == [b"first", b"second"]
    run(go())


def test_a_lost_answer_is_retried_with_the_same_seq_and_stored_once():
    async def go():
        async with FakeCluster() as fc, quorumlog.Client(fc.peers_text, request_timeout_ms=300) as c:
            fc.group.drop_responses = 1  # stored, but the answer never comes
            r = await c.append(b"once")
            sent = fc.group.appends()
            assert len(sent) == 2
            assert {(a.client_id, a.seq) for a in sent} == {(c.client_id, sent[0].seq)}
            assert sent[0].client_id != 0
            assert fc.group.bodies == [b"once"] and r.index == 0
            await c.append(b"next")
            assert fc.group.appends()[-1].seq > sent[0].seq  # a new batch, a new seq
    run(go())


def test_a_cut_connection_is_reopened_and_the_batch_retried_with_the_same_seq():
    async def go():
        async with FakeCluster() as fc, quorumlog.Client(fc.peers_text) as c:
            await c.append(b"warm")
            fc.group.abort_connections = 1
            r = await c.append_batch([b"x", b"y"])
            sent = fc.group.appends()[1:]
            assert len(sent) == 2 and sent[0].seq == sent[1].seq
            assert fc.group.bodies == [b"warm", b"x", b"y"] and [x.index for x in r] == [1, 2]
    run(go())


def test_a_dead_leader_is_forgotten_and_the_new_one_discovered():
    async def go():
        async with FakeCluster() as fc, quorumlog.Client(fc.peers_text) as c:
            await c.append(b"a")
            await fc.nodes["n0"].server.close()  # n0 is gone; the group elected n1
            fc.group.leader_id, fc.group.term = "n1", 2
            r = await c.append(b"b")
            assert r == quorumlog.AppendResult(1, 2) and c.leader_id == "n1"
            assert fc.group.bodies == [b"a", b"b"]
            nodes = await c.status()
            assert [n.role for n in nodes] == ["unreachable", "leader", "follower"]
    run(go())


def test_retriable_codes_are_retried_and_others_are_raised_with_their_code():
    async def go():
        async with FakeCluster() as fc, quorumlog.Client(fc.peers_text) as c:
            fc.group.error_codes = [ResponseCode.LEADER_PENDING_FULL, ResponseCode.WAIT_QUORUM_ACK_TIMEOUT]
            r = await c.append(b"x")
            assert r.index == 0 and len(fc.group.appends()) == 3
            assert len({a.seq for a in fc.group.appends()}) == 1
            fc.group.error_codes = [ResponseCode.DISK_FULL]
            with pytest.raises(quorumlog.DiskFull) as ei:
                await c.append(b"y")
            assert ei.value.code == ResponseCode.DISK_FULL and not ei.value.retriable
            assert len(fc.group.appends()) == 4  # not retried
            fc.group.error_codes = [ResponseCode.INDEX_LESS_THAN_LOCAL_BEGIN]
            with pytest.raises(QuorumLogError) as ei:
                await c.append(b"z")
            assert ei.value.code == ResponseCode.INDEX_LESS_THAN_LOCAL_BEGIN
    run(go())


def test_concurrent_appends_are_coalesced_into_few_frames_each_with_its_own_index():
    async def go():
        async with FakeCluster() as fc, quorumlog.Client(fc.peers_text, max_in_flight=2) as c:
            await c.append(b"warm")  # discovery out of the way
            fc.group.append_delay_s = 0.02
            bodies = [b"v%d" % i for i in range(300)]
            results = await asyncio.gather(*(c.append(b) for b in bodies))
            frames = fc.group.appends()[1:]
            assert len(frames) <= 4, [len(f.bodies) for f in frames]
            assert sum(len(f.bodies) for f in frames) == 300
            assert len({r.index for r in results}) == 300
            for body, r in zip(bodies, results):
                assert fc.group.bodies[r.index] == body  # each caller got its own entry's index
    run(go())


def test_an_append_cancelled_before_it_left_is_never_sent():
    async def go():
        async with FakeCluster() as fc, quorumlog.Client(fc.peers_text, max_in_flight=1) as c:
            await c.append(b"warm")
            fc.group.append_delay_s = 0.2
            first = asyncio.ensure_future(c.append(b"in-flight"))
            while len(fc.group.appends()) < 2:  # first is on the wire and holds the only slot
                await asyncio.sleep(0.005)
            second = asyncio.ensure_future(c.append(b"cancelled"))
            while not c._accumulator._pending:  # queued behind it
                await asyncio.sleep(0)
            second.cancel()
            assert (await first).index == 1
            third = await c.append(b"after")
            assert fc.group.bodies == [b"warm", b"in-flight", b"after"] and third.index == 2
    run(go())


def test_linger_and_max_batch_bytes_bound_a_frame():
    async def go():
        async with FakeCluster() as fc, quorumlog.Client(fc.peers_text, linger_ms=20, max_batch_bytes=1000) as c:
            await c.append(b"warm")
            results = await asyncio.gather(*(c.append(bytes(100)) for _ in range(50)))
            frames = fc.group.appends()[1:]
            assert all(sum(map(len, f.bodies)) <= 1000 for f in frames)
            assert len(frames) == 5 and len({r.index for r in results}) == 50
    run(go())


def test_one_oversized_entry_fails_alone_not_its_whole_frame():
    async def go():
        async with FakeCluster() as fc, quorumlog.Client(fc.peers_text) as c:
            await c.append(b"warm")
            fc.group.max_entry_bytes = 10
            results = await asyncio.gather(c.append(b"ok1"), c.append(bytes(11)), c.append(b"ok2"),
                                           return_exceptions=True)
            assert isinstance(results[1], EntryTooLarge) and results[1].code == ResponseCode.ENTRY_TOO_LARGE
            assert sorted(fc.group.bodies[r.index] for r in (results[0], results[2])) == [b"ok1", b"ok2"]
    run(go())


def test_caller_fixed_idempotence_key_appends_once():
    async def go():
        async with FakeCluster() as fc, quorumlog.Client(fc.peers_text) as c:
            a = await c.append_batch([b"p", b"q"], client_id=42, seq=7)
            b = await c.append_batch([b"p", b"q"], client_id=42, seq=7)
            assert a == b and fc.group.bodies == [b"p", b"q"]
            with pytest.raises(ValueError):
                await c.append_batch([b"p"], client_id=42)
            with pytest.raises(quorumlog.EmptyBatch):
                await c.append_batch([])
    run(go())


def test_follow_long_polls_instead_of_looping():
    async def go():
        async with FakeCluster() as fc, quorumlog.Client(fc.peers_text) as c:
            await c.append(b"e0")
            got: list[bytes] = []
            two = asyncio.Event()

            async def follow():
                async for e in c.read(0, follow=True, node="n1"):
                    got.append(e.body)
                    if len(got) == 2:
                        two.set()
                        return

            task = asyncio.ensure_future(follow())
            # wait until the follower is parked in a long-poll at index 1
            while not any(r.start == 1 for r in fc.group.reads()):
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.3)
            parked = [r for r in fc.group.reads() if r.start == 1]
            assert len(parked) == 1 and parked[0].wait_ms > 0  # held by the node, not re-asked
            await c.append(b"e1")
            await asyncio.wait_for(two.wait(), 2)
            await task
            assert got == [b"e0", b"e1"]
            assert all(s.node_id == "n1" for s in fc.group.seen if isinstance(s.request, type(parked[0])))
    run(go())


def test_status_lists_every_member_and_marks_the_silent_unreachable():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead_port = s.getsockname()[1]  # closed once the block ends: nothing listens there

    async def go():
        async with FakeCluster() as fc:
            peers = dict(fc.peers)
            peers["n9"] = ("127.0.0.1", dead_port)
            fc.group.status_down = {"n1"}
            async with quorumlog.Client(peers, request_timeout_ms=500) as c:
                nodes = await c.status()
                assert [n.id for n in nodes] == ["n0", "n1", "n2", "n9"]
                assert [n.role for n in nodes] == ["leader", "unreachable", "follower", "unreachable"]
                assert nodes[0].leader_id == "n0" and nodes[2].leader_id == "n0"
                assert nodes[3].error and not nodes[3].reachable
                assert nodes[0].to_dict()["flush"] == "sync"
    run(go())


def test_max_retries_bounds_busy_leaders_but_not_the_search_for_a_leader():
    async def go():
        async with FakeCluster(leader=None) as fc, quorumlog.Client(fc.peers_text, max_retries=1) as c:
            async def elect_later():
                await asyncio.sleep(0.3)  # many leader-search rounds happen meanwhile
                fc.group.leader_id = "n1"

            elect = asyncio.ensure_future(elect_later())
            assert (await c.append(b"a")).index == 0
            await elect
            fc.group.error_codes = [ResponseCode.LEADER_PENDING_FULL] * 3
            with pytest.raises(quorumlog.LeaderPendingFull):
                await c.append(b"b")
            assert len(fc.group.appends()) == 1 + 2  # first try + max_retries
    run(go())


def test_retries_that_run_out_of_time_raise_the_real_error_not_a_timeout():
    # CI: a promote retried LEARNER_NOT_CAUGHT_UP until its backoff slept to the deadline, then sent one more
    # attempt with 1 ms left and raised "no response within 1 ms" instead of the error a caller handles.
    async def go():
        async with FakeCluster() as fc, quorumlog.Client(fc.peers_text, timeout_ms=400, max_retries=10_000) as c:
            fc.group.error_codes = [ResponseCode.LEADER_PENDING_FULL] * 10_000
            fc.group.append_delay_s = 0.005  # longer than the 1 ms a last attempt had
            for _ in range(5):
                with pytest.raises(quorumlog.errors.LeaderPendingFull):
                    await c.append(b"x")
    run(go())


def test_an_attempt_the_deadline_cut_short_raises_the_real_error_even_before_the_deadline_passes():
    # CI: a sync append to SIGSTOPped slaves got FLUSH_SLAVE_TIMEOUT, then its last attempt had 1.x ms left; the
    # connection's timer (whole milliseconds) fired before the call's deadline, and the caller saw Timeout. Here
    # that timer fires at once, so the deadline is far from expired when the cut attempt times out.
    async def go():
        async with FakeCluster() as fc, quorumlog.Client(fc.peers_text, timeout_ms=2_000, request_timeout_ms=5_000,
                                                         max_retries=10_000) as c:
            await c.append(b"first")  # (the leader is known)
            fc.group.error_codes = [ResponseCode.LEADER_PENDING_FULL]
            real, calls = c._pool.call, []

            async def call(node_id, request, timeout_ms):
                calls.append(timeout_ms)
                if len(calls) == 1:
                    return await real(node_id, request, timeout_ms)  # LEADER_PENDING_FULL
                raise quorumlog.errors.Timeout(f"no response within {int(timeout_ms)} ms")

            c._pool.call = call
            t0 = time.monotonic()
            with pytest.raises(quorumlog.errors.LeaderPendingFull):
                await c.append(b"x")
            assert len(calls) == 2 and all(t < 5_000 for t in calls)  # (every budget cut by the 2 s deadline)
            assert time.monotonic() - t0 < 1.5  # at once, not after retrying Timeouts until the deadline
    run(go())


def test_no_leader_gives_up_within_the_timeout_with_not_leader():
    async def go():
        async with FakeCluster(leader=None) as fc, quorumlog.Client(fc.peers_text, timeout_ms=600) as c:
            t0 = time.monotonic()
            with pytest.raises(NotLeader):
                await c.append(b"x")
            assert 0.5 < time.monotonic() - t0 < 3
            assert fc.group.bodies == []
    run(go())


def test_transfer_leader_moves_the_clients_leader():
    async def go():
        async with FakeCluster() as fc, quorumlog.Client(fc.peers_text) as c:
            assert await c.transfer_leader("n1") == "n1"
            assert fc.group.leader_id == "n1" and c.leader_id == "n1"
            await c.append(b"x")
            assert len(fc.group.appends("n1")) == 1
            with pytest.raises(ValueError, match="n7"):
                await c.transfer_leader("n7")
    run(go())


def test_wrong_group_is_refused_with_its_code():
    async def go():
        async with FakeCluster() as fc, quorumlog.Client(fc.peers_text, group="other", timeout_ms=2000) as c:
            nodes = await c.status()
            assert all(not n.reachable and "UNKNOWN_GROUP" in (n.error or "") for n in nodes), nodes
            t0 = time.monotonic()
            with pytest.raises(UnknownGroup) as ei:
                await c.append(b"x")
            assert ei.value.code == ResponseCode.UNKNOWN_GROUP
            assert time.monotonic() - t0 < 1.5  # not retried until the timeout: no retry can fix it
    run(go())


def test_close_is_idempotent_and_an_unclosed_client_warns():
    async def go():
        async with FakeCluster() as fc:
            c = quorumlog.Client(fc.peers_text)
            await c.append(b"x")
            await c.close()
            await c.close()
            with pytest.raises(quorumlog.NetworkError):
                await c.append(b"y")
            leaked = quorumlog.Client(fc.peers_text)
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                del leaked
                gc.collect()
            assert any(issubclass(x.category, ResourceWarning) for x in w)
    run(go())


def test_blocking_connect_has_the_same_methods():
    async def serve(stop: asyncio.Event, ready: asyncio.Future):
        async with FakeCluster() as fc:
            ready.set_result(fc)
            await stop.wait()

    import threading

    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    ready: asyncio.Future = loop.create_future()
    t = threading.Thread(target=loop.run_until_complete, args=(serve(stop, ready),), daemon=True)
    t.start()
    try:
        deadline = time.monotonic() + 10
        while not ready.done() and time.monotonic() < deadline:
            time.sleep(0.01)
        fc = ready.result()
        with quorumlog.connect(fc.peers_text) as c:
            assert c.append(b"a").index == 0
            assert [r.index for r in c.append_batch([b"b", b"c"])] == [1, 2]
            assert c.get(1).body == b"b"
            assert [e.body for e in c.read(0)] == [b"a", b"b", b"c"]
            assert [n.role for n in c.status()][0] == "leader"
        c.close()  # idempotent
        with pytest.raises(quorumlog.NetworkError):
            c.append(b"z")
    finally:
        loop.call_soon_threadsafe(stop.set)
        t.join(10)
    assert isinstance(AppendRequest, type)


def test_a_lone_append_is_sent_from_its_callers_task():
    """Nothing waiting and a slot free: no hop through the accumulator's tasks (each a loop turn)."""
    async def go():
        from quorumlog.client.accumulator import Accumulator

        seen = []

        async def send_batch(batch):
            seen.append((asyncio.current_task(), [p.body for p in batch]))
            for p in batch:
                p.future.set_result(len(seen))

        acc = Accumulator(send_batch, linger_ms=0, max_batch_bytes=1 << 20, max_in_flight=2)
        for i in range(4):
            assert await acc.add(b"a%d" % i) == i + 1
        me = asyncio.current_task()
        # the first LONE_AFTER_BATCHES go through the accumulator's tasks, then the caller's task sends
        assert [t is me for t, _ in seen] == [False, False, True, True]
        # busy slots: later appends queue and leave together, from the accumulator's tasks
        gate = asyncio.Event()

        async def slow_batch(batch):
            seen.append((asyncio.current_task(), [p.body for p in batch]))
            await gate.wait()
            for p in batch:
                p.future.set_result(len(seen))
        acc._send_batch = slow_batch
        first = [asyncio.ensure_future(acc.add(b"x%d" % i)) for i in range(2)]  # take both slots
        await asyncio.sleep(0)
        rest = [asyncio.ensure_future(acc.add(b"y%d" % i)) for i in range(5)]
        while len(seen) < 6:
            await asyncio.sleep(0.001)
        gate.set()
        await asyncio.gather(*first, *rest)
        assert [b for _, b in seen[4:6]] == [[b"x0"], [b"x1"]]
        later = seen[6:]
        assert len(later) <= 2 and [x for _, b in later for x in b] == [b"y%d" % i for i in range(5)]
        assert all(t not in rest for t, _ in later)  # sent by the accumulator's sender tasks
        await acc.close(1000)
    run(go())


def test_writers_that_append_in_a_loop_keep_sharing_frames():
    """The lone-writer shortcut must not turn steady concurrent load into one frame per append."""
    async def go():
        async with FakeCluster() as fc, quorumlog.Client(fc.peers_text, max_in_flight=32) as c:
            await c.append(b"warm")
            fc.group.append_delay_s = 0.002

            async def writer(w):
                for i in range(10):
                    await c.append(b"w%d-%d" % (w, i))
            await asyncio.gather(*(writer(w) for w in range(64)))
            frames = fc.group.appends()[1:]
            assert sum(len(f.bodies) for f in frames) == 640
            assert len(frames) <= 640 // 8, len(frames)
    run(go())


def test_no_member_reachable_says_why_once():
    """Every member refusing the connection is a network error led by its cause, said once for all members,
    not NOT_LEADER with one hint per member."""
    import socket

    ports = []
    for _ in range(3):  # ports nobody listens on: bound, then closed
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    peers = ",".join(f"n{i}=127.0.0.1:{p}" for i, p in enumerate(ports))

    async def go():
        async with quorumlog.Client(peers, timeout_ms=400) as c:
            with pytest.raises(quorumlog.errors.NetworkError) as e:
                await c.append(b"x")
        return str(e.value)

    message = run(go())
    assert message.startswith("cannot connect to every member: [Errno 111] Connection refused (") and \
        message.count("Connection refused") == 1, message
    assert all(f"127.0.0.1:{p}" in message for p in ports)


def test_members_failing_differently_are_each_named():
    from quorumlog.client.client import unreachable_summary

    assert unreachable_summary([("n0", "h:1", "cannot connect to h:1: refused"),
                                ("n1", "h:2", "h:2 closed the connection during the handshake")]) == \
        "no member answered: n0 h:1: cannot connect to it: refused; n1 h:2: it closed the connection during the handshake"


def test_get_says_why_an_index_has_no_entry():
    """Not committed yet, a gap (a leader's no-op: readers never see it), or removed by retention: three kinds of
    IndexOutOfRange, so a caller can wait, skip or give up."""
    async def go():
        async with FakeCluster() as fc, quorumlog.Client(fc.peers_text) as c:
            await c.append_batch([b"a", b"b", b"c", b"d"])
            fc.group.hidden, fc.group.begin_index = {2}, 1
            assert (await c.get(3)).body == b"d"
            for index, kind in ((9, NotCommittedYet), (2, IndexGap), (0, RemovedByRetention)):
                with pytest.raises(kind) as e:
                    await c.get(index)
                assert isinstance(e.value, IndexOutOfRange) and e.value.code == ResponseCode.INDEX_OUT_OF_RANGE
    run(go())


def test_a_failed_write_says_whether_it_may_have_been_applied():
    """outcome_unknown: True once an attempt reached a node and its outcome was never learned (no answer; an
    answer that cannot tell), even when the last attempt's error is a plain refusal; False when every attempt
    was refused or never sent."""
    async def go():
        async with FakeCluster() as fc:
            peers = fc.peers_text
            async with quorumlog.Client(fc.peers_text, linger_ms=0, max_retries=2) as c:
                fc.group.error_codes = [ResponseCode.ENTRY_TOO_LARGE]
                with pytest.raises(EntryTooLarge) as e:
                    await c.append(b"x")
                assert e.value.outcome_unknown is False
                fc.group.error_codes = [ResponseCode.TERM_CHANGED] + [ResponseCode.LEADER_PENDING_FULL] * 5
                with pytest.raises(LeaderPendingFull) as e:
                    await c.append(b"y")
                assert e.value.outcome_unknown is True  # the first attempt may yet commit
            async with quorumlog.Client(fc.peers_text, linger_ms=0, timeout_ms=600, request_timeout_ms=250) as c:
                fc.group.error_codes, fc.group.drop_responses = [], 100
                with pytest.raises(Timeout) as e:
                    await c.append(b"z")
                assert e.value.outcome_unknown is True
                assert "within the call's 600 ms" in str(e.value), e.value  # its whole budget, not the last cut
        async with quorumlog.Client(peers, linger_ms=0, timeout_ms=300) as c:  # every node gone
            with pytest.raises(NetworkError) as e:
                await c.append(b"never sent")
            assert e.value.outcome_unknown is False
    run(go())
