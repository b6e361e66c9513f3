"""Real asyncio sockets on 127.0.0.1: pipelining, handshake refusals, bad input, storms, peer links."""

from __future__ import annotations

import asyncio
import random

import pytest

from quorumlog.codes import ResponseCode
from quorumlog.errors import NetworkError, QuorumLogError, Timeout, UnknownGroup
from quorumlog.format.log_entry import Records
from quorumlog.transport import ClientConnection, PeerLinks
from quorumlog.transport.frames import FRAME_HEADER, NEED_DATA, FrameDecoder, encode_frame
from quorumlog.transport.handshake import (
    PROTOCOL_VERSION, Hello, Role, decode_hello_error, decode_hello_ok, encode_hello,
)
from quorumlog.transport.kinds import Kind
from quorumlog.wire.client import AppendRequest, AppendResponse, StatusRequest, StatusResponse
from quorumlog.wire.messages import HeartbeatRequest, PushRequest, PushType

from .netutil import GROUP, free_port, read_frames_until_eof, run_bounded, start_server, wait_until

pytestmark = pytest.mark.timeout(60)


def echo_handler(req, session):
    """Answers appends at once: first_index = number of bodies, so a mismatch shows."""
    if isinstance(req, AppendRequest):
        session.send(AppendResponse(req.request_id, ResponseCode.SUCCESS, first_index=len(req.bodies),
                                    last_index=req.seq))
    elif isinstance(req, StatusRequest):
        session.send(StatusResponse(req.request_id, ResponseCode.SUCCESS, b'{"ok": true}'))


async def client(server, name="c") -> ClientConnection:
    return await ClientConnection.open("127.0.0.1", server.port, group=GROUP, client_name=name, timeout_ms=3000)


async def assert_served(server) -> None:
    async with await client(server, "witness") as c:
        r = await c.call(StatusRequest(c.next_request_id()), 3000)
        assert r.code == ResponseCode.SUCCESS and r.status_json == b'{"ok": true}'


# -- pipelining -------------------------------------------------------------------------------------
def test_pipelined_requests_answered_out_of_order():
    n = 500

    async def main():
        held: list = []
        all_in = asyncio.Event()

        def on_client(req, session):
            held.append((req, session))
            if len(held) == n:
                all_in.set()

        async def answer_shuffled():
            await all_in.wait()
            random.Random(7).shuffle(held)
            for req, session in held:
                session.send(AppendResponse(req.request_id, ResponseCode.SUCCESS, first_index=req.seq))

        server = await start_server(on_client=on_client)
        conn = await client(server)
        answering = asyncio.create_task(answer_shuffled())
        calls = [conn.call(AppendRequest(conn.next_request_id(), (b"x" * 100,), client_id=1, seq=i), 10_000)
                 for i in range(n)]
        responses = await asyncio.gather(*calls)
        await answering
        assert [r.first_index for r in responses] == list(range(n))
        assert server.stats.client_connections_active == 1 and conn.in_flight == 0
        await conn.close()
        await server.close()

    run_bounded(main())


def test_async_handlers_and_in_flight_bound():
    async def main():
        async def on_client(req, session):
            await asyncio.sleep(0)
            echo_handler(req, session)

        server = await start_server(on_client=on_client, max_in_flight=8)
        conn = await ClientConnection.open("127.0.0.1", server.port, group=GROUP, client_name="c",
                                           max_in_flight=4)
        rs = await asyncio.gather(*[conn.call(AppendRequest(conn.next_request_id(), (b"a",) * (i % 5 + 1)), 5000)
                                    for i in range(300)])
        assert [r.first_index for r in rs] == [i % 5 + 1 for i in range(300)]
        await conn.close()
        await server.close()

    run_bounded(main())


def test_call_timeout_then_late_response_is_dropped():
    async def main():
        held = []
        server = await start_server(on_client=lambda r, s: held.append((r, s)))
        conn = await client(server)
        with pytest.raises(Timeout):
            await conn.call(StatusRequest(conn.next_request_id()), 50)
        req, session = held[0]
        assert session.send(StatusResponse(req.request_id, ResponseCode.SUCCESS, b"{}"))
        # The connection still works for the next request.
        t = asyncio.create_task(conn.call(StatusRequest(conn.next_request_id()), 3000))
        await wait_until(lambda: len(held) == 2)
        held[1][1].send(StatusResponse(held[1][0].request_id, ResponseCode.SUCCESS, b"2"))
        assert (await t).status_json == b"2"
        await conn.close()
        await server.close()

    run_bounded(main())


