"""With real processes: 5 nodes, each a bookie, ledger metadata in `_meta`.

- kill -9 of a bookie of the current ensemble under a writer (E=3 W=2 A=2): the writer changes its ensemble
  and carries on, no caller sees an error; a second client then recovers the ledger while the writer is still
  adding: the writer gets LEDGER_FENCED, and every entry acknowledged to it is in the closed ledger, readable,
  with its body, and within last_entry_id;
- 12 writers of one client share requests (ADD_MULTI, in rounds) through a bookie's kill -9, and through a
  SIGSTOPped bookie the writers not on it carry on (a round waits for it at most ROUND_WAIT_S);
- a wiped bookie (its disk lost) comes back in limbo for the ledgers it held, and answers UNKNOWN, never "no
  such entry", for them;
- a bookie's disk past 95%: read-only (placement avoids it, reads go on), and back once space returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from quorumlog.codes import ResponseCode
from quorumlog.errors import LedgerFenced
from quorumlog.ledger.metadata import State
from quorumlog.ledgers import LedgerClient
from quorumlog.server.services.bookie import BOOKIE_DIR
from quorumlog.soak.processes import Cluster, fill_to_last_byte
from quorumlog.wire.ledger import BookieOp, BookieOpRequest, ReadEntry, to_op_request

from .test_meta import _create_meta

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

IN_FLIGHT = 16


class Writer:
    """Adds entries with IN_FLIGHT in flight until stopped or fenced; records what was acknowledged."""

    def __init__(self, w, in_flight: int = IN_FLIGHT) -> None:
        self.w = w
        self.in_flight = in_flight
        self.acked: dict[int, bytes] = {}
        self.errors: list[BaseException] = []
        self.fenced = False
        self.stop = asyncio.Event()
        self.sent = 0

    async def run(self) -> None:
        sem = asyncio.Semaphore(self.in_flight)
        tasks = set()

        async def one(body: bytes) -> None:
            try:
                eid = await self.w.add_entry(body)
                self.acked[eid] = body
            except LedgerFenced:
                self.fenced = True
            except Exception as e:  # noqa: BLE001 - the test asserts there are none
                self.errors.append(e)
            finally:
                sem.release()

        while not self.stop.is_set() and not self.fenced and not self.errors:
            await sem.acquire()
            body = f"entry-{self.sent}".encode() * 4
            self.sent += 1
            t = asyncio.create_task(one(body))
            tasks.add(t)
            t.add_done_callback(tasks.discard)
        await asyncio.gather(*tasks)

    async def acks_grow(self, by: int, timeout_s: float = 20.0) -> None:
        target = len(self.acked) + by
        deadline = time.monotonic() + timeout_s
        while len(self.acked) < target:
            assert not self.errors, self.errors
            assert time.monotonic() < deadline, f"adds stalled at {len(self.acked)} acks"
            await asyncio.sleep(0.01)


def _node_ids(cluster: Cluster) -> list[str]:
    return list(cluster.nodes)


async def _wait_registered(lc: LedgerClient, n: int, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        infos = await lc.bookies()
        if sum(1 for i in infos.values() if i.get("limbo_known")) >= n:
            return
        assert time.monotonic() < deadline, f"bookies never registered: {infos}"
        await asyncio.sleep(0.2)


@contextlib.asynccontextmanager
async def _writer_and_other_client(cluster: Cluster):
    """`_meta` made and the five bookies registered: the writers' client (a bookie silent for 2 s is replaced)
    and a second client, for recoveries."""
    await _create_meta(cluster)
    async with LedgerClient(cluster.peers, bookie_timeout_ms=2_000) as lc, LedgerClient(cluster.peers) as other:
        await _wait_registered(lc, 5)
        yield lc, other


def test_kill_9_a_bookie_under_a_writer_then_recover_while_it_writes(tmp_path):
    cluster = Cluster(str(tmp_path), n=5)

    async def main() -> None:
        async with _writer_and_other_client(cluster) as (lc, other):
            w = await lc.create_ledger(ensemble=3, write_quorum=2, ack_quorum=2)
            first = w.metadata.last_ensemble
            writer = Writer(w)
            task = asyncio.create_task(writer.run())
            await writer.acks_grow(300)
            victim = first[1]
            cluster.nodes[victim].kill9()
            await writer.acks_grow(300)
            md = await lc.describe(w.ledger_id)
            assert len(md.ensembles) >= 2 and victim not in md.last_ensemble, md
            assert md.state is State.OPEN
            assert not writer.errors, writer.errors
            # a second client recovers the ledger while the first still adds
            r = await other.open_ledger(w.ledger_id, recovery=True)
            await asyncio.wait_for(task, 30)
            assert writer.fenced and not writer.errors, writer.errors
            assert r.is_closed and r.metadata.state is State.CLOSED
            last = r.metadata.last_entry_id
            assert max(writer.acked) <= last, (max(writer.acked), last)
            entries = {e.entry_id: e.body async for e in r.read(0, last)}
            assert sorted(entries) == list(range(last + 1))
            lost = [eid for eid, body in writer.acked.items() if entries.get(eid) != body]
            assert not lost, f"acknowledged entries lost or changed: {lost[:10]}"
            # every entry read back is one the writer sent (acked or in flight when fenced)
            assert all(body.startswith(b"entry-") for body in entries.values())
            assert r.metadata.length == sum(len(b) for b in entries.values())
            # the closed ledger never changes: a second recovery keeps it
            again = await lc.open_ledger(w.ledger_id, recovery=True)
            assert again.metadata.last_entry_id == last and again.metadata.version == r.metadata.version
            print("\nE2E ledgers " + json.dumps({"acked": len(writer.acked), "last_entry_id": last,
                                                 "ensembles": [list(s.bookies) for s in md.ensembles],
                                                 "killed": victim}))

    try:
        cluster.start()
        asyncio.run(main())
    finally:
        cluster.stop()


async def _bookie_requests(lc: LedgerClient) -> int:
    return sum(i.get("requests", 0) for i in (await lc.bookies()).values())


async def _one_add_writers(lc: LedgerClient, n: int = 12) -> tuple[list[Writer], list[asyncio.Task]]:
    """n ledgers (E=3 W=2 A=2) of one client, a writer with one add in flight on each, running."""
    ws = [await lc.create_ledger(ensemble=3, write_quorum=2, ack_quorum=2) for _ in range(n)]
    writers = [Writer(w, in_flight=1) for w in ws]
    return writers, [asyncio.create_task(wr.run()) for wr in writers]


async def _stop_and_check_nothing_lost(writers: list[Writer], tasks: list[asyncio.Task], other: LedgerClient,
                                       readers: dict | None = None) -> None:
    """Stop the writers, recover each ledger from `other` (or take its reader from `readers`): every entry
    acknowledged to a writer is there, with its body, and within last_entry_id."""
    for wr in writers:
        wr.stop.set()
    await asyncio.wait_for(asyncio.gather(*tasks), 30)
    assert not any(wr.errors for wr in writers), [wr.errors for wr in writers]
    for wr in writers:
        reader = (readers or {}).get(wr.w.ledger_id) or await other.open_ledger(wr.w.ledger_id, recovery=True)
        last = reader.metadata.last_entry_id
        assert max(wr.acked) <= last, (wr.w.ledger_id, max(wr.acked), last)
        entries = {e.entry_id: e.body async for e in reader.read(0, last)}
        lost = [eid for eid, body in wr.acked.items() if entries.get(eid) != body]
        assert not lost, f"ledger {wr.w.ledger_id}: acknowledged entries lost or changed: {lost[:10]}"


def test_many_writers_share_requests_through_a_bookie_kill_and_one_ledgers_recovery(tmp_path):
    """12 writers of one client, one add in flight each: the adds that go to a bookie in one event-loop
    iteration go in one request (ADD_MULTI), whose answer carries each ledger's own outcome. Then kill -9 a
    bookie (the writers whose ensemble held it change it; the others never notice) and recover one ledger
    from another client (its writer is fenced, the 11 others carry on); nothing acknowledged is lost."""
    cluster = Cluster(str(tmp_path), n=5)

    async def main() -> None:
        async with _writer_and_other_client(cluster) as (lc, other):
            writers, tasks = await _one_add_writers(lc)
            before_requests, before_acks = await _bookie_requests(lc), sum(len(wr.acked) for wr in writers)
            await asyncio.gather(*(wr.acks_grow(100) for wr in writers))
            requests = await _bookie_requests(lc) - before_requests
            adds = (sum(len(wr.acked) for wr in writers) - before_acks) * 2  # (W = 2 bookies per entry)
            # one request per add would make requests >= adds; shared, a request carries several writers' adds
            # (about 3 here: each writer's next add waits for both its bookies, and rounds gather those answers)
            assert requests * 2 < adds, (requests, adds)
            victim = writers[0].w.metadata.last_ensemble[0]
            holders = [wr for wr in writers if victim in wr.w.metadata.last_ensemble]
            cluster.nodes[victim].kill9()
            await asyncio.gather(*(wr.acks_grow(100) for wr in writers))
            for wr in holders:
                assert victim not in (await lc.describe(wr.w.ledger_id)).last_ensemble
            fenced_one = writers[-1]
            r = await other.open_ledger(fenced_one.w.ledger_id, recovery=True)
            await asyncio.wait_for(tasks[-1], 30)
            assert fenced_one.fenced and not fenced_one.errors, fenced_one.errors
            await asyncio.gather(*(wr.acks_grow(50) for wr in writers[:-1]))
            await _stop_and_check_nothing_lost(writers, tasks, other, {fenced_one.w.ledger_id: r})
            assert not any(wr.fenced for wr in writers[:-1])
            print("\nE2E ledgers shared " + json.dumps({"adds_to_bookies": adds, "requests": requests,
                                                        "holders_of_victim": len(holders)}))

    try:
        cluster.start()
        asyncio.run(main())
    finally:
        cluster.stop()


def test_a_hung_bookie_holds_the_other_bookies_adds_of_its_client_a_round_at_a_time(tmp_path):
    """12 writers of one client, one add in flight each; SIGSTOP a bookie. Its request never comes back until
    the client's 2 s bookie timeout, and the client sends adds in rounds: the writers whose ensembles do not
    hold it must keep being acknowledged meanwhile (each round waits at most ROUND_WAIT_S for it), and those
    whose ensembles do change them once the request times out. Then SIGCONT; nothing acknowledged is lost."""
    cluster = Cluster(str(tmp_path), n=5)

    async def main() -> None:
        async with _writer_and_other_client(cluster) as (lc, other):
            writers, tasks = await _one_add_writers(lc)
            await asyncio.gather(*(wr.acks_grow(50) for wr in writers))

            def split(b: str) -> tuple[list[Writer], list[Writer]]:
                holders = [wr for wr in writers if b in wr.w.metadata.last_ensemble]
                return holders, [wr for wr in writers if wr not in holders]
            victim = max(_node_ids(cluster), key=lambda b: min(len(part) for part in split(b)))
            holders, others = split(victim)
            assert holders and others, [wr.w.metadata.last_ensemble for wr in writers]
            cluster.nodes[victim].signal(signal.SIGSTOP)
            try:
                stopped_at = time.monotonic()
                before = {id(wr): len(wr.acked) for wr in others}
                # within 1.5 s, before the 2 s timeout: a client whose rounds waited for every answer would stall
                await asyncio.gather(*(wr.acks_grow(20, timeout_s=1.5) for wr in others))
                waited = time.monotonic() - stopped_at
                gained = min(len(wr.acked) - before[id(wr)] for wr in others)
                await asyncio.gather(*(wr.acks_grow(20) for wr in holders))  # after their ensemble change
                for wr in holders:
                    assert victim not in (await lc.describe(wr.w.ledger_id)).last_ensemble
            finally:
                cluster.nodes[victim].signal(signal.SIGCONT)
            await asyncio.gather(*(wr.acks_grow(20) for wr in writers))
            await _stop_and_check_nothing_lost(writers, tasks, other)
            assert not any(wr.fenced for wr in writers)
            print("\nE2E hung bookie " + json.dumps({"others": len(others), "holders": len(holders),
                                                    "others_20_acks_s": round(waited, 3), "min_gained": gained}))

    try:
        cluster.start()
        asyncio.run(main())
    finally:
        cluster.stop()


def test_a_wiped_bookie_is_in_limbo_for_the_ledgers_it_held(tmp_path):
    cluster = Cluster(str(tmp_path), n=5)

    async def main() -> None:
        await _create_meta(cluster)
        async with LedgerClient(cluster.peers) as lc:
            await _wait_registered(lc, 5)
            w = await lc.create_ledger(ensemble=5, write_quorum=5, ack_quorum=3)
            for i in range(20):
                await w.add_entry(b"x%d" % i)
            await w.close()
            victim = w.metadata.last_ensemble[0]
            node = cluster.nodes[victim]
            node.kill9()
            shutil.rmtree(os.path.join(node.data_dir, "bookie"))  # its bookie disk is lost
            node.start()
            deadline = time.monotonic() + 30
            while True:
                info = await lc.registry.info(victim)
                if info.get("limbo_known"):
                    break
                assert time.monotonic() < deadline, info
                await asyncio.sleep(0.2)
            assert info["limbo"] == 1 and info["ledgers"] == 0
            resp = await lc.registry.call(victim, to_op_request(lc.registry.request_id(),
                                                                ReadEntry(victim, w.ledger_id, 3)))
            assert resp.code == ResponseCode.UNKNOWN  # not NO_SUCH_ENTRY: recovery must not count it absent
            other = await lc.registry.call(victim, BookieOpRequest(lc.registry.request_id(), BookieOp.READ,
                                                                   w.ledger_id + 1000, 0))
            assert other.code == ResponseCode.NO_SUCH_LEDGER  # a ledger it never held is plainly absent
            # the limbo survives a restart (limbo.json was synced before the new instance id was registered)
            node.kill9()
            node.start()
            deadline = time.monotonic() + 30
            while not (info := await lc.registry.info(victim)).get("limbo_known"):
                assert time.monotonic() < deadline, info
                await asyncio.sleep(0.2)
            assert info["limbo"] == 1
            r = await lc.open_ledger(w.ledger_id)
            assert [e.body async for e in r.read()] == [b"x%d" % i for i in range(20)]

    try:
        cluster.start()
        asyncio.run(main())
    finally:
        cluster.stop()


def test_a_full_disk_makes_a_bookie_read_only_and_placement_avoids_it_until_space_returns(tmp_path, tmpfs):
    small_disk = tmpfs("64M")
    cluster = Cluster(str(tmp_path), n=5, data_dirs={"n4": os.path.join(small_disk, "n4")})

    async def main() -> None:
        await _create_meta(cluster)
        async with LedgerClient(cluster.peers) as lc:
            await _wait_registered(lc, 5)
            w = await lc.create_ledger(ensemble=5, write_quorum=5, ack_quorum=5)
            await w.add_entry(b"before")
            await w.close()
            st = os.statvfs(small_disk)
            filler = os.path.join(small_disk, "filler")
            with open(filler, "wb") as f:  # leave ~2% free: past the 95% threshold
                f.write(b"\0" * int(st.f_bavail * st.f_frsize - 0.02 * st.f_blocks * st.f_frsize))
            deadline = time.monotonic() + 10
            while (await lc.registry.info("n4"))["state"] != "read_only":
                assert time.monotonic() < deadline, "n4 never went read-only"
                await asyncio.sleep(0.1)
            for _ in range(5):  # placement leaves the read-only bookie out
                w2 = await lc.create_ledger(ensemble=4, write_quorum=2, ack_quorum=2)
                assert "n4" not in w2.metadata.last_ensemble
                await w2.add_entry(b"y")
                await w2.close()
            r = await lc.open_ledger(w.ledger_id)  # reads go on: n4 still answers its entries
            got = await lc.registry.call("n4", to_op_request(lc.registry.request_id(), ReadEntry("n4", w.ledger_id, 0)))
            assert got.code == ResponseCode.SUCCESS and [e.body async for e in r.read()] == [b"before"]
            os.remove(filler)
            deadline = time.monotonic() + 10
            while (await lc.registry.info("n4"))["state"] != "read_write":
                assert time.monotonic() < deadline, "n4 never went back to read-write"
                await asyncio.sleep(0.1)
            w3 = await lc.create_ledger(ensemble=5, write_quorum=5, ack_quorum=5)  # needs all five again
            assert await w3.add_entry(b"after") == 0

    try:
        cluster.start()
        asyncio.run(main())
    finally:
        cluster.stop()


def test_a_bookie_whose_disk_runs_out_under_a_writer_loses_nothing_and_takes_adds_again_once_space_returns(
        tmp_path, tmpfs):
    """ENOSPC before the bookie's 95% check sees it (the check runs every 250 ms): the adds that hit it fail, the
    writer replaces the bookie and goes on, the bookie turns read-only; once space returns it starts a new
    journal file and entry log and takes adds again. Every acknowledged entry reads back. Only n4's bookie
    directory is on the small disk: a full Raft member's store is the Raft tests' matter
    (test_bad_input.py), not this test's."""
    disk = tmpfs("64M")
    os.makedirs(tmp_path / "n4")
    os.symlink(disk, tmp_path / "n4" / BOOKIE_DIR)
    cluster = Cluster(str(tmp_path), n=5)

    async def main() -> None:
        await _create_meta(cluster)
        async with LedgerClient(cluster.peers) as lc:
            await _wait_registered(lc, 5)
            w = await lc.create_ledger(ensemble=4, write_quorum=4, ack_quorum=3)
            while "n4" not in w.metadata.last_ensemble:  # (random placement: 4 of 5 hold it)
                await w.close()
                w = await lc.create_ledger(ensemble=4, write_quorum=4, ack_quorum=3)
            acked: list[int] = []
            stop = asyncio.Event()

            async def writer() -> None:
                while not stop.is_set():
                    acked.append(await w.add_entry(b"%06d" % len(acked) * 1024))

            task = asyncio.create_task(writer())
            await _until(lambda: len(acked) >= 50, 10, "the writer never got going")
            filler = os.path.join(disk, "filler")
            fill_to_last_byte(filler)  # while the writer writes
            await _until(lambda: "n4" not in w.metadata.last_ensemble, 15,
                         "the writer never replaced the full bookie")
            at_change = len(acked)
            await _until(lambda: len(acked) >= at_change + 50, 15, "the writer stopped")
            info = await lc.registry.info("n4")
            # (mostly a write hit ENOSPC first; the 95% check may also win the race with the writer's next write,
            # and then no write failed: tests/bookie/test_disk_errors.py takes the ENOSPC path every time)
            assert info["state"] == "read_only", info
            assert info["disk_error"] is None or "No space left" in info["disk_error"], info
            os.remove(filler)

            async def writable() -> bool:
                return (await lc.registry.info("n4"))["state"] == "read_write"
            await _until(writable, 15, "n4 never took writes again")
            assert (await lc.registry.info("n4"))["disk_error"] is None
            w5 = await lc.create_ledger(ensemble=5, write_quorum=5, ack_quorum=5)  # needs n4's journal again
            assert await w5.add_entry(b"after") == 0
            await w5.close()
            stop.set()
            await task
            last = await w.close()
            assert last == acked[-1] and acked == list(range(len(acked)))
            r = await lc.open_ledger(w.ledger_id)
            assert [e.body async for e in r.read()] == [b"%06d" % i * 1024 for i in acked]

    try:
        cluster.start()
        asyncio.run(main())
    finally:
        cluster.stop()


