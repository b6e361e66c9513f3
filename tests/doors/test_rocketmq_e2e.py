"""The RocketMQ door with the real RocketMQ 5 Python client (rocketmq-python-client, its public API only) against
one 3-node cluster for the module: normal, tagged, delayed, transactional and FIFO messages, SimpleConsumer and
PushConsumer, redelivery and the dead-letter queue, bad input. (A node killed under load:
test_rocketmq_failover.py, on a cluster of its own.)"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections import defaultdict

import grpc
import pytest
from rocketmq import (ClientConfiguration, ConsumeResult, Credentials, FilterExpression, Message, MessageListener,
                      Producer, PushConsumer, SimpleConsumer, TransactionChecker, TransactionResolution)
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc

import quorumlog
from quorumlog.spark.local import LocalCluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

TOPICS = [("normal", 4, "NORMAL"), ("retry", 2, "NORMAL"), ("delay", 2, "DELAY"), ("tx", 2, "TRANSACTION"),
          ("fifo", 4, "FIFO"), ("push", 2, "NORMAL"), ("bad", 1, "NORMAL"), ("fifo-push", 2, "FIFO")]


def _cli(cluster: LocalCluster, *args: str) -> dict:
    r = subprocess.run([sys.executable, "-m", "quorumlog.cli", *args, "--peers", cluster.peers, "--json"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster.up(tmp_path_factory.mktemp("rmq"), doors=("rocketmq",))
    try:
        assert _cli(c, "topic", "create", "normal", "--queues", "4")["message_type"] == "NORMAL"
        _cli(c, "consumer-group", "create", "cg-retry", "--max-attempts", "3")

        async def setup():
            from quorumlog.doors.rocketmq import metadata
            async with quorumlog.TopicAdmin(c.peers, timeout_ms=20_000) as admin, \
                    quorumlog.Client(c.peers, group="_meta", timeout_ms=20_000) as meta:
                for name, queues, mtype in TOPICS[1:]:
                    await admin.create(name, queues)
                    await meta.kv_put(metadata.topic_type_key(name), metadata.encode_topic_type(mtype))
                for name, policy in [("cg-fifo", metadata.GroupPolicy(fifo=True)),
                                     ("cg-push", metadata.GroupPolicy(backoff_s=(1,))),
                                     ("cg-fifo-push", metadata.GroupPolicy(fifo=True, max_attempts=2,
                                                                           backoff_s=(1,)))]:
                    await meta.kv_put(metadata.group_key(name), policy.encode())
                while len(await meta.kv_list("doors/rocketmq/")) < 3:  # every door recorded its address
                    await asyncio.sleep(0.1)

        asyncio.run(setup())
        yield c
    finally:
        c.down()


def _config(cluster: LocalCluster) -> ClientConfiguration:
    return ClientConfiguration(cluster.door_endpoints("rocketmq").replace(",", ";"), Credentials())


def _message(topic: str, body: str, *, tag: str = "", keys: str = "", group: str = "", deliver_s: int = 0,
             properties: dict | None = None) -> Message:
    m = Message()
    m.topic = topic
    m.body = body.encode()
    if tag:
        m.tag = tag
    if keys:
        m.keys = keys
    if group:
        m.message_group = group
    if deliver_s:
        m.delivery_timestamp = deliver_s
    for k, v in (properties or {}).items():
        m.add_property(k, v)
    return m


class _Clients:
    """Started clients, shut down at the end of the test whatever happens."""

    def __init__(self) -> None:
        self.started = []

    def __call__(self, client):
        client.startup()
        self.started.append(client)
        return client

    def shutdown(self) -> None:
        for c in reversed(self.started):
            try:
                c.shutdown()
            except Exception:  # noqa: BLE001 - a client of a dead node may fail to say goodbye
                pass


@pytest.fixture
def clients():
    c = _Clients()
    yield c
    c.shutdown()


def _receive(consumer: SimpleConsumer, want: int, timeout_s: float, *, invisible_s: int = 15,
             ack: bool = True) -> list:
    got = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        try:
            batch = consumer.receive(32, invisible_s)
        except Exception:  # noqa: BLE001 - a failover: the client raises, the next receive goes on
            time.sleep(0.2)
            continue
        for m in batch:
            got.append(m)
            if ack:
                consumer.ack(m)
    return got


def test_send_receive_ack_with_tags_keys_and_filters(cluster, clients):
    cfg = _config(cluster)
    producer = clients(Producer(cfg, ("normal",)))
    receipts = {}
    for i in range(10):
        r = producer.send(_message("normal", f"m{i}", tag="a" if i % 2 else "b", keys=f"k{i}",
                                   properties={"n": str(i)}))
        receipts[f"m{i}"] = r.message_id
    every = clients(SimpleConsumer(cfg, "cg-all", {"normal": FilterExpression()}, await_duration=2))
    got = _receive(every, 10, 30)
    assert sorted(m.body.decode() for m in got) == sorted(receipts)
    for m in got:
        body = m.body.decode()
        i = int(body[1:])
        assert m.message_id == receipts[body] and m.tag == ("a" if i % 2 else "b") and m.keys == {f"k{i}"}
        assert m.properties == {"n": str(i)} and m.delivery_attempt == 1 and m.topic == "normal"
    assert every.receive(32, 15) == []  # all acked: nothing comes again

    only_a = clients(SimpleConsumer(cfg, "cg-a", {"normal": FilterExpression("a")}, await_duration=2))
    got_a = _receive(only_a, 5, 30)
    assert sorted(m.body.decode() for m in got_a) == [f"m{i}" for i in (1, 3, 5, 7, 9)]
    assert only_a.receive(32, 15) == []  # the b's were filtered out (and acked for the group)

    async def read_raw():  # the same messages through the own client, with RocketMQ's property names
        async with quorumlog.TopicClient(cluster.peers) as tc:
            out = []
            for q in range(4):
                out += (await tc.pull("normal", q, 0)).messages
            return out

    raw = asyncio.run(read_raw())
    assert sorted(m.properties["UNIQ_KEY"] for m in raw) == sorted(receipts.values())
    assert {m.key for m in raw} == {f"k{i}" for i in range(10)} and {m.tags for m in raw} == {"a", "b"}
    groups = _cli(cluster, "consumer-group", "describe", "cg-all")
    assert sum(r["lag"] for r in groups["queues"] if r["topic"] == "normal") == 0  # progress is in `_meta`
    assert groups["retry_policy"]["default"] and groups["retry_policy"]["max_attempts"] == 16


def test_invisible_time_redelivers_with_the_attempt_counted_then_the_dead_letter_queue(cluster, clients):
    cfg = _config(cluster)
    producer = clients(Producer(cfg, ("retry",)))
    sent = producer.send(_message("retry", "poison"))
    consumer = clients(SimpleConsumer(cfg, "cg-retry", {"retry": FilterExpression()}, await_duration=15))
    first = _receive(consumer, 1, 20, invisible_s=10, ack=False)
    assert [(m.message_id, m.delivery_attempt) for m in first] == [(sent.message_id, 1)]
    t0 = time.monotonic()
    second = _receive(consumer, 1, 20, invisible_s=10, ack=False)  # not acked: back after its invisible time
    assert [(m.message_id, m.delivery_attempt) for m in second] == [(sent.message_id, 2)]
    assert time.monotonic() - t0 > 5
    with pytest.raises(Exception) as stale:  # the first delivery's handle acks nothing now
        consumer.ack(first[0])
    assert getattr(stale.value, "code", None) == pb.INVALID_RECEIPT_HANDLE
    consumer.change_invisible_duration(second[0], 0)  # a nack: at once again
    third = _receive(consumer, 1, 20, invisible_s=10, ack=False)
    assert [m.delivery_attempt for m in third] == [3]
    consumer.change_invisible_duration(third[0], 0)  # out of attempts (3): to %DLQ%cg-retry
    consumer.await_duration = 2
    assert _receive(consumer, 1, 3, ack=False) == []
    dlq = clients(SimpleConsumer(cfg, "cg-dlq-reader", {"%DLQ%cg-retry": FilterExpression()}, await_duration=5))
    dead = _receive(dlq, 1, 30)
    assert [(m.message_id, m.body) for m in dead] == [(sent.message_id, b"poison")]


def test_a_delayed_message_is_held_until_its_time(cluster, clients):
    cfg = _config(cluster)
    producer = clients(Producer(cfg, ("delay",)))
    deliver_s = int(time.time()) + 4
    producer.send(_message("delay", "later", deliver_s=deliver_s))
    with pytest.raises(Exception) as wrong:  # a DELAY topic takes no normal message (the client checks)
        producer.send(_message("delay", "now"))
    assert "accept" in str(wrong.value)
    consumer = clients(SimpleConsumer(cfg, "cg-delay", {"delay": FilterExpression()}, await_duration=10))
    got = _receive(consumer, 1, 20)
    assert time.time() >= deliver_s - 0.05
    assert [m.body for m in got] == [b"later"] and got[0].delivery_timestamp == deliver_s * 1000


def test_transactions_commit_rollback_and_check_back(cluster, clients):
    cfg = _config(cluster)
    asked = []

    class Checker(TransactionChecker):
        def check(self, message):
            asked.append(message.body)
            return TransactionResolution.COMMIT

    producer = clients(Producer(cfg, ("tx",), Checker()))
    for body in ("commit-me", "rollback-me", "ask-me"):
        t = producer.begin_transaction()
        producer.send(_message("tx", body), t)
        if body == "commit-me":
            t.commit()
        elif body == "rollback-me":
            t.rollback()
    deadline = time.monotonic() + 20  # no consumer yet: the door that stored it checks back after 6 s
    while not asked and time.monotonic() < deadline:
        time.sleep(0.1)
    assert asked == [b"ask-me"]
    consumer = clients(SimpleConsumer(cfg, "cg-tx", {"tx": FilterExpression()}, await_duration=5))
    got = _receive(consumer, 2, 15)
    assert sorted(m.body for m in got) == [b"ask-me", b"commit-me"]  # the checker committed; one rolled back
    assert _receive(consumer, 1, 3) == []  # never the rolled-back one


def test_fifo_order_per_message_group_under_four_producers(cluster, clients):
    cfg = _config(cluster)
    producers = [clients(Producer(cfg, ("fifo",))) for _ in range(4)]
    per_group = 15

    def produce(p: Producer, t: int) -> None:
        for i in range(per_group):
            for g in range(3):
                p.send(_message("fifo", f"{t}-{g}:{i}", group=f"g{t}-{g}"))

    threads = [threading.Thread(target=produce, args=(p, t)) for t, p in enumerate(producers)]
    for th in threads:
        th.start()
    consumer = clients(SimpleConsumer(cfg, "cg-fifo", {"fifo": FilterExpression()}, await_duration=2))
    seen = defaultdict(list)
    deadline = time.monotonic() + 60
    total = 4 * 3 * per_group
    while sum(map(len, seen.values())) < total and time.monotonic() < deadline:
        batch = consumer.receive(32, 15)
        assert len({m.message_group for m in batch}) == len(batch)  # one in flight per message group
        for m in batch:
            seen[m.message_group].append(int(m.body.decode().split(":")[1]))
            consumer.ack(m)
    for th in threads:
        th.join()
    assert len(seen) == 12 and all(v == list(range(per_group)) for v in seen.values()), dict(seen)


def test_push_consumer_consumes_and_retries_with_backoff(cluster, clients):
    cfg = _config(cluster)
    producer = clients(Producer(cfg, ("push",)))
    for i in range(20):
        producer.send(_message("push", f"p{i}"))
    consumed = defaultdict(list)
    lock = threading.Lock()
    done = threading.Event()

    class Listener(MessageListener):
        def consume(self, message):
            body = message.body.decode()
            with lock:
                consumed[body].append(message.delivery_attempt)
                if len(consumed) == 20 and len(consumed["p7"]) == 2:
                    done.set()
            return ConsumeResult.FAILURE if body == "p7" and message.delivery_attempt == 1 else ConsumeResult.SUCCESS

    clients(PushConsumer(cfg, "cg-push", Listener(), {"push": FilterExpression()}))
    assert done.wait(40), dict(consumed)
    assert consumed["p7"] == [1, 2]  # failed once: back after the group's 1 s backoff, attempt 2


def test_fifo_push_consumer_keeps_group_order_and_forwards_a_failing_message_to_the_dlq(cluster, clients):
    """A FIFO push consumer retries a failing message in place (the group's 2 attempts, 1 s apart), then
    forwards it to %DLQ%<group> (ForwardMessageToDeadLetterQueue) and goes on with its group, in order."""
    cfg = _config(cluster)
    producer = clients(Producer(cfg, ("fifo-push",)))
    for i in range(5):
        for g in ("a", "b"):
            producer.send(_message("fifo-push", f"{g}:{i}", group=g))
    seen = defaultdict(list)
    lock = threading.Lock()
    done = threading.Event()

    class Listener(MessageListener):
        def consume(self, message):
            g, i = message.body.decode().split(":")
            with lock:
                seen[g].append(int(i))
                if len(seen["a"]) == 6 and len(seen["b"]) == 5:
                    done.set()
            return ConsumeResult.FAILURE if (g, i) == ("a", "2") else ConsumeResult.SUCCESS

    clients(PushConsumer(cfg, "cg-fifo-push", Listener(), {"fifo-push": FilterExpression()}))
    assert done.wait(40), dict(seen)
    assert seen["a"] == [0, 1, 2, 2, 3, 4] and seen["b"] == [0, 1, 2, 3, 4]
    dlq = clients(SimpleConsumer(cfg, "cg-fifo-dlq", {"%DLQ%cg-fifo-push": FilterExpression()}, await_duration=3))
    assert [m.body for m in _receive(dlq, 1, 20)] == [b"a:2"]


def _stub(cluster: LocalCluster, node: int = 0):
    address = cluster.door_endpoints("rocketmq").split(",")[node]
    channel = grpc.insecure_channel(address)
    return channel, service_pb2_grpc.MessagingServiceStub(channel)


def test_bad_input_gets_a_status_and_the_door_keeps_serving(cluster, clients):
    channel, stub = _stub(cluster)
    with channel:
        raw = channel.unary_unary("/apache.rocketmq.v2.MessagingService/SendMessage")
        with pytest.raises(grpc.RpcError) as e:
            raw(b"\xff\xff\xff\xff garbage", timeout=5)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.RpcError) as e:
            list(channel.unary_stream("/apache.rocketmq.v2.MessagingService/ReceiveMessage")(b"\x0a\xff", timeout=5))
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        telemetry = channel.stream_stream("/apache.rocketmq.v2.MessagingService/Telemetry")
        answers = list(telemetry(iter([b"\xff\xff"]), timeout=5))
        assert [spb.TelemetryCommand.FromString(a).status.code for a in answers] == [pb.BAD_REQUEST]
        with pytest.raises(grpc.RpcError) as e:
            channel.unary_unary("/apache.rocketmq.v2.MessagingService/NoSuchThing")(b"", timeout=5)
        assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
        unknown = stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="no-such-topic")), timeout=5)
        assert unknown.status.code == pb.TOPIC_NOT_FOUND
        send = spb.SendMessageRequest(messages=[pb.Message(topic=pb.Resource(name="no-such-topic"), body=b"x")])
        assert stub.SendMessage(send, timeout=5).status.code == pb.TOPIC_NOT_FOUND
        fifo = pb.Message(topic=pb.Resource(name="bad"), body=b"x")  # a FIFO message to a NORMAL topic
        fifo.system_properties.message_group = "g"
        fifo.system_properties.message_type = pb.FIFO
        conflict = stub.SendMessage(spb.SendMessageRequest(messages=[fifo]), timeout=5)
        assert conflict.status.code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
        sql = spb.ReceiveMessageRequest(group=pb.Resource(name="cg-bad"), batch_size=1,
                                        message_queue=pb.MessageQueue(topic=pb.Resource(name="bad")),
                                        filter_expression=pb.FilterExpression(type=pb.SQL, expression="a > 1"))
        assert [r.status.code for r in stub.ReceiveMessage(sql, timeout=5)] == [pb.ILLEGAL_FILTER_EXPRESSION]
        forged = spb.AckMessageRequest(group=pb.Resource(name="cg-bad"), topic=pb.Resource(name="bad"),
                                       entries=[spb.AckMessageEntry(message_id="x", receipt_handle=h) for h in
                                                ("", "junk", "n0/abc/0/0.1.0123456789abcdef", "a/b/c/d/e")])
        resp = stub.AckMessage(forged, timeout=5)
        assert resp.status.code == pb.INVALID_RECEIPT_HANDLE
        assert [x.status.code for x in resp.entries] == [pb.INVALID_RECEIPT_HANDLE] * 4

        # a stale handle never acks the message's later delivery
        producer = clients(Producer(_config(cluster), ("bad",)))
        producer.send(_message("bad", "once"))
        recv = spb.ReceiveMessageRequest(group=pb.Resource(name="cg-bad"), batch_size=1,
                                         message_queue=pb.MessageQueue(topic=pb.Resource(name="bad")),
                                         invisible_duration={"seconds": 10}, long_polling_timeout={"seconds": 5})
        first = [r.message for r in stub.ReceiveMessage(recv, timeout=10) if r.HasField("message")]
        assert len(first) == 1
        old = first[0].system_properties.receipt_handle
        nack = stub.ChangeInvisibleDuration(spb.ChangeInvisibleDurationRequest(
            group=pb.Resource(name="cg-bad"), topic=pb.Resource(name="bad"), receipt_handle=old,
            invisible_duration={"seconds": 0}), timeout=5)
        assert nack.status.code == pb.OK and nack.receipt_handle != old
        again = [r.message for r in stub.ReceiveMessage(recv, timeout=10) if r.HasField("message")]
        assert [m.system_properties.delivery_attempt for m in again] == [2]
        ack = lambda h: stub.AckMessage(spb.AckMessageRequest(  # noqa: E731
            group=pb.Resource(name="cg-bad"), topic=pb.Resource(name="bad"),
            entries=[spb.AckMessageEntry(message_id="x", receipt_handle=h)]), timeout=5).status.code
        assert ack(old) == pb.INVALID_RECEIPT_HANDLE and ack(nack.receipt_handle) == pb.INVALID_RECEIPT_HANDLE
        assert ack(again[0].system_properties.receipt_handle) == pb.OK
        other_door_channel, other = _stub(cluster, 1)  # a handle of another door names nothing there
        with other_door_channel:
            assert other.AckMessage(spb.AckMessageRequest(
                group=pb.Resource(name="cg-bad"), topic=pb.Resource(name="bad"),
                entries=[spb.AckMessageEntry(receipt_handle=old)]), timeout=5).status.code == pb.INVALID_RECEIPT_HANDLE
        # still serving
        route = spb.QueryRouteRequest(topic=pb.Resource(name="bad"))
        for language, doors in (("PYTHON", 3), ("JAVA", 1), ("GOLANG", 1), (None, 1)):
            md = [("x-mq-language", language)] if language else []
            ok = stub.QueryRoute(route, metadata=md, timeout=5)  # (every door only to a pick-first client)
            assert ok.status.code == pb.OK and len(ok.message_queues[0].broker.endpoints.addresses) == doors
