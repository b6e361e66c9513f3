"""The Kafka front door with the real clients (confluent-kafka/librdkafka, kafka-python, kcat) against one
3-node cluster (module-scoped): every compression, timestamps, groups, an idempotent producer through a kill -9
of its partitions' leader, committed offsets through a kill of the coordinator, malformed frames."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import struct
import subprocess
import threading
import time
from pathlib import Path

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from quorumlog.client.groups import GroupAdmin  # noqa: E402
from quorumlog.config import parse_peers  # noqa: E402
from quorumlog.spark.local import LocalCluster  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]
KCAT = "/usr/bin/kcat"
QUIET = {"log_level": 3}  # librdkafka: errors only (brokers going away are expected here)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster.up(tmp_path_factory.mktemp("kafka"), doors=("kafka",))
    try:
        yield c
    finally:
        c.down()


def bootstrap(c: LocalCluster) -> str:
    return c.door_endpoints("kafka")


def live_bootstrap(c: LocalCluster, dead: str | None = None) -> str:
    return ",".join(f"127.0.0.1:{n['kafka_port']}" for n in c.doc["nodes"] if n["id"] != dead)


def create_topic(c: LocalCluster, name: str, partitions: int) -> None:
    a = AdminClient({"bootstrap.servers": bootstrap(c), **QUIET})
    for f in a.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)],
                             operation_timeout=30).values():
        f.result(60)


def leaders(c: LocalCluster, topic: str) -> dict[int, int]:
    a = AdminClient({"bootstrap.servers": live_bootstrap(c), **QUIET})
    md = a.list_topics(topic, timeout=10)
    return {p.id: p.leader for p in md.topics[topic].partitions.values()}


def restart(c: LocalCluster, node_id: str) -> None:
    """Start a killed node again with its own command line; cluster.json learns its new pid (for `down`)."""
    n = c.node(node_id)
    with open(n["log_file"], "ab") as log:
        p = subprocess.Popen(n["argv"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    n["pid"] = p.pid
    path = Path(c.data_dir) / "cluster.json"
    doc = json.loads(path.read_text())
    for node in doc["nodes"]:
        if node["id"] == node_id:
            node["pid"] = p.pid
    path.write_text(json.dumps(doc, indent=2))
    # back in every door's broker list before the next test (they may run in any order)
    a = AdminClient({"bootstrap.servers": live_bootstrap(c, node_id), **QUIET})
    deadline = time.monotonic() + 40
    while len(a.list_topics(timeout=10).brokers) < len(c.doc["nodes"]):
        assert time.monotonic() < deadline, f"{node_id} did not come back"
        time.sleep(0.3)


def wait_dead(pid: int) -> None:
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        if Path(f"/proc/{pid}/status").exists() and "zombie" in Path(f"/proc/{pid}/status").read_text():
            return
        time.sleep(0.05)


def read_ahead_taken(c: LocalCluster) -> int:
    """Fetch answers the Kafka doors of all nodes gave from a pull read ahead (each node's status says)."""
    async def main() -> int:
        async with GroupAdmin(parse_peers(c.peers), timeout_ms=10_000) as admin:
            docs = await asyncio.gather(*(admin.node_status(n["id"]) for n in c.doc["nodes"]))
        return sum(d["read_ahead"]["taken"] for doc in docs for d in doc["doors"] if d["kind"] == "kafka")

    return asyncio.run(main())


def consume_all(c: LocalCluster, topic: str, partitions: int, dead: str | None = None,
                timeout_s: float = 30, **config) -> dict[int, list]:
    """Every record of `topic`, per partition, from the start to the high watermark (no group)."""
    cons = Consumer({"bootstrap.servers": live_bootstrap(c, dead), "group.id": "reader-" + topic,
                     "enable.auto.commit": False, **QUIET, **config})
    ends = {}
    deadline = time.monotonic() + timeout_s
    for p in range(partitions):
        while True:
            try:
                ends[p] = cons.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1]
                break
            except Exception:  # noqa: BLE001 - a leader still being elected
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
    cons.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: dict[int, list] = {p: [] for p in range(partitions)}
    while any(len(out[p]) < ends[p] for p in out) and time.monotonic() < deadline:
        m = cons.poll(0.5)
        if m is None or m.error():
            continue
        out[m.partition()].append(m)
    cons.close()
    assert all(len(out[p]) == ends[p] for p in out), ({p: len(v) for p, v in out.items()}, ends)
    return out