def test_broken_connection_fails_pending_calls_with_network_error():
    async def main():
        server = await start_server(on_client=lambda r, s: None)  # never answers
        conn = await client(server)
        calls = [asyncio.create_task(conn.call(StatusRequest(conn.next_request_id()), 10_000)) for _ in range(5)]
        await wait_until(lambda: server.stats.frames_in >= 6)
        await server.close()
        for t in calls:
            with pytest.raises(NetworkError):
                await t
        assert conn.closed
        with pytest.raises(NetworkError):
            await conn.call(StatusRequest(conn.next_request_id()), 1000)
        await conn.close()
        await conn.close()  # idempotent

    run_bounded(main())


# -- handshake ----------------------------------------------------------------------------------------
async def raw_hello(server, hello: Hello) -> list:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(encode_hello(hello))
    frames = await read_frames_until_eof(reader)
    writer.close()
    return frames


@pytest.mark.parametrize("hello, code, counter", [
    (Hello("g", "n1", Role.PEER, magic=b"NOPE"), ResponseCode.PROTOCOL_ERROR, "closed_protocol_errors"),
    (Hello("g", "n1", Role.PEER, version=PROTOCOL_VERSION + 9), ResponseCode.PROTOCOL_ERROR,
     "closed_protocol_errors"),
    (Hello("other", "n1", Role.PEER), ResponseCode.UNKNOWN_GROUP, "closed_handshake_errors"),
    (Hello("g", "n7", Role.PEER), ResponseCode.UNKNOWN_MEMBER, "closed_handshake_errors"),
])
def test_refused_handshakes(hello, code, counter):
    async def main():
        closes = []
        server = await start_server(on_client=echo_handler, on_protocol_error=lambda c, r: closes.append(c))
        frames = await raw_hello(server, hello)
        assert [k for k, _ in frames] == [Kind.HELLO_ERROR]
        assert decode_hello_error(frames[0][1]).code == code
        assert getattr(server.stats, counter) == 1 and closes == [counter]
        await assert_served(server)
        await server.close()

    run_bounded(main())


def test_client_open_raises_unknown_group():
    async def main():
        server = await start_server()
        with pytest.raises(UnknownGroup):
            await ClientConnection.open("127.0.0.1", server.port, group="elsewhere", client_name="c")
        await server.close()

    run_bounded(main())


def test_hello_ok_names_the_server():
    async def main():
        server = await start_server()
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(encode_hello(Hello(GROUP, "n1", Role.PEER)))
        data = await asyncio.wait_for(reader.readexactly(5), 5)
        length, kind = FRAME_HEADER.unpack(data)
        assert kind == Kind.HELLO_OK
        ok = decode_hello_ok(await asyncio.wait_for(reader.readexactly(length - 1), 5))
        assert ok.node_id == "n0" and ok.group == GROUP
        writer.close()
        await server.close()

    run_bounded(main())


def test_no_handshake_is_closed_after_timeout():
    async def main():
        server = await start_server(on_client=echo_handler, handshake_timeout_ms=200)
        loop = asyncio.get_running_loop()
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"QL")  # a start, never finished
        t0 = loop.time()
        await read_frames_until_eof(reader, timeout_s=5)
        elapsed = loop.time() - t0
        assert 0.15 <= elapsed < 3, elapsed
        assert server.stats.closed_handshake_timeouts == 1
        await assert_served(server)
        writer.close()
        await server.close()

    run_bounded(main())


# -- bad input after the handshake --------------------------------------------------------------------
BAD_INPUTS = {
    "garbage": bytes(random.Random(1).randrange(256) for _ in range(4096)),
    "absurd_length": FRAME_HEADER.pack(0xFFFFFFF0, Kind.APPEND_REQUEST) + b"x" * 100,
    "unknown_kind": encode_frame(99, b"hello"),
    "bad_payload": encode_frame(Kind.APPEND_REQUEST, b"\x00" * 7),
    "response_kind_from_client": encode_frame(Kind.APPEND_RESPONSE, b""),
}


