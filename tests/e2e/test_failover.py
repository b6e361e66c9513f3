"""Kill -9, SIGSTOP and whole-cluster restarts of real nodes under load; nothing acknowledged may be lost."""

from __future__ import annotations

import asyncio
import json
import signal
import time

import pytest

import quorumlog

from quorumlog.codes import ResponseCode
from quorumlog.transport import ClientConnection
from quorumlog.wire.client import AppendRequest, StatusRequest

from quorumlog.soak.processes import Cluster

from quorumlog.soak.nemesis import LinkProxy, LinkState

from .harness import History, check_logs, time_to_first_write, writer

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

FAILOVER_LIMIT_S = 2.0


def _report(name: str, **numbers) -> None:
    print(f"\nE2E {name} " + json.dumps(numbers, sort_keys=True))


async def _load(cluster: Cluster, history: History, writers: int, **kw):
    stop = asyncio.Event()
    clients = [cluster.client() for _ in range(writers)]
    tasks = [asyncio.create_task(writer(c, f"w{i}", history, stop, **kw)) for i, c in enumerate(clients)]

    async def finish():
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 30)
        for c in clients:
            await c.close()
    return finish


async def _acks_grow(history: History, by: int, timeout_s: float = 10.0) -> None:
    target = len(history.acked) + by
    deadline = time.monotonic() + timeout_s
    while len(history.acked) < target:
        assert time.monotonic() < deadline, f"writes stalled at {len(history.acked)} acks (errors {history.errors})"
        await asyncio.sleep(0.01)


def test_kill9_leader_under_four_writers_then_restart_it(tmp_path):
    async def main(cluster: Cluster):
        history = History()
        async with cluster.client() as admin, cluster.client() as probe:
            old = await cluster.wait_leader(admin)
            history.acked[b"warm-up"] = (await probe.append(b"warm-up")).index  # the probe knows the old leader, as a real client would
            finish = await _load(cluster, history, writers=4)
            await _acks_grow(history, 200)
            old_term = (await cluster.statuses(admin))[old].term
            cluster.nodes[old].kill9()
            t_kill = time.monotonic()
            failover_s = await time_to_first_write(probe, b"probe-after-kill", history=history)
            new = await cluster.wait_leader(admin, exclude=(old,), min_term=old_term + 1)
            await _acks_grow(history, 200)
            cluster.nodes[old].start()  # restart the old leader: it must rejoin as a follower and catch up
            await _acks_grow(history, 200)
            await finish()
            st = await cluster.wait_converged(admin)
            logs = await cluster.committed_logs(admin)
            ref = check_logs(history, logs)
            assert st[old].role == "follower"
            first_ack_after_kill = min((t for t, _ in history.ack_times if t > t_kill), default=None)
            _report("kill9_leader", failover_s=round(failover_s, 3), acked=len(history.acked),
                    unknown=len(history.unknown), log_len=len(ref), new_leader=new, errors=history.errors,
                    writers_first_ack_after_kill_s=round(first_ack_after_kill - t_kill, 3)
                    if first_ack_after_kill else None)
            assert failover_s < FAILOVER_LIMIT_S, f"no write accepted within {FAILOVER_LIMIT_S}s of the kill"

    with Cluster(str(tmp_path)) as cluster:
        asyncio.run(main(cluster))