# -- metadata, kcat ----------------------------------------------------------------------------------------
def test_kcat_metadata_and_round_trip(cluster) -> None:
    create_topic(cluster, "kc", 2)
    out = subprocess.run([KCAT, "-b", bootstrap(cluster), "-L", "-t", "kc"], capture_output=True, text=True,
                         timeout=30).stdout
    assert "3 brokers" in out and 'topic "kc" with 2 partitions' in out, out
    subprocess.run([KCAT, "-b", bootstrap(cluster), "-P", "-t", "kc", "-p", "1", "-K:"], input="k1:one\nk2:two\n",
                   text=True, check=True, timeout=30, capture_output=True)
    got = subprocess.run([KCAT, "-b", bootstrap(cluster), "-C", "-t", "kc", "-p", "1", "-o", "beginning", "-e",
                          "-f", "%o %k %s\n"], capture_output=True, text=True, timeout=30).stdout
    assert got.splitlines() == ["0 k1 one", "1 k2 two"]


def test_admin_configs_and_delete(cluster) -> None:
    from confluent_kafka.admin import ConfigResource
    a = AdminClient({"bootstrap.servers": bootstrap(cluster), **QUIET})
    for f in a.create_topics([NewTopic("cfg", num_partitions=3, replication_factor=1,
                                      config={"retention.ms": "3600000"})]).values():
        f.result(60)
    with pytest.raises(confluent_kafka.KafkaException, match="TOPIC_ALREADY_EXISTS"):
        for f in a.create_topics([NewTopic("cfg", num_partitions=3, replication_factor=1)]).values():
            f.result(60)
    with pytest.raises(confluent_kafka.KafkaException, match="TOPIC_EXCEPTION"):
        for f in a.create_topics([NewTopic("no.dots", num_partitions=1, replication_factor=1)]).values():
            f.result(60)
    (res,) = a.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "cfg")]).values()
    configs = res.result(10)
    assert configs["retention.ms"].value == "3600000" and configs["cleanup.policy"].value == "delete"
    for f in a.delete_topics(["cfg"], operation_timeout=30).values():
        f.result(30)
    assert "cfg" not in a.list_topics(timeout=10).topics


def test_a_topic_is_one_thing_for_both_clients(cluster) -> None:
    """Kafka records read by the own client, the own producer's messages read by a Kafka consumer."""
    import asyncio

    from quorumlog.client.topics import TopicClient
    create_topic(cluster, "both", 1)
    p = Producer({"bootstrap.servers": bootstrap(cluster), **QUIET})
    p.produce("both", value=b"from kafka", key=b"k", partition=0, headers=[("h", b"v")], timestamp=1_600_000_000_000)
    assert p.flush(30) == 0

    async def own() -> list:
        async with TopicClient(cluster.peers) as tc:
            await tc.send_batch("both", 0, [(b"from quorumlog", "ok", "tagA", {"color": "red"})])
            return (await tc.pull("both", 0, 0, max_messages=10)).messages

    msgs = asyncio.run(own())
    assert [(m.body, m.key, m.born_timestamp_ms) for m in msgs][0] == (b"from kafka", "k", 1_600_000_000_000)
    got = consume_all(cluster, "both", 1)[0]
    assert [(m.key(), m.value()) for m in got] == [(b"k", b"from kafka"), (b"ok", b"from quorumlog")]
    assert got[0].headers() == [("h", b"v")]
    assert sorted(got[1].headers()) == [("color", b"red"), ("quorumlog.tags", b"tagA")]


