"""The Kafka door's codecs without processes: RecordBatch v2 (CRC32C, varints, every compression), the frame
reader, request/response round trips for every API and version served, the record ↔ message mapping, and the
classic group protocol's state machine."""

from __future__ import annotations

import asyncio
import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from quorumlog.doors.kafka import protocol as P
from quorumlog.doors.kafka.groups import COMPLETING, STABLE, GroupCoordinator
from quorumlog.doors.kafka.mapping import record_of, encode_record
from quorumlog.doors.kafka.records import (GZIP, LZ4, NONE, SNAPPY, ZSTD, CorruptBatch, Record, RecordBatch,
                                          compress, decode_batches, decode_varint, encode_batch, encode_varint)
from quorumlog.doors.kafka.view import broker_id_of
from quorumlog.client.topics import TopicMessage
from quorumlog.topic.message import decode

CODECS = [NONE, GZIP, SNAPPY, LZ4, ZSTD]

headers_st = st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=16))), max_size=3)
record_st = st.tuples(st.one_of(st.none(), st.binary(max_size=32)), st.one_of(st.none(), st.binary(max_size=64)),
                      headers_st, st.integers(0, 2 ** 41))


# -- varints -------------------------------------------------------------------------------------------------
@given(st.integers(-(2 ** 63), 2 ** 63 - 1))
def test_varint_round_trip(v: int) -> None:
    out = bytearray()
    encode_varint(v, out)
    assert decode_varint(bytes(out), 0) == (v, len(out))


def test_varint_known_values_and_truncation() -> None:
    for v, enc in ((0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (63, b"\x7e"), (64, b"\x80\x01"), (-65, b"\x81\x01")):
        out = bytearray()
        encode_varint(v, out)
        assert bytes(out) == enc
    with pytest.raises(CorruptBatch):
        decode_varint(b"\x80\x80", 0)


# -- RecordBatch v2 ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("codec", CODECS)
@settings(max_examples=25, deadline=None)
@given(records=st.lists(record_st, min_size=1, max_size=8))
def test_batch_round_trip_and_kafka_python_reads_it(codec: int, records: list) -> None:
    recs = [Record(i, ts, k, v, [(hk, hv) for hk, hv in h]) for i, (k, v, h, ts) in enumerate(records)]
    data = encode_batch(RecordBatch(1000, recs, attributes=codec, producer_id=7, producer_epoch=0, base_sequence=3))
    (back,) = decode_batches(data)
    assert back.base_offset == 1000 and back.compression == codec and back.base_sequence == 3
    assert [(r.offset_delta, r.timestamp_ms, r.key, r.value, r.headers) for r in back.records] == \
           [(r.offset_delta, r.timestamp_ms, r.key, r.value, r.headers) for r in recs]
    if codec == SNAPPY:
        return  # (kafka-python reads snappy only with python-snappy, which is not installed)
    theirs = DefaultRecordBatch(data)  # an independent reader: kafka-python's
    assert theirs.validate_crc()
    assert [(r.offset, r.key, r.value) for r in theirs] == [(1000 + i, r.key, r.value) for i, r in enumerate(recs)]


@pytest.mark.parametrize("codec", [c for c in CODECS if c != SNAPPY])
def test_decodes_kafka_python_batches(codec: int) -> None:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=5,
                                  producer_epoch=1, base_sequence=10, batch_size=1 << 20)
    for i in range(20):
        b.append(i, timestamp=1_700_000_000_000 + i, key=b"k%d" % i if i % 2 else None, value=b"v" * i,
                 headers=[("h", b"x")])
    (batch,) = decode_batches(bytes(b.build()))
    assert batch.producer_id == 5 and batch.producer_epoch == 1 and batch.base_sequence == 10
    assert [r.value for r in batch.records] == [b"v" * i for i in range(20)]
    assert batch.records[3].key == b"k3" and batch.records[2].key is None
    assert batch.records[19].timestamp_ms == 1_700_000_000_019 and batch.records[0].headers == [("h", b"x")]


