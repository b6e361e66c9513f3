import asyncio

from quorumlog.config import load_config
from quorumlog.server.transport_adapter import RealTransport


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
