"""Topics on the log (docs/interfaces.md "Topics, queues and consumer groups"; docs/topics.md): where a topic's
queues live, a producer, and pulls.

A topic is a key in `_meta`: `topics/<name>` = {"queues": [group of queue 0, group of queue 1, ...]}. Its
queues are spread round robin over groups that run the topic dispatcher (`group create G --state-machine
topics`); each such group turns its committed messages into per-queue consume queues (topic/dispatcher.py),
so a queue offset is assigned once, in log order, the same on every member and after every failover.

- `TopicAdmin`: create (compare-and-set: a name is created once), list, describe (per queue: group, min and
  max offsets), delete (the route only; the messages stay in the groups' logs until retention).
- `Producer.send(topic, body, key=, tags=, properties=)` → SendResult(topic, queue_id, queue_offset): the
  queue is crc32c(key) mod the queue count (stable: the same key, the same queue), round robin without a
  key. Each send is one request with the producer id and a sequence, so a retry after a lost answer is
  stored once. Concurrent sends pipeline; `send_batch` puts many messages of one queue in one request.
- `TopicClient.pull(topic, queue_id, offset, ...)`: long-polling reads of one queue.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, NamedTuple

from ..codes import ResponseCode
from ..errors import BadRequest, GroupExists, MetadataVersionConflict, QuorumLogError, TopicNotExist
from ..format.log_entry import crc32c
from ..peers import Address, parse_peers
from ..topic.message import (DEFAULT_MAX_MESSAGE_BYTES, FLAG_CONFIG, TOPIC_RE, Message, decode_pulled, encode,
                             encode_fields)
from ..wire.client import TopicRequest, TopicResponse
from .client import Client
from .groups import GroupAdmin
from .kv import META_GROUP

log = logging.getLogger(__name__)

TOPICS_PREFIX = "topics/"
DEFAULT_QUEUES = 8
MAX_QUEUES = 1024
FIRST_TOPIC_GROUP = "topics"  # the topic group `topic create` makes on a cluster that has none


class SendResult(NamedTuple):  # (a tuple: a producer makes one per message)
    topic: str
    queue_id: int
    queue_offset: int


@dataclass(slots=True)  # (not frozen: a consumer makes millions, and a frozen __init__ costs 3x)
class TopicMessage:
    """A message as a consumer sees it."""

    topic: str
    queue_id: int
    queue_offset: int
    body: bytes
    key: str = ""
    tags: str = ""
    properties: dict[str, str] = field(default_factory=dict)
    born_timestamp_ms: int = 0
    store_timestamp_ms: int = 0
    index: int = -1  # its entry's index in the group's log
    term: int = -1  # and that entry's term


@dataclass(frozen=True, slots=True)
class Pulled:
    messages: list[TopicMessage]
    next_offset: int
    min_offset: int
    max_offset: int


def topic_key(name: str) -> str:
    return TOPICS_PREFIX + name


def queue_for(key: str, queues: int) -> int:
    """The queue of a key: stable across producers, processes and versions (crc32c, not Python's salted
    hash), mixed by murmur3's finalizer: crc32c alone is linear, and keys that differ in one character
    ("k0".."k9") land in few queues."""
    h = crc32c(key.encode())
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    h ^= h >> 16
    return h % queues


def _retention(value: int) -> int:
    if value < 0:
        raise BadRequest(f"retention {value} < 0 (0: unlimited)")
    return int(value)


def _check_name(name: str) -> None:
    if not TOPIC_RE.match(name or ""):
        raise BadRequest(f"topic {name!r}: 1..127 characters of letters, digits, _ % | -")


class _Routes:
    """Topic routes from `_meta`, cached; and one Client per group the topics live on."""

    def __init__(self, peers: str | dict[str, Address], **client_kw: Any) -> None:
        self.nodes = parse_peers(peers) if isinstance(peers, str) else dict(peers)
        if not self.nodes:
            raise ValueError("peers: no nodes")
        self.client_kw = client_kw
        self.meta = Client(self.nodes, group=META_GROUP, **client_kw)
        self._routes: dict[str, list[str]] = {}
        self._clients: dict[str, Client] = {}

    async def route(self, topic: str, refresh: bool = False) -> list[str]:
        if refresh or topic not in self._routes:
            _check_name(topic)
            got = await self.meta.kv_get(topic_key(topic))
            if got is None:
                self._routes.pop(topic, None)
                raise TopicNotExist(f"topic {topic!r} does not exist (quorumlog topic create {topic})")
            self._routes[topic] = json.loads(got[0])["queues"]
        return self._routes[topic]

    def cached(self, topic: str) -> list[str] | None:
        """The topic's placement if already known (no await: a producer asks once per message)."""
        return self._routes.get(topic)

    def group_client(self, group: str) -> Client:
        c = self._clients.get(group)
        if c is None:
            c = self._clients[group] = Client(self.nodes, group=group, **self.client_kw)
        return c

    async def call(self, group: str, make, what: str) -> TopicResponse:
        """make(client, request_id) to `group`'s leader (client: that group's, for its producer id)."""
        c = self.group_client(group)
        return await c.call_leader(lambda rid: make(c, rid), what)

    async def send(self, group: str, topic: str, queue_id: int, bodies: tuple[bytes, ...], *,
                   client_id: int | None = None, seq: int | None = None) -> TopicResponse:
        """Encoded messages to `group` as one request; every attempt carries the same producer sequence, so a
        retry after a lost answer is stored once. A caller with a producer identity of its own (Spark's
        writers) gives `client_id` and `seq`."""
        seq_box: list[int] = [] if seq is None else [seq]

        def make(c: Client, rid: int) -> TopicRequest:
            if not seq_box:
                seq_box.append(c.next_seq())
            return TopicRequest(rid, "send", topic, queue_id, client_id=client_id or c.client_id,
                                seq=seq_box[0], bodies=bodies)

        return await self.call(group, make, f"send to {topic}/{queue_id}")

    async def offsets(self, topic: str, queue_id: int) -> tuple[int, int]:
        """(min, max) offset of a queue, as its group's leader has them."""
        group = (await self.route(topic))[queue_id]
        resp = await self.call(group, lambda c, rid: TopicRequest(rid, "offsets", topic, queue_id),
                               f"offsets of {topic}/{queue_id}")
        return resp.min_offset, resp.max_offset

    async def close(self) -> None:
        for c in list(self._clients.values()) + [self.meta]:
            await c.close()
        self._clients.clear()