def test_snappy_xerial_framing_is_read() -> None:
    import cramjam
    body = bytearray()
    from quorumlog.doors.kafka.records import encode_record as enc_rec
    enc_rec(Record(0, 5, b"k", b"value", []), 5, body)
    block = bytes(cramjam.snappy.compress_raw(bytes(body)))
    xerial = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + struct.pack(">i", len(block)) + block
    raw = encode_batch(RecordBatch(0, [Record(0, 5, b"k", b"value", [])], attributes=SNAPPY))
    # swap the compressed payload for the xerial-framed one and fix the length and CRC
    from crc32c import crc32c
    head = bytearray(raw[:61])
    tail = bytes(head[21:61]) + xerial
    struct.pack_into(">i", head, 8, len(tail) + 9)
    struct.pack_into(">I", head, 17, crc32c(tail))
    (batch,) = decode_batches(bytes(head[:21]) + tail)
    assert batch.records[0].value == b"value"


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_a_flipped_or_truncated_batch_raises_corrupt_batch_only(data) -> None:
    codec = data.draw(st.sampled_from(CODECS))
    raw = bytearray(encode_batch(RecordBatch(0, [Record(0, 1, b"k", b"v" * 30, [("h", None)])], attributes=codec)))
    if data.draw(st.booleans()):
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] ^= 1 << data.draw(st.integers(0, 7))
    else:
        raw = raw[:data.draw(st.integers(1, len(raw) - 1))]
    try:
        decode_batches(bytes(raw))
    except CorruptBatch:
        pass  # (a flip in base_offset or the leader epoch is outside the CRC: it may decode)


def test_old_message_formats_and_zip_bombs_are_refused() -> None:  # (bombs: a small limit, same code)
    raw = bytearray(encode_batch(RecordBatch(0, [Record(0, 1, None, b"v", [])])))
    raw[16] = 1  # magic 1
    with pytest.raises(CorruptBatch, match="magic"):
        decode_batches(bytes(raw))
    from quorumlog.doors.kafka import records as R
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(R, "MAX_DECOMPRESSED_BYTES", 1 << 16)
        for codec in (GZIP, SNAPPY, LZ4, ZSTD):
            with pytest.raises(CorruptBatch, match="inflates"):
                R.decompress(codec, compress(codec, b"\x00" * ((1 << 16) + 10)))


# -- frames and API round trips ------------------------------------------------------------------------------
def test_frame_reader_waits_for_whole_frames_and_refuses_absurd_sizes() -> None:
    fr = P.FrameReader(max_frame_bytes=1000)
    frame = struct.pack(">hhih", 18, 0, 9, 3) + b"abc"
    data = struct.pack(">i", len(frame)) + frame
    fr.feed(data[:5])
    assert fr.next_frame() is None
    fr.feed(data[5:] + data)
    assert fr.next_frame() == frame and fr.next_frame() == frame and fr.next_frame() is None
    h = P.parse_header(frame)
    assert (h.api_key, h.api_version, h.correlation_id, h.client_id) == (18, 0, 9, "abc")
    fr.feed(struct.pack(">i", 10_000))
    with pytest.raises(P.ProtocolError):
        fr.next_frame()
    with pytest.raises(P.ProtocolError):
        P.parse_header(struct.pack(">hhih", 18, 0, 9, 50) + b"short")


def _sample_requests():
    """One request per API served, as a client would build it."""
    return {
        0: dict(transactional_id=None, acks=-1, timeout_ms=1000,
                topic_data=[dict(name="t", partition_data=[dict(index=0, records=b"xyz")])]),
        1: dict(replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
                session_epoch=-1, topics=[dict(topic="t", partitions=[dict(partition=0, current_leader_epoch=-1,
                                                                           fetch_offset=3, log_start_offset=-1,
                                                                           partition_max_bytes=1 << 20)])],
                forgotten_topics_data=[], rack_id=""),
        2: dict(replica_id=-1, isolation_level=0,
                topics=[dict(name="t", partitions=[dict(partition_index=0, current_leader_epoch=-1, timestamp=-2)])]),
        3: dict(topics=[dict(name="t")], allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False),
        8: dict(group_id="g", generation_id_or_member_epoch=1, member_id="m", group_instance_id=None,
                retention_time_ms=-1,
                topics=[dict(name="t", partitions=[dict(partition_index=0, committed_offset=5, committed_leader_epoch=-1,
                                                        committed_metadata="")])]),
        9: dict(group_id="g", topics=[dict(name="t", partition_indexes=[0, 1])], require_stable=False),
        10: dict(key="g", key_type=0),
        11: dict(group_id="g", session_timeout_ms=10000, rebalance_timeout_ms=30000, member_id="", group_instance_id=None,
                 protocol_type="consumer", protocols=[dict(name="range", metadata=b"\x00\x01")]),
        12: dict(group_id="g", generation_id=1, member_id="m", group_instance_id=None),
        13: dict(group_id="g", member_id="m"),
        14: dict(group_id="g", generation_id=1, member_id="m", group_instance_id=None,
                 assignments=[dict(member_id="m", assignment=b"a")]),
        15: dict(groups=["g"], include_authorized_operations=False),
        16: dict(),
        17: dict(mechanism="PLAIN"),
        18: dict(),
        19: dict(topics=[dict(name="t", num_partitions=3, replication_factor=1, assignments=[], configs=[])],
                 timeout_ms=1000, validate_only=False),
        20: dict(topic_names=["t"], timeout_ms=1000),
        22: dict(transactional_id=None, transaction_timeout_ms=1000),
        32: dict(resources=[dict(resource_type=2, resource_name="t", configuration_keys=None)], include_synonyms=False),
        36: dict(auth_bytes=b"\x00u\x00p"),
    }


