"""The Kafka front door of one node: a listener that speaks Kafka's wire protocol and answers each request
with the own client's requests (docs/kafka.md).

One task per connection reads frames; each request is handled in a task of its own, and the answers are
written in the order the requests came (Kafka's per-connection ordering; clients pipeline). Produce batches of
one (producer, partition) are appended one after the other, so an idempotent producer's sequences are checked
in order. A malformed frame or an absurd size closes that connection only; an API or version we do not serve
gets UNSUPPORTED_VERSION.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import random
import struct
import time
from collections import OrderedDict
from typing import Any, Callable

from ...client.client import Client
from ...client.groups import GroupAdmin
from ...client.topics import DEFAULT_QUEUES, TopicAdmin, TopicClient, TopicMessage
from ...config import NodeConfig
from ...errors import (BadRequest, DuplicateSequenceTooOld, EntryTooLarge, MetadataVersionConflict, NetworkError,
                       NotLeader, OffsetTooBig, OffsetTooSmall, QuorumLogError, Timeout, TopicNotExist)
from ...topic.group_coordinator import OFFSETS_PREFIX, offset_key
from ...format.log_entry import load_compiled
from ...topic.message import DEFAULT_MAX_MESSAGE_BYTES, TOPIC_RE, decode_pulled
from .. import client_options, door_key
from . import protocol as P
from .groups import GroupCoordinator
from .read_ahead import ReadAhead
from .mapping import encode_record, record_of
from .records import (ATTR_CONTROL, ATTR_TRANSACTIONAL, CorruptBatch, RecordBatch, decode_batches, encode_batch)
from .view import META_GROUP, Broker, ViewKeeper, broker_id_of

log = logging.getLogger(__name__)

CLUSTER_ID = "quorumlog"
KAFKA_GROUPS_PREFIX = "kafka-groups/"  # `_meta`: a Kafka consumer group's membership, written by its coordinator
REGISTER_RETRY_S = 1.0
TICK_S = 0.2
ANSWER_GRACE_S = 5.0  # answers still due when a connection's reading side ends
MAX_IN_FLIGHT_PER_CONNECTION = 64  # requests read ahead of their answers on one connection
MAX_PRODUCER_STATES = 100_000  # (producer, partition) sequence entries kept (least recently used go)
MAX_FETCH_MESSAGES = 4_000
FETCH_MESSAGE_ESTIMATE_BYTES = 256  # a partition's stored message size until its first fetch says
MAX_SIZE_ESTIMATES = 100_000
AFTER_SENT = "_after_sent"  # a handler's answer: what to start once it is written

fast = load_compiled("quorumlog.doors.kafka._fastrecords")  # a Fetch answer's records in one C call, or None


class _Connection:
    __slots__ = ("peer", "authenticated", "sasl_mechanism", "raw_sasl")

    def __init__(self, peer: str, authenticated: bool) -> None:
        self.peer = peer
        self.authenticated = authenticated
        self.sasl_mechanism: str | None = None
        self.raw_sasl = False  # after SaslHandshake v0: the next frame is the bare PLAIN token


class KafkaDoor:
    kind = "kafka"

    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self.node_id = config.node_id
        self.host = config.peers[config.node_id][0]
        self.port = config.kafka_port
        self.broker = Broker(self.node_id, broker_id_of(self.node_id), self.host, self.port)
        self._token = config.auth_token()
        self._options = client_options(config)
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task] = set()
        self._closed = False
        self.topics: TopicClient | None = None
        self.admin: TopicAdmin | None = None
        self.meta: Client | None = None
        self.group_admin: GroupAdmin | None = None
        self.views: ViewKeeper | None = None
        self.coordinator = GroupCoordinator()
        self._producers: OrderedDict[tuple, int] = OrderedDict()  # (pid, epoch, topic, partition) -> next seq
        self._producer_locks: dict[tuple, asyncio.Lock] = {}
        self._registered = False
        self._connections = 0
        self._requests = 0
        self._was_coordinator = False
        self._published: dict[str, tuple[int, str]] = {}  # group -> (generation, state) last written to `_meta`
        self._message_bytes: dict[tuple[str, int], int] = {}  # (topic, partition) -> stored bytes per message
        self._read_ahead = ReadAhead(self._spawn)

    # -- life ------------------------------------------------------------------------------------------------
    async def start(self) -> None:
        peers = dict(self.config.peers)
        self.topics = TopicClient(peers, **self._options)
        self.admin = TopicAdmin(peers, **self._options)
        self.meta = Client(peers, group=META_GROUP, **self._options)
        self.group_admin = GroupAdmin(peers, timeout_ms=1_500, token=self._options.get("token"),
                                      tls_ca=self._options.get("tls_ca"))
        self.views = ViewKeeper(self.group_admin, self.meta, self.broker)
        ssl_ctx = None
        if self.config.tls_cert:
            from ...transport.tls import http_context
            ssl_ctx = http_context(self.config.tls_cert, self.config.tls_key)
        self._server = await asyncio.start_server(self._serve, self.config.listen_host, self.port, ssl=ssl_ctx)
        self._spawn(self._register())
        self._spawn(self._background())
        log.info("kafka door listening node=%s port=%d broker_id=%d", self.node_id, self.port, self.broker.broker_id)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._server is not None:
            self._server.close()
        for t in list(self._tasks):
            t.cancel()
        for t in list(self._tasks):
            try:
                await t
            except BaseException:  # noqa: BLE001 - cancelled or failed: closing anyway
                pass
        self.coordinator.clear()
        self._read_ahead.clear()
        for c in (self.topics, self.admin, self.meta, self.group_admin):
            if c is None:
                continue
            try:
                if isinstance(c, GroupAdmin):
                    await c.__aexit__(None, None, None)
                else:
                    await c.close()
            except Exception:  # noqa: BLE001
                pass

    def status(self) -> dict[str, Any]:
        return {"kind": self.kind, "port": self.port, "broker_id": self.broker.broker_id,
                "registered": self._registered, "connections": self._connections, "requests": self._requests,
                "groups": self.coordinator.describe(),
                "read_ahead": {"started": self._read_ahead.started, "taken": self._read_ahead.taken}}

    def _spawn(self, coro) -> asyncio.Task:
        t = asyncio.ensure_future(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)
        return t

    async def _register(self) -> None:
        """Our address in `_meta` (doors/kafka/<node>), retried until `_meta` answers."""
        doc = json.dumps({"host": self.host, "port": self.port, "broker_id": self.broker.broker_id}).encode()
        while not self._closed:
            try:
                await self.meta.kv_put(door_key(self.kind, self.node_id), doc)
                self._registered = True
                await self.views.refresh(force=True)
                return
            except Exception as e:  # noqa: BLE001 - `_meta` may not exist yet: try again
                log.debug("kafka door: cannot register in _meta yet: %s", e)
                await asyncio.sleep(REGISTER_RETRY_S)

    async def _background(self) -> None:
        """The cluster view's periodic refresh, and the group coordinator's clock."""
        last = 0.0
        while not self._closed:
            await asyncio.sleep(TICK_S)
            try:
                last = await self._tick(last)
            except Exception:  # noqa: BLE001 - a bug in one tick must not stop the clock of every group
                log.exception("kafka door: background tick failed")

    async def _tick(self, last: float) -> float:
        """One tick: the view's periodic refresh (every 2 s), coordinator hand-over, sessions, records."""
        now = time.monotonic()
        if now - last >= 2.0:
            last = now
            await self.views.refresh()
        coordinating = self._is_coordinator()
        if self._was_coordinator and not coordinating:
            log.info("kafka door: no longer the group coordinator node=%s", self.node_id)
            self.coordinator.clear()
            self._published.clear()
        self._was_coordinator = coordinating
        self.coordinator.tick(now)
        if coordinating:
            self._publish_groups()
        return last

    def _publish_groups(self) -> None:
        """Each group's membership, once it is stable or empty, in `_meta` (`kafka-groups/<group>`), for
        `consumer-group describe` and the status page: members, client ids and assigned partitions."""
        for gid, g in self.coordinator.groups.items():
            if g.state not in ("Stable", "Empty"):
                continue
            mark = (g.generation, g.state)
            if self._published.get(gid) == mark:
                continue
            self._published[gid] = mark
            doc = {"group": gid, "state": g.state, "generation": g.generation, "protocol": g.protocol_name,
                   "leader": g.leader, "coordinator": self.node_id,
                   "members": [{"member_id": m.member_id, "client_id": m.client_id,
                                "assignment": consumer_assignment(m.assignment)} for m in g.members.values()]}
            self._spawn(self._put_quietly(KAFKA_GROUPS_PREFIX + gid, json.dumps(doc, sort_keys=True).encode()))

    async def _put_quietly(self, key: str, value: bytes) -> None:
        try:
            await self.meta.kv_put(key, value)
        except QuorumLogError as e:
            log.debug("kafka door: cannot record %s: %s", key, e)

    # -- connections -----------------------------------------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._tasks.add(task)
        self._connections += 1
        peer = str(writer.get_extra_info("peername"))
        conn = _Connection(peer, authenticated=self._token is None)
        frames = P.FrameReader()
        answers: asyncio.Queue = asyncio.Queue(MAX_IN_FLIGHT_PER_CONNECTION)
        sender = asyncio.ensure_future(self._send_answers(answers, writer))
        try:
            while not self._closed:
                data = await reader.read(256 * 1024)
                if not data:
                    break
                frames.feed(data)
                while True:
                    frame = frames.next_frame()
                    if frame is None:
                        break
                    self._requests += 1
                    if conn.raw_sasl:
                        ok = self._plain_ok(frame)
                        if not ok:
                            return
                        conn.raw_sasl, conn.authenticated = False, True
                        await answers.put(_done(struct.pack(">i", 0)))
                        continue
                    header = P.parse_header(frame)
                    api = P.served(header.api_key, header.api_version)
                    if api is None:
                        log.debug("kafka door: unsupported api=%d v%d from %s", header.api_key, header.api_version,
                                  peer)
                        await answers.put(_done(P.unsupported_response(header)))
                        continue
                    if not conn.authenticated and api.key not in (17, 18, 36):
                        log.info("kafka door: %s sent %s before authenticating: closed", peer, api.name)
                        return
                    request = P.decode_request(api, header, frame)
                    if api.key in (17, 36):  # SASL: in line, it changes what the connection may do next
                        await answers.put(_done(self._sasl(conn, api, header, request)))
                        continue
                    if api.key == 0 and request.acks == 0:
                        await self._handle(api, header, request)  # no answer (acks=0): in order, then on
                        continue
                    await answers.put(asyncio.ensure_future(self._handle(api, header, request)))
        except (P.ProtocolError, CorruptBatch) as e:
            log.info("kafka door: closing %s: %s", peer, e)
        except (ConnectionError, asyncio.IncompleteReadError, OSError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception:  # noqa: BLE001 - a bug in one request closes its connection, never the door
            log.exception("kafka door: closing %s after an unexpected error", peer)
        finally:
            # Answers still due go out (a client may close its side after its last request), for a while; a
            # closing door or a silent client ends them (a join can wait for a whole rebalance timeout).
            if not self._closed:
                try:
                    answers.put_nowait(None)
                    await asyncio.wait_for(asyncio.shield(sender), ANSWER_GRACE_S)
                except BaseException:  # noqa: BLE001 - full queue, timeout or cancelled: stop below
                    pass
            sender.cancel()
            while not answers.empty():
                fut = answers.get_nowait()
                if fut is not None:
                    fut.cancel()
            writer.close()
            self._connections -= 1
            self._tasks.discard(task)

    async def _send_answers(self, answers: asyncio.Queue, writer: asyncio.StreamWriter) -> None:
        while True:
            fut = await answers.get()
            if fut is None:
                return
            try:
                data = await fut
            except Exception:  # noqa: BLE001 - a handler bug: the connection cannot stay in order
                log.exception("kafka door: a request failed; closing the connection")
                writer.close()
                return
            after_sent = None
            if isinstance(data, tuple):
                data, after_sent = data
            if data:
                writer.write(data)
                for start in after_sent or ():
                    start()
                try:
                    await writer.drain()
                except (ConnectionError, OSError):
                    return

    async def _handle(self, api: P.Api, header: P.RequestHeader, request: Any) -> bytes | tuple[bytes, list]:
        """The answer's frame; with what to start once it is written (a Fetch's read-ahead), if anything: work
        begun before would delay the answer it prepares for."""
        handler = getattr(self, "_" + api.name.lower())
        body = await handler(request, header.api_version, header)
        if body is None:
            return b""
        after_sent = body.pop(AFTER_SENT, None)
        data = P.encode_response(api, header.api_version, header.correlation_id, body)
        return data if not after_sent else (data, after_sent)

    # -- SASL ------------------------------------------------------------------------------------------------
    def _plain_ok(self, token: bytes) -> bool:
        parts = token.split(b"\x00")
        if len(parts) != 3 or self._token is None:
            return self._token is None
        return hmac.compare_digest(parts[2], self._token.encode())

    def _sasl(self, conn: _Connection, api: P.Api, header: P.RequestHeader, request: Any) -> bytes:
        v = header.api_version
        if api.key == 17:
            ok = request.mechanism == "PLAIN"
            conn.sasl_mechanism = request.mechanism if ok else None
            conn.raw_sasl = ok and v == 0
            return P.encode_response(api, v, header.correlation_id,
                                     {"error_code": P.NONE if ok else P.UNSUPPORTED_SASL_MECHANISM,
                                      "mechanisms": ["PLAIN"]})
        if conn.sasl_mechanism != "PLAIN":
            return P.encode_response(api, v, header.correlation_id,
                                     {"error_code": P.ILLEGAL_SASL_STATE, "error_message": "SaslHandshake first",
                                      "auth_bytes": b""})
        if self._plain_ok(bytes(request.auth_bytes or b"")):
            conn.authenticated = True
            return P.encode_response(api, v, header.correlation_id,
                                     {"error_code": P.NONE, "error_message": None, "auth_bytes": b"",
                                      "session_lifetime_ms": 0})
        return P.encode_response(api, v, header.correlation_id,
                                 {"error_code": P.SASL_AUTHENTICATION_FAILED,
                                  "error_message": "authentication failed: the password must be the cluster's token",
                                  "auth_bytes": b""})

    # -- ApiVersions, Metadata -------------------------------------------------------------------------------
    async def _apiversions(self, req: Any, v: int, h: P.RequestHeader | None = None) -> dict:
        return P.api_versions_body(P.NONE)

    def _leader_of(self, group: str) -> str | None:
        return self.views.view.leaders.get(group)

    def _coordinator_node(self) -> str | None:
        """The node whose door coordinates every group: the `_meta` leader's; when that node runs no Kafka door,
        the live door with the lowest broker id (every door computes the same from the same view)."""
        view = self.views.view
        leader = view.leaders.get(META_GROUP)
        if leader is None or leader in view.brokers:
            return leader
        live = [b for nid, b in view.brokers.items() if nid in view.live]
        return min(live, key=lambda b: b.broker_id).node_id if live else None

    def _is_coordinator(self) -> bool:
        return self._coordinator_node() == self.node_id

    async def _placement(self, topic: str, refresh: bool = False) -> list[str] | None:
        """The group of each of the topic's queues; None when there is no such topic. A `_meta` that cannot
        answer now raises (QuorumLogError): callers answer LEADER_NOT_AVAILABLE, which every client retries."""
        try:
            return await self.topics.routes.route(topic, refresh=refresh)
        except (TopicNotExist, BadRequest):
            return None

    async def _metadata(self, req: Any, v: int, h: P.RequestHeader | None = None) -> dict:
        view = await self.views.refresh()
        if req.topics is None:
            try:
                names = sorted(await self.admin.list())
            except QuorumLogError as e:
                log.info("kafka door: cannot list topics now: %s", e)
                names = []
        else:
            names = [t.name for t in req.topics]
        topics = []
        missing_leader = False

        async def placement_of(name: str) -> list[str] | None | QuorumLogError:
            try:
                return await self._placement(name, refresh=True)
            except QuorumLogError as e:
                return e

        placements = await asyncio.gather(*(placement_of(n) for n in names))
        for name, placement in zip(names, placements):
            if isinstance(placement, QuorumLogError):
                topics.append({"error_code": P.LEADER_NOT_AVAILABLE, "name": name, "is_internal": False,
                               "partitions": []})
                continue
            if placement is None:
                topics.append({"error_code": P.UNKNOWN_TOPIC_OR_PARTITION if TOPIC_RE.match(name or "")
                               else P.INVALID_TOPIC_EXCEPTION, "name": name, "is_internal": False,
                               "partitions": []})
                continue
            parts = []
            for q, group in enumerate(placement):
                leader = view.leaders.get(group)
                b = view.brokers.get(leader) if leader else None
                if b is None:
                    missing_leader = True
                replicas = [view.brokers[n].broker_id for n in view.members.get(group, []) if n in view.brokers]
                isr = [view.brokers[n].broker_id for n in view.members.get(group, [])
                       if n in view.brokers and n in view.live]
                parts.append({"error_code": P.NONE if b else P.LEADER_NOT_AVAILABLE, "partition_index": q,
                              "leader_id": b.broker_id if b else -1, "leader_epoch": -1,
                              "replica_nodes": replicas or ([b.broker_id] if b else []),
                              "isr_nodes": isr or ([b.broker_id] if b else []), "offline_replicas": []})
            topics.append({"error_code": P.NONE, "name": name, "is_internal": False, "partitions": parts})
        if missing_leader:
            self._spawn(self.views.refresh(force=True))
        brokers = [b for nid, b in view.brokers.items() if nid in view.live or nid == self.node_id]
        controller = view.brokers.get(view.leaders.get(META_GROUP) or "")
        return {"throttle_time_ms": 0,
                "brokers": [{"node_id": b.broker_id, "host": b.host, "port": b.port, "rack": None}
                            for b in sorted(brokers, key=lambda b: b.broker_id)],
                "cluster_id": CLUSTER_ID, "controller_id": controller.broker_id if controller else self.broker.broker_id,
                "topics": topics}

    # -- Produce ---------------------------------------------------------------------------------------------
    async def _produce(self, req: Any, v: int, h: P.RequestHeader | None = None) -> dict | None:
        responses = []
        jobs = []
        for td in req.topic_data:
            parts = []
            responses.append({"name": td.name, "partition_responses": parts})
            for pd in td.partition_data:
                out = {"index": pd.index, "error_code": P.NONE, "base_offset": -1, "log_append_time_ms": -1,
                       "log_start_offset": -1, "record_errors": [], "error_message": None}
                parts.append(out)
                if req.transactional_id is not None:
                    out["error_code"] = P.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                    out["error_message"] = "transactions are not supported by quorumlog's Kafka door"
                    continue
                jobs.append(self._produce_partition(td.name, pd.index, pd.records, out))
        await asyncio.gather(*jobs)
        if req.acks == 0:
            return None
        return {"responses": responses, "throttle_time_ms": 0}

    async def _produce_partition(self, topic: str, partition: int, records: bytes | None, out: dict) -> None:
        try:
            placement = await self._placement(topic)
        except QuorumLogError:
            out["error_code"] = P.LEADER_NOT_AVAILABLE
            return
        if placement is None or not 0 <= partition < len(placement):
            out["error_code"] = P.UNKNOWN_TOPIC_OR_PARTITION
            return
        if self._leader_of(placement[partition]) != self.node_id:
            out["error_code"] = P.NOT_LEADER_OR_FOLLOWER
            self._spawn(self.views.refresh())
            return
        try:
            batches = decode_batches(records)
        except CorruptBatch as e:
            out["error_code"], out["error_message"] = P.CORRUPT_MESSAGE, str(e)
            return
        for batch in batches:
            if batch.attributes & (ATTR_TRANSACTIONAL | ATTR_CONTROL):
                out["error_code"] = P.UNSUPPORTED_FOR_MESSAGE_FORMAT
                out["error_message"] = "transactional and control batches are not supported"
                return
            try:
                bodies = tuple(encode_record(topic, partition, r, DEFAULT_MAX_MESSAGE_BYTES) for r in batch.records)
            except EntryTooLarge as e:
                out["error_code"], out["error_message"] = P.MESSAGE_TOO_LARGE, str(e)
                return
            except BadRequest as e:
                out["error_code"], out["error_message"] = P.INVALID_RECORD, str(e)
                return
            if not bodies:
                continue
            code, base = await self._append(topic, partition, placement[partition], batch, bodies)
            out["error_code"] = code
            if code != P.NONE:
                return
            if out["base_offset"] == -1:
                out["base_offset"] = base

    async def _append(self, topic: str, partition: int, group: str, batch: RecordBatch,
                      bodies: tuple[bytes, ...]) -> tuple[int, int]:
        """(error code, base offset) of one batch. An idempotent producer's batch is sent with a producer id
        derived from (producer id, epoch, topic, partition) and its base sequence, so a retry — here or at
        another door after a failover — is stored once and answered with the original offsets."""
        if batch.producer_id < 0 or batch.base_sequence < 0:
            return await self._send(topic, partition, group, bodies, None, None)
        key = (batch.producer_id, batch.producer_epoch, topic, partition)
        lock = self._producer_locks.get(key)
        if lock is None:
            lock = self._producer_locks[key] = asyncio.Lock()
        async with lock:
            expected = self._producers.get(key)
            if expected is not None and batch.base_sequence > expected:
                return P.OUT_OF_ORDER_SEQUENCE_NUMBER, -1
            client_id = _client_id_of(key)
            code, base = await self._send(topic, partition, group, bodies, client_id, batch.base_sequence)
            if code == P.NONE:
                nxt = batch.base_sequence + len(bodies)
                if expected is None or nxt > expected:
                    self._producers[key] = nxt
            elif expected is None:
                # The first batch we saw failed: the batches pipelined behind it must wait for its retry, not
                # be stored before it.
                self._producers[key] = batch.base_sequence
            self._producers.move_to_end(key)
            while len(self._producers) > MAX_PRODUCER_STATES:
                old, _ = self._producers.popitem(last=False)
                old_lock = self._producer_locks.get(old)
                if old_lock is not None and not old_lock.locked():
                    del self._producer_locks[old]
            return code, base

    async def _send(self, topic: str, partition: int, group: str, bodies: tuple[bytes, ...],
                    client_id: int | None, seq: int | None) -> tuple[int, int]:
        try:
            resp = await self.topics.routes.send(group, topic, partition, bodies, client_id=client_id, seq=seq)
        except (NotLeader, NetworkError, Timeout) as e:
            log.debug("kafka door: produce to %s/%d failed: %s", topic, partition, e)
            self._spawn(self.views.refresh(force=True))
            return P.NOT_LEADER_OR_FOLLOWER, -1
        except EntryTooLarge:
            return P.MESSAGE_TOO_LARGE, -1
        except DuplicateSequenceTooOld:
            return P.NONE, -1  # a retry so old the producer table forgot it: stored, once (offsets unknown)
        except QuorumLogError as e:
            log.info("kafka door: produce to %s/%d refused: %s", topic, partition, e)
            return (P.REQUEST_TIMED_OUT if e.retriable else P.UNKNOWN_SERVER_ERROR), -1
        offsets = resp.offsets
        return P.NONE, (offsets[0] if offsets else -1)

    # -- Fetch -----------------------------------------------------------------------------------------------
    async def _fetch(self, req: Any, v: int, h: P.RequestHeader | None = None) -> dict:
        wanted = [(t.topic, p.partition, p.fetch_offset, p.partition_max_bytes)
                  for t in req.topics for p in t.partitions]
        results: dict[tuple[str, int], dict] = {}
        after_sent: list[Callable[[], None]] = []
        first = await asyncio.gather(*(self._fetch_partition(t, p, off, mb, 0, after_sent)
                                       for t, p, off, mb in wanted))
        size = 0
        for (t, p, _, _), r in zip(wanted, first):
            results[(t, p)] = r
            size += len(r["records"] or b"")
        waitable = [(t, p, off, mb) for (t, p, off, mb), r in zip(wanted, first)
                    if r["error_code"] == P.NONE and not r["records"]]
        if size < max(req.min_bytes, 1) and req.max_wait_ms > 0 and waitable and size == 0:
            tasks = {asyncio.ensure_future(self._fetch_partition(t, p, off, mb, req.max_wait_ms, after_sent)): (t, p)
                     for t, p, off, mb in waitable}
            done, pending = await asyncio.wait(tasks, timeout=req.max_wait_ms / 1000 + 0.05,
                                               return_when=asyncio.FIRST_COMPLETED)
            if done and pending:  # others that have data by now: a short grace
                more, pending = await asyncio.wait(pending, timeout=0.005)
                done |= more
            for t in pending:
                t.cancel()
            for t in done:
                try:
                    r = t.result()
                except BaseException:  # noqa: BLE001
                    continue
                results[tasks[t]] = r
        responses: dict[str, list] = {}
        budget = req.max_bytes if req.max_bytes and req.max_bytes > 0 else 1 << 30
        for t, p, _, _ in wanted:
            r = results[(t, p)]
            if r["records"] and budget <= 0:
                r = dict(r, records=b"")
            budget -= len(r["records"] or b"")
            responses.setdefault(t, []).append(r)
        return {"throttle_time_ms": 0, "error_code": P.NONE, "session_id": 0,
                "responses": [{"topic": t, "partitions": ps} for t, ps in responses.items()], AFTER_SENT: after_sent}

    async def _fetch_partition(self, topic: str, partition: int, offset: int, max_bytes: int,
                               wait_ms: int, after_sent: list[Callable[[], None]]) -> dict:
        out = {"partition_index": partition, "error_code": P.NONE, "high_watermark": -1, "last_stable_offset": -1,
               "log_start_offset": -1, "aborted_transactions": None, "preferred_read_replica": -1,
               "records": b""}
        try:
            placement = await self._placement(topic)
        except QuorumLogError:
            out["error_code"] = P.LEADER_NOT_AVAILABLE
            return out
        if placement is None or not 0 <= partition < len(placement):
            out["error_code"] = P.UNKNOWN_TOPIC_OR_PARTITION
            return out
        if self._leader_of(placement[partition]) != self.node_id:
            out["error_code"] = P.NOT_LEADER_OR_FOLLOWER
            self._spawn(self.views.refresh())
            return out
        # As many messages as max_bytes holds, by the partition's last fetch: what a pull brings beyond that
        # is read, sent and decoded for nothing.
        estimate = self._message_bytes.get((topic, partition), FETCH_MESSAGE_ESTIMATE_BYTES)
        n = max(1, min(MAX_FETCH_MESSAGES, max_bytes // estimate + 1))
        try:
            pulled = await self._read_ahead.take((topic, partition, offset))
            if pulled is None:
                pulled = await self.topics.pull_raw(topic, partition, offset, max_messages=n, wait_ms=wait_ms)
        except (OffsetTooSmall, OffsetTooBig):
            out["error_code"] = P.OFFSET_OUT_OF_RANGE
            try:
                lo, hi = await self.topics.offsets(topic, partition)
                out.update(high_watermark=hi, last_stable_offset=hi, log_start_offset=lo)
            except QuorumLogError:
                pass
            return out
        except (NotLeader, NetworkError, Timeout):
            out["error_code"] = P.NOT_LEADER_OR_FOLLOWER
            self._spawn(self.views.refresh(force=True))
            return out
        except QuorumLogError as e:
            log.info("kafka door: fetch %s/%d@%d failed: %s", topic, partition, offset, e)
            out["error_code"] = P.UNKNOWN_SERVER_ERROR
            return out
        out.update(high_watermark=pulled.max_offset, last_stable_offset=pulled.max_offset,
                   log_start_offset=pulled.min_offset)
        if offset > pulled.max_offset or offset < pulled.min_offset:
            out["error_code"] = P.OFFSET_OUT_OF_RANGE
            return out
        count, size = _pulled_size(pulled.messages)
        if count:
            if len(self._message_bytes) >= MAX_SIZE_ESTIMATES:
                self._message_bytes.clear()
            self._message_bytes[(topic, partition)] = max(1, size // count)
            out["records"] = records = _records(pulled.messages, max_bytes)
            if records:
                after = _next_offset(records)
                if after < pulled.max_offset:  # more is there: the consumer asks for it next
                    after_sent.append(lambda: self._read_ahead.start((topic, partition, after), self.topics.pull_raw(
                        topic, partition, after, max_messages=n, wait_ms=0)))
        return out

    # -- ListOffsets -----------------------------------------------------------------------------------------
    async def _listoffsets(self, req: Any, v: int, h: P.RequestHeader | None = None) -> dict:
        async def one(topic: str, p: Any) -> dict:
            out = {"partition_index": p.partition_index, "error_code": P.NONE, "timestamp": -1, "offset": -1,
                   "leader_epoch": -1}
            try:
                placement = await self._placement(topic)
            except QuorumLogError:
                out["error_code"] = P.LEADER_NOT_AVAILABLE
                return out
            if placement is None or not 0 <= p.partition_index < len(placement):
                out["error_code"] = P.UNKNOWN_TOPIC_OR_PARTITION
                return out
            if self._leader_of(placement[p.partition_index]) != self.node_id:
                out["error_code"] = P.NOT_LEADER_OR_FOLLOWER
                self._spawn(self.views.refresh())
                return out
            try:
                lo, hi = await self.topics.offsets(topic, p.partition_index)
                if p.timestamp == -2:
                    out["offset"] = lo
                elif p.timestamp == -1:
                    out["offset"] = hi
                else:
                    out["offset"], out["timestamp"] = await self._offset_for_time(topic, p.partition_index, lo, hi,
                                                                                  p.timestamp)
            except (NotLeader, NetworkError, Timeout):
                out["error_code"] = P.NOT_LEADER_OR_FOLLOWER
            except QuorumLogError:
                out["error_code"] = P.UNKNOWN_SERVER_ERROR
            return out

        topics = []
        for t in req.topics:
            parts = await asyncio.gather(*(one(t.name, p) for p in t.partitions))
            topics.append({"name": t.name, "partitions": list(parts)})
        return {"throttle_time_ms": 0, "topics": topics}

    async def _offset_for_time(self, topic: str, partition: int, lo: int, hi: int, ts: int) -> tuple[int, int]:
        """(offset, timestamp) of the first message whose timestamp ≥ ts, by binary search over single-message
        pulls (log2(n) pulls; exact when timestamps grow with offsets, as one producer's CreateTime do);
        (-1, -1) when there is none."""
        async def ts_at(off: int) -> int:
            pulled = await self.topics.pull(topic, partition, off, max_messages=1)
            if not pulled.messages:
                return -1
            m = pulled.messages[0]
            return m.born_timestamp_ms or m.store_timestamp_ms

        a, b = lo, hi
        while a < b:
            mid = (a + b) // 2
            if await ts_at(mid) >= ts:
                b = mid
            else:
                a = mid + 1
        if a >= hi:
            return -1, -1
        return a, await ts_at(a)

    # -- topics ----------------------------------------------------------------------------------------------
    async def _createtopics(self, req: Any, v: int, h: P.RequestHeader | None = None) -> dict:
        results = []
        for t in req.topics:
            code, message = P.NONE, None
            configs = {c.name: c.value for c in (t.configs or [])}
            queues = t.num_partitions if t.num_partitions and t.num_partitions > 0 else DEFAULT_QUEUES
            try:
                retention_ms = max(0, int(configs.get("retention.ms") or 0))
                retention_bytes = max(0, int(configs.get("retention.bytes") or 0))
            except ValueError:
                retention_ms = retention_bytes = 0
                code, message = P.INVALID_REQUEST, "retention.ms / retention.bytes must be integers"
            if code == P.NONE and not TOPIC_RE.match(t.name or ""):
                code, message = P.INVALID_TOPIC_EXCEPTION, ("topic names are 1..127 of letters, digits, _ % | - "
                                                            "(quorumlog's, RocketMQ's rule: no '.')")
            elif code == P.NONE and t.assignments:
                code, message = P.INVALID_REQUEST, "manual replica assignments are not supported"
            elif code == P.NONE and not getattr(req, "validate_only", False):
                try:
                    await self.admin.create(t.name, queues, retention_ms=retention_ms, retention_bytes=retention_bytes)
                except MetadataVersionConflict:
                    code, message = P.TOPIC_ALREADY_EXISTS, f"topic {t.name!r} exists"
                except BadRequest as e:
                    code, message = P.INVALID_PARTITIONS if "queues" in str(e) else P.INVALID_REQUEST, str(e)
                except QuorumLogError as e:
                    code, message = P.REQUEST_TIMED_OUT, str(e)
            elif code == P.NONE:  # validate_only
                try:
                    if await self._placement(t.name, refresh=True) is not None:
                        code, message = P.TOPIC_ALREADY_EXISTS, f"topic {t.name!r} exists"
                except QuorumLogError as e:
                    code, message = P.REQUEST_TIMED_OUT, str(e)
            results.append({"name": t.name, "error_code": code, "error_message": message})
        if any(r["error_code"] == P.NONE for r in results):
            self._spawn(self.views.refresh(force=True))
        return {"throttle_time_ms": 0, "topics": results}

    async def _deletetopics(self, req: Any, v: int, h: P.RequestHeader | None = None) -> dict:
        out = []
        for name in req.topic_names:
            code = P.NONE
            try:
                await self.admin.delete(name)
            except TopicNotExist:
                code = P.UNKNOWN_TOPIC_OR_PARTITION
            except QuorumLogError:
                code = P.REQUEST_TIMED_OUT
            out.append({"name": name, "error_code": code})
        self._read_ahead.clear()  # (a topic made again under the name starts over at offset 0)
        return {"throttle_time_ms": 0, "responses": out}

    async def _describeconfigs(self, req: Any, v: int, h: P.RequestHeader | None = None) -> dict:
        results = []
        for r in req.resources:
            code, message, configs = P.NONE, None, {}
            if r.resource_type == 2:  # TOPIC
                try:
                    doc = await self.admin.get(r.resource_name)
                    configs = {"retention.ms": str(doc.get("retention_ms") or -1),
                               "retention.bytes": str(doc.get("retention_bytes") or -1),
                               "cleanup.policy": "delete", "compression.type": "producer",
                               "max.message.bytes": str(DEFAULT_MAX_MESSAGE_BYTES),
                               "message.timestamp.type": "CreateTime", "min.insync.replicas": "2"}
                except TopicNotExist:
                    code, message = P.UNKNOWN_TOPIC_OR_PARTITION, f"topic {r.resource_name!r} does not exist"
                except QuorumLogError as e:
                    code, message = P.REQUEST_TIMED_OUT, str(e)
            elif r.resource_type == 4:  # BROKER
                configs = {"broker.id": str(self.broker.broker_id), "num.partitions": str(DEFAULT_QUEUES),
                           "auto.create.topics.enable": "false", "message.max.bytes": str(DEFAULT_MAX_MESSAGE_BYTES)}
            else:
                code, message = P.INVALID_REQUEST, f"resource type {r.resource_type}: only topics and brokers"
            keys = r.configuration_keys
            entries = [{"name": k, "value": val, "read_only": True, "is_default": False, "config_source": 5,
                        "is_sensitive": False, "synonyms": []}
                       for k, val in configs.items() if keys is None or k in keys]
            results.append({"error_code": code, "error_message": message, "resource_type": r.resource_type,
                            "resource_name": r.resource_name, "configs": entries})
        return {"throttle_time_ms": 0, "results": results}

    # -- producers -------------------------------------------------------------------------------------------
    async def _initproducerid(self, req: Any, v: int, h: P.RequestHeader | None = None) -> dict:
        if req.transactional_id is not None:
            return {"throttle_time_ms": 0, "error_code": P.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    "producer_id": -1, "producer_epoch": -1}
        # A random 62-bit id: unique across doors and restarts without a round trip (collisions: ~n²/2⁶³).
        return {"throttle_time_ms": 0, "error_code": P.NONE, "producer_id": random.getrandbits(62) | 1,
                "producer_epoch": 0}

    # -- consumer groups -------------------------------------------------------------------------------------
    async def _findcoordinator(self, req: Any, v: int, h: P.RequestHeader | None = None) -> dict:
        view = await self.views.refresh()
        leader = self._coordinator_node()
        b = view.brokers.get(leader) if leader else None
        if getattr(req, "key_type", 0) not in (0, None):
            return {"throttle_time_ms": 0, "error_code": P.COORDINATOR_NOT_AVAILABLE,
                    "error_message": "transaction coordinators are not supported", "node_id": -1, "host": "",
                    "port": -1}
        if b is None:
            self._spawn(self.views.refresh(force=True))
            return {"throttle_time_ms": 0, "error_code": P.COORDINATOR_NOT_AVAILABLE,
                    "error_message": "no `_meta` leader known yet", "node_id": -1, "host": "", "port": -1}
        return {"throttle_time_ms": 0, "error_code": P.NONE, "error_message": None, "node_id": b.broker_id,
                "host": b.host, "port": b.port}

    def _not_coordinator(self) -> bool:
        if self._is_coordinator():
            return False
        self._spawn(self.views.refresh())
        return True

    async def _joingroup(self, req: Any, v: int, h: P.RequestHeader | None = None) -> dict:
        base = {"throttle_time_ms": 0, "generation_id": -1, "protocol_name": "", "leader": "",
                "member_id": req.member_id or "", "members": []}
        if not req.group_id:
            return dict(base, error_code=P.INVALID_GROUP_ID)
        if self._not_coordinator():
            return dict(base, error_code=P.NOT_COORDINATOR)
        got = self.coordinator.join(req.group_id, req.member_id or "", (h.client_id if h else None) or "kafka",
                                    req.session_timeout_ms,
                                    req.rebalance_timeout_ms if v >= 1 else req.session_timeout_ms,
                                    req.protocol_type, [(p.name, bytes(p.metadata)) for p in req.protocols],
                                    time.monotonic())
        if isinstance(got, asyncio.Future):
            got = await got
        out = dict(base, **{k: val for k, val in got.items() if k != "protocol_type"})
        return out

    async def _syncgroup(self, req: Any, v: int, h: P.RequestHeader | None = None) -> dict:
        base = {"throttle_time_ms": 0, "assignment": b""}
        if self._not_coordinator():
            return dict(base, error_code=P.NOT_COORDINATOR)
        got = self.coordinator.sync(req.group_id, req.member_id, req.generation_id,
                                    [(a.member_id, bytes(a.assignment)) for a in (req.assignments or [])],
                                    time.monotonic())
        if isinstance(got, asyncio.Future):
            got = await got
        return dict(base, error_code=got["error_code"], assignment=got.get("assignment") or b"")

    async def _heartbeat(self, req: Any, v: int, h: P.RequestHeader | None = None) -> dict:
        if self._not_coordinator():
            return {"throttle_time_ms": 0, "error_code": P.NOT_COORDINATOR}
        code = self.coordinator.heartbeat(req.group_id, req.member_id, req.generation_id, time.monotonic())
        return {"throttle_time_ms": 0, "error_code": code}

    async def _leavegroup(self, req: Any, v: int, h: P.RequestHeader | None = None) -> dict:
        if self._not_coordinator():
            return {"throttle_time_ms": 0, "error_code": P.NOT_COORDINATOR}
        code = self.coordinator.leave(req.group_id, req.member_id, time.monotonic())
        return {"throttle_time_ms": 0, "error_code": code}

    async def _listgroups(self, req: Any, v: int, h: P.RequestHeader | None = None) -> dict:
        """The groups this door coordinates (clients ask every broker and merge)."""
        groups = [{"group_id": gid, "protocol_type": g.protocol_type or "consumer"}
                  for gid, g in self.coordinator.groups.items() if g.members] if self._is_coordinator() else []
        return {"throttle_time_ms": 0, "error_code": P.NONE, "groups": groups}

    async def _describegroups(self, req: Any, v: int, h: P.RequestHeader | None = None) -> dict:
        coordinating = self._is_coordinator()
        out = []
        for gid in req.groups:
            g = self.coordinator.groups.get(gid)
            if not coordinating:
                out.append({"error_code": P.NOT_COORDINATOR, "group_id": gid, "group_state": "", "protocol_type": "",
                            "protocol_data": "", "members": []})
                continue
            if g is None:
                out.append({"error_code": P.NONE, "group_id": gid, "group_state": "Dead", "protocol_type": "",
                            "protocol_data": "", "members": []})
                continue
            stable = g.state == "Stable"
            out.append({"error_code": P.NONE, "group_id": gid, "group_state": g.state,
                        "protocol_type": g.protocol_type or "", "protocol_data": g.protocol_name or "",
                        "members": [{"member_id": m.member_id, "group_instance_id": None, "client_id": m.client_id,
                                     "client_host": "", "member_metadata":
                                         dict(m.protocols).get(g.protocol_name, b"") if stable else b"",
                                     "member_assignment": m.assignment if stable else b""}
                                    for m in g.members.values()]})
        return {"throttle_time_ms": 0, "groups": out}

    async def _offsetcommit(self, req: Any, v: int, h: P.RequestHeader | None = None) -> dict:
        def answer(code_of) -> dict:
            return {"throttle_time_ms": 0,
                    "topics": [{"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                                                "error_code": code_of(t.name, p)}
                                                               for p in t.partitions]} for t in req.topics]}

        if self._not_coordinator():
            return answer(lambda t, p: P.NOT_COORDINATOR)
        code = self.coordinator.check_commit(req.group_id, req.member_id or "", req.generation_id_or_member_epoch)
        if code != P.NONE:
            return answer(lambda t, p: code)
        codes: dict[tuple[str, int], int] = {}

        async def put(topic: str, p: Any) -> None:
            try:
                await self.meta.kv_put(offset_key(req.group_id, topic, p.partition_index),
                                       str(int(p.committed_offset)).encode())
                codes[(topic, p.partition_index)] = P.NONE
            except QuorumLogError as e:
                log.info("kafka door: commit %s %s/%d failed: %s", req.group_id, topic, p.partition_index, e)
                codes[(topic, p.partition_index)] = P.COORDINATOR_NOT_AVAILABLE

        await asyncio.gather(*(put(t.name, p) for t in req.topics for p in t.partitions))
        return answer(lambda t, p: codes[(t, p.partition_index)])

    async def _offsetfetch(self, req: Any, v: int, h: P.RequestHeader | None = None) -> dict:
        if self._not_coordinator():
            return {"throttle_time_ms": 0, "topics": [], "error_code": P.NOT_COORDINATOR}
        try:
            if req.topics is None:
                prefix = f"{OFFSETS_PREFIX}{req.group_id}/"
                found: dict[str, list] = {}
                for kv in await self.meta.kv_list(prefix):
                    topic, _, q = kv.key[len(prefix):].rpartition("/")
                    found.setdefault(topic, []).append((int(q), int(kv.value)))
                topics = [{"name": t, "partitions": [_committed(q, off) for q, off in sorted(ps)]}
                          for t, ps in found.items()]
            else:
                async def get(topic: str, q: int) -> dict:
                    got = await self.meta.kv_get(offset_key(req.group_id, topic, q))
                    return _committed(q, int(got[0]) if got else -1)

                topics = []
                for t in req.topics:
                    parts = await asyncio.gather(*(get(t.name, q) for q in t.partition_indexes))
                    topics.append({"name": t.name, "partitions": list(parts)})
        except QuorumLogError as e:
            log.info("kafka door: offset fetch %s failed: %s", req.group_id, e)
            return {"throttle_time_ms": 0, "topics": [], "error_code": P.COORDINATOR_NOT_AVAILABLE}
        return {"throttle_time_ms": 0, "topics": topics, "error_code": P.NONE}


def consumer_assignment(data: bytes) -> dict[str, list[int]] | None:
    """The partitions in a member's assignment when it is the "consumer" protocol's (version i16 | topics:
    [name string, partitions [i32]] | user data bytes); None when it is not that layout."""
    try:
        pos = 2
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4
        out: dict[str, list[int]] = {}
        for _ in range(max(n, 0)):
            (ln,) = struct.unpack_from(">h", data, pos)
            pos += 2
            topic = data[pos:pos + ln].decode("utf-8")
            pos += ln
            (k,) = struct.unpack_from(">i", data, pos)
            pos += 4
            out[topic] = list(struct.unpack_from(f">{max(k, 0)}i", data, pos))
            pos += 4 * max(k, 0)
        return out
    except (struct.error, UnicodeDecodeError):
        return None


def _committed(q: int, offset: int) -> dict:
    return {"partition_index": q, "committed_offset": offset, "committed_leader_epoch": -1, "metadata": "",
            "error_code": P.NONE}


def _client_id_of(key: tuple) -> int:
    """The own client's producer id for a Kafka (producer id, epoch, topic, partition): a 64-bit hash, in the
    range the own client allows (1..2**64-2)."""
    h = int.from_bytes(hashlib.blake2b(repr(key).encode(), digest_size=8).digest(), "big")
    return h % (2 ** 64 - 2) + 1


def _pulled_size(messages: Any) -> tuple[int, int]:
    """(messages, their stored bytes) of a pull's answer, packed or not."""
    size = len(messages.blob) if hasattr(messages, "blob") else sum(len(m.body) for m in messages)
    return len(messages), size


def _next_offset(batch: bytes) -> int:
    """The offset after a RecordBatch's last record: its base offset and last offset delta."""
    base, = struct.unpack_from(">q", batch, 0)
    last_delta, = struct.unpack_from(">i", batch, 23)
    return base + last_delta + 1


def _records(pulled: Any, max_bytes: int) -> bytes:
    """A pull's messages as one Fetch answer's records (what _encode_messages makes of them): one C call where
    _fastrecords is built and the messages need no more than copying, else the reference below."""
    if fast is not None and hasattr(pulled, "blob"):
        out = fast.record_batch(pulled.head, pulled.blob, max_bytes)
        if out is not None:
            return out
    msgs = decode_pulled(pulled, TopicMessage)
    return _encode_messages(msgs, max_bytes) if msgs else b""


def _encode_messages(msgs: list, max_bytes: int) -> bytes:
    """Pulled messages as one uncompressed RecordBatch v2 (base offset: the first's queue offset), cut after
    max_bytes of values (always at least one record)."""
    base = msgs[0].queue_offset
    records, size = [], 0
    for m in msgs:
        if records and size + len(m.body) > max_bytes:
            break
        records.append(record_of(m, m.queue_offset - base))
        size += len(m.body) + 64
    return encode_batch(RecordBatch(base, records))


def _done(data: bytes) -> asyncio.Future:
    fut = asyncio.get_running_loop().create_future()
    fut.set_result(data)
    return fut
