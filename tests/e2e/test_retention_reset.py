"""With real processes: a follower down while the next leader's retention deletes past its end
is reset to that leader's begin index when it comes back (it used to loop COMPARE -> INCONSISTENT_STATE and
never catch up: on the code before the reset it stays at its old end for the whole 30 s). Retention runs for
real: 64 KiB segments, file_reserved_hours 0, every 100 ms."""

from __future__ import annotations

import asyncio
import time

import pytest

from quorumlog.soak.processes import Cluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

RETENTION_ARGS = ("--max-entry-bytes", str(16 * 1024), "--data-segment-size", str(64 * 1024),
                  "--index-segment-size", str(64 * 1024), "--file-reserved-hours", "0",
                  "--retention-interval-ms", "100")


def test_a_follower_back_after_retention_passed_its_end_is_reset_and_catches_up(tmp_path):
    cluster = Cluster(str(tmp_path), extra_args=RETENTION_ARGS)

    async def main() -> None:
        async with cluster.client(timeout_ms=10_000) as client:
            leader = await cluster.wait_leader(client, timeout_s=30)
            away, successor = [n for n in cluster.nodes if n != leader]
            for i in range(50):
                await client.append_batch([b"before-%04d-%d" % (i, k) + b"." * 1000 for k in range(10)])
            await cluster.wait_converged(client, timeout_s=30)
            away_end = (await cluster.statuses(client))[away].end_index
            cluster.nodes[away].kill9()
            for i in range(300):  # ~3 MB: dozens of 64 KiB segments for retention to delete
                await client.append_batch([b"while-%04d-%d" % (i, k) + b"." * 1000 for k in range(10)])
            # the successor, a follower, deletes below its commit point; the leader keeps what `away` lacks
            deadline = time.monotonic() + 20
            while (await cluster.statuses(client))[successor].begin_index <= away_end + 1:
                assert time.monotonic() < deadline, "retention did not pass the stopped follower's end"
                await asyncio.sleep(0.1)
            assert (await cluster.statuses(client))[leader].begin_index <= away_end + 1
            await client.transfer_leader(successor)
            assert await cluster.wait_leader(client, timeout_s=10) == successor
            begin = (await cluster.statuses(client))[successor].begin_index
            cluster.nodes[away].start()
            st = await cluster.wait_converged(client, timeout_s=30, members=tuple(cluster.nodes))
            assert st[away].begin_index >= begin > away_end + 1
            rid = await client.append(b"after")
            await cluster.wait_converged(client, timeout_s=30, members=tuple(cluster.nodes))
            start = max(s.begin_index for s in (await cluster.statuses(client)).values())
            logs = {nid: [(e.index, e.body) async for e in client.read(start, node=nid)] for nid in cluster.nodes}
        assert logs[away] == logs[successor] == logs[leader]
        assert logs[away][-1] == (rid.index, b"after")
        assert "reset" in cluster.nodes[away].log_text()

    try:
        cluster.start()
        asyncio.run(main())
    finally:
        cluster.stop()
