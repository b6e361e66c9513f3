"""The topic dispatcher as a group's state machine (quorumlog/topic/dispatcher.py) under the same runner as
`_meta`'s store: committed messages reach their queues once each in log order (raw entries and no-ops skipped,
producer tags stripped), a restored snapshot carries on to the same queues, and queue offsets stay dense."""

from __future__ import annotations

from quorumlog.meta.state_machine import StateMachineRunner
from quorumlog.store.memory import MemoryStore
from quorumlog.topic.dispatcher import TopicDispatcher
from quorumlog.topic.message import Message, encode


def _log(bodies_per_batch) -> MemoryStore:
    log = MemoryStore()
    for i, bodies in enumerate(bodies_per_batch):
        if bodies == "noop":
            log.append_batch(1, [b""], 0, noop=True)
        else:
            log.append_batch(1, bodies, 0, producer=(7, i) if i % 2 else None)  # some idempotent batches
    log.flush()
    log.set_committed_index(log.end_index)
    return log


def test_committed_messages_reach_their_queues_once_in_order_and_a_snapshot_carries_on():
    batches = []
    for i in range(20):
        batches.append([encode(Message("orders", b"o%d" % i, queue_id=i % 4, key=f"k{i}")), b"raw"])
        if i % 7 == 0:
            batches.append("noop")
    log = _log(batches)
    d = TopicDispatcher()
    runner = StateMachineRunner(d, log, snapshot_every=10, read_max_bytes=64)
    applied = runner.on_commit(log.end_index // 2)
    offsets = [r for _, r in applied if r is not None]
    assert runner.on_commit(log.end_index // 2) == []  # nothing twice
    index, snap = runner.take_snapshot()
    rest = runner.on_commit(log.end_index)
    offsets += [r for _, r in rest if r is not None]
    assert d.messages == 20 and sorted(offsets) == sorted([q for _ in range(4) for q in range(5)])
    for qid in range(4):
        q = d.queue("orders", qid)
        assert [u.queue_offset for u in q.read(0, 100)] == list(range(5))
        idx = [u.log_index for u in q.read(0, 100)]
        assert idx == sorted(idx)
    restored = TopicDispatcher.restore(snap)
    assert restored.applied_index == index
    StateMachineRunner(restored, log).on_commit(log.end_index)
    assert restored.snapshot() == d.snapshot()


def test_retention_by_time_and_size_follows_the_logs_clock_and_survives_a_snapshot():
    import json

    from quorumlog.topic.message import FLAG_CONFIG

    def msg(topic: str, i: int) -> bytes:
        return encode(Message(topic, b"x" * 100, queue_id=0, key=f"k{i}"))

    d = TopicDispatcher()
    cfg = encode(Message("short", json.dumps({"retention_ms": 10_000}).encode(), flags=FLAG_CONFIG))
    size_cfg = encode(Message("small", json.dumps({"retention_bytes": 1_000}).encode(), flags=FLAG_CONFIG))
    assert d.apply(0, cfg, 1_000) is None and d.apply(1, size_cfg, 1_000) is None  # configs are not messages
    index = 2
    for second in range(30):  # one message of each topic per second of the log's clock
        for topic in ("short", "small", "kept"):
            d.apply(index, msg(topic, second), 1_000 + second * 1_000)
            index += 1
    short, small, kept = (d.queue(t, 0) for t in ("short", "small", "kept"))
    assert short.max_offset == small.max_offset == kept.max_offset == 30
    assert 18 <= short.min_offset <= 20  # ~10 s of 30 kept (1 s granularity)
    assert small.total_bytes <= 1_000 and small.max_offset - small.min_offset == 1_000 // len(msg("small", 0))
    assert kept.min_offset == 0
    restored = TopicDispatcher.restore(d.snapshot())
    for t in range(3):
        for topic in ("short", "small", "kept"):
            d.apply(index, msg(topic, 99), 40_000 + t * 1_000)
            restored.apply(index, msg(topic, 99), 40_000 + t * 1_000)
            index += 1
    assert restored.snapshot() == d.snapshot()
    assert short.min_offset >= 30 and kept.min_offset == 0  # 10 s after the last of them, the 30 are gone