class TopicAdmin:
    def __init__(self, peers: str | dict[str, Address], **client_kw: Any) -> None:
        self._routes = _Routes(peers, **client_kw)
        self._groups = GroupAdmin(self._routes.nodes, timeout_ms=client_kw.get("timeout_ms", 10_000),
                                  token=client_kw.get("token"), tls_ca=client_kw.get("tls_ca"))

    async def __aenter__(self) -> "TopicAdmin":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        await self._routes.close()
        await self._groups.__aexit__(None, None, None)

    async def topic_groups(self) -> list[str]:
        """Groups that run the topic dispatcher."""
        out = []
        for p in await self._groups.list():
            if any((r.get("state_machine") or {}).get("kind") == "topics" for r in p.rows):
                out.append(p.group)
        return sorted(out)

    async def _first_topic_group(self) -> str:
        """A cluster with no topic group yet gets one, as a Kafka or RocketMQ user expects `topic create` to just
        work: FIRST_TOPIC_GROUP, a Raft group on up to three nodes. Two creates racing share it."""
        try:
            await self._groups.create(FIRST_TOPIC_GROUP, replicas=min(3, len(self._groups.nodes)),
                                      state_machine="topics")
        except GroupExists:
            pass
        if FIRST_TOPIC_GROUP not in await self.topic_groups():
            raise BadRequest(f"no group carries topics, and the group {FIRST_TOPIC_GROUP!r} exists without "
                             f"them: create one with `quorumlog group create G --state-machine topics`")
        return FIRST_TOPIC_GROUP

    async def create(self, name: str, queues: int = DEFAULT_QUEUES, groups: list[str] | None = None, *,
                     retention_ms: int = 0, retention_bytes: int = 0) -> list[str]:
        """Create `name` with `queues` queues spread round robin over `groups` (default: every topic group, or a
        first one made now when the cluster has none);
        returns the group of each queue; MetadataVersionConflict if it exists. Retention (0: unlimited) is the
        age on the log's clock and the bytes per queue past which messages go (topic/dispatcher.py)."""
        _check_name(name)
        if not 1 <= queues <= MAX_QUEUES:
            raise BadRequest(f"queues {queues}: 1..{MAX_QUEUES}")
        available = await self.topic_groups()
        if groups is None:
            groups = available or [await self._first_topic_group()]
        else:
            missing = [g for g in groups if g not in available]
            if missing:
                raise BadRequest(f"groups {missing} do not carry topics (`group create G --state-machine topics`)")
        placement = [groups[i % len(groups)] for i in range(queues)]
        doc = {"queues": placement, "retention_ms": _retention(retention_ms), "retention_bytes": _retention(retention_bytes)}
        try:
            await self._routes.meta.kv_put(topic_key(name), json.dumps(doc).encode(), expected_version=0)
        except MetadataVersionConflict:
            raise MetadataVersionConflict(f"topic {name!r} exists") from None
        if retention_ms or retention_bytes:
            await self._configure(name, doc)
        return placement

    async def alter(self, name: str, *, retention_ms: int | None = None, retention_bytes: int | None = None) -> dict:
        """Change a topic's retention (None: keep); returns its record. The groups carrying its queues apply
        it in log order; running `alter` again after a failure part way is safe."""
        got = await self._routes.meta.kv_get(topic_key(name))
        if got is None:
            raise TopicNotExist(f"topic {name!r} does not exist")
        doc = json.loads(got[0])
        if retention_ms is not None:
            doc["retention_ms"] = _retention(retention_ms)
        if retention_bytes is not None:
            doc["retention_bytes"] = _retention(retention_bytes)
        await self._routes.meta.kv_put(topic_key(name), json.dumps(doc).encode(), expected_version=got[1])
        await self._configure(name, doc)
        return doc

    async def _configure(self, name: str, doc: dict) -> None:
        """A config message (FLAG_CONFIG) into every group carrying the topic's queues."""
        body = json.dumps({"retention_ms": doc.get("retention_ms", 0),
                           "retention_bytes": doc.get("retention_bytes", 0)}).encode()
        first_queue = {}
        for q, g in enumerate(doc["queues"]):
            first_queue.setdefault(g, q)
        for group, q in first_queue.items():
            await self._routes.send(group, name, q, (encode(Message(name, body, q, flags=FLAG_CONFIG)),))

    async def list(self) -> dict[str, list[str]]:
        items = await self._routes.meta.kv_list(TOPICS_PREFIX)
        return {kv.key[len(TOPICS_PREFIX):]: json.loads(kv.value)["queues"] for kv in items}

    async def get(self, name: str) -> dict:
        """A topic's record: {"queues": [group of each queue], "retention_ms", "retention_bytes"}."""
        got = await self._routes.meta.kv_get(topic_key(name))
        if got is None:
            raise TopicNotExist(f"topic {name!r} does not exist")
        return json.loads(got[0])

    async def describe(self, name: str) -> list[dict[str, Any]]:
        """Per queue: its group, min and max offsets (as the group's leader has them)."""
        placement = await self._routes.route(name, refresh=True)

        async def one(q: int, group: str) -> dict[str, Any]:
            lo, hi = await self._routes.offsets(name, q)
            return {"queue_id": q, "group": group, "min_offset": lo, "max_offset": hi}

        return list(await asyncio.gather(*(one(q, g) for q, g in enumerate(placement))))

    async def delete(self, name: str) -> None:
        got = await self._routes.meta.kv_get(topic_key(name))
        if got is None:
            raise TopicNotExist(f"topic {name!r} does not exist")
        await self._routes.meta.kv_delete(topic_key(name), expected_version=got[1])