# -- every compression ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_produce_and_consume_each_compression(cluster, codec: str) -> None:
    topic = f"comp-{codec}"
    create_topic(cluster, topic, 2)
    p = Producer({"bootstrap.servers": bootstrap(cluster), "compression.type": codec, "linger.ms": 5,
                  "acks": "all", **QUIET})
    errors = []
    for i in range(300):
        p.produce(topic, value=(b"value-%d-" % i) * 8, key=None if i % 3 == 0 else b"\xffkey%d" % i,
                  partition=i % 2, headers=[("n", str(i).encode()), ("bin", b"\x00\x01")],
                  on_delivery=lambda err, m: errors.append(err) if err else None)
    assert p.flush(30) == 0 and errors == []
    got = consume_all(cluster, topic, 2)
    for part, msgs in got.items():
        assert [m.offset() for m in msgs] == list(range(150))
        for m in msgs:
            i = int(dict(m.headers())["n"])
            assert i % 2 == part and m.value() == (b"value-%d-" % i) * 8
            assert m.key() == (None if i % 3 == 0 else b"\xffkey%d" % i)
            assert m.headers() == [("n", str(i).encode()), ("bin", b"\x00\x01")]


def test_many_small_fetches_read_ahead_in_order(cluster) -> None:
    """A consumer whose fetches take a few records each goes through hundreds of Fetch rounds, each answered
    from the pull read ahead at the previous round; records with headers (served by the Python path) among
    them change nothing."""
    create_topic(cluster, "small-fetches", 2)
    taken = read_ahead_taken(cluster)
    p = Producer({"bootstrap.servers": bootstrap(cluster), "linger.ms": 5, "acks": "all", **QUIET})
    for i in range(800):
        p.produce("small-fetches", value=b"%05d" % i + b"." * 1000, key=b"k%d" % i, partition=i % 2,
                  headers=[("n", b"%d" % i)] if i % 50 == 0 else None)
    assert p.flush(30) == 0
    got = consume_all(cluster, "small-fetches", 2, **{"max.partition.fetch.bytes": 3000})
    for part, msgs in got.items():
        assert [m.offset() for m in msgs] == list(range(400))
        assert [int(m.value()[:5]) for m in msgs] == list(range(part, 800, 2))
        assert all(m.key() == b"k%d" % int(m.value()[:5]) for m in msgs)
        assert [m.headers() for m in msgs if m.headers()] == [[("n", b"%d" % i)] for i in range(part, 800, 2)
                                                                if i % 50 == 0]
    assert read_ahead_taken(cluster) - taken > 100  # (about 3 records a round: over 250 rounds)


# -- timestamps -----------------------------------------------------------------------------------------------
def test_offsets_for_times_and_seek(cluster) -> None:
    create_topic(cluster, "ts", 1)
    t0 = 1_700_000_000_000
    p = Producer({"bootstrap.servers": bootstrap(cluster), **QUIET})
    for i in range(20):
        p.produce("ts", value=b"%d" % i, partition=0, timestamp=t0 + i * 1000)
    assert p.flush(30) == 0
    cons = Consumer({"bootstrap.servers": bootstrap(cluster), "group.id": "ts-reader", **QUIET})
    found = cons.offsets_for_times([TopicPartition("ts", 0, t0 + 4500)], timeout=10)
    assert found[0].offset == 5
    assert cons.offsets_for_times([TopicPartition("ts", 0, t0 + 99_000)], timeout=10)[0].offset == -1
    cons.assign([TopicPartition("ts", 0, found[0].offset)])
    m = None
    for _ in range(40):
        m = cons.poll(0.5)
        if m is not None and not m.error():
            break
    assert m.value() == b"5" and m.timestamp() == (confluent_kafka.TIMESTAMP_CREATE_TIME, t0 + 5000)
    lo, hi = cons.get_watermark_offsets(TopicPartition("ts", 0), timeout=10)
    assert (lo, hi) == (0, 20)
    cons.close()
    # an offset beyond the end: OFFSET_OUT_OF_RANGE, and the consumer resets (earliest here)
    cons = Consumer({"bootstrap.servers": bootstrap(cluster), "group.id": "ts-reset", "auto.offset.reset": "earliest",
                     **QUIET})
    cons.assign([TopicPartition("ts", 0, 1000)])
    m = None
    for _ in range(40):
        m = cons.poll(0.5)
        if m is not None and not m.error():
            break
    cons.close()
    assert m.offset() == 0 and m.value() == b"0"


