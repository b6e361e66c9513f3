"""RocketMQ 5's MessagingService (apache.rocketmq.v2), each RPC translated into the own client's requests.

Requests are parsed here, not by grpc (handlers take raw bytes): a malformed one gets INVALID_ARGUMENT and the
server keeps serving. A per-request failure is a RocketMQ Status in the response, never a crash. Methods not
served (PullMessage, UpdateOffset, GetOffset, QueryOffset, RecallMessage, SyncLiteSubscription) are not
registered: grpc answers UNIMPLEMENTED.
"""

from __future__ import annotations

import asyncio
import hmac
import itertools
import logging
import re
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from hashlib import sha1
from typing import Any, AsyncIterator, Awaitable, Callable

import grpc
from google.protobuf.message import DecodeError
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from ...client.topics import TopicClient, TopicMessage, queue_for
from ...errors import (BadRequest, EntryTooLarge, MetadataVersionConflict, QuorumLogError, Timeout,
                       TopicNotExist)
from ...topic.message import encode_fields
from ...topic.pop import Decision
from . import metadata
from .consuming import TRANSACTION_CHECK_AFTER_MS, Consuming
from .convert import ConvertError, parse_filter, to_proto, to_stored

log = logging.getLogger(__name__)

SERVICE = "apache.rocketmq.v2.MessagingService"
MAX_BODY_BYTES = 4 * 1024 * 1024  # RocketMQ's maxMessageSize
DEFAULT_INVISIBLE_MS = 60_000  # a push consumer's receive names none (RocketMQ's proxy: 60 s, renewed)
MIN_INVISIBLE_MS = 10_000  # RocketMQ's proxy refuses a shorter receive (minInvisibleTimeMillsForRecv)
MAX_INVISIBLE_MS = 12 * 3600 * 1000
DEFAULT_LONG_POLLING_MS = 20_000
MAX_LONG_POLLING_MS = 30_000
LONG_POLL_MARGIN_MS = 200  # answer this long before the call's own deadline
MAX_RECEIVE_BATCH = 1024
DEFAULT_RECEIVE_BATCH = 32
ROUTE_CACHE_S = 5.0
DEDUPE_WINDOW = 100_000  # recent message ids answered from the first send's result (a retry is stored once)
REQUEST_TIMEOUT_S = 3
MAX_IN_FLIGHT_PER_GROUP = 2
MAX_SEND_BATCH = 256  # sends in one request, and their bodies' bytes (one body may be larger: alone)
MAX_SEND_BATCH_BYTES = 1024 * 1024
MAX_GROUP_LOCKS = 100_000
MAX_HALF_MESSAGES = 100_000  # half messages a door checks back itself (more: the consuming side still does)
MAX_TRANSACTION_CHECKS = 15  # RocketMQ's transactionCheckMax: then the half message is left undecided
HALF_SCAN_INTERVAL_S = 1.0
BROKER_NAME = "quorumlog"
# Clients that keep one connection over a multi-address route (grpc's default pick-first): they get every door in
# each route and fail over at once. Others get the answering door only: the Java client balances its calls round
# robin over a route's addresses, which would take a receive to one door and its ack to another.
PICK_FIRST_LANGUAGES = frozenset({"PYTHON"})
AUTH_RE = re.compile(r"MQv2-HMAC-SHA1\s+Credential=([^,]+),\s*SignedHeaders=([^,]+),\s*Signature=([0-9a-fA-F]+)")


def status(code: int, message: str = "") -> pb.Status:
    return pb.Status(code=code, message=message)


OK = status(pb.OK, "OK")


def duration_ms(d: Any) -> int:
    return d.seconds * 1000 + d.nanos // 1_000_000