@pytest.mark.parametrize("api,version", [(a.key, v) for a in P.SERVED.values()
                                         for v in range(a.min_version, a.max_version + 1)])
def test_every_served_request_round_trips(api: int, version: int) -> None:
    a = P.SERVED[api]
    fields = {k: val for k, val in _sample_requests()[api].items()
              if k in a.request.fields and a.request.fields[k].for_version_q(version)}
    req = P.build(a.request[version], fields)
    body = bytes(req.encode(version=version))
    frame = struct.pack(">hhih", api, version, 42, 2) + b"id" + body
    h = P.parse_header(frame)
    back = P.decode_request(a, h, frame)
    def plain(x, struct_) -> dict:
        out = {}
        for name, f in struct_.fields.items():
            if not f.for_version_q(version) or f._tag is not None:
                continue
            val = getattr(x, name)
            if f.is_struct_array() and val is not None:
                val = [plain(v, f) for v in val]
            elif f.is_struct() and val is not None:
                val = plain(val, f)
            out[name] = bytes(val) if isinstance(val, (bytearray, memoryview)) else val
        return out

    assert plain(back, a.request._struct) == plain(req, a.request._struct)


fetch_partitions = st.fixed_dictionaries({
    "partition_index": st.integers(0, 2 ** 31 - 1), "error_code": st.sampled_from([0, 1, 6, 35]),
    "high_watermark": st.integers(-1, 2 ** 63 - 1), "last_stable_offset": st.integers(-1, 2 ** 40),
    "log_start_offset": st.integers(-1, 2 ** 40), "preferred_read_replica": st.just(-1),
    "aborted_transactions": st.one_of(st.none(), st.lists(st.fixed_dictionaries(
        {"producer_id": st.integers(0, 2 ** 40), "first_offset": st.integers(0, 2 ** 40)}), max_size=2)),
    "records": st.one_of(st.none(), st.binary(max_size=300))})


@given(st.integers(4, 11), st.integers(-(2 ** 31), 2 ** 31 - 1),
       st.lists(st.tuples(st.text(min_size=1, max_size=10), st.lists(fetch_partitions, max_size=3)), max_size=3),
       st.integers(0, 10))
@settings(max_examples=300, deadline=None)
def test_the_written_out_fetch_answer_is_kafka_pythons(version, correlation_id, topics, throttle) -> None:
    fields = {"throttle_time_ms": throttle, "error_code": 0, "session_id": 0,
              "responses": [{"topic": t, "partitions": ps} for t, ps in topics]}
    msg = P.build(P.SERVED[P.FETCH].response[version], fields)
    body = bytes(msg.encode(version=version))
    assert P.encode_response(P.SERVED[P.FETCH], version, correlation_id, fields) == (
        struct.pack(">ii", len(body) + 4, correlation_id) + body)


def test_api_versions_answers_and_unsupported_ones() -> None:
    from kafka.protocol.metadata import ApiVersionsResponse
    frame = P.encode_response(P.SERVED[18], 2, 7, P.api_versions_body(P.NONE))
    resp = ApiVersionsResponse.decode(frame[8:], version=2)
    assert {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}[0] == (3, 8)
    # ApiVersions v3 (flexible) gets the v0 layout with UNSUPPORTED_VERSION, as a broker answers
    h = P.RequestHeader(18, 3, 11, "x", 10)
    out = P.unsupported_response(h)
    assert struct.unpack_from(">ii", out) [1] == 11
    resp = ApiVersionsResponse.decode(out[8:], version=0)
    assert resp.error_code == P.UNSUPPORTED_VERSION and len(resp.api_keys) == len(P.SERVED)
    out = P.unsupported_response(P.RequestHeader(9999, 0, 12, None, 10))
    assert struct.unpack(">iih", out) == (6, 12, P.UNSUPPORTED_VERSION)
    assert P.served(0, 2) is None and P.served(0, 3) is not None and P.served(77, 0) is None