@pytest.mark.parametrize("name", sorted(BAD_INPUTS) + ["half_frame", "garbage_before_hello"])
def test_bad_input_closes_only_that_connection(name):
    async def main():
        server = await start_server(on_client=echo_handler, max_frame_bytes=1 << 20)
        good = await client(server, "good")
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        if name != "garbage_before_hello":
            writer.write(encode_hello(Hello(GROUP, "bad", Role.CLIENT)))
        if name == "half_frame":
            frame = encode_frame(Kind.STATUS_REQUEST, b"\x00" * 8)
            writer.write(frame[:-3])
            writer.write_eof()
        elif name == "garbage_before_hello":
            writer.write(BAD_INPUTS["garbage"])
        else:
            writer.write(BAD_INPUTS[name])
        await read_frames_until_eof(reader)
        await wait_until(lambda: server.stats.closed_protocol_errors == 1, what="protocol error close")
        writer.close()
        r = await good.call(AppendRequest(good.next_request_id(), (b"a", b"b"), seq=5), 3000)
        assert (r.code, r.first_index, r.last_index) == (ResponseCode.SUCCESS, 2, 5)
        assert server.stats.client_connections_active == 1
        await good.close()
        await server.close()

    run_bounded(main())


def test_frame_over_max_frame_bytes_closes_connection():
    async def main():
        server = await start_server(on_client=echo_handler, max_frame_bytes=64 * 1024)
        conn = await client(server)
        with pytest.raises(NetworkError):
            await conn.call(AppendRequest(conn.next_request_id(), (b"z" * 100_000,)), 3000)
        assert server.stats.closed_protocol_errors == 1
        await assert_served(server)
        await server.close()

    run_bounded(main())


def test_peer_message_with_forged_sender_closes_link():
    async def main():
        got = []
        server = await start_server(on_peer=got.append)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(encode_hello(Hello(GROUP, "n1", Role.PEER)))
        from quorumlog.transport import codec
        writer.writelines(codec.encode(HeartbeatRequest("n1", "n0", 1, 0)))
        writer.writelines(codec.encode(HeartbeatRequest("n2", "n0", 1, 0)))
        frames = await read_frames_until_eof(reader)
        assert [k for k, _ in frames] == [Kind.HELLO_OK]
        assert got == [HeartbeatRequest("n1", "n0", 1, 0)]
        assert server.stats.closed_protocol_errors == 1
        writer.close()
        await server.close()

    run_bounded(main())


# -- storms ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("max_connections", [1024, 50])
def test_connection_storm(max_connections):
    n = 300

    async def main():
        server = await start_server(on_client=echo_handler, handshake_timeout_ms=10_000,
                                    max_connections=max_connections)
        good = await client(server, "good")
        rnd = random.Random(3)
        opened = await asyncio.gather(*[asyncio.open_connection("127.0.0.1", server.port) for _ in range(n)])
        for i, (_, w) in enumerate(opened):
            kind = i % 4
            if kind == 0:
                w.write(bytes(rnd.randrange(256) for _ in range(64)))  # garbage
            elif kind == 1:
                w.write(encode_hello(Hello(GROUP, f"c{i}", Role.CLIENT))[:7])  # a half handshake
            elif kind == 2:
                w.write(FRAME_HEADER.pack(3_000_000_000, 1))  # absurd length
            # kind 3: silent
        # The node keeps serving while the storm is on.
        for _ in range(20):
            r = await good.call(AppendRequest(good.next_request_id(), (b"v",), seq=1), 3000)
            assert r.code == ResponseCode.SUCCESS
        await wait_until(lambda: server.stats.connections_accepted + server.stats.connections_rejected >= n + 1,
                         what="all storm connections seen")
        assert server.stats.connections_active <= max_connections
        if max_connections < n:
            # Over the limit, idle handshakes are evicted (or newcomers refused when none is left to evict);
            # the established client is never the victim (it keeps being served above).
            assert server.stats.connections_rejected + server.stats.closed_handshake_evictions >= 1
        # The garbage and absurd-length connections are closed at once; buffering stayed bounded.
        assert sum(len(c.decoder._buf) for c in server.connections) <= len(server.connections) * 4096
        for _, w in opened:
            w.close()
        await wait_until(lambda: server.stats.connections_active == 1, what="storm connections closed")
        await assert_served(server)
        await good.close()
        await wait_until(lambda: server.stats.connections_active == 0, what="all closed")
        await server.close()

    run_bounded(main())


