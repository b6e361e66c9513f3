"""A kill -9 of the node whose door the RocketMQ clients use, while 4 FIFO producers and 2 consumers run (the real
Python client): every acknowledged send is delivered, in order per message group. A cluster of its own: the
test kills one of its nodes."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import defaultdict

import pytest
from rocketmq import FilterExpression, Producer, SimpleConsumer, TransactionChecker, TransactionResolution

import quorumlog
from quorumlog.spark.local import LocalCluster

from .test_rocketmq_e2e import _config, _message, clients  # noqa: F401 - (clients: a fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


def _clients_door_node(cluster: LocalCluster) -> str:
    """The node whose door a client uses first: it sorts the addresses as "host:port" strings."""
    doors = cluster.door_endpoints("rocketmq").split(",")
    return cluster.doc["nodes"][doors.index(min(doors))]["id"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster.up(tmp_path_factory.mktemp("rmqha"), doors=("rocketmq",))
    try:
        async def setup():
            from quorumlog.doors.rocketmq import metadata
            async with quorumlog.TopicAdmin(c.peers, timeout_ms=20_000) as admin, \
                    quorumlog.Client(c.peers, group="_meta", timeout_ms=20_000) as meta:
                await admin.create("ha", 4)
                await admin.create("ha-delay", 2)
                await admin.create("ha-tx", 2)
                await meta.kv_put(metadata.topic_type_key("ha-delay"), metadata.encode_topic_type("DELAY"))
                await meta.kv_put(metadata.topic_type_key("ha-tx"), metadata.encode_topic_type("TRANSACTION"))
                await meta.kv_put(metadata.topic_type_key("ha"), metadata.encode_topic_type("FIFO"))
                await meta.kv_put(metadata.group_key("cg-ha"), metadata.GroupPolicy(fifo=True).encode())
                while len(await meta.kv_list("doors/rocketmq/")) < 3:  # every door recorded its address
                    await asyncio.sleep(0.1)

        asyncio.run(setup())
        yield c
    finally:
        c.down()


def test_kill_9_of_the_clients_door_loses_no_acknowledged_message_and_keeps_fifo_order(cluster, clients):
    """The clients' channel runs over every door's address and uses the first as the client sorts them (as
    strings): that door's node is killed while 4 producers and 2 consumers run. Every acknowledged send is
    delivered; per message group, messages arrive in order (first deliveries; a redelivery after the kill may
    repeat some). A delayed message and a half message sent before the kill are delivered after it, when due and
    once committed through the next door."""
    cfg = _config(cluster)

    class Committed(TransactionChecker):
        def check(self, message):  # (asked only if the commit below came late: it is committed either way)
            return TransactionResolution.COMMIT

    side = clients(Producer(cfg, ("ha-delay", "ha-tx"), Committed()))
    side.send(_message("ha-delay", "due", deliver_s=int(time.time()) + 6))
    transaction = side.begin_transaction()
    side.send(_message("ha-tx", "half"), transaction)
    producers = [clients(Producer(cfg, ("ha",))) for _ in range(4)]
    consumers = [clients(SimpleConsumer(cfg, "cg-ha", {"ha": FilterExpression()}, await_duration=2))
                 for _ in range(2)]
    acked: dict[str, list[int]] = defaultdict(list)
    seen: dict[str, list[int]] = defaultdict(list)
    lock = threading.Lock()
    stop_producing = threading.Event()
    stop_consuming = threading.Event()

    def produce(p: Producer, t: int) -> None:
        i = 0
        while not stop_producing.is_set():
            for g in range(2):
                group = f"h{t}-{g}"
                try:
                    p.send(_message("ha", f"{group}:{i}", group=group))
                except Exception:  # noqa: BLE001 - not acknowledged: the next one goes on (order kept)
                    continue
                with lock:
                    acked[group].append(i)
            i += 1

    def consume(c: SimpleConsumer) -> None:
        while not stop_consuming.is_set():
            try:
                batch = c.receive(32, 15)
            except Exception:  # noqa: BLE001 - failover
                time.sleep(0.2)
                continue
            for m in batch:
                group, i = m.body.decode().split(":")
                with lock:
                    seen[group].append(int(i))
                try:
                    c.ack(m)
                except Exception:  # noqa: BLE001 - a handle of the dead door: redelivered by the next one
                    pass

    threads = [threading.Thread(target=produce, args=(p, t)) for t, p in enumerate(producers)]
    threads += [threading.Thread(target=consume, args=(c,)) for c in consumers]
    for th in threads:
        th.start()
    try:
        time.sleep(3)
        with lock:
            before = sum(map(len, acked.values()))
        cluster.kill(_clients_door_node(cluster))
        commit_by = time.monotonic() + 30
        while True:  # (the first tries may meet the dead door's channel)
            try:
                transaction.commit()
                break
            except Exception:  # noqa: BLE001
                assert time.monotonic() < commit_by, "EndTransaction never went through the other doors"
                time.sleep(0.3)
        time.sleep(6)
        stop_producing.set()
        for th in threads[:4]:
            th.join(30)

        def delivered_all() -> bool:
            with lock:
                return all(set(v) <= set(seen[g]) for g, v in acked.items())

        deadline = time.monotonic() + 60
        while not delivered_all() and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        stop_producing.set()
        stop_consuming.set()
        for th in threads:
            th.join(30)
    with lock:
        total = sum(map(len, acked.values()))
        assert before > 0 and total > before, (before, total)  # sends went on after the kill
        for g, sent in acked.items():
            assert set(sent) <= set(seen[g]), (g, sorted(set(sent) - set(seen[g])))
            first = list(dict.fromkeys(seen[g]))
            assert first == sorted(first), (g, seen[g])
    late = clients(SimpleConsumer(cfg, "cg-ha-late", {"ha-delay": FilterExpression(), "ha-tx": FilterExpression()},
                                  await_duration=2))
    got = set()
    deadline = time.monotonic() + 30
    while got != {b"due", b"half"} and time.monotonic() < deadline:
        try:
            for m in late.receive(8, 15):
                got.add(m.body)
                late.ack(m)
        except Exception:  # noqa: BLE001
            time.sleep(0.2)
    assert got == {b"due", b"half"}
