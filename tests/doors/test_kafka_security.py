"""The Kafka door on a cluster with a token and TLS (one node): SASL/PLAIN over TLS with the token as the
password; a wrong password or a plaintext client gets nothing."""

from __future__ import annotations

import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from quorumlog.spark.local import LocalCluster  # noqa: E402
from quorumlog.transport.tls import TLS_CA_ENV  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]
TOKEN = "kafka-door-secret"


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("QUORUMLOG_TOKEN", TOKEN)
        # (set, not deleted: a delenv of an unset variable records nothing to undo, and LocalCluster.up sets it
        # for this process; left behind, every later test of this worker would dial its plain nodes with TLS)
        mp.setenv(TLS_CA_ENV, "")
        c = LocalCluster.up(tmp_path_factory.mktemp("kafka-sec"), nodes=1, tls=True, doors=("kafka",))
        try:
            yield c
        finally:
            c.down()


def conf(c: LocalCluster, password: str = TOKEN, **extra) -> dict:
    return {"bootstrap.servers": c.door_endpoints("kafka"), "security.protocol": "SASL_SSL",
            "sasl.mechanisms": "PLAIN", "sasl.username": "anyone", "sasl.password": password,
            "ssl.ca.location": c.doc["tls_ca"], "ssl.endpoint.identification.algorithm": "none",
            "log_level": 0, **extra}


def test_sasl_plain_over_tls_with_the_token(secure) -> None:
    """SASL/PLAIN over TLS with the token as the password serves; a wrong password or a plaintext client gets
    nothing. (One test: under `--dist worksteal` each test of a module may start its own cluster.)"""
    refused_without_the_token(secure)
    sasl_v0_raw_token(secure)
    a = AdminClient(conf(secure))
    for f in a.create_topics([NewTopic("sec", num_partitions=1, replication_factor=1)]).values():
        f.result(60)
    p = Producer(conf(secure, **{"enable.idempotence": True}))
    for i in range(10):
        p.produce("sec", value=b"%d" % i)
    assert p.flush(30) == 0
    c = Consumer(conf(secure, **{"group.id": "sec-reader"}))
    c.assign([TopicPartition("sec", 0, 0)])
    got = []
    deadline = time.monotonic() + 20
    while len(got) < 10 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
    c.close()
    assert got == [b"%d" % i for i in range(10)]


def refused_without_the_token(secure) -> None:
    for cfg in (conf(secure, password="wrong"), {"bootstrap.servers": secure.door_endpoints("kafka"), "log_level": 0}):
        with pytest.raises(KafkaException):
            AdminClient(cfg).list_topics(timeout=3)


def sasl_v0_raw_token(secure) -> None:
    """SaslHandshake v0: the PLAIN token follows as a bare size-prefixed frame (what old clients send)."""
    import socket
    import ssl
    import struct

    ctx = ssl.create_default_context(cafile=secure.doc["tls_ca"])
    ctx.check_hostname = False
    port = int(secure.door_endpoints("kafka").split(",")[0].rsplit(":", 1)[1])

    def frame(api_key: int, version: int, corr: int, body: bytes = b"") -> bytes:
        payload = struct.pack(">hhih", api_key, version, corr, -1) + body
        return struct.pack(">i", len(payload)) + payload

    def exactly(s, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = s.recv(n - len(data))
            assert chunk, "closed"
            data += chunk
        return data

    def answer(s) -> bytes:
        (n,) = struct.unpack(">i", exactly(s, 4))
        return exactly(s, n)

    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, ctx.wrap_socket(raw) as s:
        s.sendall(frame(17, 0, 1, struct.pack(">h", 5) + b"PLAIN"))
        corr, err = struct.unpack_from(">ih", answer(s))
        assert (corr, err) == (1, 0)
        token = b"\x00user\x00" + TOKEN.encode()
        s.sendall(struct.pack(">i", len(token)) + token)
        assert answer(s) == b""  # an empty challenge: authenticated
        s.sendall(frame(3, 1, 2, struct.pack(">i", -1)))  # Metadata v1, all topics
        assert struct.unpack_from(">i", answer(s))[0] == 2