# -- peer links ----------------------------------------------------------------------------------------
def test_peer_links_deliver_in_order_including_big_pushes():
    async def main():
        got, done = [], asyncio.Event()
        n = 200

        def on_peer(m):
            got.append(m)
            if len(got) == n:
                done.set()

        server = await start_server(on_peer=on_peer)
        links = PeerLinks(group=GROUP, node_id="n1", peers={"n0": ("127.0.0.1", server.port),
                                                             "n1": ("127.0.0.1", 1)})
        assert links.peer_ids == ("n0",)
        big = bytes(random.Random(5).randrange(256) for _ in range(1 << 16)) * 20  # 1.25 MiB
        sent = []
        for i in range(n):
            if i % 50 == 0:
                rec = Records(i, i, (memoryview(big),), len(big))
                m = PushRequest("n1", "n0", 1, PushType.APPEND, i, i - 1, 1, i, i, rec)
            else:
                m = HeartbeatRequest("n1", "n0", 1, i)
            links.send(m)
            sent.append(m)
        await asyncio.wait_for(done.wait(), 20)
        for a, b in zip(got, sent):
            assert type(a) is type(b)
            if isinstance(a, PushRequest):
                assert bytes(a.records.chunks[0]) == big and a.records.size_bytes == len(big)
            else:
                assert a == b
        assert links.stats()["n0"].dropped_messages == 0
        await links.close()
        await links.close()
        await server.close()

    run_bounded(main())


def test_peer_links_drop_oldest_when_full_then_deliver_newest():
    async def main():
        port = free_port()
        got, done = [], asyncio.Event()

        def on_peer(m):
            got.append(m.committed_index)
            if len(got) == 10:
                done.set()

        links = PeerLinks(group=GROUP, node_id="n1", peers={"n0": ("127.0.0.1", port)}, max_queue_messages=10,
                          reconnect_backoff_min_ms=5, reconnect_backoff_max_ms=50)
        for i in range(100):
            links.send(HeartbeatRequest("n1", "n0", 1, i))  # never blocks, nobody listening
        st = links.stats()["n0"]
        assert (st.dropped_messages, st.queued_messages, st.connected) == (90, 10, False)
        await wait_until(lambda: links.stats()["n0"].connect_failures >= 1, what="a failed connect")
        server = await start_server(on_peer=on_peer, port=port)
        await asyncio.wait_for(done.wait(), 10)
        assert got == list(range(90, 100))
        await links.close()
        await server.close()

    run_bounded(main())


def test_peer_links_reconnect_after_server_restart():
    async def main():
        got, arrived = [], asyncio.Event()

        def on_peer(m):
            got.append(m)
            arrived.set()

        server = await start_server(on_peer=on_peer)
        port = server.port
        links = PeerLinks(group=GROUP, node_id="n2", peers={"n0": ("127.0.0.1", port)},
                          reconnect_backoff_min_ms=5, reconnect_backoff_max_ms=100)
        links.send(HeartbeatRequest("n2", "n0", 1, 1))
        await asyncio.wait_for(arrived.wait(), 5)
        await server.close()
        await wait_until(lambda: not links.connected("n0"), what="link down")
        arrived.clear()
        server = await start_server(on_peer=on_peer, port=port)
        await wait_until(lambda: links.connected("n0"), timeout_s=10, what="link up again")
        links.send(HeartbeatRequest("n2", "n0", 2, 2))
        await asyncio.wait_for(arrived.wait(), 5)
        assert got[-1] == HeartbeatRequest("n2", "n0", 2, 2)
        assert links.stats()["n0"].connects == 2
        await links.close()
        await server.close()

    run_bounded(main())


def test_a_broken_link_is_reported_on_both_sides_once_and_not_while_the_peer_has_linked_again():
    """What a master/slave session ends on: the server reports a peer whose last link to it ended
    (on_peer_gone), the dialling side a connected link that broke (on_link_down). A second link from the same
    peer keeps the first one's end from being reported."""
    async def main():
        gone: list[str] = []
        down: list[str] = []
        arrived = asyncio.Event()

        def on_peer(m):
            arrived.set()

        server = await start_server(on_peer=on_peer, on_peer_gone=gone.append)
        links = PeerLinks(group=GROUP, node_id="n2", peers={"n0": ("127.0.0.1", server.port)},
                          reconnect_backoff_min_ms=5, reconnect_backoff_max_ms=50)
        links.on_link_down = down.append
        other = PeerLinks(group=GROUP, node_id="n2", peers={"n0": ("127.0.0.1", server.port)})
        try:
            links.send(HeartbeatRequest("n2", "n0", 1, 1))
            await asyncio.wait_for(arrived.wait(), 5)
            arrived.clear()
            other.send(HeartbeatRequest("n2", "n0", 1, 1))  # (a second link from n2)
            await asyncio.wait_for(arrived.wait(), 5)
            await other.close()
            await wait_until(lambda: server.stats.peer_connections_active == 1, what="one link left")
            assert gone == [] and down == []  # (n2 is still linked)
            for conn in list(server.connections):  # the server drops n2's remaining link
                conn.transport.abort()
            await wait_until(lambda: gone == ["n2"] and down == ["n0"], what="both sides report the break")
            await wait_until(lambda: links.connected("n0"), what="the link back")
            assert gone == ["n2"] and down == ["n0"]
        finally:
            await server.close()
            await links.close()
        assert gone == ["n2"]  # (a closing server reports no one)

    run_bounded(main())