AUTO_RECOVERY_ARGS = ("--auditor-period-ms", "300", "--lost-bookie-recovery-delay-ms", "1500",
                      "--open-ledger-rereplication-grace-period-ms", "3000")


async def _until(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while True:
        result = predicate()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return result
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.2)


def _cli(cluster: Cluster, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "quorumlog.cli", *args, "--peers", cluster.peers, "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_auto_recovery_re_replicates_a_lost_bookie_and_fences_an_idle_open_ledger(tmp_path):
    """A bookie killed for good: the auditor (on the `_meta` leader) marks every ledger with a fragment on it,
    the workers copy those fragments to other bookies and rewrite the metadata, `ledger underreplicated`
    empties, and every entry is again on W live bookies. An OPEN ledger whose writer went idle is fenced and
    closed after the grace period (its acknowledged entries kept); a writer still adding closes its ledger
    over the workers' metadata. Then `bookie decommission` drains a live bookie the same way."""
    cluster = Cluster(str(tmp_path), n=5, extra_args=AUTO_RECOVERY_ARGS)

    async def main() -> None:
        await _create_meta(cluster)
        async with LedgerClient(cluster.peers, bookie_timeout_ms=2_000) as lc:
            await _wait_registered(lc, 5)
            closed = []
            for k in range(4):
                w = await lc.create_ledger(ensemble=3, write_quorum=2, ack_quorum=2)
                for i in range(200):
                    await w.add_entry(b"c%d-%d" % (k, i))
                await w.close()
                closed.append(w.ledger_id)
            # an OPEN ledger left idle on the victim: it is fenced after the grace period
            idle = await lc.create_ledger(ensemble=3, write_quorum=2, ack_quorum=2)
            idle_acked = [await idle.add_entry(b"idle-%d" % i) for i in range(50)]
            victim = idle.metadata.last_ensemble[0]
            # and a ledger its writer keeps adding to: the writer changes its own ensemble, the worker copies
            # the fragment before it, and the writer's close lands over the worker's metadata
            while victim not in (active := await lc.create_ledger(ensemble=3, write_quorum=2,
                                                                  ack_quorum=2)).metadata.last_ensemble:
                await active.close()
            writer = Writer(active)
            writing = asyncio.create_task(writer.run())
            await writer.acks_grow(200)
            cluster.nodes[victim].kill9()
            t0 = time.monotonic()

            async def marked():
                return [m for m in await lc.underreplicated() if victim in m["lost"]]
            await _until(marked, 20, "the auditor never marked the lost bookie's ledgers")
            t_marked = time.monotonic() - t0

            async def drained():
                mds = await lc.list_ledgers()
                names = [md.ledger_id for md in mds if any(victim in s.bookies for s in md.ensembles)]
                return not names and not await lc.underreplicated()
            await _until(drained, 60, "auto-recovery never restored full replication")
            t_done = time.monotonic() - t0
            writer.stop.set()
            await asyncio.wait_for(writing, 30)
            assert not writer.errors and not writer.fenced, writer.errors
            await active.close()
            md_active = await lc.describe(active.ledger_id)
            assert md_active.state is State.CLOSED and md_active.last_entry_id == max(writer.acked)
            assert all(victim not in s.bookies for s in md_active.ensembles)
            r = await lc.open_ledger(active.ledger_id)
            assert {e.entry_id: e.body async for e in r.read()} == writer.acked
            assert _cli(cluster, "ledger", "underreplicated")["ledgers"] == []
            md_idle = await lc.describe(idle.ledger_id)
            assert md_idle.state is State.CLOSED and md_idle.last_entry_id >= idle_acked[-1], md_idle
            with pytest.raises(LedgerFenced):
                await idle.add_entry(b"too late")
            # every entry is on each bookie of its write set (read straight from each of them)
            for lid in closed + [idle.ledger_id]:
                md = await lc.describe(lid)
                for seg_i, seg in enumerate(md.ensembles):
                    end = md.ensembles[seg_i + 1].first_entry_id - 1 if seg_i + 1 < len(md.ensembles) \
                        else md.last_entry_id
                    for eid in range(seg.first_entry_id, end + 1):
                        for pos in range(md.write_quorum):
                            b = seg.bookies[(eid + pos) % md.ensemble_size]
                            resp = await lc.registry.call(b, to_op_request(lc.registry.request_id(),
                                                                           ReadEntry(b, lid, eid)))
                            assert resp.code == ResponseCode.SUCCESS, (lid, eid, b, resp.code)
                r = await lc.open_ledger(lid)
                bodies = [e.body async for e in r.read()]
                expected_prefix = b"idle-" if lid == idle.ledger_id else b"c%d-" % closed.index(lid)
                assert bodies[:50] and all(b.startswith(expected_prefix) for b in bodies)
            print("\nE2E auto-recovery " + json.dumps({"victim": victim, "marked_s": round(t_marked, 2),
                                                       "replicated_s": round(t_done, 2)}))

            # decommission a live bookie: drained the same way, and new ledgers avoid it
            live = [b for b in cluster.nodes if b != victim]
            target = [b for b in live if await lc.ledgers_on(b)][0]
            doc = _cli(cluster, "bookie", "decommission", "--id", target, "--wait-timeout-s", "60")
            assert doc["ledgers_remaining"] == [] and not await lc.ledgers_on(target)
            w = await lc.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2)
            assert target not in w.metadata.last_ensemble and victim not in w.metadata.last_ensemble
            for lid in closed:
                r = await lc.open_ledger(lid)
                assert len([e async for e in r.read()]) == 200

    try:
        cluster.start()
        asyncio.run(main())
    finally:
        cluster.stop()
