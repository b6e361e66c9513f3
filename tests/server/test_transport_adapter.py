import asyncio

from quorumlog.config import load_config
from quorumlog.server.transport_adapter import COMMIT_HOLD_MS, RealTransport
from quorumlog.wire.messages import HeartbeatRequest, PushRequest, PushType


class _Link:
    def __init__(self, fail_times: int) -> None:
        self.fail_times = fail_times
        self.runs = 0
        self.task = None

    async def run(self) -> None:
        self.runs += 1
        if self.runs <= self.fail_times:
            raise RuntimeError("unable to perform operation on <TCPTransport closed=True>; the handler is closed")
        await asyncio.sleep(3600)


class _Links:
    closing = False

    def __init__(self) -> None:
        self._links = {"n1": _Link(fail_times=2)}


def test_a_dead_peer_link_task_is_restarted(tmp_path):
    async def main():
        cfg = load_config(flags={"node_id": "n0", "peers": "n0=127.0.0.1:1,n1=127.0.0.1:2",
                                 "data_dir": str(tmp_path)}, env={})
        t = RealTransport(cfg, metrics=None)
        t._links = _Links()
        link = t._links._links["n1"]
        link.task = asyncio.ensure_future(link.run())
        watchdog = asyncio.ensure_future(t.watch_links(interval_s=0.01))
        for _ in range(200):
            if link.runs == 3 and not link.task.done():
                break
            await asyncio.sleep(0.01)
        assert link.runs == 3 and not link.task.done()
        assert t.dead_links() == {}
        watchdog.cancel()
        link.task.cancel()
        await asyncio.gather(watchdog, link.task, return_exceptions=True)
    asyncio.run(main())


class _Recorder:
    closing = False

    def __init__(self) -> None:
        self.sent: list = []
        self.flushes = 0

    def send(self, msg, group) -> None:
        assert group == "default"
        self.sent.append(msg)

    def flush(self) -> None:
        self.flushes += 1

    async def close(self) -> None:
        self.closing = True


def _transport(tmp_path) -> tuple[RealTransport, _Recorder]:
    cfg = load_config(flags={"node_id": "n0", "peers": "n0=127.0.0.1:1,n1=127.0.0.1:2,n2=127.0.0.1:3",
                             "data_dir": str(tmp_path)}, env={})
    t = RealTransport(cfg, metrics=None)
    t._links = _Recorder()
    return t, t._links


def _commit(to, committed, term=1):
    return PushRequest("n0", to, term, PushType.COMMIT, committed)


def _append(to, committed, term=1):
    return PushRequest("n0", to, term, PushType.APPEND, committed, 4, 1, 5, 5, None)


def test_commit_only_push_is_superseded_by_the_next_append_push(tmp_path):
    async def main():
        t, rec = _transport(tmp_path)
        t.send("default", _commit("n1", 4))
        t.send("default", _commit("n1", 5))
        assert rec.sent == []  # held
        t.send("default", _append("n1", 5))
        assert rec.sent == [_append("n1", 5)]  # carries committed 5: the commit-only push is not needed
        await asyncio.sleep(COMMIT_HOLD_MS / 1000 * 3)
        assert rec.sent == [_append("n1", 5)]
    asyncio.run(main())


def test_held_commit_goes_out_after_the_hold_or_before_anything_that_does_not_carry_it(tmp_path):
    async def main():
        t, rec = _transport(tmp_path)
        t.send("default", _commit("n1", 5))
        t.send("default", _commit("n2", 5))
        hb = HeartbeatRequest("n0", "n2", 1, 5)
        t.send("default", hb)
        assert rec.sent == [_commit("n2", 5), hb]  # order kept
        older = _append("n1", 3)
        t.send("default", _commit("n1", 6))
        t.send("default", older)  # carries an older commit index: the held one goes first
        assert rec.sent[2:] == [_commit("n1", 6), older]
        t.send("default", _commit("n1", 7))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 1
        while len(rec.sent) < 5:
            assert loop.time() < deadline
            await asyncio.sleep(0.001)
        assert rec.sent[4] == _commit("n1", 7) and rec.flushes >= 1
        await t.close()
    asyncio.run(main())