# -- kafka-python ----------------------------------------------------------------------------------------------
def test_kafka_python_producer_and_consumer(cluster) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic as KNewTopic
    admin = KafkaAdminClient(bootstrap_servers=bootstrap(cluster))
    admin.create_topics([KNewTopic("kp", 2, 1)])
    assert "kp" in admin.list_topics()
    admin.close()
    p = KafkaProducer(bootstrap_servers=bootstrap(cluster), compression_type="gzip", acks="all")
    futures = [p.send("kp", key=b"k%d" % i, value=b"v%d" % i, headers=[("h", b"x")]) for i in range(100)]
    p.flush()
    assert sorted(f.get(10).offset for f in futures) == sorted(list(range(50)) * 2) or \
        len({(f.get(10).partition, f.get(10).offset) for f in futures}) == 100
    p.close()
    c = KafkaConsumer("kp", bootstrap_servers=bootstrap(cluster), group_id="kp-group", auto_offset_reset="earliest",
                      consumer_timeout_ms=15_000, enable_auto_commit=False)
    seen, committed = _read_and_commit(c, 100)
    assert seen == {b"v%d" % i for i in range(100)} and committed == 100


def _read_and_commit(c, n: int) -> tuple[set[bytes], int]:
    """The values a kafka-python consumer reads until it saw n different ones, then commits and closes: (the
    values, the sum of its committed offsets)."""
    seen = set()
    for m in c:
        seen.add(m.value)
        if len(seen) == n:
            break
    c.commit()
    committed = sum(c.committed(tp) or 0 for tp in c.assignment())
    c.close()
    return seen, committed


