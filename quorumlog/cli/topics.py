"""`quorumlog topic create|list|describe|delete`, `quorumlog produce`, `quorumlog consume` (client/topics.py).

`produce` sends each VALUE (or each line of --file, `-` for stdin) as one message and prints where it landed;
`consume` reads every queue of a topic from the earliest (or latest) offset, in queue order, and with
--follow keeps long-polling for new messages until interrupted or --max messages were printed.
"""

from __future__ import annotations

import asyncio
import base64
import json
import sys
from typing import Any, List, Optional

import typer

from ..client.client import Client
from ..client.consumer import Consumer, describe_group
from ..client.kv import META_GROUP
from ..errors import NoSuchKey
from ..client.topics import DEFAULT_QUEUES, TopicAdmin, TopicClient, TopicMessage
from ..doors.rocketmq import metadata as rocketmq_meta
from .common import (ClusterOpt, JsonOpt, PeersOpt, TimeoutOpt, new_table, out_console, print_json, resolve_target,
                     run, usage)

topic_app = typer.Typer(help="Create, list, describe or delete topics", no_args_is_help=True)
consumer_group_app = typer.Typer(help="Consumer groups: create (a RocketMQ retry policy), describe",
                                 no_args_is_help=True)
FOLLOW_POLL_MS = 1_000


def _peers(peers: Optional[str], cluster: Optional[str]) -> dict:
    return resolve_target(peers, cluster, None).peers


def _meta(peers: dict, timeout_ms: int) -> Client:
    """A client of the `_meta` group (the RocketMQ door's records: docs/rocketmq.md)."""
    return Client(peers, group=META_GROUP, timeout_ms=timeout_ms)


@topic_app.command("create")
def create(name: str = typer.Argument(..., help="Topic name: 1..127 of letters, digits, _ % | -"),
           queues: int = typer.Option(DEFAULT_QUEUES, "--queues", min=1, help="How many queues"),
           groups: Optional[str] = typer.Option(None, "--groups", help="Spread the queues over these topic "
                                                "groups, e.g. t1,t2 (default: every group created with "
                                                "--state-machine topics)"),
           spread: bool = typer.Option(False, "--spread", help="Spread the queues over every topic group (the "
                                                              "default, said explicitly; not with --groups)"),
           retention_ms: int = typer.Option(0, "--retention-ms", min=0, help="Drop messages older than this "
                                            "(on the log's clock; 0: keep)"),
           retention_bytes: int = typer.Option(0, "--retention-bytes", min=0, help="Keep at most this many bytes "
                                               "of messages per queue (0: no limit)"),
           message_type: str = typer.Option("NORMAL", "--message-type", "--type",
                                            help="The RocketMQ message type it takes: NORMAL, FIFO, DELAY or "
                                                 "TRANSACTION (docs/rocketmq.md)"),
           peers: Optional[str] = PeersOpt, cluster: Optional[str] = ClusterOpt, timeout_ms: int = TimeoutOpt,
           json_out: bool = JsonOpt) -> None:
    """Create a topic; prints the group of each queue."""
    if spread and groups:
        usage("--spread and --groups: one or the other (--spread is every topic group)")
    try:
        message_type = rocketmq_meta.check_message_type(message_type)
    except ValueError as e:
        usage(f"--message-type: {e}")
    named = [g.strip() for g in groups.split(",") if g.strip()] if groups else None

    async def go():
        target = _peers(peers, cluster)
        async with TopicAdmin(target, timeout_ms=timeout_ms) as admin:
            placement = await admin.create(name, queues, named, retention_ms=retention_ms,
                                           retention_bytes=retention_bytes)
        async with _meta(target, timeout_ms) as meta:  # (created: this is the topic's first type record)
            await meta.kv_put(rocketmq_meta.topic_type_key(name), rocketmq_meta.encode_topic_type(message_type))
        return placement

    placement = run(go())
    if json_out:
        print_json({"topic": name, "queues": placement, "message_type": message_type})
    else:
        out_console.print(f"topic {name}: {len(placement)} queues on {', '.join(sorted(set(placement)))}, "
                          f"{message_type} messages", highlight=False)


