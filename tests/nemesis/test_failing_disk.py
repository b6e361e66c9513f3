"""A disk that starts failing under the leader (every write and fsync under its data dir returns EIO, through
the LD_PRELOAD shim quorumlog/soak/faildisk.c): within a bounded time another node leads and acknowledges
writes, the failed node neither leads nor acknowledges, and after the disk heals and the node restarts no
acknowledged entry is lost (the soak's checker judges the whole history)."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

import quorumlog
from quorumlog.client import Client
from quorumlog.soak import checker, faildisk
from quorumlog.soak.checker import OK, UNKNOWN, Op
from quorumlog.soak.processes import Cluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

FAILOVER_BOUND_S = 5.0  # election timeouts are ~1 s; the hand-over needs less


@pytest.fixture(scope="module")
def shim() -> str:
    try:
        return faildisk.build()
    except faildisk.NoCompiler as e:
        pytest.skip(f"cannot inject a failing disk: {e}")


def test_shim_fails_writes_and_fsyncs_under_the_dir_only_while_triggered(tmp_path, shim):
    import subprocess
    import sys
    data, other = tmp_path / "data", tmp_path / "other"
    data.mkdir()
    other.mkdir()
    trigger = tmp_path / "trigger"
    code = f"""
import os, time
def attempt(path):
    fd = os.open(path, os.O_CREAT | os.O_RDWR)
    out = []
    for op in (lambda: os.pwrite(fd, b"x", 0), lambda: os.pwritev(fd, [b"a", b"b"], 0), lambda: os.write(fd, b"y"),
               lambda: os.fdatasync(fd), lambda: os.fsync(fd)):
        try:
            op(); out.append("ok")
        except OSError as e:
            out.append(e.errno)
    os.close(fd)
    return out