def test_sigstop_leader_steps_down_and_its_unacked_suffix_is_truncated(tmp_path):
    """The followers pause first, so the leader appends a suffix that mostly cannot reach them; then the
    leader pauses (longer than the election timeout) and the followers resume and elect a new leader that
    writes over those indexes. Resumed, the old leader must step down and truncate its suffix."""
    async def main(cluster: Cluster):
        history = History()
        async with cluster.client() as admin:
            old = await cluster.wait_leader(admin)
            followers = [n for n in cluster.nodes if n != old]
            finish = await _load(cluster, history, writers=4)
            await _acks_grow(history, 100)
            node = cluster.nodes[old]
            conn = await ClientConnection.open("127.0.0.1", node.port, group="default", client_name="stale")
            old_term = (await cluster.statuses(admin))[old].term
            end_before = json.loads((await conn.call(StatusRequest(1), 5_000)).status_json)["end_index"]
            for f in followers:
                cluster.nodes[f].signal(signal.SIGSTOP)
            t_followers = time.monotonic()
            big = b"s" * (1024 * 1024 - 16)
            stale = [asyncio.create_task(conn.call(AppendRequest(100 + i, (b"stale-%03d" % i + big,)), 30_000))
                     for i in range(24)]
            # The old leader stores the suffix at once; check-quorum would depose it after ≥ 500 ms
            end_stale = end_before
            while time.monotonic() - t_followers < 0.3 and end_stale < end_before + 20:
                end_stale = json.loads((await conn.call(StatusRequest(2), 5_000)).status_json)["end_index"]
            node.signal(signal.SIGSTOP)
            t_stop = time.monotonic()
            for f in followers:
                cluster.nodes[f].signal(signal.SIGCONT)
            # A client stuck on the paused leader waits for its request timeout; the cluster's failover is
            # measured by a client of the survivors.
            async with quorumlog.Client(cluster.peers_without(old), timeout_ms=10_000) as survivors:
                failover_s = await time_to_first_write(survivors, b"probe-after-stop", history=history)
                new = await cluster.wait_leader(survivors, exclude=(old,), min_term=old_term + 1)
                await _acks_grow(history, 100)
                await asyncio.sleep(max(0.0, 1.5 - (time.monotonic() - t_stop)))  # paused > election timeout
                survivors_end = max(s.end_index for s in (await cluster.statuses(survivors)).values())
            node.signal(signal.SIGCONT)
            answers = await asyncio.wait_for(asyncio.gather(*stale, return_exceptions=True), 30)
            for i, a in enumerate(answers):  # the stale leader's appends join the history with their outcome
                if not isinstance(a, BaseException) and a.code == ResponseCode.SUCCESS:
                    history.acked[b"stale-%03d" % i + big] = a.first_index
                else:
                    history.unknown.add(b"stale-%03d" % i + big)
            await _acks_grow(history, 100)
            await finish()
            st = await cluster.wait_converged(admin)
            logs = await cluster.committed_logs(admin)
            ref = check_logs(history, logs)
            assert st[old].role == "follower" and st[old].term > old_term
            codes: dict[str, int] = {}
            for i, a in enumerate(answers):
                code = a.code.name if not isinstance(a, BaseException) else type(a).__name__
                codes[code] = codes.get(code, 0) + 1
                if not isinstance(a, BaseException) and a.code == ResponseCode.SUCCESS:
                    assert {e.index: e for e in ref}[a.first_index].body.startswith(b"stale-%03d" % i)
            await conn.close()
            stale_in_log = sum(1 for e in ref if e.body.startswith(b"stale-"))
            truncated = f"truncated node={old}" in node.log_text()
            _report("sigstop_leader", failover_s=round(failover_s, 3), acked=len(history.acked),
                    stale_answers=codes, stale_suffix=end_stale - end_before, stale_committed=stale_in_log,
                    old_leader_truncated=truncated, log_len=len(ref), new_leader=new)
            assert failover_s < FAILOVER_LIMIT_S
            assert end_stale > end_before, "the old leader stored no suffix while its followers were paused"
            if stale_in_log < end_stale - end_before and end_stale < survivors_end:
                # some of the suffix never reached a survivor, and the new leader wrote over those indexes
                assert truncated, "the old leader kept a suffix the new leader overwrote"

    with Cluster(str(tmp_path)) as cluster:
        asyncio.run(main(cluster))