def code_of(e: QuorumLogError) -> int:
    if isinstance(e, TopicNotExist):
        return pb.TOPIC_NOT_FOUND
    if isinstance(e, EntryTooLarge):
        return pb.MESSAGE_BODY_TOO_LARGE
    if isinstance(e, BadRequest):
        return pb.BAD_REQUEST
    if isinstance(e, Timeout):
        return pb.PROXY_TIMEOUT
    return pb.INTERNAL_SERVER_ERROR  # (the client retries these)


@dataclass(eq=False)
class _HalfMessage:
    """A half message this door stored, checked back with its producer until an outcome is in `_meta`."""
    message: TopicMessage
    client_id: str
    sent_ms: int
    checks: int = 0


@dataclass(eq=False)
class _Outbox:
    """Sends to one group's queues waiting for a request, and how many requests to it are in flight."""
    pending: list = field(default_factory=list)
    in_flight: int = 0


@dataclass(eq=False)
class ClientSession:
    """What a client's Telemetry said about it (RocketMQ's ClientSettings), and its stream to push commands."""
    client_id: str
    client_type: int = 0
    group: str = ""
    topics: set[str] = field(default_factory=set)
    outbox: asyncio.Queue | None = None  # commands to write on its Telemetry stream, while open


class MessagingService:
    def __init__(self, tc: TopicClient, consuming: Consuming, *, node_id: str, token: str | None,
                 endpoints: Callable[[bool], Awaitable[pb.Endpoints]], store_host: str) -> None:
        self.tc = tc
        self.meta = tc.routes.meta
        self.consuming = consuming
        self.node_id = node_id
        self.token = token
        self.endpoints = endpoints
        self.store_host = store_host
        self.clients: dict[str, ClientSession] = {}
        self._round_robin = itertools.count()
        self._types: dict[str, tuple[str | None, float]] = {}
        self._routes: dict[str, tuple[int, float]] = {}
        self._sent: OrderedDict[str, asyncio.Future] = OrderedDict()
        self._group_locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._outbox: dict[str, _Outbox] = {}  # per topic group
        self._half: OrderedDict[tuple[str, int, int], _HalfMessage] = OrderedDict()
        self._tasks: list[asyncio.Task] = []
        self.requests = 0

    def start(self) -> None:
        self._tasks.append(asyncio.ensure_future(self._check_half_messages()))

    async def close(self) -> None:
        for t in self._tasks:
            t.cancel()

    # -- plumbing ----------------------------------------------------------------------------------
    def handler(self) -> grpc.GenericRpcHandler:
        def unary(fn, req_cls, resp_cls):
            return grpc.unary_unary_rpc_method_handler(self._unary(fn, req_cls, resp_cls),
                                                       response_serializer=resp_cls.SerializeToString)

        methods = {
            "QueryRoute": unary(self.query_route, spb.QueryRouteRequest, spb.QueryRouteResponse),
            "Heartbeat": unary(self.heartbeat, spb.HeartbeatRequest, spb.HeartbeatResponse),
            "SendMessage": unary(self.send_message, spb.SendMessageRequest, spb.SendMessageResponse),
            "QueryAssignment": unary(self.query_assignment, spb.QueryAssignmentRequest,
                                     spb.QueryAssignmentResponse),
            "AckMessage": unary(self.ack_message, spb.AckMessageRequest, spb.AckMessageResponse),
            "ForwardMessageToDeadLetterQueue": unary(self.forward_to_dlq, spb.ForwardMessageToDeadLetterQueueRequest,
                                                     spb.ForwardMessageToDeadLetterQueueResponse),
            "EndTransaction": unary(self.end_transaction, spb.EndTransactionRequest, spb.EndTransactionResponse),
            "NotifyClientTermination": unary(self.notify_client_termination, spb.NotifyClientTerminationRequest,
                                             spb.NotifyClientTerminationResponse),
            "ChangeInvisibleDuration": unary(self.change_invisible_duration, spb.ChangeInvisibleDurationRequest,
                                             spb.ChangeInvisibleDurationResponse),
            "ReceiveMessage": grpc.unary_stream_rpc_method_handler(
                self._receive_stream, response_serializer=spb.ReceiveMessageResponse.SerializeToString),
            "Telemetry": grpc.stream_stream_rpc_method_handler(
                self._telemetry, response_serializer=spb.TelemetryCommand.SerializeToString),
        }
        return grpc.method_handlers_generic_handler(SERVICE, methods)

    @staticmethod
    async def _parse(raw: bytes, req_cls: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return req_cls.FromString(raw)
        except (DecodeError, ValueError, TypeError) as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"malformed {req_cls.__name__}: {e}")

    def authorized(self, context: grpc.aio.ServicerContext) -> bool:
        """RocketMQ's request signature with the cluster's token as the secret key (any access key)."""
        if not self.token:
            return True
        md = {k: v for k, v in (context.invocation_metadata() or ())}
        m = AUTH_RE.match(str(md.get("authorization", "")))
        date_time = str(md.get("x-mq-date-time", ""))
        if m is None or not date_time or not m.group(1).strip():
            return False
        expected = hmac.new(self.token.encode(), date_time.encode(), sha1).hexdigest()
        return hmac.compare_digest(expected, m.group(3).lower())

    def _unary(self, fn, req_cls, resp_cls):
        async def behavior(raw: bytes, context: grpc.aio.ServicerContext):
            req = await self._parse(raw, req_cls, context)
            self.requests += 1
            if not self.authorized(context):
                return resp_cls(status=status(pb.UNAUTHORIZED, "bad or missing signature (the secret key is the "
                                                               "cluster's token)"))
            try:
                return await fn(req, context)
            except QuorumLogError as e:
                return resp_cls(status=status(code_of(e), f"{e.code.name}: {e}"))
            except (ConvertError,) as e:
                return resp_cls(status=status(e.code, str(e)))
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - a per-request failure is a status, never a crash
                log.exception("rocketmq door: %s failed", fn.__name__)
                return resp_cls(status=status(pb.INTERNAL_SERVER_ERROR, f"{type(e).__name__}: {e}"))
        return behavior

    @staticmethod
    def _client_id(context: grpc.aio.ServicerContext) -> str:
        for k, v in context.invocation_metadata() or ():
            if k == "x-mq-client-id":
                return str(v)
        return ""

    # -- routes ----------------------------------------------------------------------------------
    async def queues_of(self, topic: str, refresh: bool = False) -> int:
        got = self._routes.get(topic)
        if got is None or refresh or time.monotonic() - got[1] > ROUTE_CACHE_S:
            if not topic:
                raise ConvertError(pb.ILLEGAL_TOPIC, "no topic")
            n = len(await self.tc.routes.route(topic, refresh=True))
            self._routes[topic] = got = (n, time.monotonic())
        return got[0]

    async def topic_type(self, topic: str) -> str | None:
        got = self._types.get(topic)
        if got is None or time.monotonic() - got[1] > ROUTE_CACHE_S:
            raw = await self.meta.kv_get(metadata.topic_type_key(topic))
            got = self._types[topic] = (metadata.decode_topic_type(raw[0] if raw else None), time.monotonic())
        return got[0]

    async def _message_queues(self, topic: str, context) -> list[pb.MessageQueue]:
        n = await self.queues_of(topic, refresh=True)
        ttype = await self.topic_type(topic)
        accept = [pb.MessageType.Value(ttype)] if ttype else [pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION]
        language = ""
        for k, v in context.invocation_metadata() or ():
            if k == "x-mq-language":
                language = str(v).upper()
        endpoints = await self.endpoints(language in PICK_FIRST_LANGUAGES)
        out = []
        for q in range(n):
            mq = pb.MessageQueue(id=q, permission=pb.READ_WRITE, accept_message_types=accept)
            mq.topic.name = topic
            mq.broker.name = BROKER_NAME
            mq.broker.id = 0
            mq.broker.endpoints.CopyFrom(endpoints)
            out.append(mq)
        return out

    async def query_route(self, req: spb.QueryRouteRequest, context) -> spb.QueryRouteResponse:
        return spb.QueryRouteResponse(status=OK, message_queues=await self._message_queues(req.topic.name, context))

    async def query_assignment(self, req: spb.QueryAssignmentRequest, context) -> spb.QueryAssignmentResponse:
        if not req.group.name:
            return spb.QueryAssignmentResponse(status=status(pb.ILLEGAL_CONSUMER_GROUP, "no consumer group"))
        queues = await self._message_queues(req.topic.name, context)
        return spb.QueryAssignmentResponse(status=OK, assignments=[pb.Assignment(message_queue=mq) for mq in queues])

    async def heartbeat(self, req: spb.HeartbeatRequest, context) -> spb.HeartbeatResponse:
        self.consuming.client_seen_ms[self._client_id(context)] = int(time.time() * 1000)
        return spb.HeartbeatResponse(status=OK)

    async def notify_client_termination(self, req, context) -> spb.NotifyClientTerminationResponse:
        client_id = self._client_id(context)
        self.clients.pop(client_id, None)
        self.consuming.client_seen_ms.pop(client_id, None)  # (its renewed messages come again when due)
        return spb.NotifyClientTerminationResponse(status=OK)

    # -- producing -------------------------------------------------------------------------------
    async def send_message(self, req: spb.SendMessageRequest, context) -> spb.SendMessageResponse:
        if not req.messages:
            return spb.SendMessageResponse(status=status(pb.BAD_REQUEST, "no message"))
        client_id = self._client_id(context)
        entries = [await self._send_one(m, client_id) for m in req.messages]
        codes = {e.status.code for e in entries}
        overall = entries[0].status if len(codes) == 1 else status(pb.MULTIPLE_RESULTS, "per entry")
        return spb.SendMessageResponse(status=overall, entries=entries)

    async def _send_one(self, message: pb.Message, client_id: str) -> spb.SendResultEntry:
        mid = message.system_properties.message_id
        try:
            out = to_stored(message)
            if len(out.body) > MAX_BODY_BYTES:
                raise ConvertError(pb.MESSAGE_BODY_TOO_LARGE, f"body over {MAX_BODY_BYTES} bytes")
            n = await self.queues_of(out.topic)
            ttype = await self.topic_type(out.topic)
            if ttype is not None and ttype != out.message_type:
                raise ConvertError(pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                                   f"topic {out.topic} takes {ttype} messages, not {out.message_type}")
        except ConvertError as e:
            return spb.SendResultEntry(status=status(e.code, str(e)), message_id=mid)
        except QuorumLogError as e:
            return spb.SendResultEntry(status=status(code_of(e), f"{e.code.name}: {e}"), message_id=mid)
        fut = self._sent.get(mid) if mid else None
        if fut is None or (fut.done() and (fut.cancelled() or fut.exception() is not None)):
            fut = asyncio.ensure_future(self._store(out, n))
            if mid:
                self._sent[mid] = fut
                while len(self._sent) > DEDUPE_WINDOW:
                    self._sent.popitem(last=False)
        try:
            q, offset = await asyncio.shield(fut)
        except QuorumLogError as e:
            return spb.SendResultEntry(status=status(code_of(e), f"{e.code.name}: {e}"), message_id=mid)
        entry = spb.SendResultEntry(status=OK, message_id=mid, offset=offset)
        if out.message_type == "TRANSACTION":
            entry.transaction_id = f"{q}:{offset}"
            now = int(time.time() * 1000)
            self._half[(out.topic, q, offset)] = _HalfMessage(
                TopicMessage(out.topic, q, offset, out.body, out.key, out.tags, dict(out.properties), now), client_id,
                now)
            while len(self._half) > MAX_HALF_MESSAGES:
                self._half.popitem(last=False)
        return entry

    async def _check_half_messages(self) -> None:
        """RocketMQ's transaction check: a half message this door stored that has no outcome after the
        transaction timeout is checked back with its producer (or another of its topic at this door)."""
        while True:
            await asyncio.sleep(HALF_SCAN_INTERVAL_S)
            now = int(time.time() * 1000)
            for key, h in list(self._half.items()):
                if now - h.sent_ms < TRANSACTION_CHECK_AFTER_MS or self.consuming.recently_checked(key, now):
                    continue
                try:
                    decided = await self.meta.kv_get(metadata.transaction_key(*key))
                except (QuorumLogError, OSError) as e:
                    log.info("rocketmq door: transaction check of %s failed: %s", key, e)
                    break
                if decided is not None or h.checks >= MAX_TRANSACTION_CHECKS:
                    self._half.pop(key, None)
                    continue
                if await self.check_back(key[0], h.message, prefer=h.client_id):
                    h.checks += 1
                    self.consuming.mark_checked(key, now)

    async def _store(self, out, queues: int) -> tuple[int, int]:
        if out.message_group:  # FIFO: the group's queue, and one send of the group in flight (order kept)
            q = queue_for(out.message_group, queues)
            lock = self._group_locks.setdefault((out.topic, out.message_group), asyncio.Lock())
            async with lock:
                offset = await self._append(out, q)
            if not lock.locked() and len(self._group_locks) > MAX_GROUP_LOCKS:
                self._group_locks = {k: v for k, v in self._group_locks.items() if v.locked()}
        else:
            q = next(self._round_robin) % queues
            offset = await self._append(out, q)
        return q, offset

    async def _append(self, out, q: int) -> int:
        """The message's queue offset, once stored. Sends to the queues of one group share requests (one log
        batch, one fsync for many clients' sends, as the own producer batches): up to MAX_IN_FLIGHT_PER_GROUP
        requests at a time, each with the sends that arrived meanwhile (at most MAX_SEND_BATCH, about
        MAX_SEND_BATCH_BYTES). A bad message fails its own send only (encoded here)."""
        placement = self.tc.routes.cached(out.topic) or await self.tc.routes.route(out.topic)
        group = placement[q]
        encoded = encode_fields(out.topic, out.body, q, out.key, out.tags, out.properties, int(time.time() * 1000))
        box = self._outbox.get(group)
        if box is None:
            box = self._outbox[group] = _Outbox()
        fut = asyncio.get_running_loop().create_future()
        box.pending.append((encoded, out.topic, q, fut))
        if box.in_flight < MAX_IN_FLIGHT_PER_GROUP and len(box.pending) == 1:
            asyncio.get_running_loop().call_soon(self._flush, group)  # (sends of this loop turn join it)
        return await fut

    def _flush(self, group: str) -> None:
        box = self._outbox.get(group)
        if box is None or not box.pending or box.in_flight >= MAX_IN_FLIGHT_PER_GROUP:
            return
        n, size = 0, 0
        while n < len(box.pending) and n < MAX_SEND_BATCH and (n == 0 or size < MAX_SEND_BATCH_BYTES):
            size += len(box.pending[n][0])
            n += 1
        batch, box.pending = box.pending[:n], box.pending[n:]
        box.in_flight += 1
        asyncio.ensure_future(self._send_batch(group, box, batch))

    async def _send_batch(self, group: str, box: "_Outbox", batch: list) -> None:
        try:
            resp = await self.tc.routes.send(group, batch[0][1], batch[0][2], tuple(e for e, _, _, _ in batch))
        except BaseException as e:  # noqa: BLE001 - every send of the batch gets the error
            for *_, fut in batch:
                if not fut.done():
                    fut.set_exception(e)
            if not isinstance(e, Exception):
                raise
        else:
            for (*_, fut), offset in zip(batch, resp.offsets):
                if not fut.done():
                    fut.set_result(offset)
        finally:
            box.in_flight -= 1
            if box.pending:
                self._flush(group)

    async def end_transaction(self, req: spb.EndTransactionRequest, context) -> spb.EndTransactionResponse:
        q, _, offset = req.transaction_id.partition(":")
        if not (q.isdigit() and offset.isdigit()):
            return spb.EndTransactionResponse(status=status(pb.INVALID_TRANSACTION_ID,
                                                            f"transaction id {req.transaction_id!r}"))
        if req.resolution == pb.COMMIT:
            decision = Decision.COMMIT
        elif req.resolution == pb.ROLLBACK:
            decision = Decision.ROLLBACK
        else:
            return spb.EndTransactionResponse(status=status(pb.BAD_REQUEST, "resolution: COMMIT or ROLLBACK"))
        topic = req.topic.name
        if int(q) >= await self.queues_of(topic):
            return spb.EndTransactionResponse(status=status(pb.INVALID_TRANSACTION_ID, f"no queue {q} in {topic}"))
        try:
            await self.meta.kv_put(metadata.transaction_key(topic, int(q), int(offset)),
                                   decision.value.encode(), expected_version=0)
        except MetadataVersionConflict:
            pass  # decided already: the first decision stands
        self.consuming.decide(topic, int(q), int(offset), decision)
        self._half.pop((topic, int(q), int(offset)), None)
        return spb.EndTransactionResponse(status=OK)

    async def check_back(self, topic: str, m: TopicMessage, prefer: str = "") -> bool:
        """Ask a connected producer of `topic` (`prefer`, the one that sent it, first) for a half message's
        outcome (RecoverOrphanedTransactionCommand)."""
        first = self.clients.get(prefer)
        for c in ([first] if first is not None else []) + list(self.clients.values()):
            if c.client_type == pb.PRODUCER and topic in c.topics and c.outbox is not None:
                cmd = spb.TelemetryCommand()
                cmd.recover_orphaned_transaction_command.message.CopyFrom(to_proto(m, store_host=self.store_host))
                cmd.recover_orphaned_transaction_command.transaction_id = f"{m.queue_id}:{m.queue_offset}"
                c.outbox.put_nowait(cmd)
                log.info("rocketmq door: checking back %s/%d@%d with producer %s", topic, m.queue_id,
                         m.queue_offset, c.client_id)
                return True
        return False

    # -- consuming -------------------------------------------------------------------------------
    async def _receive_stream(self, raw: bytes, context) -> AsyncIterator[spb.ReceiveMessageResponse]:
        req = await self._parse(raw, spb.ReceiveMessageRequest, context)
        self.requests += 1
        if not self.authorized(context):
            yield spb.ReceiveMessageResponse(status=status(pb.UNAUTHORIZED, "bad or missing signature"))
            return
        try:
            deliveries, invisible_ms = await self._receive(req, context)
        except ConvertError as e:
            yield spb.ReceiveMessageResponse(status=status(e.code, str(e)))
            return
        except QuorumLogError as e:
            yield spb.ReceiveMessageResponse(status=status(code_of(e), f"{e.code.name}: {e}"))
            return
        if not deliveries:
            yield spb.ReceiveMessageResponse(status=status(pb.MESSAGE_NOT_FOUND, "no new message"))
            return
        if req.auto_renew:  # a push consumer: invisible while its client lives (RocketMQ's proxy renews too)
            client_id = self._client_id(context)
            for st, d in deliveries:
                self.consuming.auto_renew(st, d, invisible_ms, client_id)
        yield spb.ReceiveMessageResponse(status=OK)
        for st, d in deliveries:
            yield spb.ReceiveMessageResponse(message=to_proto(
                d.message.ref, receipt_handle=self.consuming.handle_of(st, d), attempt=d.attempt,
                invisible_ms=invisible_ms, store_host=self.store_host))
        ts = spb.ReceiveMessageResponse()
        now = time.time()
        ts.delivery_timestamp.seconds = int(now)
        ts.delivery_timestamp.nanos = int((now % 1) * 1e9)
        yield ts

    async def _receive(self, req: spb.ReceiveMessageRequest, context):
        group, topic = req.group.name, req.message_queue.topic.name
        if not group:
            raise ConvertError(pb.ILLEGAL_CONSUMER_GROUP, "no consumer group")
        n = await self.queues_of(topic)
        tag_filter = parse_filter(req.filter_expression if req.HasField("filter_expression") else None)
        batch = req.batch_size or DEFAULT_RECEIVE_BATCH
        if not 0 < batch <= MAX_RECEIVE_BATCH:
            raise ConvertError(pb.BAD_REQUEST, f"batch_size {req.batch_size}: 1..{MAX_RECEIVE_BATCH}")
        if req.HasField("invisible_duration"):
            invisible_ms = duration_ms(req.invisible_duration)
            if not MIN_INVISIBLE_MS <= invisible_ms <= MAX_INVISIBLE_MS:
                raise ConvertError(pb.ILLEGAL_INVISIBLE_TIME, f"invisible duration {invisible_ms} ms: "
                                                              f"{MIN_INVISIBLE_MS}..{MAX_INVISIBLE_MS} ms")
        else:
            invisible_ms = DEFAULT_INVISIBLE_MS
        wait_ms = duration_ms(req.long_polling_timeout) if req.HasField("long_polling_timeout") \
            else DEFAULT_LONG_POLLING_MS
        if wait_ms < 0:
            raise ConvertError(pb.ILLEGAL_POLLING_TIME, f"long polling timeout {wait_ms} ms")
        wait_ms = min(wait_ms, MAX_LONG_POLLING_MS)
        left = context.time_remaining()
        if left is not None:
            wait_ms = max(0, min(wait_ms, int(left * 1000) - LONG_POLL_MARGIN_MS))
        first = req.message_queue.id if 0 <= req.message_queue.id < n else 0
        deliveries = await self.consuming.receive(group, topic, n, first, tag_filter, batch, invisible_ms, wait_ms)
        return deliveries, invisible_ms

    async def ack_message(self, req: spb.AckMessageRequest, context) -> spb.AckMessageResponse:
        entries = []
        for e in req.entries:
            ok = self.consuming.ack(req.group.name, req.topic.name, e.receipt_handle)
            entries.append(spb.AckMessageResultEntry(
                message_id=e.message_id, receipt_handle=e.receipt_handle,
                status=OK if ok else status(pb.INVALID_RECEIPT_HANDLE, "receipt handle names no delivery "
                                                                       "(stale, forged, or of another door)")))
        if not entries:
            return spb.AckMessageResponse(status=status(pb.BAD_REQUEST, "no entry"))
        codes = {e.status.code for e in entries}
        overall = entries[0].status if len(codes) == 1 else status(pb.MULTIPLE_RESULTS, "per entry")
        return spb.AckMessageResponse(status=overall, entries=entries)

    async def change_invisible_duration(self, req, context) -> spb.ChangeInvisibleDurationResponse:
        invisible_ms = duration_ms(req.invisible_duration)
        if not 0 <= invisible_ms <= MAX_INVISIBLE_MS:
            return spb.ChangeInvisibleDurationResponse(status=status(pb.ILLEGAL_INVISIBLE_TIME,
                                                                     f"invisible duration {invisible_ms} ms"))
        handle = self.consuming.change_invisible(req.group.name, req.topic.name, req.receipt_handle, invisible_ms)
        if handle is None:
            return spb.ChangeInvisibleDurationResponse(status=status(pb.INVALID_RECEIPT_HANDLE,
                                                                     "receipt handle names no delivery"))
        return spb.ChangeInvisibleDurationResponse(status=OK, receipt_handle=handle)

    async def forward_to_dlq(self, req, context) -> spb.ForwardMessageToDeadLetterQueueResponse:
        if not self.consuming.forward_to_dead_letter(req.group.name, req.topic.name, req.receipt_handle):
            return spb.ForwardMessageToDeadLetterQueueResponse(status=status(pb.INVALID_RECEIPT_HANDLE,
                                                                             "receipt handle names no delivery"))
        return spb.ForwardMessageToDeadLetterQueueResponse(status=OK)

    # -- telemetry -------------------------------------------------------------------------------
    async def _telemetry(self, request_iterator, context) -> None:
        self.requests += 1
        if not self.authorized(context):
            await context.write(spb.TelemetryCommand(status=status(pb.UNAUTHORIZED, "bad or missing signature")))
            return
        client_id = self._client_id(context)
        outbox: asyncio.Queue = asyncio.Queue()
        session = self.clients.get(client_id) or ClientSession(client_id)
        self.clients[client_id] = session
        session.outbox = outbox

        async def read() -> None:
            while True:
                try:
                    raw = await context.read()
                except asyncio.CancelledError:
                    raise
                except Exception:  # noqa: BLE001 - the stream broke: end the call
                    raw = grpc.aio.EOF
                if raw is grpc.aio.EOF:
                    outbox.put_nowait(None)
                    return
                try:
                    cmd = spb.TelemetryCommand.FromString(raw)
                except DecodeError:
                    outbox.put_nowait(spb.TelemetryCommand(status=status(pb.BAD_REQUEST, "malformed command")))
                    continue
                if cmd.HasField("settings"):
                    outbox.put_nowait(await self._settings(session, cmd.settings))
                # (thread stack traces and verify results: nothing asks for them)

        reader = asyncio.ensure_future(read())
        try:
            while True:
                cmd = await outbox.get()
                if cmd is None:
                    return
                await context.write(cmd)
        finally:
            reader.cancel()
            if session.outbox is outbox:
                session.outbox = None

    async def _settings(self, session: ClientSession, s: pb.Settings) -> spb.TelemetryCommand:
        """Remember the client's settings; answer the server's (what RocketMQ's proxy answers)."""
        session.client_type = s.client_type
        out = pb.Settings()
        out.client_type = s.client_type
        out.request_timeout.seconds = REQUEST_TIMEOUT_S
        if s.HasField("access_point"):
            out.access_point.CopyFrom(s.access_point)
        if s.WhichOneof("pub_sub") == "publishing":
            session.topics = {r.name for r in s.publishing.topics}
            out.publishing.max_body_size = MAX_BODY_BYTES
            out.publishing.validate_message_type = True
            out.backoff_policy.max_attempts = 3
            out.backoff_policy.exponential_backoff.initial.nanos = 10_000_000
            out.backoff_policy.exponential_backoff.max.seconds = 1
            out.backoff_policy.exponential_backoff.multiplier = 2.0
        else:
            sub = s.subscription
            session.group = sub.group.name
            session.topics = {e.topic.name for e in sub.subscriptions}
            try:
                policy = await self.consuming.policy(sub.group.name) if sub.group.name else metadata.GroupPolicy()
            except (QuorumLogError, OSError) as e:  # (`_meta` unreachable now: the defaults, synced again later)
                log.info("rocketmq door: the policy of group %s: %s", sub.group.name, e)
                policy = metadata.GroupPolicy()
            out.subscription.group.CopyFrom(sub.group)
            out.subscription.subscriptions.extend(sub.subscriptions)
            out.subscription.fifo = policy.fifo
            out.subscription.receive_batch_size = DEFAULT_RECEIVE_BATCH
            out.subscription.long_polling_timeout.seconds = DEFAULT_LONG_POLLING_MS // 1000
            out.backoff_policy.max_attempts = policy.max_attempts
            for seconds in policy.backoff_s:
                out.backoff_policy.customized_backoff.next.add(seconds=seconds)
        cmd = spb.TelemetryCommand(status=OK)
        cmd.settings.CopyFrom(out)
        return cmd