# -- records as messages -------------------------------------------------------------------------------------
@settings(max_examples=50, deadline=None)
@given(rec=record_st)
def test_a_record_survives_the_message_round_trip(rec) -> None:
    key, value, headers, ts = rec
    r = Record(0, ts, key, value, list(headers))
    m = decode(encode_record("t", 2, r, 1 << 22))
    tm = TopicMessage(m.topic, m.queue_id, 17, m.body, m.key, m.tags, m.properties, m.born_timestamp_ms, 0)
    back = record_of(tm, 3)
    assert (back.key, back.value, back.headers, back.timestamp_ms, back.offset_delta) == (key, value, headers, ts, 3)


def test_own_messages_show_properties_and_tags_as_headers() -> None:
    tm = TopicMessage("t", 0, 0, b"body", "key", "tagA", {"color": "red"}, 5, 9)
    r = record_of(tm, 0)
    assert r.key == b"key" and r.value == b"body" and r.timestamp_ms == 5
    assert ("color", b"red") in r.headers and ("quorumlog.tags", b"tagA") in r.headers


def test_broker_ids() -> None:
    assert broker_id_of("n0") == 0 and broker_id_of("n12") == 12 and broker_id_of("node-3") == 3
    assert broker_id_of("alpha") == broker_id_of("alpha") >= 1_000_000_000


# -- the group protocol --------------------------------------------------------------------------------------
def test_group_rebalances_fence_old_generations_and_expire_sessions() -> None:
    async def main() -> None:
        gc = GroupCoordinator()
        protos = [("range", b"m")]
        f1 = gc.join("g", "", "c1", 1000, 2000, "consumer", protos, 0.0)
        assert isinstance(f1, asyncio.Future) and not f1.done()
        gc.tick(0.1)
        assert not f1.done()  # the initial delay gathers joiners
        f2 = gc.join("g", "", "c2", 1000, 2000, "consumer", protos, 0.2)
        gc.tick(0.5)
        j1, j2 = f1.result(), f2.result()
        assert j1["generation_id"] == j2["generation_id"] == 1 and j1["leader"] == j1["member_id"]
        assert len(j1["members"]) == 2 and j2["members"] == []
        m1, m2 = j1["member_id"], j2["member_id"]
        assert gc.groups["g"].state == COMPLETING
        s2 = gc.sync("g", m2, 1, [], 0.6)
        assert isinstance(s2, asyncio.Future) and not s2.done()
        s1 = gc.sync("g", m1, 1, [(m1, b"A"), (m2, b"B")], 0.6)
        assert s1["assignment"] == b"A" and s2.result()["assignment"] == b"B"
        assert gc.groups["g"].state == STABLE
        assert gc.heartbeat("g", m1, 1, 0.7) == P.NONE
        assert gc.check_commit("g", m1, 1) == P.NONE
        # a third member: a rebalance; the others learn it from their heartbeats
        f3 = gc.join("g", "", "c3", 1000, 2000, "consumer", protos, 0.8)
        assert gc.heartbeat("g", m1, 1, 0.8) == P.REBALANCE_IN_PROGRESS
        f1 = gc.join("g", m1, "c1", 1000, 2000, "consumer", protos, 0.9)
        f2 = gc.join("g", m2, "c2", 1000, 2000, "consumer", protos, 0.9)
        assert f1.done() and f2.done() and f3.done() and f3.result()["generation_id"] == 2
        assert gc.check_commit("g", m1, 1) == P.ILLEGAL_GENERATION  # a zombie's commit
        assert gc.heartbeat("g", "nobody", 2, 1.0) == P.UNKNOWN_MEMBER_ID
        # m2 and m3 stop heartbeating; m1 keeps on: a rebalance without them
        gc.sync("g", m1, 2, [(m1, b"A")], 1.0)
        for t in (1.5, 2.0, 2.5):
            gc.heartbeat("g", m1, gc.groups["g"].generation, t)
            gc.tick(t)
        assert set(gc.groups["g"].members) == {m1}
        assert gc.leave("g", m1, 3.0) == P.NONE and gc.groups["g"].members == {}
        assert gc.check_commit("g", "", -1) == P.NONE  # a standalone consumer may commit to an empty group
        # a protocol nobody else speaks
        fa = gc.join("h", "", "a", 1000, 2000, "consumer", [("range", b"")], 4.0)
        assert gc.join("h", "", "b", 1000, 2000, "consumer", [("roundrobin", b"")], 4.0)["error_code"] == \
            P.INCONSISTENT_GROUP_PROTOCOL
        gc.clear()
        assert fa.result()["error_code"] == P.UNKNOWN_MEMBER_ID

    asyncio.run(main())