def test_kill9_follower_mid_push_then_restart_it(tmp_path):
    async def main(cluster: Cluster):
        history = History()
        async with cluster.client() as admin:
            leader = await cluster.wait_leader(admin)
            follower = next(n for n in cluster.nodes if n != leader)
            # 32 KiB bodies: pushes carry up to max_push_batch_bytes, so a kill lands inside one
            finish = await _load(cluster, history, writers=4, body_bytes=32 * 1024)
            await _acks_grow(history, 100)
            cluster.nodes[follower].kill9()
            await _acks_grow(history, 100)  # a majority (leader + one follower) keeps committing
            cluster.nodes[follower].start()
            await _acks_grow(history, 100)
            await finish()
            await cluster.wait_converged(admin, timeout_s=30)
            logs = await cluster.committed_logs(admin)
            ref = check_logs(history, logs)
            _report("kill9_follower", acked=len(history.acked), unknown=len(history.unknown), log_len=len(ref))

    with Cluster(str(tmp_path)) as cluster:
        asyncio.run(main(cluster))


def test_restart_the_whole_cluster(tmp_path):
    async def main(cluster: Cluster):
        history = History()
        async with cluster.client() as admin:
            await cluster.wait_leader(admin)
            finish = await _load(cluster, history, writers=4)
            await _acks_grow(history, 300)
            for n in cluster.nodes.values():  # all at once, no flush: only fsynced data may count
                n.kill9()
            await finish()
            t0 = time.monotonic()
            cluster.start()
            await cluster.wait_leader(admin)
            r = await admin.append(b"after-kill-all")
            first_write_s = time.monotonic() - t0
            history.acked[b"after-kill-all"] = r.index
            await cluster.wait_converged(admin)
            check_logs(history, await cluster.committed_logs(admin))
            # graceful stop of everyone (SIGTERM → flush, checkpoint, exit 0), then start again
            codes = cluster.stop()
            assert set(codes.values()) == {0}, codes
            cluster.start()
            await cluster.wait_leader(admin)
            r = await admin.append(b"after-graceful-restart")
            history.acked[b"after-graceful-restart"] = r.index
            await cluster.wait_converged(admin)
            ref = check_logs(history, await cluster.committed_logs(admin))
            _report("restart_cluster", acked=len(history.acked), log_len=len(ref),
                    kill_all_to_first_write_s=round(first_write_s, 3))

    with Cluster(str(tmp_path)) as cluster:
        asyncio.run(main(cluster))


