"""Loop lag on a real node process: a SIGSTOP is a pause, not a stall (the node handles SIGCONT), and the lag is
in its status."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest

from quorumlog.soak.processes import Cluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def test_a_stopped_node_counts_the_pause_apart_from_its_loop_lag(tmp_path):
    async def lag(cluster, admin):
        return (await cluster.statuses(admin))["n0"].raw["loop_lag"]

    async def main(cluster):
        async with cluster.client(timeout_ms=5_000) as admin:
            await cluster.wait_leader(admin, timeout_s=30)
            deadline = time.monotonic() + 10
            while (await lag(cluster, admin))["samples"] < 20:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.1)
            node = cluster.nodes["n0"]
            node.signal(signal.SIGSTOP)
            await asyncio.sleep(0.8)
            node.signal(signal.SIGCONT)
            deadline = time.monotonic() + 10
            while (doc := await lag(cluster, admin))["paused"] < 1:
                assert time.monotonic() < deadline, doc
                await asyncio.sleep(0.1)
            assert doc["max_ms"] < 700, doc  # the 800 ms stop is not in the lag
            assert doc["p999_ms"] <= doc["max_ms"] and doc["less_cpu_wait"]["max_ms"] <= doc["max_ms"] + 1

    with Cluster(str(tmp_path), n=1) as cluster:
        asyncio.run(main(cluster))