# -- the door's per-partition sequence check -------------------------------------------------------------------
def test_idempotent_sequences_are_checked_in_order_and_retries_reach_the_group_again() -> None:
    from collections import OrderedDict

    from quorumlog.doors.kafka.door import KafkaDoor, _client_id_of

    door = object.__new__(KafkaDoor)
    door._producers, door._producer_locks = OrderedDict(), {}
    sent: list = []
    fail = {"next": False}

    async def send(topic, partition, group, bodies, client_id, seq):
        sent.append((client_id, seq, len(bodies)))
        if fail["next"]:
            fail["next"] = False
            return P.NOT_LEADER_OR_FOLLOWER, -1
        return P.NONE, 100 + (seq if seq is not None else -1)

    door._send = send

    def batch(pid: int, seq: int, n: int) -> RecordBatch:
        return RecordBatch(0, [Record(i, 0, None, b"v", []) for i in range(n)], producer_id=pid, producer_epoch=0,
                           base_sequence=seq)

    async def append(pid: int, seq: int, n: int = 3) -> tuple[int, int]:
        return await door._append("t", 0, "g", batch(pid, seq, n), (b"x",) * n)

    async def main() -> None:
        assert await append(1, 5) == (P.NONE, 105)  # unknown producer (a failover): accepted
        assert await append(1, 11) == (P.OUT_OF_ORDER_SEQUENCE_NUMBER, -1)  # 8 expected
        assert await append(1, 5) == (P.NONE, 105)  # a retry: to the group again (its table dedupes it)
        assert await append(1, 8) == (P.NONE, 108)
        key = (1, 0, "t", 0)
        assert [s for s in sent if s[0] == _client_id_of(key)] == [(_client_id_of(key), 5, 3), (_client_id_of(key), 5, 3),
                                                                 (_client_id_of(key), 8, 3)]
        # a first batch that fails holds back the ones pipelined behind it
        fail["next"] = True
        assert await append(2, 0) == (P.NOT_LEADER_OR_FOLLOWER, -1)
        assert await append(2, 3) == (P.OUT_OF_ORDER_SEQUENCE_NUMBER, -1)
        assert await append(2, 0) == (P.NONE, 100)
        assert await append(2, 3) == (P.NONE, 103)
        # without a producer id: no check
        assert await door._append("t", 0, "g", RecordBatch(0, [Record(0, 0, None, b"v", [])]), (b"x",)) == (P.NONE, 99)

    asyncio.run(main())


def test_consumer_protocol_assignments_are_read() -> None:
    from quorumlog.doors.kafka.door import consumer_assignment
    data = struct.pack(">hi", 0, 2) + struct.pack(">h", 1) + b"a" + struct.pack(">iii", 2, 0, 3) + \
        struct.pack(">h", 2) + b"bb" + struct.pack(">i", 0) + struct.pack(">i", -1)
    assert consumer_assignment(data) == {"a": [0, 3], "bb": []}
    assert consumer_assignment(b"") is None and consumer_assignment(b"\x00\x00\x00\x00\x00\x05") is None