def test_follower_on_a_slow_link_catches_up_after_it_recovers(tmp_path):
    """Pushes to n2 crawl (64 KiB/s, so 1 MiB pushes time out and are resent) for 4 s, then the link heals:
    n2 must catch up (not loop on REPEATED_PUSH) while the others keep committing throughout."""
    async def main(cluster: Cluster):
        links = LinkState()
        toward_n2 = ("peers", "n2")  # every connection dialed to n2 carries bytes in this direction
        proxy = await LinkProxy(*toward_n2, cluster.proxy_ports["n2"], cluster.nodes["n2"].port, links).start()
        cluster.start()
        history = History()
        try:
            async with cluster.client() as admin:
                leader = await cluster.wait_leader(admin)
                if leader == "n2":  # the slow follower must be a follower
                    await admin.transfer_leader("n0")
                    leader = await cluster.wait_leader(admin, exclude=("n2",))
                try:
                    await cluster.wait_converged(admin)  # n2 is reachable through the proxy
                except AssertionError as e:
                    raise AssertionError(f"{e}\nproxy accepted {proxy.accepted} connections") from None
                finish = await _load(cluster, history, writers=4, body_bytes=32 * 1024)
                await _acks_grow(history, 50)
                links.rate_bytes_s[toward_n2] = 64 * 1024
                t_slow = time.monotonic()
                await _acks_grow(history, 100, timeout_s=15)  # a majority without n2 keeps committing
                await asyncio.sleep(max(0.0, 4.0 - (time.monotonic() - t_slow)))
                st = await cluster.statuses(admin)
                lag_when_healed = st[leader].end_index - st["n2"].end_index
                acked_while_slow = len(history.acked)
                del links.rate_bytes_s[toward_n2]
                t_heal = time.monotonic()
                await finish()
                await cluster.wait_converged(admin, timeout_s=30)
                catch_up_s = time.monotonic() - t_heal
                ref = check_logs(history, await cluster.committed_logs(admin))
                repeated = sum(n.log_text().count("REPEATED_PUSH") for n in cluster.nodes.values())
                _report("slow_follower", lag_entries_when_healed=lag_when_healed, catch_up_s=round(catch_up_s, 2),
                        acked=len(history.acked), acked_while_slow=acked_while_slow, log_len=len(ref),
                        repeated_push_log_lines=repeated)
                assert lag_when_healed > 0, "the throttle did not slow n2 down"
        finally:
            cluster.stop()
            await proxy.close()

    asyncio.run(main(Cluster(str(tmp_path), proxied=("n2",))))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_failover_time_over_ten_kills(tmp_path):
    """kill -9 the leader ten times (restarting each victim); time from the kill to the first acknowledged
    append of a client that knew the old leader. Every one must be < 2 s; the median is reported against the
    benchmark target of 1 s (it is a measurement: on a loaded 2-core machine it drifts around 0.9-1.1 s)."""
    async def main(cluster: Cluster):
        history = History()
        times: list[float] = []
        async with cluster.client() as admin:
            for k in range(10):
                old = await cluster.wait_leader(admin)
                async with cluster.client() as probe:
                    r = await probe.append(b"before-%d" % k)
                    history.acked[b"before-%d" % k] = r.index
                    cluster.nodes[old].kill9()
                    t = await time_to_first_write(probe, b"after-%d" % k, history=history)
                    times.append(t)
                cluster.nodes[old].start()
                await cluster.wait_converged(admin, timeout_s=20)
            ref = check_logs(history, await cluster.committed_logs(admin))
        times.sort()
        median = (times[4] + times[5]) / 2
        _report("failover_10_kills", median_s=round(median, 3), min_s=round(times[0], 3),
                max_s=round(times[-1], 3), all_s=[round(t, 3) for t in times], log_len=len(ref))
        assert times[-1] < FAILOVER_LIMIT_S, times

    with Cluster(str(tmp_path)) as cluster:
        asyncio.run(main(cluster))


def test_sigterm_leader_hands_over_leadership_under_load(tmp_path):
    """A graceful stop of the leader transfers leadership first: writers barely notice, nothing is lost."""
    async def main(cluster: Cluster):
        history = History()
        async with cluster.client() as admin, cluster.client() as probe:
            old = await cluster.wait_leader(admin)
            history.acked[b"warm-up"] = (await probe.append(b"warm-up")).index
            finish = await _load(cluster, history, writers=4)
            await _acks_grow(history, 100)
            t0 = time.monotonic()
            cluster.nodes[old].signal(signal.SIGTERM)
            handover_s = await time_to_first_write(probe, b"probe-after-sigterm", history=history)
            assert cluster.nodes[old].proc.wait(15) == 0
            new = await cluster.wait_leader(admin, exclude=(old,))
            await _acks_grow(history, 100)
            cluster.nodes[old].start()
            await finish()
            await cluster.wait_converged(admin)
            ref = check_logs(history, await cluster.committed_logs(admin))
            handed = f"handing over leadership node={old} to={new}" in cluster.nodes[old].log_text()
            _report("sigterm_leader", first_write_after_sigterm_s=round(handover_s, 3), handed_over=handed,
                    acked=len(history.acked), errors=history.errors, log_len=len(ref),
                    stop_s=round(time.monotonic() - t0, 3))
            assert handed
            assert handover_s < FAILOVER_LIMIT_S

    with Cluster(str(tmp_path)) as cluster:
        asyncio.run(main(cluster))