def test_peer_link_refused_as_unknown_member_keeps_retrying_quietly():
    async def main():
        server = await start_server()
        links = PeerLinks(group=GROUP, node_id="stranger", peers={"n0": ("127.0.0.1", server.port)},
                          reconnect_backoff_min_ms=5, reconnect_backoff_max_ms=20)
        links.send(HeartbeatRequest("stranger", "n0", 1, 1))
        await wait_until(lambda: server.stats.closed_handshake_errors >= 2, what="refused twice")
        assert not links.connected("n0")
        assert links.stats()["n0"].last_error.startswith("UnknownMember")
        await links.close()
        await server.close()

    run_bounded(main())


def test_idle_storm_cannot_lock_out_a_real_client():
    """At max_connections the oldest connection still in handshake makes room for the newcomer."""
    async def main():
        server = await start_server(on_client=echo_handler, max_connections=10, handshake_timeout_ms=30_000)
        idle = await asyncio.gather(*[asyncio.open_connection("127.0.0.1", server.port) for _ in range(10)])
        await wait_until(lambda: server.stats.connections_accepted == 10, what="idle connections accepted")
        await assert_served(server)
        assert server.stats.closed_handshake_evictions == 1
        for _, w in idle:
            w.close()
        await server.close()

    run_bounded(main())


def test_token_required_when_configured():
    async def main():
        server = await start_server(on_client=echo_handler, token="s3cret")
        with pytest.raises(QuorumLogError) as e:
            await ClientConnection.open("127.0.0.1", server.port, group=GROUP, client_name="c", token="nope")
        assert e.value.code == ResponseCode.UNAUTHORIZED
        async with await ClientConnection.open("127.0.0.1", server.port, group=GROUP, client_name="c",
                                               token="s3cret") as conn:
            assert (await conn.call(StatusRequest(1), 3000)).code == ResponseCode.SUCCESS
        await server.close()

    run_bounded(main())


def test_session_send_after_close_returns_false():
    async def main():
        held = []
        server = await start_server(on_client=lambda r, s: held.append((r, s)))
        conn = await client(server)
        t = asyncio.create_task(conn.call(StatusRequest(1), 5000))
        await wait_until(lambda: held, what="request arrived")
        await conn.close()
        with pytest.raises(NetworkError):
            await t
        await wait_until(lambda: held[0][1].closed, what="session closed")
        assert held[0][1].send(StatusResponse(1, ResponseCode.SUCCESS)) is False
        await server.close()

    run_bounded(main())


def test_peer_link_drops_a_server_that_talks_after_hello_ok():
    """Peer links are write-only after the handshake: a chatty 'server' is not a quorumlog node."""
    async def main():
        accepted = asyncio.Event()
        writers = []

        async def fake_node(reader, writer):
            await reader.read(4096)  # the Hello
            from quorumlog.transport.handshake import HelloOk, encode_hello_ok
            writer.write(encode_hello_ok(HelloOk(GROUP, "n0")) + encode_frame(Kind.STATUS_RESPONSE, b"??"))
            writers.append(writer)
            accepted.set()

        fake = await asyncio.start_server(fake_node, "127.0.0.1", 0)
        port = fake.sockets[0].getsockname()[1]
        links = PeerLinks(group=GROUP, node_id="n1", peers={"n0": ("127.0.0.1", port)},
                          reconnect_backoff_min_ms=5, reconnect_backoff_max_ms=20)
        await asyncio.wait_for(accepted.wait(), 5)
        await wait_until(lambda: "unexpected data" in links.stats()["n0"].last_error, what="link dropped")
        await links.close()
        for w in writers:
            w.close()
        fake.close()
        await fake.wait_closed()

    run_bounded(main())