@topic_app.command("alter")
def alter(name: str = typer.Argument(...),
          retention_ms: Optional[int] = typer.Option(None, "--retention-ms", min=0, help="New age limit (0: keep)"),
          retention_bytes: Optional[int] = typer.Option(None, "--retention-bytes", min=0,
                                                        help="New per-queue size limit (0: none)"),
          peers: Optional[str] = PeersOpt, cluster: Optional[str] = ClusterOpt, timeout_ms: int = TimeoutOpt,
          json_out: bool = JsonOpt) -> None:
    """Change a topic's retention."""
    if retention_ms is None and retention_bytes is None:
        usage("give --retention-ms and/or --retention-bytes")

    async def go():
        async with TopicAdmin(_peers(peers, cluster), timeout_ms=timeout_ms) as admin:
            return await admin.alter(name, retention_ms=retention_ms, retention_bytes=retention_bytes)

    doc = run(go())
    if json_out:
        print_json({"topic": name, **doc})
    else:
        out_console.print(f"topic {name}: retention_ms {doc['retention_ms']}, retention_bytes "
                          f"{doc['retention_bytes']}", highlight=False)


@topic_app.command("list")
def list_topics(peers: Optional[str] = PeersOpt, cluster: Optional[str] = ClusterOpt, timeout_ms: int = TimeoutOpt,
                json_out: bool = JsonOpt) -> None:
    """Every topic with its queue count and groups."""
    async def go():
        async with TopicAdmin(_peers(peers, cluster), timeout_ms=timeout_ms) as admin:
            return await admin.list()

    topics = run(go())
    if json_out:
        print_json({t: {"queues": q} for t, q in topics.items()})
        return
    table = new_table(title="topics")
    for col in ("topic", "queues", "groups"):
        table.add_column(col)
    for t, q in topics.items():
        table.add_row(t, str(len(q)), ",".join(sorted(set(q))))
    out_console.print(table)


@topic_app.command("describe")
def describe(name: str = typer.Argument(...), peers: Optional[str] = PeersOpt, cluster: Optional[str] = ClusterOpt,
             timeout_ms: int = TimeoutOpt, json_out: bool = JsonOpt) -> None:
    """Per queue: its group and its min / max queue offsets; and the RocketMQ message type it takes."""
    async def go():
        target = _peers(peers, cluster)
        async with TopicAdmin(target, timeout_ms=timeout_ms) as admin:
            rows = await admin.describe(name)
        async with _meta(target, timeout_ms) as meta:
            raw = await meta.kv_get(rocketmq_meta.topic_type_key(name))
        return rows, rocketmq_meta.decode_topic_type(raw[0] if raw else None)

    rows, message_type = run(go())
    shown_type = message_type or "any"  # (no record: made by the own client or Kafka; takes every type)
    if json_out:
        print_json({"topic": name, "queues": rows, "message_type": shown_type})
        return
    table = new_table(title=f"topic {name} ({shown_type} messages)")
    for col in ("queue_id", "group", "min_offset", "max_offset"):
        table.add_column(col, justify="left" if col == "group" else "right")
    for r in rows:
        table.add_row(str(r["queue_id"]), r["group"], str(r["min_offset"]), str(r["max_offset"]))
    out_console.print(table)


@topic_app.command("delete")
def delete(name: str = typer.Argument(...), peers: Optional[str] = PeersOpt, cluster: Optional[str] = ClusterOpt,
           timeout_ms: int = TimeoutOpt, json_out: bool = JsonOpt) -> None:
    """Delete a topic's route (its messages stay in the groups' logs until retention deletes them)."""
    async def go():
        target = _peers(peers, cluster)
        async with TopicAdmin(target, timeout_ms=timeout_ms) as admin:
            await admin.delete(name)
        async with _meta(target, timeout_ms) as meta:  # and its RocketMQ type, if it had one
            try:
                await meta.kv_delete(rocketmq_meta.topic_type_key(name))
            except NoSuchKey:
                pass

    run(go())
    if json_out:
        print_json({"topic": name, "deleted": True})
    else:
        out_console.print(f"topic {name} deleted", highlight=False)


def produce(values: Optional[List[str]] = typer.Argument(None, help="Message bodies (UTF-8)"),
            topic: str = typer.Option(..., "--topic", help="The topic"),
            key: str = typer.Option("", "--key", help="Message key: the same key, the same queue"),
            tags: str = typer.Option("", "--tags", help="Message tag (consumers can filter on it)"),
            file: Optional[str] = typer.Option(None, "--file", help="One message per line of this file ('-': stdin)"),
            peers: Optional[str] = PeersOpt, cluster: Optional[str] = ClusterOpt, timeout_ms: int = TimeoutOpt,
            json_out: bool = JsonOpt) -> None:
    """Send messages to a topic; prints queue and queue offset of each."""
    if bool(values) == bool(file):
        usage("give message VALUEs or --file F, not both and not neither")
    if file is not None:
        stream = sys.stdin if file == "-" else open(file, encoding="utf-8")
        with stream:
            bodies = [line.rstrip("\n") for line in stream]
    else:
        bodies = list(values or [])

    async def go():
        async with TopicClient(_peers(peers, cluster), timeout_ms=timeout_ms) as p:
            by_queue: dict[int, list] = {}
            for b in bodies:  # one request per queue: the messages of a queue keep the order given
                by_queue.setdefault(await p.queue_of(topic, key), []).append((b, key, tags, None))
            sent = await asyncio.gather(*(p.send_batch(topic, q, ms) for q, ms in by_queue.items()))
            return [r for rs in sent for r in rs]

    results = run(go(), long_running=file is not None)
    for r in results:
        if json_out:
            print_json({"topic": r.topic, "queue_id": r.queue_id, "queue_offset": r.queue_offset})
        else:
            out_console.print(f"{r.topic}/{r.queue_id}@{r.queue_offset}", highlight=False)