@pytest.mark.parametrize("seed", range(150))
def test_group_protocol_invariants_under_random_members(seed: int) -> None:
    """Members join, sync, heartbeat, commit, leave and go silent in a random order, time jumps around the
    session timeout: the generation never goes back, a stable group's leader is a member and every member of
    it was answered at that generation, a commit is accepted only from the current generation, and every
    waiting member is answered once it is removed."""
    import random

    from quorumlog.doors.kafka.groups import EMPTY, PREPARING

    rng = random.Random(seed)

    async def main() -> None:
        gc = GroupCoordinator()
        now = 0.0
        known: dict[str, int] = {}  # member id -> the generation it was last answered
        history: list[tuple[str, int]] = []  # every (member, generation) ever answered
        joins: list[asyncio.Future] = []
        syncs: list[tuple[str, asyncio.Future]] = []
        last_gen = 0
        for _ in range(120):
            now += rng.choice((0.05, 0.2, 0.5, 1.2))
            op = rng.random()
            g = gc.groups.get("g")
            if op < 0.25 or not known:
                mid = rng.choice(list(known) + [""]) if known and rng.random() < 0.5 else ""
                got = gc.join("g", mid, "c", 1000, 1500, "consumer", [("range", b"")], now)
                if isinstance(got, asyncio.Future):
                    joins.append(got)
            elif op < 0.45 and g is not None:
                mid = rng.choice(list(known))
                got = gc.sync("g", mid, known[mid], [(m, b"A" + m.encode()) for m in known], now)
                if isinstance(got, asyncio.Future):
                    syncs.append((mid, got))
            elif op < 0.8:
                # a zombie: a member (maybe gone) with a generation it once had
                mid, gen = rng.choice(history) if history and rng.random() < 0.4 else \
                    (lambda m: (m, known[m]))(rng.choice(list(known)))
                if op < 0.7:
                    if gc.heartbeat("g", mid, gen, now) == P.NONE:
                        assert gen == gc.groups["g"].generation and mid in gc.groups["g"].members
                elif gc.check_commit("g", mid, gen) == P.NONE:
                    assert gen == gc.groups["g"].generation and mid in gc.groups["g"].members
            elif op < 0.88:
                mid = rng.choice(list(known))
                gc.leave("g", mid, now)
                known.pop(mid)
            else:
                gc.tick(now)
            await asyncio.sleep(0)
            for f in [f for f in joins if f.done()]:
                joins.remove(f)
                r = f.result()
                if r["error_code"] == P.NONE:
                    known[r["member_id"]] = r["generation_id"]
                    history.append((r["member_id"], r["generation_id"]))
            for mid, f in [x for x in syncs if x[1].done()]:
                syncs.remove((mid, f))
            g = gc.groups.get("g")
            if g is None:
                continue
            assert g.generation >= last_gen
            last_gen = g.generation
            if g.state in (COMPLETING, STABLE):
                assert g.leader in g.members
                assert all(known.get(m) == g.generation for m in g.members), (known, g.generation)
            if g.state == EMPTY:
                assert not g.members
            for mid in list(known):
                if mid not in g.members:
                    known.pop(mid)
            assert g.state in (EMPTY, PREPARING, COMPLETING, STABLE)
        gc.clear()
        await asyncio.sleep(0)
        assert all(f.done() for f in joins) and all(f.done() for _, f in syncs)

    asyncio.run(main())


def test_the_view_takes_leaders_brokers_and_a_leader_it_cannot_ask() -> None:
    from types import SimpleNamespace

    from quorumlog.doors.kafka.view import Broker, ViewKeeper

    statuses = {
        "n0": {"groups": [{"group": "_meta", "id": "n0", "role": "leader", "term": 3, "voters": ["n0", "n1"]},
                          {"group": "t", "id": "n0", "role": "follower", "term": 7, "leader_id": "n3",
                           "voters": ["n0", "n1", "n3"]}]},
        "n1": {"groups": [{"group": "_meta", "id": "n1", "role": "follower", "term": 3, "leader_id": "n0"},
                          {"group": "u", "id": "n1", "role": "leader", "term": 2}]},
        "n2": RuntimeError("down"),
    }

    class Admin:
        async def cluster_status(self):
            return statuses

    class Meta:
        async def kv_list(self, prefix):
            assert prefix == "doors/kafka/"
            return [SimpleNamespace(key=f"doors/kafka/n{i}", value=json.dumps({"host": "h", "port": 9000 + i,
                                                                                "broker_id": i}).encode())
                    for i in (0, 1, 2, 3, 4)]

    keeper = ViewKeeper(Admin(), Meta(), Broker("n0", 0, "h", 9000))
    view = asyncio.run(keeper.refresh(force=True))
    assert view.leaders == {"_meta": "n0", "u": "n1", "t": "n3"}  # n3: not asked (added later), named by n0
    # n2 did not answer; n4 (added later, leading nothing) cannot be asked: listed
    assert view.live == {"n0", "n1", "n3", "n4"} and set(view.brokers) == {"n0", "n1", "n2", "n3", "n4"}
    assert view.members["t"] == ["n0", "n1", "n3"]