print(attempt({str(data / 'f')!r}), attempt({str(other / 'f')!r}))
open({str(trigger)!r}, "w").close(); time.sleep(0.05)
print(attempt({str(data / 'f')!r}), attempt({str(other / 'f')!r}))
os.unlink({str(trigger)!r}); time.sleep(0.05)
print(attempt({str(data / 'f')!r}))
"""
    env = dict(os.environ, **faildisk.failing_disk_env(str(data), str(trigger), shim))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    ok5, eio5 = str(["ok"] * 5), str([5] * 5)
    assert r.stdout.splitlines() == [f"{ok5} {ok5}", f"{eio5} {ok5}", ok5]


async def _writer(client: Client, name: str, history: list[Op], stop: asyncio.Event) -> None:
    i = 0
    while not stop.is_set():
        value = f"{name}-{i:06d}".encode()
        i += 1
        t0 = time.monotonic()
        try:
            r = await client.append(value)
        except quorumlog.QuorumLogError:
            history.append(Op(name, value, t0, time.monotonic(), UNKNOWN))
            await asyncio.sleep(0.01)
            continue
        history.append(Op(name, value, t0, time.monotonic(), OK, r.index))


def test_leader_with_failing_disk_hands_over_and_loses_nothing(tmp_path, shim):
    cluster = Cluster(str(tmp_path))
    triggers = {}
    for nid, node in cluster.nodes.items():
        triggers[nid] = str(tmp_path / f"failing-disk-{nid}")
        node.env = {**node.env, **faildisk.failing_disk_env(node.data_dir, triggers[nid], shim)}

    async def main() -> None:
        history: list[Op] = []
        stop = asyncio.Event()
        async with cluster.client(timeout_ms=10_000) as admin, cluster.client(timeout_ms=4_000) as client:
            old = await cluster.wait_leader(admin, timeout_s=30)
            writers = [asyncio.create_task(_writer(client, f"w{k}", history, stop)) for k in range(3)]
            await asyncio.sleep(1.0)
            assert sum(op.outcome == OK for op in history) > 10
            t_fault = time.monotonic()
            open(triggers[old], "w").close()
            # another node leads and acknowledges writes within the bound
            new = await cluster.wait_leader(admin, timeout_s=FAILOVER_BOUND_S, exclude=(old,))
            while not any(op.outcome == OK and op.invoke_s > t_fault + 0.2 for op in history):
                assert time.monotonic() - t_fault < FAILOVER_BOUND_S, "no acknowledged write after the failure"
                await asyncio.sleep(0.02)
            failover_s = time.monotonic() - t_fault
            # the failed node does not lead again while its disk fails, and acknowledges nothing
            old_only = Client(cluster.peers_without(*[n for n in cluster.nodes if n != old]), timeout_ms=1_500)
            try:
                with pytest.raises((quorumlog.QuorumLogError, OSError)):
                    await old_only.append(b"to-the-failed-node")
            finally:
                await old_only.close()
            end = time.monotonic() + 2.0
            while time.monotonic() < end:
                st = await cluster.statuses(admin)
                assert st[old].role != "leader", f"{old} leads again with a failing disk"
                await asyncio.sleep(0.1)
            assert await cluster.wait_leader(admin, timeout_s=5, exclude=(old,)) == new
            # heal: the disk works again, and the node comes back by a restart (EIO is final in-process)
            os.unlink(triggers[old])
            exited = not cluster.nodes[old].alive
            cluster.nodes[old].kill9()
            cluster.nodes[old].start()
            await asyncio.sleep(1.0)
            stop.set()
            await asyncio.gather(*writers)
            await cluster.wait_converged(admin, timeout_s=30, members=tuple(cluster.nodes))
            logs = await cluster.committed_logs(admin, tuple(cluster.nodes))
        log_text = cluster.nodes[old].log_text()
        assert "DISK_ERROR" in log_text
        violations = checker.check(history, {nid: [(e.index, e.body) for e in es] for nid, es in logs.items()})
        assert violations == [], violations
        acked_after = [op for op in history if op.outcome == OK and op.invoke_s > t_fault]
        assert len(acked_after) > 10
        print(f"\nFAILING-DISK failover_s={failover_s:.2f} old={old} new={new} old_exited={exited} "
              f"ops={checker.summarize(history)}")

    try:
        cluster.start()
        asyncio.run(main())
    finally:
        cluster.stop()


def test_follower_with_failing_disk_fail_stops_and_loses_nothing(tmp_path, shim):
    """A follower whose disk returns EIO while no election happens used to stay up refusing every
    push until a term change or a restart: invisible, and one replica short. It must fail-stop (exit 1 with
    the reason in its log) while the leader and the other follower go on acknowledging; after the disk heals
    and the node restarts it converges, and no acknowledged entry is lost."""
    cluster = Cluster(str(tmp_path))
    triggers = {}
    for nid, node in cluster.nodes.items():
        triggers[nid] = str(tmp_path / f"failing-disk-{nid}")
        node.env = {**node.env, **faildisk.failing_disk_env(node.data_dir, triggers[nid], shim)}

    async def main() -> None:
        history: list[Op] = []
        stop = asyncio.Event()
        async with cluster.client(timeout_ms=10_000) as admin, cluster.client(timeout_ms=4_000) as client:
            leader = await cluster.wait_leader(admin, timeout_s=30)
            follower = next(n for n in cluster.nodes if n != leader)
            writers = [asyncio.create_task(_writer(client, f"w{k}", history, stop)) for k in range(3)]
            await asyncio.sleep(1.0)
            t_fault = time.monotonic()
            open(triggers[follower], "w").close()
            while cluster.nodes[follower].alive:
                assert time.monotonic() - t_fault < FAILOVER_BOUND_S, f"{follower} still up with a failing disk"
                await asyncio.sleep(0.02)
            exit_code = cluster.nodes[follower].proc.returncode
            stopped_s = time.monotonic() - t_fault
            await asyncio.sleep(1.0)
            assert await cluster.wait_leader(admin, timeout_s=5, exclude=(follower,)) == leader  # no election
            acked_after = [op for op in history if op.outcome == OK and op.invoke_s > t_fault]
            assert len(acked_after) > 10
            os.unlink(triggers[follower])
            cluster.nodes[follower].start()
            await asyncio.sleep(1.0)
            stop.set()
            await asyncio.gather(*writers)
            await cluster.wait_converged(admin, timeout_s=30, members=tuple(cluster.nodes))
            logs = await cluster.committed_logs(admin, tuple(cluster.nodes))
        assert exit_code == 1
        assert "fail-stop" in cluster.nodes[follower].log_text() and "DISK_ERROR" in cluster.nodes[follower].log_text()
        violations = checker.check(history, {nid: [(e.index, e.body) for e in es] for nid, es in logs.items()})
        assert violations == [], violations
        print(f"\nFAILING-DISK follower={follower} stopped_s={stopped_s:.2f} ops={checker.summarize(history)}")

    try:
        cluster.start()
        asyncio.run(main())
    finally:
        cluster.stop()
