import asyncio

from quorumlog.codes import ResponseCode
from quorumlog.store import MemoryStore
from quorumlog.format.log_entry import decode_records
from quorumlog.server.reads import CommitNotifier, read_committed, serve_read
from quorumlog.wire.client import ReadRequest


def _store(n: int) -> MemoryStore:
    s = MemoryStore()
    s.append_batch(1, [b"e%d" % i for i in range(n)], 7)
    return s


def test_reads_stop_at_the_committed_index_and_return_raw_records():
    s = _store(10)
    r = read_committed(s, ReadRequest(1, start=2), committed_index=5)
    assert r.code == ResponseCode.SUCCESS and r.committed_index == 5
    assert [e.body for e in decode_records(b"".join(r.records.chunks))] == [b"e2", b"e3", b"e4", b"e5"]
    r = read_committed(s, ReadRequest(1, start=2, end=3), committed_index=5)
    assert (r.records.first_index, r.records.last_index) == (2, 3)


def test_beyond_committed_is_empty_and_below_begin_is_refused():
    s = _store(3)
    r = read_committed(s, ReadRequest(1, start=3), committed_index=2)
    assert r.code == ResponseCode.SUCCESS and r.records is None and r.committed_index == 2
    r = read_committed(s, ReadRequest(1, start=-1), committed_index=2)
    assert r.code == ResponseCode.BAD_REQUEST

    class Trimmed(MemoryStore):
        begin_index = 5
    r = read_committed(Trimmed(), ReadRequest(1, start=2), committed_index=9)
    assert r.code == ResponseCode.INDEX_LESS_THAN_LOCAL_BEGIN


def test_long_poll_wakes_on_commit_not_on_a_timer():
    async def main():
        s = _store(5)
        n = CommitNotifier()
        n.advance(1)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        task = asyncio.create_task(serve_read(s, ReadRequest(1, start=2, wait_ms=10_000), n))
        await asyncio.sleep(0.05)
        assert not task.done() and n.waiting == 1
        n.advance(3)
        r = await asyncio.wait_for(task, 2)
        assert loop.time() - t0 < 1.0
        assert (r.records.first_index, r.records.last_index) == (2, 3)
        assert n.waiting == 0
    asyncio.run(main())


def test_long_poll_times_out_empty_and_shutdown_releases_it():
    async def main():
        s = _store(5)
        n = CommitNotifier()
        n.advance(1)
        r = await serve_read(s, ReadRequest(1, start=2, wait_ms=50), n)
        assert r.code == ResponseCode.SUCCESS and r.records is None and r.committed_index == 1
        task = asyncio.create_task(serve_read(s, ReadRequest(1, start=2, wait_ms=60_000), n))
        await asyncio.sleep(0.02)
        n.wake_all()
        r = await asyncio.wait_for(task, 2)
        assert r.records is None
    asyncio.run(main())
