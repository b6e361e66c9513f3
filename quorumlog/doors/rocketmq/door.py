"""The RocketMQ door of one node: a grpc.aio server in the node's loop, serving MessagingService (service.py)
for the whole cluster (RocketMQ 5's proxy in cluster mode), and its address recorded in `_meta`."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import secrets
import time
from typing import Any

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb

from ...client.topics import TopicAdmin, TopicClient
from ...config import NodeConfig
from ...errors import QuorumLogError
from .. import DOORS_PREFIX, client_options, door_key
from .consuming import Consuming
from .service import MessagingService

log = logging.getLogger(__name__)

REGISTER_RETRY_MS = 500
ENDPOINTS_CACHE_S = 5.0
CLOSE_GRACE_S = 1.0
MAX_MESSAGE_BYTES = 16 * 1024 * 1024  # a gRPC message: a batch of 4 MiB bodies and their properties


class RocketMqDoor:
    kind = "rocketmq"

    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self.node_id = config.node_id
        self.nonce = secrets.token_hex(8)
        self.advertised = f"{config.address[0]}:{config.rocketmq_port}"
        self._server: grpc.aio.Server | None = None
        self._tc: TopicClient | None = None
        self._admin: TopicAdmin | None = None
        self._consuming: Consuming | None = None
        self._service: MessagingService | None = None
        self._register: asyncio.Task | None = None
        self._endpoints: tuple[list[str], float] | None = None
        self._registered = False
        self._closed = False

    async def start(self) -> None:
        options = client_options(self.config)
        peers = dict(self.config.peers)
        self._tc = TopicClient(peers, **options)
        self._admin = TopicAdmin(peers, **options)
        self._consuming = Consuming(self._tc, self._admin, node_id=self.node_id, nonce=self.nonce,
                                    check_back=self._check_back)
        self._service = MessagingService(self._tc, self._consuming, node_id=self.node_id,
                                         token=options.get("token"), endpoints=self.endpoints,
                                         store_host=self.advertised)
        server = grpc.aio.server(options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                                          ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                                          ("grpc.so_reuseport", 0)])
        server.add_generic_rpc_handlers((self._service.handler(),))
        where = f"{self.config.listen_host}:{self.config.rocketmq_port}"
        try:
            if self.config.tls:
                with open(self.config.tls_key, "rb") as k, open(self.config.tls_cert, "rb") as c:
                    creds = grpc.ssl_server_credentials([(k.read(), c.read())])
                bound = server.add_secure_port(where, creds)
            else:
                bound = server.add_insecure_port(where)
        except RuntimeError as e:
            await self._close_clients()
            raise OSError(f"rocketmq door: cannot listen on {where}: {e}") from None
        if not bound:
            await self._close_clients()
            raise OSError(f"rocketmq door: cannot listen on {where}")
        await server.start()
        self._server = server
        self._consuming.start()
        self._service.start()
        self._register = asyncio.ensure_future(self._register_address())
        log.info("rocketmq door listening node=%s address=%s tls=%s", self.node_id, where, self.config.tls)

    async def _register_address(self) -> None:
        """Record this door's address in `_meta`, retrying until `_meta` answers (it may not exist yet)."""
        assert self._tc is not None
        while not self._closed:
            try:
                await self._tc.routes.meta.kv_put(door_key(self.kind, self.node_id), self.advertised.encode())
                self._registered = True
                return
            except (QuorumLogError, OSError) as e:
                log.debug("rocketmq door: recording the address failed (%s): again", e)
                await asyncio.sleep(REGISTER_RETRY_MS / 1000)

    async def endpoints(self, every_door: bool = True) -> pb.Endpoints:
        """Every door of the cluster (from `_meta`), as one Endpoints: a client that keeps one connection (the
        Python client's pick-first channel) makes one channel over all of them and moves to the next at once
        when one dies. Only this door when `every_door` is false (a client that spreads its calls over the
        addresses: the Java client's round robin would take a receive to one door and its ack to another), with
        host names (a client takes one address per DNS name), or with TLS (grpc checks the certificate of a
        multi-address target against its whole address list as one host name, which no certificate names)."""
        now = time.monotonic()
        if self._endpoints is None or now - self._endpoints[1] >= ENDPOINTS_CACHE_S:
            addresses = {self.advertised}
            try:
                assert self._tc is not None
                for kv in await self._tc.routes.meta.kv_list(f"{DOORS_PREFIX}{self.kind}/"):
                    addresses.add(kv.value.decode())
            except (QuorumLogError, OSError, UnicodeDecodeError) as e:
                log.info("rocketmq door: listing the doors failed: %s", e)
            self._endpoints = (sorted(addresses), now)
        hosts = [a.rsplit(":", 1) for a in self._endpoints[0]]
        out = pb.Endpoints()
        if every_door and not self.config.tls and all(_is_ipv4(h) for h, _ in hosts):
            out.scheme = pb.IPv4
            for h, p in hosts:
                out.addresses.add(host=h, port=int(p))
        else:
            h, p = self.advertised.rsplit(":", 1)
            out.scheme = pb.IPv4 if _is_ipv4(h) else pb.DOMAIN_NAME
            out.addresses.add(host=h, port=int(p))
        return out

    async def _check_back(self, topic: str, m: Any) -> bool:
        return await self._service.check_back(topic, m) if self._service else False

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._register is not None:
            self._register.cancel()
        if self._server is not None:
            await self._server.stop(CLOSE_GRACE_S)
        if self._service is not None:
            await self._service.close()
        if self._consuming is not None:
            await self._consuming.close()
        await self._close_clients()

    async def _close_clients(self) -> None:
        for c in (self._admin, self._tc):
            if c is not None:
                try:
                    await c.close()
                except Exception:  # noqa: BLE001 - closing must not fail the node's stop
                    log.exception("rocketmq door: closing a client failed")

    def status(self) -> dict[str, Any]:
        svc = self._service
        return {"kind": self.kind, "address": self.advertised, "registered": self._registered,
                "tls": self.config.tls, "clients": len(svc.clients) if svc else 0,
                "requests": svc.requests if svc else 0,
                "pop_queues": self._consuming.status() if self._consuming else {}}


def _is_ipv4(host: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(host), ipaddress.IPv4Address)
    except ValueError:
        return False