class TopicClient:
    """Sends and pulls, for a producer, a consumer or a tool. `peers`: any nodes of the cluster."""

    def __init__(self, peers: str | dict[str, Address], *,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES, **client_kw: Any) -> None:
        self.routes = _Routes(peers, **client_kw)
        self.max_message_bytes = max_message_bytes
        self._round_robin = itertools.count()
        # sends of this loop turn, per group, coalesced into one request (as the raw client's accumulator does):
        # the queues of one group share its log, so one log batch carries them all, each queue in order
        self._outbox: dict[str, list[tuple[bytes, str, int, asyncio.Future]]] = {}
        # (topic, queue) -> the slave its master suggested pulling from (a master/slave group, a reader far behind)
        self.suggested_slaves: dict[tuple[str, int], str] = {}

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        await self.routes.close()

    async def queue_of(self, topic: str, key: str = "") -> int:
        """The queue a message with `key` goes to (round robin over the queues without a key)."""
        placement = await self.routes.route(topic)
        return queue_for(key, len(placement)) if key else next(self._round_robin) % len(placement)

    async def send(self, topic: str, body: bytes | str, *, key: str = "", tags: str = "",
                   properties: dict[str, str] | None = None) -> SendResult:
        """One message. Sends to queues of one group made in the same event-loop turn go out as one request
        (one log batch, in the order they were made); for an order across turns, await each send."""
        placement = self.routes.cached(topic) or await self.routes.route(topic)
        q = queue_for(key, len(placement)) if key else next(self._round_robin) % len(placement)
        group = placement[q]
        encoded = self._encode(topic, q, body, key, tags, properties)  # a bad message fails its own send only
        fut = asyncio.get_running_loop().create_future()
        box = self._outbox.setdefault(group, [])
        box.append((encoded, topic, q, fut))
        if len(box) == 1:
            asyncio.get_running_loop().call_soon(self._flush, group)
        return await fut

    def _flush(self, group: str) -> None:
        box = self._outbox.pop(group, [])
        if box:
            asyncio.ensure_future(self._send_box(group, box))

    async def _send_box(self, group: str, box: list) -> None:
        try:
            resp = await self.routes.send(group, box[0][1], box[0][2], tuple(m for m, _, _, _ in box))
        except BaseException as e:  # noqa: BLE001 - every sender of the batch gets the error
            for *_, fut in box:
                if not fut.done():
                    fut.set_exception(e)
            return
        for (_, topic, q, fut), off in zip(box, resp.offsets):
            if not fut.done():
                fut.set_result(SendResult(topic, q, off))

    async def send_batch(self, topic: str, queue_id: int,
                         messages: Iterable[tuple[bytes | str, str, str, dict[str, str] | None]]) -> list[SendResult]:
        """(body, key, tags, properties) messages into one queue, as one request (one log batch)."""
        placement = await self.routes.route(topic)
        if not 0 <= queue_id < len(placement):
            raise BadRequest(f"topic {topic!r} has queues 0..{len(placement) - 1}, not {queue_id}")
        bodies = tuple(self._encode(topic, queue_id, *m) for m in messages)
        if not bodies:
            raise BadRequest("send_batch: no message")
        return await self._send_encoded(topic, queue_id, bodies)

    def _encode(self, topic: str, queue_id: int, body: bytes | str, key: str, tags: str,
                properties: dict[str, str] | None) -> bytes:
        return encode_fields(topic, body.encode() if isinstance(body, str) else bytes(body), queue_id, key, tags,
                             properties, int(time.time() * 1000), 0, self.max_message_bytes)

    async def _send_encoded(self, topic: str, queue_id: int, bodies: tuple[bytes, ...]) -> list[SendResult]:
        group = (await self.routes.route(topic))[queue_id]
        resp = await self.routes.send(group, topic, queue_id, bodies)
        return [SendResult(topic, queue_id, off) for off in resp.offsets]

    async def offsets(self, topic: str, queue_id: int) -> tuple[int, int]:
        """(min, max) offset of one queue: where reading can start, and one past its last message."""
        return await self.routes.offsets(topic, queue_id)

    async def pull_raw(self, topic: str, queue_id: int, offset: int, *, max_messages: int = 256,
                       wait_ms: int = 0, tags: str = "", node: str | None = None) -> TopicResponse:
        """pull's answer as it came (encoded messages, not yet decoded or filtered by exact tag): for a
        reader that decodes many at once (Spark's, spark/topic.py). From `node` when given — any member of the
        queue's group serves what it has dispatched (waiting up to wait_ms for `offset`), one attempt, errors
        raised — else from the group's leader, following elections and retrying. A master/slave group's master
        may answer that this reader is far behind (`suggest_slave`): the queue's next pulls go to that slave
        (`suggested_slaves`), and back to the master once the slave fails or has nothing more."""
        placement = await self.routes.route(topic)
        if not 0 <= queue_id < len(placement):
            raise BadRequest(f"topic {topic!r} has queues 0..{len(placement) - 1}, not {queue_id}")
        c = self.routes.group_client(placement[queue_id])

        def make(rid: int) -> TopicRequest:
            return TopicRequest(rid, "pull", topic, queue_id, offset, max_messages, wait_ms, tags=tags)

        if node is not None:
            resp = await c.call_member(node, make, extra_ms=wait_ms)
            if resp.code != ResponseCode.SUCCESS:
                raise QuorumLogError.for_code(resp.code, resp.message, leader_id=resp.leader_id)
            return resp
        key = (topic, queue_id)
        slave = self.suggested_slaves.get(key)
        if slave is not None:
            try:
                resp = await c.call_member(slave, make, extra_ms=wait_ms)
            except (QuorumLogError, OSError) as e:
                log.info("pull %s/%d: the suggested slave %s failed (%s): back to the master", topic, queue_id,
                         slave, e)
                resp = None
            if resp is None or resp.code != ResponseCode.SUCCESS or not resp.messages.count:
                del self.suggested_slaves[key]  # (the slave holds no more, or fails: the master again)
            if resp is not None and resp.code == ResponseCode.SUCCESS:
                return resp
        # The wait is the node's: give each attempt that long on top of the usual request time.
        resp = await c.call_leader(make, f"pull {topic}/{queue_id}@{offset}", extra_ms=wait_ms)
        if resp.suggest_slave in c.peers:
            self.suggested_slaves[key] = resp.suggest_slave
        return resp

    async def pull(self, topic: str, queue_id: int, offset: int, *, max_messages: int = 256, wait_ms: int = 0,
                   tags: str = "") -> Pulled:
        """Messages of one queue from `offset`, waiting up to wait_ms for the first (long polling). Tags
        ("a||b") are filtered by hash on the node and exactly here. OffsetTooSmall if retention deleted
        `offset` (its `min_offset` says where the queue starts now)."""
        resp = await self.pull_raw(topic, queue_id, offset, max_messages=max_messages, wait_ms=wait_ms, tags=tags)
        wanted = None if tags in ("", "*") else {t.strip() for t in tags.split("||")}
        return Pulled(decode_pulled(resp.messages, TopicMessage, wanted), resp.next_offset, resp.min_offset,
                      resp.max_offset)


class Producer(TopicClient):
    """`async with quorumlog.Producer(peers) as p: r = await p.send("T", b"body", key="k", tags="a")`."""
