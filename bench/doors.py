"""The front doors against quorumlog's own client, one run, one 3-node cluster on 127.0.0.1 (flush sync).

    python bench/doors.py [--seconds 8]

Every figure is 1 KiB messages on one 8-queue topic, each door's figure next to the own client's from the same
run, with the ratio the issues ask for:
- RocketMQ (rocketmq-python-client): sends/s with 64 sends in flight (`send_async`), against the own
  `Producer` with 64 sending tasks; receive+ack/s of one SimpleConsumer (batches of 32, each message acked),
  against one own `Consumer` (each consumer reads what its producing phase stored); send → receive p50/p99 (one message at a time, a consumer waiting).
- Kafka (confluent-kafka, librdkafka): produce MB/s with acks=all, linger.ms=5, against the own `Producer`'s
  MB/s; consume MB/s of one consumer in a group, against one own `Consumer` reading the same topic (the same
  200,000-odd messages, each read three times, the two alternating, medians compared: the own topic's few tens
  of thousands read in a fifth of a second, too short a window to set a ratio by); produce → consume p50/p99.
- The CPU-seconds of this process (the clients) and of the nodes in each phase: where a client library is the
  limit, its own CPU says so.
Results: bench/results/doors-<date>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import quorumlog  # noqa: E402
from quorumlog.spark.local import LocalCluster  # noqa: E402

import results_file  # noqa: E402  (bench/results_file.py)

BODY = b"x" * 1024
QUEUES = 8
IN_FLIGHT = 64
CONSUME_RUNS = 3


class Phase:
    """CPU-seconds of this process and of the nodes over one measured phase."""

    def __init__(self, node_pids: dict[str, int]) -> None:
        self.node_pids = node_pids

    def __enter__(self) -> "Phase":
        self.t0 = time.monotonic()
        self.own0 = time.process_time()
        self.nodes0 = sum(results_file.process_cpu_s(p) for p in self.node_pids.values())
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = time.monotonic() - self.t0
        self.client_cpu_s = time.process_time() - self.own0
        self.nodes_cpu_s = sum(results_file.process_cpu_s(p) for p in self.node_pids.values()) - self.nodes0

    def figures(self, count: int) -> dict:
        return {"messages": count, "seconds": round(self.seconds, 3), "per_s": round(count / self.seconds),
                "mb_per_s": round(count * len(BODY) / self.seconds / 1e6, 2),
                "client_cpu_s": round(self.client_cpu_s, 2), "nodes_cpu_s": round(self.nodes_cpu_s, 2)}


def _percentiles(samples_ms: list[float]) -> dict:
    samples_ms = sorted(samples_ms)
    return {"p50_ms": round(statistics.median(samples_ms), 2),
            "p99_ms": round(samples_ms[min(len(samples_ms) - 1, int(len(samples_ms) * 0.99))], 2),
            "samples": len(samples_ms)}


# -- the own client ------------------------------------------------------------------------------------------
async def own_produce(peers: str, topic: str, seconds: float, pids: dict) -> dict:
    async with quorumlog.Producer(peers, timeout_ms=20_000) as p:
        count, stop = 0, False

        async def task(i: int) -> None:
            nonlocal count
            while not stop:
                await p.send(topic, BODY, key=str(i))
                count += 1

        with Phase(pids) as ph:
            tasks = [asyncio.create_task(task(i)) for i in range(IN_FLIGHT)]
            await asyncio.sleep(seconds)
            stop = True
            await asyncio.gather(*tasks)
        return ph.figures(count)


async def own_consume(peers: str, topic: str, messages: int, pids: dict) -> dict:
    """One consumer of a new group reads `messages` (what the producing phase stored) from the earliest; timed
    from its first messages on (joining the group is not consuming)."""
    async with quorumlog.Consumer(peers, consumer_group=f"own-{uuid.uuid4().hex[:6]}", topics=[topic],
                                  timeout_ms=20_000) as c:
        first = len(await c.poll())
        got = 0
        with Phase(pids) as ph:
            while first + got < messages:
                got += len(await c.poll())
    return ph.figures(got)


# -- RocketMQ ----------------------------------------------------------------------------------------------
def rocketmq_phases(endpoints: str, topic: str, seconds: float, pids: dict) -> dict:
    from rocketmq import ClientConfiguration, Credentials, FilterExpression, Message, Producer, SimpleConsumer

    config = ClientConfiguration(endpoints.replace(",", ";"), Credentials())
    producer = Producer(config, (topic,))
    producer.startup()
    out: dict = {}
    try:
        def message() -> Message:
            m = Message()
            m.topic, m.body = topic, BODY
            return m

        sent, failed = 0, 0
        window = threading.Semaphore(IN_FLIGHT)

        def done(future) -> None:
            nonlocal sent, failed
            if future.exception() is None:
                sent += 1
            else:
                failed += 1
            window.release()

        with Phase(pids) as ph:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                window.acquire()
                producer.send_async(message()).add_done_callback(done)
            for _ in range(IN_FLIGHT):
                window.acquire()
        out["send"] = {**ph.figures(sent), "failed": failed, "in_flight": IN_FLIGHT}

        consumer = SimpleConsumer(config, f"rmq-{uuid.uuid4().hex[:6]}", {topic: FilterExpression()}, await_duration=2)
        consumer.startup()
        try:
            acked = 0
            for m in consumer.receive(32, 30):  # (timed from the first messages on, as the others)
                consumer.ack(m)
                acked += 1
            first, acked = acked, 0
            with Phase(pids) as ph:
                while first + acked < sent:
                    for m in consumer.receive(32, 30):
                        consumer.ack(m)
                        acked += 1
            out["receive_ack"] = ph.figures(acked)

            latencies = []
            for _ in range(200):
                t0 = time.monotonic()
                producer.send(message())
                while True:
                    got = consumer.receive(1, 30)
                    if got:
                        latencies.append((time.monotonic() - t0) * 1000)
                        for m in got:
                            consumer.ack(m)
                        break
            out["send_to_receive"] = _percentiles(latencies)
        finally:
            consumer.shutdown()
    finally:
        producer.shutdown()
    return out


# -- Kafka -------------------------------------------------------------------------------------------------
def kafka_consume(bootstrap: str, topic: str, messages: int, pids: dict) -> tuple[dict, "Consumer"]:
    """One consumer of a new group reads `messages` from the earliest, timed from its first messages on
    (joining the group is not consuming); the consumer stays open, at the end of the topic."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"kafka-{uuid.uuid4().hex[:6]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": True})
    consumer.subscribe([topic])
    first = 0
    while not first:
        first = sum(m.error() is None for m in consumer.consume(1000, 1.0))
    got = 0
    with Phase(pids) as ph:
        while first + got < messages:  # (consume waits for its count or its timeout: never ask past the end)
            got += sum(m.error() is None for m in consumer.consume(min(1000, messages - first - got), 1.0))
    return ph.figures(got), consumer


def _median_run(runs: list[dict]) -> dict:
    return {**sorted(runs, key=lambda r: r["mb_per_s"])[len(runs) // 2],
            "mb_per_s_runs": [r["mb_per_s"] for r in runs]}


def kafka_phases(bootstrap: str, peers: str, topic: str, seconds: float, pids: dict) -> dict:
    from confluent_kafka import Producer

    out: dict = {}
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "enable.idempotence": True})
    failed, i = [], 0
    with Phase(pids) as ph:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                producer.produce(topic, BODY, key=str(i % 64).encode(),
                                 on_delivery=lambda err, _m: err is not None and failed.append(err))
                i += 1
            except BufferError:
                producer.poll(0.01)
            producer.poll(0)
        assert producer.flush(60) == 0
    messages = i - len(failed)
    out["produce"] = {**ph.figures(messages), "failed": len(failed), "acks": "all", "linger_ms": 5}

    # Each consumer reads the whole topic CONSUME_RUNS times, the two alternating: a second-long phase on a
    # 2-core machine moves with whatever else runs, and the median of each is what is compared.
    kafka_runs, own_runs, consumer = [], [], None
    for _ in range(CONSUME_RUNS):
        if consumer is not None:
            consumer.close()
        figures, consumer = kafka_consume(bootstrap, topic, messages, pids)
        kafka_runs.append(figures)
        own_runs.append(asyncio.run(own_consume(peers, topic, messages, pids)))
    out["consume"] = _median_run(kafka_runs)
    out["own_consume_same_topic"] = _median_run(own_runs)

    latencies = []
    for _ in range(200):
        t0 = time.monotonic()
        producer.produce(topic, BODY)
        producer.flush(10)
        while True:
            m = consumer.poll(1.0)
            if m is not None and m.error() is None:
                latencies.append((time.monotonic() - t0) * 1000)
                break
    out["produce_to_consume"] = _percentiles(latencies)
    consumer.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=8.0, help="length of each sending phase")
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    work = tempfile.mkdtemp(prefix="bench-doors-")
    cluster = LocalCluster.up(os.path.join(work, "cluster"), doors=("rocketmq", "kafka"))
    pids = results_file.cluster_node_pids(str(cluster.data_dir))
    try:
        async def setup() -> None:
            async with quorumlog.TopicAdmin(cluster.peers, timeout_ms=20_000) as admin:
                for t in ("own", "rmq", "kafka"):
                    await admin.create(t, queues=QUEUES)
            async with quorumlog.Client(cluster.peers, group="_meta", timeout_ms=20_000) as meta:
                while len(await meta.kv_list("doors/")) < 6:  # every node's two doors said where they listen
                    await asyncio.sleep(0.1)

        asyncio.run(setup())
        own = {"produce": asyncio.run(own_produce(cluster.peers, "own", args.seconds, pids))}
        own["consume"] = asyncio.run(own_consume(cluster.peers, "own", own["produce"]["messages"], pids))
        rmq = rocketmq_phases(cluster.door_endpoints("rocketmq"), "rmq", args.seconds, pids)
        kafka = kafka_phases(cluster.door_endpoints("kafka"), cluster.peers, "kafka", args.seconds, pids)
    finally:
        cluster.down()
    ratios = {
        "rocketmq_send_vs_own_producer": round(rmq["send"]["per_s"] / own["produce"]["per_s"], 3),
        "rocketmq_receive_ack_vs_own_consumer": round(rmq["receive_ack"]["per_s"] / own["consume"]["per_s"], 3),
        "kafka_produce_vs_own_producer": round(kafka["produce"]["mb_per_s"] / own["produce"]["mb_per_s"], 3),
        "kafka_consume_vs_own_consumer": round(kafka["consume"]["mb_per_s"]
                                               / kafka["own_consume_same_topic"]["mb_per_s"], 3),
    }
    doc = {"flush": "sync", "body_bytes": len(BODY), "queues": QUEUES, "own": own, "rocketmq": rmq, "kafka": kafka,
           "ratios": ratios, "machine": {"cpus": os.cpu_count()}}
    results_file.write(args.out, "doors", doc, {"ratios": ratios, "own": own, "rocketmq": rmq, "kafka": kafka})
    return 0


if __name__ == "__main__":
    sys.exit(main())
