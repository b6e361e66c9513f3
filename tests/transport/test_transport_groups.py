"""One link per peer node carries every group: GroupSelect frames route each message to its group, also when
the queue dropped the message that came with a switch, and after a reconnect."""

from __future__ import annotations

from quorumlog.codes import ResponseCode
from quorumlog.errors import QuorumLogError
from quorumlog.transport import NODE_LINK, ClientConnection, PeerLinks, TransportServer
from quorumlog.wire.client import StatusRequest, StatusResponse
from quorumlog.wire.messages import HeartbeatRequest

from .netutil import run_bounded, wait_until

GROUPS = {"a": frozenset({"n0", "n1"}), "b": frozenset({"n0", "n1", "n2"})}


def _members_of(group: str):
    if group == NODE_LINK:
        return frozenset().union(*GROUPS.values())
    return GROUPS.get(group)


async def _server(got: list, on_client=None) -> TransportServer:
    return await TransportServer.start(
        "127.0.0.1", 0, node_id="n0", members_of=_members_of, on_peer_message=lambda g, m: got.append((g, m)),
        on_client_request=on_client or (lambda r, s: None))


def test_messages_of_many_groups_share_one_link_and_keep_their_group():
    async def main():
        got: list = []
        server = await _server(got)
        links = PeerLinks(group=NODE_LINK, node_id="n1", peers={"n0": ("127.0.0.1", server.port)})
        sent = []
        for i in range(300):
            group = "ab"[(i // 3) % 2] if i % 7 else "a"  # runs of each group, and switches in between
            m = HeartbeatRequest("n1", "n0", 1, i)
            links.send(m, group)
            sent.append((group, m))
        await wait_until(lambda: len(got) == len(sent), what="all messages")
        assert got == sent
        assert server.stats.peer_connections_active == 1  # one connection for both groups
        await links.close()
        await server.close()

    run_bounded(main())


def test_a_dropped_message_does_not_take_its_group_switch_with_it():
    """The queue drops its oldest messages when full; the GroupSelect is decided when frames are written, so the
    messages that remain still arrive under their own group."""
    async def main():
        got: list = []
        server = await _server(got)
        links = PeerLinks(group=NODE_LINK, node_id="n1", peers={"n0": ("127.0.0.1", server.port)},
                          max_queue_messages=3)
        await wait_until(lambda: links.connected("n0"), what="link up")
        links._links["n0"].idle = False  # hold the writer: everything below queues up first
        for i, group in enumerate(["a", "b", "b", "a", "b"]):
            links.send(HeartbeatRequest("n1", "n0", 1, i), group)
        links._links["n0"].idle = True
        links._links["n0"].write_now()
        await wait_until(lambda: len(got) == 3, what="the 3 newest")
        assert [(g, m.committed_index) for g, m in got] == [("b", 2), ("a", 3), ("b", 4)]
        assert links.stats()["n0"].dropped_messages == 2
        await links.close()
        await server.close()

    run_bounded(main())


def test_reconnect_starts_from_the_hello_group():
    async def main():
        got: list = []
        server = await _server(got)
        links = PeerLinks(group=NODE_LINK, node_id="n1", peers={"n0": ("127.0.0.1", server.port)})
        links.send(HeartbeatRequest("n1", "n0", 1, 0), "b")
        await wait_until(lambda: len(got) == 1, what="first")
        for conn in list(server.connections):
            conn._close("test: cut", count=None, abort=True)
        await wait_until(lambda: not links.connected("n0"), what="link down")
        await wait_until(lambda: links.connected("n0"), what="link up again")
        links.send(HeartbeatRequest("n1", "n0", 1, 1), "b")
        await wait_until(lambda: len(got) == 2, what="second")
        assert got[1][0] == "b"  # the new connection selected b again
        await links.close()
        await server.close()

    run_bounded(main())


def test_clients_name_their_group_and_unknown_groups_are_refused():
    async def main():
        seen: list = []

        def on_client(request, session):
            seen.append(session.group)
            session.send(StatusResponse(request.request_id, ResponseCode.SUCCESS, b"{}"))

        server = await _server([], on_client)
        async with await ClientConnection.open("127.0.0.1", server.port, group="b", client_name="c",
                                               max_in_flight=4) as conn:
            r = await conn.call(StatusRequest(conn.next_request_id()))
            assert r.code == ResponseCode.SUCCESS
        assert seen == ["b"]
        try:
            await ClientConnection.open("127.0.0.1", server.port, group="zzz", client_name="c", max_in_flight=4)
        except QuorumLogError as e:
            assert e.code == ResponseCode.UNKNOWN_GROUP
        else:
            raise AssertionError("a client of a group not hosted here was accepted")
        await server.close()

    run_bounded(main())