def _doc(m: TopicMessage) -> dict[str, Any]:
    try:
        body: Any = m.body.decode()
    except UnicodeDecodeError:
        body = {"base64": base64.b64encode(m.body).decode()}
    return {"topic": m.topic, "queue_id": m.queue_id, "queue_offset": m.queue_offset, "key": m.key, "tags": m.tags,
            "properties": m.properties, "born_timestamp": m.born_timestamp_ms,
            "store_timestamp": m.store_timestamp_ms, "body": body}


def _print_message(m: TopicMessage, json_out: bool) -> None:
    if json_out:
        sys.stdout.write(json.dumps(_doc(m)) + "\n")
        sys.stdout.flush()
    else:
        out_console.print(f"{m.topic}/{m.queue_id}@{m.queue_offset} key={m.key!r} tags={m.tags!r}: "
                          f"{m.body.decode(errors='replace')}", highlight=False)


def consume(topic: str = typer.Option(..., "--topic", help="The topic"),
            consumer_group: Optional[str] = typer.Option(
                None, "--consumer-group", help="Consume as a member of this group: its committed offsets, its "
                "share of the queues; commits what it printed"),
            start: str = typer.Option("earliest", "--from", help="earliest | latest (a group: where it starts "
                                      "when it has no committed offset)"),
            max_messages: int = typer.Option(0, "--max", min=0, help="Stop after this many (0: no limit)"),
            follow: bool = typer.Option(False, "--follow", help="Keep waiting for new messages"),
            tags: str = typer.Option("", "--tags", help="Only these tags, e.g. a||b"),
            session_timeout_ms: int = typer.Option(10_000, "--session-timeout-ms", min=1_000,
                                                   help="With --consumer-group: how long the group waits for a "
                                                        "silent member before its queues move"),
            peers: Optional[str] = PeersOpt, cluster: Optional[str] = ClusterOpt, timeout_ms: int = TimeoutOpt,
            json_out: bool = JsonOpt) -> None:
    """Print a topic's messages (one JSON document per line with --json): queue by queue, or as a member of
    --consumer-group (which ends after --max messages, or after a quiet second without --follow)."""
    if start not in ("earliest", "latest"):
        usage(f"--from {start!r}: earliest or latest")
    if consumer_group is not None:
        return _consume_in_group(topic, consumer_group, start, max_messages, follow, tags, session_timeout_ms,
                                 peers, cluster, timeout_ms, json_out)

    async def go():
        printed = 0
        async with TopicClient(_peers(peers, cluster), timeout_ms=timeout_ms) as c:
            queues = len(await c.routes.route(topic))
            offsets = {}
            for q in range(queues):
                lo, hi = await c.offsets(topic, q)
                offsets[q] = hi if start == "latest" else lo
            while True:
                progressed = False
                for q in range(queues):
                    p = await c.pull(topic, q, offsets[q], max_messages=256, tags=tags,
                                     wait_ms=FOLLOW_POLL_MS // queues if follow else 0)
                    progressed |= p.next_offset > offsets[q]
                    offsets[q] = p.next_offset
                    for m in p.messages:
                        _print_message(m, json_out)
                        printed += 1
                        if max_messages and printed >= max_messages:
                            return
                if not progressed and not follow:
                    return

    try:
        run(go(), long_running=True)
    except KeyboardInterrupt:
        pass


def _consume_in_group(topic: str, group: str, start: str, max_messages: int, follow: bool, tags: str,
                      session_timeout_ms: int, peers: Optional[str], cluster: Optional[str], timeout_ms: int,
                      json_out: bool) -> None:
    async def go():
        printed = 0
        async with Consumer(_peers(peers, cluster), consumer_group=group, topics=[topic], start_from=start,
                            tags=tags, session_timeout_ms=session_timeout_ms, timeout_ms=timeout_ms) as c:
            it = c.__aiter__()
            while not (max_messages and printed >= max_messages):
                try:
                    m = await (it.__anext__() if follow else asyncio.wait_for(it.__anext__(), 1.0))
                except asyncio.TimeoutError:
                    break
                _print_message(m, json_out)
                printed += 1

    try:
        run(go(), long_running=True)
    except KeyboardInterrupt:
        pass


def generation_text(generation: int) -> str:
    """A generation as people read it: the coordinator numbers them from its leader's term << 32 (so a new
    coordinator's are above every old one's), shown as `term.n` -- 12884901890 is `3.2`."""
    return f"{generation >> 32}.{generation & 0xFFFF_FFFF}" if generation >= 1 << 32 else str(generation)


@consumer_group_app.command("create")
def create_consumer_group(group: str = typer.Argument(..., help="Consumer group name"),
                          max_attempts: int = typer.Option(rocketmq_meta.DEFAULT_MAX_ATTEMPTS, "--max-attempts",
                                                           min=1, max=rocketmq_meta.MAX_ATTEMPTS_LIMIT,
                                                           help="Deliveries of a message before it goes to "
                                                                "%DLQ%<group> (RocketMQ clients)"),
                          fifo: bool = typer.Option(False, "--fifo", help="Deliver each message group's messages "
                                                    "one at a time, in order (RocketMQ FIFO consumption)"),
                          backoff: Optional[str] = typer.Option(None, "--backoff-s", help="Retry delays in seconds "
                                                                "a push consumer waits after failed attempt 1, 2, "
                                                                "... e.g. 1,5,10 (default RocketMQ's 10,30,60,...)"),
                          start_from: str = typer.Option("earliest", "--from", help="earliest | latest: where the "
                                                         "group starts on a queue it has no offset for"),
                          peers: Optional[str] = PeersOpt, cluster: Optional[str] = ClusterOpt,
                          timeout_ms: int = TimeoutOpt, json_out: bool = JsonOpt) -> None:
    """Create (or change) a consumer group's retry policy, as RocketMQ clients consume through it. A group used
    without one gets the defaults (RocketMQ's autoCreateSubscriptionGroup)."""
    try:
        delays = tuple(int(x) for x in backoff.split(",") if x.strip()) if backoff else rocketmq_meta.DEFAULT_BACKOFF_S
        policy = rocketmq_meta.GroupPolicy(max_attempts=max_attempts, fifo=fifo, backoff_s=delays,
                                           start_from=start_from)
    except ValueError as e:
        usage(str(e))

    async def go():
        async with _meta(_peers(peers, cluster), timeout_ms) as meta:
            await meta.kv_put(rocketmq_meta.group_key(group), policy.encode())

    run(go())
    doc = {"group": group, **json.loads(policy.encode())}
    if json_out:
        print_json(doc)
    else:
        out_console.print(f"consumer group {group}: max attempts {policy.max_attempts}, "
                          f"{'FIFO' if policy.fifo else 'concurrent'}, from {policy.start_from}", highlight=False)


@consumer_group_app.command("describe")
def describe_consumer_group(group: str = typer.Argument(...), peers: Optional[str] = PeersOpt,
                            cluster: Optional[str] = ClusterOpt, timeout_ms: int = TimeoutOpt,
                            json_out: bool = JsonOpt) -> None:
    """Members, generation, and per queue: owner, committed offset, lag; and its RocketMQ retry policy."""
    async def go():
        target = _peers(peers, cluster)
        doc = await describe_group(target, group, timeout_ms=timeout_ms)
        async with _meta(target, timeout_ms) as meta:
            raw = await meta.kv_get(rocketmq_meta.group_key(group))
        policy = rocketmq_meta.GroupPolicy.decode(raw[0] if raw else None)
        doc["retry_policy"] = {**json.loads(policy.encode()), "default": raw is None}
        return doc

    doc = run(go())
    if json_out:
        print_json(doc)
        return
    rp = doc["retry_policy"]
    out_console.print(f"consumer group {group}: generation {generation_text(doc['generation'])}, members "
                      f"{', '.join(doc['members']) or '-'}; retry policy{' (default)' if rp['default'] else ''}: "
                      f"max attempts {rp['max_attempts']}, {'FIFO' if rp['fifo'] else 'concurrent'}",
                      highlight=False)
    table = new_table()
    for col in ("topic", "queue_id", "owner", "committed_offset", "max_offset", "lag"):
        table.add_column(col, justify="left" if col in ("topic", "owner") else "right")
    for r in doc["queues"]:
        table.add_row(r["topic"], str(r["queue_id"]), r["owner"] or "-", str(r["committed_offset"] if r[
            "committed_offset"] is not None else "-"), str(r["max_offset"]), str(r["lag"]))
    out_console.print(table)