def test_client_that_does_not_read_is_not_read_either():
    """Responses to a client that reads nothing pile up only to the write high-water mark, then we stop
    reading its requests; once it reads, every request is answered."""
    n, doc = 3000, b"x" * 16 * 1024
    handled = 0

    def on_client(req, session):
        nonlocal handled
        if session.client_name == "witness":
            return echo_handler(req, session)
        handled += 1
        session.send(StatusResponse(req.request_id, ResponseCode.SUCCESS, doc))

    async def main():
        from quorumlog.transport import codec
        server = await start_server(on_client=on_client)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(encode_hello(Hello(GROUP, "lazy", Role.CLIENT)))
        writer.write(b"".join(b"".join(codec.encode(StatusRequest(i))) for i in range(n)))
        await wait_until(lambda: any(c.reading_paused for c in server.connections), what="server paused reading")
        (conn,) = server.connections
        assert handled < n
        assert conn.transport.get_write_buffer_size() <= 4 * 1024 * 1024 + 512 * 1024
        await assert_served(server)  # others are served meanwhile
        got = 0
        dec = FrameDecoder()
        while got < n + 1:  # HelloOk + n responses
            data = await asyncio.wait_for(reader.read(1 << 20), 10)
            assert data
            dec.feed(data)
            while dec.next_frame() is not NEED_DATA:
                got += 1
        assert handled == n
        writer.close()
        await server.close()

    run_bounded(main())


def test_server_stops_reading_at_max_in_flight():
    async def main():
        held = []
        server = await start_server(on_client=lambda r, s: held.append((r, s)), max_in_flight=8)
        conn = await ClientConnection.open("127.0.0.1", server.port, group=GROUP, client_name="c",
                                           max_in_flight=100)
        calls = [asyncio.create_task(conn.call(StatusRequest(i), 10_000)) for i in range(50)]
        answered = 0
        while answered < 50:
            await wait_until(lambda: len(held) == min(8, 50 - answered), what="a window of requests")
            (sc,) = server.connections
            if len(held) == 8:
                assert sc.reading_paused and sc.in_flight == 8
            batch, held[:] = held[:], []
            for req, session in batch:
                session.send(StatusResponse(req.request_id, ResponseCode.SUCCESS, b"%d" % req.request_id))
            answered += len(batch)
        results = await asyncio.gather(*calls)
        assert [r.status_json for r in results] == [b"%d" % i for i in range(50)]
        await conn.close()
        await server.close()

    run_bounded(main())


def test_flush_writes_peer_messages_and_answers_in_the_same_loop_turn():
    """Once a link is up and idle, PeerLinks.flush() and TransportServer.flush() hand the bytes to the socket
    synchronously (no writer-task switch, no call_soon turn); the messages still arrive whole and in order."""
    async def main():
        got, done = [], asyncio.Event()

        def on_peer(m):
            got.append(m)
            if len(got) == 3:
                done.set()

        sessions = []
        server = await start_server(on_peer=on_peer, on_client=lambda r, s: sessions.append((r, s)))
        links = PeerLinks(group=GROUP, node_id="n1", peers={"n0": ("127.0.0.1", server.port)})
        links.send(HeartbeatRequest("n1", "n0", 1, 0))
        await wait_until(lambda: links.stats()["n0"].frames_out == 1, 5)
        await wait_until(lambda: links._links["n0"].idle, 5)  # the writer task parked on its wakeup
        before = links.stats()["n0"].frames_out
        links.send(HeartbeatRequest("n1", "n0", 1, 1))
        links.send(HeartbeatRequest("n1", "n0", 1, 2))
        links.flush()
        assert links.stats()["n0"].frames_out == before + 2  # written now, one writelines
        await asyncio.wait_for(done.wait(), 5)
        assert [m.committed_index for m in got] == [0, 1, 2]

        async with await client(server) as c:
            fut = asyncio.ensure_future(c.call(StatusRequest(c.next_request_id()), 3000))
            await wait_until(lambda: sessions, 5)
            req, session = sessions[0]
            out = server.stats.frames_out
            session.send(StatusResponse(req.request_id, ResponseCode.SUCCESS, b"{}"))
            assert server.dirty_corks  # corked until flush (or the next loop turn)
            server.flush()
            assert not server.dirty_corks and session._conn.cork.pending == [] and server.stats.frames_out == out + 1
            assert (await fut).code == ResponseCode.SUCCESS
        await links.close()
        await server.close()

    run_bounded(main())