@pytest.mark.parametrize("api_version", [(0, 11), (1, 0), (2, 0)])
def test_kafka_python_pinned_to_older_brokers(cluster, api_version) -> None:
    """kafka-python told the broker is Kafka 0.11 / 1.0 / 2.0 uses the lowest versions served (Produce v3, Fetch
    v4+, Metadata v4+, JoinGroup v2+, OffsetCommit v3+, ...)."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic as KNewTopic
    topic = "old-%d-%d" % api_version
    admin = KafkaAdminClient(bootstrap_servers=bootstrap(cluster), api_version=api_version)
    admin.create_topics([KNewTopic(topic, 2, 1)])
    admin.close()
    p = KafkaProducer(bootstrap_servers=bootstrap(cluster), api_version=api_version, acks="all")
    for f in [p.send(topic, key=b"k%d" % i, value=b"v%d" % i) for i in range(20)]:
        f.get(10)
    p.close()
    c = KafkaConsumer(topic, bootstrap_servers=bootstrap(cluster), api_version=api_version, group_id="g-" + topic,
                      auto_offset_reset="earliest", consumer_timeout_ms=10_000, enable_auto_commit=False)
    seen, committed = _read_and_commit(c, 20)
    assert len(seen) == 20 and committed == 20


# -- raw frames -------------------------------------------------------------------------------------------------
def _frame(api_key: int, version: int, corr: int, body: bytes = b"") -> bytes:
    payload = struct.pack(">hhih", api_key, version, corr, 1) + b"t" + body
    return struct.pack(">i", len(payload)) + payload


def _read_answer(s: socket.socket) -> bytes:
    head = b""
    while len(head) < 4:
        chunk = s.recv(4 - len(head))
        if not chunk:
            return b""
        head += chunk
    (n,) = struct.unpack(">i", head)
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        assert chunk
        data += chunk
    return data


def _closed(s: socket.socket) -> bool:
    s.settimeout(5)
    try:
        return s.recv(1) == b""
    except ConnectionError:
        return True


def test_malformed_frames_and_unknown_apis(cluster) -> None:
    port = int(bootstrap(cluster).split(",")[0].rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(_frame(18, 3, 1, b"\x00\x00\x01"))  # ApiVersions v3: v0 answer, UNSUPPORTED_VERSION, the list
        a = _read_answer(s)
        corr, err, n = struct.unpack_from(">ihi", a)
        assert (corr, err) == (1, 35) and n >= 15
        s.sendall(_frame(999, 0, 2))  # an unknown API key: an error answer, the connection stays
        assert struct.unpack(">ih", _read_answer(s)) == (2, 35)
        s.sendall(_frame(0, 1, 3))  # Produce v1 (before RecordBatch v2): not served
        assert struct.unpack(">ih", _read_answer(s)) == (3, 35)
        s.sendall(_frame(18, 0, 4))
        corr, err = struct.unpack_from(">ih", _read_answer(s))
        assert (corr, err) == (4, 0)
        s.sendall(_frame(3, 1, 5, b"\x00\x00\x00\x05\xff"))  # Metadata with a body that does not parse: closed
        assert _closed(s)
    for garbage in (struct.pack(">i", -7) + b"xxxx", struct.pack(">i", 2 ** 31 - 1) + b"x" * 100):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(garbage)
            assert _closed(s)
    out = subprocess.run([KCAT, "-b", f"127.0.0.1:{port}", "-L"], capture_output=True, text=True, timeout=30).stdout
    assert "3 brokers" in out  # the node still serves


# -- consumer groups ------------------------------------------------------------------------------------------------
def _member(c: LocalCluster, group: str, topic: str, seen: list, stop: threading.Event) -> None:
    cons = Consumer({"bootstrap.servers": bootstrap(c), "group.id": group, "auto.offset.reset": "earliest",
                     "session.timeout.ms": 6000, "heartbeat.interval.ms": 300, "enable.auto.commit": True,
                     "auto.commit.interval.ms": 200, **QUIET})
    cons.subscribe([topic])
    while not stop.is_set():
        m = cons.poll(0.2)
        if m is not None and not m.error():
            seen.append(m.value())
    cons.close()  # commits what was consumed, then leaves the group


def test_consumer_group_members_come_and_go(cluster) -> None:
    create_topic(cluster, "grp", 6)
    p = Producer({"bootstrap.servers": bootstrap(cluster), "linger.ms": 2, **QUIET})
    seen: list = []
    stops = [threading.Event() for _ in range(4)]
    threads = [threading.Thread(target=_member, args=(cluster, "cg", "grp", seen, stops[i])) for i in range(4)]
    for t in threads[:3]:
        t.start()
    total = 900
    for i in range(total):
        p.produce("grp", value=b"%d" % i, key=b"%d" % i)
        if i % 100 == 99:
            p.flush(10)
            time.sleep(0.25)
        if i == 300:
            stops[1].set()  # a member leaves
        if i == 500:
            threads[3].start()  # and another joins
    assert p.flush(30) == 0
    deadline = time.monotonic() + 40
    while len(set(seen)) < total and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)  # auto commits (every 200 ms) land while the group is stable, before members leave at once
    for s in stops:
        s.set()
    for t in threads:
        if t.is_alive() or t.ident:
            t.join(30)
    assert set(seen) == {b"%d" % i for i in range(total)}
    # committed offsets: the end of every partition
    cons = Consumer({"bootstrap.servers": bootstrap(cluster), "group.id": "cg", **QUIET})
    committed = cons.committed([TopicPartition("grp", q) for q in range(6)], timeout=10)
    ends = [cons.get_watermark_offsets(TopicPartition("grp", q), timeout=10)[1] for q in range(6)]
    cons.close()
    assert [tp.offset for tp in committed] == ends and sum(ends) == total


def test_admin_lists_and_describes_groups(cluster) -> None:
    create_topic(cluster, "dg", 2)
    c = Consumer({"bootstrap.servers": bootstrap(cluster), "group.id": "described", "client.id": "me", **QUIET})
    c.subscribe(["dg"])
    a = AdminClient({"bootstrap.servers": bootstrap(cluster), **QUIET})
    deadline = time.monotonic() + 20
    while True:
        c.poll(0.2)
        d = a.describe_consumer_groups(["described"])["described"].result(10)
        if d.state == confluent_kafka.ConsumerGroupState.STABLE and d.members and d.members[0].assignment:
            break
        assert time.monotonic() < deadline, d.state
    assert d.members[0].client_id == "me"
    assert sorted(tp.partition for tp in d.members[0].assignment.topic_partitions) == [0, 1]
    assert "described" in {g.group_id for g in a.list_consumer_groups().result(10).valid}
    # the coordinator records the group in `_meta` for `consumer-group describe`
    import asyncio

    from quorumlog.client.client import Client

    async def recorded() -> dict | None:
        async with Client(cluster.peers, group="_meta") as meta:
            got = await meta.kv_get("kafka-groups/described")
            return json.loads(got[0]) if got else None

    deadline = time.monotonic() + 10
    while (doc := asyncio.run(recorded())) is None or doc["state"] != "Stable":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert [(m["client_id"], m["assignment"]) for m in doc["members"]] == [("me", {"dg": [0, 1]})]
    c.close()


def wait_new_leaders(c: LocalCluster, topic: str, victim_broker: int) -> dict[int, int]:
    deadline = time.monotonic() + 30
    while True:
        try:
            now = leaders(c, topic)
            if victim_broker not in now.values() and -1 not in now.values():
                return now
        except Exception:  # noqa: BLE001 - no leader yet
            pass
        assert time.monotonic() < deadline, "no new leader"
        time.sleep(0.3)


def test_committed_offsets_survive_a_kill_of_the_coordinator(cluster) -> None:
    create_topic(cluster, "keep", 3)
    p = Producer({"bootstrap.servers": bootstrap(cluster), **QUIET})
    for i in range(30):
        p.produce("keep", value=b"%d" % i, partition=i % 3)
    assert p.flush(30) == 0
    cons = Consumer({"bootstrap.servers": bootstrap(cluster), "group.id": "keeper", "enable.auto.commit": False,
                     **QUIET})
    cons.commit(offsets=[TopicPartition("keep", q, 7 + q) for q in range(3)], asynchronous=False)
    cons.close()
    # the coordinator: the door of the `_meta` leader's node
    a = AdminClient({"bootstrap.servers": bootstrap(cluster), **QUIET})
    victim = f"n{a.describe_consumer_groups(['keeper'])['keeper'].result(10).coordinator.id}"
    pid = cluster.pid(victim)
    cluster.kill(victim)
    wait_dead(pid)
    try:
        cons = Consumer({"bootstrap.servers": live_bootstrap(cluster, victim), "group.id": "keeper",
                         "enable.auto.commit": False, **QUIET})
        deadline = time.monotonic() + 30
        while True:
            try:
                committed = cons.committed([TopicPartition("keep", q) for q in range(3)], timeout=5)
                break
            except Exception:  # noqa: BLE001 - the new coordinator is still being found
                assert time.monotonic() < deadline
                time.sleep(0.3)
        assert [tp.offset for tp in committed] == [7, 8, 9]
        cons.subscribe(["keep"])
        first = {}
        while len(first) < 3 and time.monotonic() < deadline + 20:
            m = cons.poll(0.5)
            if m is not None and not m.error():
                first.setdefault(m.partition(), m.offset())
        cons.close()
        assert first == {0: 7, 1: 8, 2: 9}
        a = AdminClient({"bootstrap.servers": live_bootstrap(cluster, victim), **QUIET})
        new = a.describe_consumer_groups(["keeper"], request_timeout=20)["keeper"].result(30).coordinator.id
        assert f"n{new}" != victim
    finally:
        restart(cluster, victim)


# -- the idempotent producer through a kill -9 -----------------------------------------------------------------
def test_idempotent_producer_through_a_leader_kill(cluster) -> None:
    create_topic(cluster, "idem", 4)
    victim_broker = leaders(cluster, "idem")[0]
    victim = f"n{victim_broker}"
    p = Producer({"bootstrap.servers": bootstrap(cluster), "enable.idempotence": True, "linger.ms": 5,
                  "message.timeout.ms": 90_000, **QUIET})
    errors: list = []
    total = 4000

    def killer() -> None:
        time.sleep(1.0)
        cluster.kill(victim)

    k = threading.Thread(target=killer)
    k.start()
    for i in range(total):
        while True:
            try:
                p.produce("idem", value=b"%d" % i, partition=i % 4,
                          on_delivery=lambda err, m: errors.append(err) if err else None)
                break
            except BufferError:
                p.poll(0.1)
        if i % 50 == 49:
            p.poll(0)
            time.sleep(0.02)
    k.join()
    try:
        assert p.flush(90) == 0 and errors == []
        wait_new_leaders(cluster, "idem", victim_broker)
        out = subprocess.run([KCAT, "-b", live_bootstrap(cluster, victim), "-L", "-t", "idem"], capture_output=True,
                             text=True, timeout=30).stdout
        assert "2 brokers" in out and f"leader {victim_broker}," not in out and "leader -1" not in out, out
        got = consume_all(cluster, "idem", 4, dead=victim, timeout_s=60)
        for part, msgs in got.items():
            assert [int(m.value()) for m in msgs] == list(range(part, total, 4)), f"partition {part}"
    finally:
        restart(cluster, victim)
