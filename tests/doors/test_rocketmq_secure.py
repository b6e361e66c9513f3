"""The RocketMQ door of a cluster with TLS and a token: the real client connects over TLS (verifying the node
with the cluster's CA) and signs its requests with the token as its secret key; a wrong or missing signature
gets UNAUTHORIZED."""

from __future__ import annotations

import asyncio
import os
import time

import grpc
import pytest
from rocketmq import ClientConfiguration, Credentials, FilterExpression, Message, Producer, SimpleConsumer
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc

import quorumlog
from quorumlog.spark.local import LocalCluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

TOKEN = "s3cret-token"
ROOTS_ENV = "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH"  # where grpc's default credentials find their CA


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    saved = {k: os.environ.get(k) for k in ("QUORUMLOG_TOKEN", ROOTS_ENV, "QUORUMLOG_TLS_CA")}
    os.environ["QUORUMLOG_TOKEN"] = TOKEN
    c = None
    try:
        c = LocalCluster.up(tmp_path_factory.mktemp("rmqs"), tls=True, doors=("rocketmq",))
        os.environ[ROOTS_ENV] = c.doc["tls_ca"]

        async def setup():
            async with quorumlog.TopicAdmin(c.peers, timeout_ms=20_000) as admin:
                await admin.create("secure", 2)

        asyncio.run(setup())
        yield c
    finally:
        if c is not None:
            c.down()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_tls_and_a_signed_client_produce_and_consume_and_a_bad_signature_is_unauthorized(cluster):
    """(One test: a second would start a second cluster on another xdist worker.)"""
    _signed_client_over_tls(cluster)
    _wrong_or_missing_signatures(cluster)


def _signed_client_over_tls(cluster):
    # one address: over TLS the client's channel to several would check the certificate against all of them
    # joined as one host name (docs/rocketmq.md)
    cfg = ClientConfiguration(cluster.door_endpoints("rocketmq").split(",")[0], Credentials("any-ak", TOKEN))
    producer = Producer(cfg, ("secure",), tls_enable=True)
    consumer = SimpleConsumer(cfg, "cg-secure", {"secure": FilterExpression()}, await_duration=3, tls_enable=True)
    producer.startup()
    consumer.startup()
    try:
        m = Message()
        m.topic, m.body = "secure", b"over tls"
        sent = producer.send(m)
        got = []
        deadline = time.monotonic() + 20
        while not got and time.monotonic() < deadline:
            got = consumer.receive(1, 15)
        assert [(x.message_id, x.body) for x in got] == [(sent.message_id, b"over tls")]
        consumer.ack(got[0])
    finally:
        consumer.shutdown()
        producer.shutdown()


def _wrong_or_missing_signatures(cluster):
    address = cluster.door_endpoints("rocketmq").split(",")[0]
    with open(cluster.doc["tls_ca"], "rb") as f:
        creds = grpc.ssl_channel_credentials(f.read())
    with grpc.secure_channel(address, creds) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        req = spb.QueryRouteRequest(topic=pb.Resource(name="secure"))
        assert stub.QueryRoute(req, timeout=5).status.code == pb.UNAUTHORIZED
        wrong = [("x-mq-date-time", "20261201T000000Z"),
                 ("authorization", "MQv2-HMAC-SHA1 Credential=ak, SignedHeaders=x-mq-date-time, Signature=00ff")]
        assert stub.QueryRoute(req, metadata=wrong, timeout=5).status.code == pb.UNAUTHORIZED
        import hmac
        from hashlib import sha1
        sig = hmac.new(TOKEN.encode(), b"20261201T000000Z", sha1).hexdigest()
        right = [wrong[0], ("authorization", f"MQv2-HMAC-SHA1 Credential=ak, SignedHeaders=x-mq-date-time, "
                                             f"Signature={sig}")]
        route = stub.QueryRoute(req, metadata=right, timeout=5)
        assert route.status.code == pb.OK
        assert [f"{a.host}:{a.port}" for a in route.message_queues[0].broker.endpoints.addresses] == [address]
    with grpc.insecure_channel(address) as plain:  # the door speaks TLS only
        with pytest.raises(grpc.RpcError):
            service_pb2_grpc.MessagingServiceStub(plain).QueryRoute(req, timeout=3)
