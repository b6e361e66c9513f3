"""The node's bookie through the runtime (a stand-in core and transport, real BookieStorage on disk): each op
answered with its code, bad requests refused without touching storage, limbo until `_meta` was read."""

import asyncio
import json
import threading

from quorumlog.codes import ResponseCode
from quorumlog.server.node import Node
from quorumlog.store import MemoryStore
from quorumlog.wire.ledger import (FLAG_FENCE, FLAG_RECOVERY, MAX_ADD_BATCH, AddEntry, BookieOp, BookieOpRequest,
                                   pack_adds, pack_entry, pack_multi_adds, unpack_add_results, unpack_multi_results)

from .fakes import FakeSession, FakeTransport, SoloCore
from .test_node import _config, _until


def _ask(transport, session, *requests):
    before = len(session.responses)
    for r in requests:
        transport.on_client_request(session, r)
    return _until(lambda: len(session.responses) == before + len(requests))


def adds(ledger, first, n):
    """Adds `first`.. of a ledger to bookie n0, each body naming its ledger and entry."""
    return [AddEntry("n0", ledger, e, pack_entry(e - 1, e + 1, b"%d/%d" % (ledger, e)), e - 1)
            for e in range(first, first + n)]


async def _started_node(tmp_path):
    """A node with a stand-in core and transport, and a real bookie on disk."""
    transport = FakeTransport()
    node = Node(_config(tmp_path), store=MemoryStore(max_entry_bytes=1000), core_factory=SoloCore,
                transport=transport)
    await node.start()
    return transport, node


def test_add_read_fence_lac_info_and_delete_through_the_node(tmp_path):
    async def main():
        transport, node = await _started_node(tmp_path)
        try:
            s = FakeSession()
            await _ask(transport, s, BookieOpRequest(1, BookieOp.ADD, 7, 0, -1, 0, pack_entry(-1, 1, b"a")),
                       BookieOpRequest(2, BookieOp.ADD, 7, 1, 0, 0, pack_entry(0, 2, b"b")))
            assert [(r.request_id, r.code) for r in s.responses] == [(1, ResponseCode.SUCCESS),
                                                                     (2, ResponseCode.SUCCESS)]
            # not yet compared with `_meta` (there is none here): it cannot tell a wiped disk, so an absent entry
            # is UNKNOWN, not NO_SUCH_ENTRY, and so is its LAC
            await _ask(transport, s, BookieOpRequest(5, BookieOp.READ, 7, 9), BookieOpRequest(55, BookieOp.READ_LAC, 7))
            assert [r.code for r in s.responses[-2:]] == [ResponseCode.UNKNOWN, ResponseCode.UNKNOWN]
            node.bookie.limbo_known = True
            await _ask(transport, s, BookieOpRequest(6, BookieOp.READ, 7, 9))
            assert s.responses[-1].code == ResponseCode.NO_SUCH_ENTRY
            await _ask(transport, s, BookieOpRequest(3, BookieOp.READ, 7, 1), BookieOpRequest(4, BookieOp.READ_LAC, 7))
            read, lac = s.responses[-2:]
            assert read.code == ResponseCode.SUCCESS and read.data == pack_entry(0, 2, b"b") and lac.lac == 0
            # fence: a writer's add is refused, a recovery write-back goes through
            await _ask(transport, s, BookieOpRequest(7, BookieOp.READ_LAC, 7, flags=FLAG_FENCE),
                       BookieOpRequest(8, BookieOp.ADD, 7, 2, 1, 0, pack_entry(1, 3, b"c")),
                       BookieOpRequest(9, BookieOp.ADD, 7, 2, 1, FLAG_RECOVERY, pack_entry(1, 3, b"c")))
            by_id = {r.request_id: r.code for r in s.responses[-3:]}  # (answers come as each is done)
            assert by_id == {7: ResponseCode.SUCCESS, 8: ResponseCode.LEDGER_FENCED, 9: ResponseCode.SUCCESS}
            # bad requests: refused with BAD_REQUEST, nothing stored
            await _ask(transport, s, BookieOpRequest(10, BookieOp.ADD, 0, 0, data=b"x"),
                       BookieOpRequest(11, BookieOp.READ, 7, -5))
            assert [r.code for r in s.responses[-2:]] == [ResponseCode.BAD_REQUEST, ResponseCode.BAD_REQUEST]
            await _ask(transport, s, BookieOpRequest(12, BookieOp.INFO))
            info = json.loads(s.responses[-1].data)
            assert info["bookie_id"] == "n0" and info["state"] == "read_write" and info["ledgers"] == 1
            await _ask(transport, s, BookieOpRequest(13, BookieOp.DELETE, 7))
            assert s.responses[-1].code == ResponseCode.SUCCESS
            assert node.bookie.storage.ledgers() == []
            assert node.node_status()["bookie"]["ledgers"] == 0
        finally:
            await node.stop()

    asyncio.run(main())


def test_adds_of_several_ledgers_in_one_request_each_get_their_ledgers_code(tmp_path):
    """ADD_MULTI: one answer with (ledger, entry, code) per add, in the request's order; a fenced ledger's adds
    are refused and the others stored; a malformed request is refused whole and stores nothing."""
    async def main():
        transport, node = await _started_node(tmp_path)
        try:
            s = FakeSession()
            await _ask(transport, s, BookieOpRequest(1, BookieOp.ADD, 8, 0, -1, 0, pack_entry(-1, 1, b"x")),
                       BookieOpRequest(2, BookieOp.READ_LAC, 8, flags=FLAG_FENCE))
            await _ask(transport, s, BookieOpRequest(3, BookieOp.ADD_MULTI, data=pack_multi_adds(
                [(7, adds(7, 0, 3)), (8, adds(8, 1, 2)), (9, adds(9, 0, 1))])))
            r = s.responses[-1]
            assert r.code == ResponseCode.SUCCESS and r.op is BookieOp.ADD_MULTI
            ok, fenced = ResponseCode.SUCCESS, ResponseCode.LEDGER_FENCED
            assert unpack_multi_results(r.data) == [(7, 0, ok), (7, 1, ok), (7, 2, ok), (8, 1, fenced),
                                                    (8, 2, fenced), (9, 0, ok)]
            storage = node.bookie.storage
            assert storage.read_entry(7, 2) == pack_entry(1, 3, b"7/2") and storage.read_entry(9, 0)
            assert storage.last_entry(8) == 0 and storage.last_add_confirmed(7) == 1
            too_many = pack_multi_adds([(10, adds(10, 0, MAX_ADD_BATCH)), (11, adds(11, 0, 1))])
            for rid, data in ((4, pack_multi_adds([(12, adds(12, 0, 2))])[:-1]),  # truncated
                              (5, pack_multi_adds([(0, adds(0, 0, 1))])),  # ledger 0
                              (6, too_many)):
                await _ask(transport, s, BookieOpRequest(rid, BookieOp.ADD_MULTI, data=data))
                assert s.responses[-1].code == ResponseCode.BAD_REQUEST, rid
            assert not {10, 11, 12} & set(storage.ledgers())
        finally:
            await node.stop()

    asyncio.run(main())


def test_a_checkpoint_deletes_covered_journal_files_off_the_event_loop(tmp_path):
    """Unlinking a whole journal file took 57 ms here: the node's checkpoint does it on the bookie's thread,
    not on the loop where every add in flight would wait for it."""
    async def main():
        transport, node = await _started_node(tmp_path)
        try:
            journal = node.bookie.storage.journal
            journal.file_bytes = 1  # every write rolls to a new file
            s = FakeSession()
            for i in range(4):
                await _ask(transport, s, BookieOpRequest(i + 1, BookieOp.ADD, 7, i, i - 1, 0,
                                                         pack_entry(i - 1, i + 1, b"x")))
            assert len(journal.files()) >= 4
            deleted_on = []
            real = journal.delete_before
            journal.delete_before = lambda mark: deleted_on.append(threading.current_thread()) or real(mark)
            await node.bookie.checkpoint()
            assert deleted_on and threading.main_thread() not in deleted_on
            assert len(journal.files()) == 1  # only the current file is left
        finally:
            await node.stop()

    asyncio.run(main())


def test_a_batch_of_adds_is_answered_per_add_refused_whole_when_malformed_and_recovery_passes_the_fence(tmp_path):
    """ADD_BATCH: one answer with (entry, code) per add in the request's order, the adds readable after it; a
    fenced ledger's batch gets LEDGER_FENCED for every add, a recovery batch goes through the fence; a truncated
    or over-long batch is refused whole with BAD_REQUEST and stores nothing."""
    async def main():
        transport, node = await _started_node(tmp_path)
        try:
            s, storage = FakeSession(), node.bookie.storage
            ok, fenced = ResponseCode.SUCCESS, ResponseCode.LEDGER_FENCED
            await _ask(transport, s, BookieOpRequest(1, BookieOp.ADD_BATCH, 7, data=pack_adds(adds(7, 0, 4))))
            r = s.responses[-1]
            assert r.code == ok and r.op is BookieOp.ADD_BATCH and unpack_add_results(r.data) == [
                (e, ok) for e in range(4)]
            assert [storage.read_entry(7, e) for e in range(4)] == [a.data for a in adds(7, 0, 4)]
            assert storage.last_add_confirmed(7) == 2
            await _ask(transport, s, BookieOpRequest(2, BookieOp.READ_LAC, 7, flags=FLAG_FENCE))
            await _ask(transport, s, BookieOpRequest(3, BookieOp.ADD_BATCH, 7, data=pack_adds(adds(7, 4, 2))))
            assert unpack_add_results(s.responses[-1].data) == [(4, fenced), (5, fenced)]
            await _ask(transport, s, BookieOpRequest(4, BookieOp.ADD_BATCH, 7, flags=FLAG_RECOVERY,
                                                     data=pack_adds(adds(7, 4, 2))))
            assert unpack_add_results(s.responses[-1].data) == [(4, ok), (5, ok)]
            assert storage.read_entry(7, 5) == adds(7, 5, 1)[0].data
            for rid, data in ((5, pack_adds(adds(8, 0, 3))[:-1]),  # truncated
                              (6, pack_adds(adds(8, 0, MAX_ADD_BATCH + 1)))):
                await _ask(transport, s, BookieOpRequest(rid, BookieOp.ADD_BATCH, 8, data=data))
                assert s.responses[-1].code == ResponseCode.BAD_REQUEST, rid
            assert 8 not in storage.ledgers()
        finally:
            await node.stop()

    asyncio.run(main())


def test_a_fence_that_arrives_before_the_registration_leaves_its_ledger_in_limbo(tmp_path):
    """A wiped bookie (its registered instance is another) that a recovery fences before it registered: the
    fence creates the ledger's state on the empty disk, yet the ledger is in limbo (it was not held when the
    bookie opened), so an absent entry answers UNKNOWN, never NO_SUCH_ENTRY (recovery would close it away)."""
    from types import SimpleNamespace

    from quorumlog.ledger.metadata import LedgerMetadata, Segment

    async def main():
        transport, node = await _started_node(tmp_path)
        try:
            s = FakeSession()
            await _ask(transport, s, BookieOpRequest(1, BookieOp.READ_LAC, 7, flags=FLAG_FENCE))
            assert s.responses[-1].code == ResponseCode.UNKNOWN and 7 in node.bookie.storage.ledgers()
            md = LedgerMetadata(7, 3, 2, 2, (Segment(0, ("n0", "n1", "n2")),), version=1)

            async def meta_get(key):  # the record of the instance this disk was before the wipe
                return SimpleNamespace(value=json.dumps({"instance_id": "before-the-wipe"}).encode(), version=3)

            async def ledgers():
                return [md]

            async def meta(*args):
                return None
            node.calls.meta_get, node.calls.ledgers, node.calls.meta = meta_get, ledgers, meta
            await node.bookie._register_once()
            node.bookie.limbo_known = True
            assert node.bookie.limbo == {7}
            await _ask(transport, s, BookieOpRequest(2, BookieOp.READ, 7, 0, flags=FLAG_FENCE))
            assert s.responses[-1].code == ResponseCode.UNKNOWN
        finally:
            await node.stop()

    asyncio.run(main())


def test_a_fenced_read_reads_the_entry_on_the_loop_not_on_the_journal_thread(tmp_path):
    """The fence completes on the journal's thread; reading the entry there raced the loop's entry-log writes
    (recovery reads answered CORRUPT_ENTRY). The storage is single-threaded apart from its journal writer."""
    async def main():
        transport, node = await _started_node(tmp_path)
        try:
            s = FakeSession()
            await _ask(transport, s, BookieOpRequest(1, BookieOp.ADD, 7, 0, -1, 0, pack_entry(-1, 1, b"a")))
            storage = node.bookie.storage
            read_entry, threads = storage.read_entry, []

            def recording_read_entry(*args):
                threads.append(threading.current_thread())
                return read_entry(*args)
            storage.read_entry = recording_read_entry
            await _ask(transport, s, BookieOpRequest(2, BookieOp.READ, 7, 0, flags=FLAG_FENCE))
            assert s.responses[-1].code == ResponseCode.SUCCESS and s.responses[-1].data == pack_entry(-1, 1, b"a")
            assert threads == [threading.main_thread()]
        finally:
            await node.stop()

    asyncio.run(main())


def test_a_wiped_bookie_restarted_before_it_registered_keeps_the_fenced_ledger_in_limbo(tmp_path):
    """The fence's state is durable: after a restart the bookie holds ledger 7 when it opens, yet this disk never
    registered its instance, so nothing it holds vouches for the ledger (found by the simulator)."""
    from types import SimpleNamespace

    from quorumlog.ledger.metadata import LedgerMetadata, Segment

    async def main():
        transport, node = await _started_node(tmp_path)
        s = FakeSession()
        try:
            await _ask(transport, s, BookieOpRequest(1, BookieOp.READ_LAC, 7, flags=FLAG_FENCE))
        finally:
            await node.stop()
        transport, node = await _started_node(tmp_path)
        try:
            assert 7 in node.bookie.storage.ledgers()

            async def meta_get(key):
                return SimpleNamespace(value=json.dumps({"instance_id": "before-the-wipe"}).encode(), version=3)

            async def ledgers():
                return [LedgerMetadata(7, 3, 2, 2, (Segment(0, ("n0", "n1", "n2")),), version=1)]

            async def meta(*args):
                return None
            node.calls.meta_get, node.calls.ledgers, node.calls.meta = meta_get, ledgers, meta
            await node.bookie._register_once()
            assert node.bookie.limbo == {7} and node.bookie.limbo_known
            await _ask(transport, s, BookieOpRequest(2, BookieOp.READ, 7, 0, flags=FLAG_FENCE))
            assert s.responses[-1].code == ResponseCode.UNKNOWN
        finally:
            await node.stop()

    asyncio.run(main())


def test_an_entry_over_max_ledger_entry_bytes_is_refused_with_entry_too_large(tmp_path):
    from quorumlog.wire.ledger import MAX_LEDGER_ENTRY_BYTES

    async def main():
        transport, node = await _started_node(tmp_path)
        try:
            s = FakeSession()
            big = pack_entry(-1, 1, bytes(MAX_LEDGER_ENTRY_BYTES + 1))
            await _ask(transport, s, BookieOpRequest(1, BookieOp.ADD, 7, 0, -1, 0, big),
                       BookieOpRequest(2, BookieOp.ADD_BATCH, 8, data=pack_adds([AddEntry("n0", 8, 0, big, -1)])))
            single, batch = sorted(s.responses, key=lambda r: r.request_id)
            assert single.code == ResponseCode.ENTRY_TOO_LARGE
            assert unpack_add_results(batch.data) == [(0, ResponseCode.ENTRY_TOO_LARGE)]
            assert node.bookie.storage.ledgers() == []
        finally:
            await node.stop()


def test_gc_compacts_in_steps_with_the_loop_running_between_them(tmp_path):
    """A compaction copies the live entries of a mostly deleted entry log: done at once on the loop it held
    every node's loop for 0.7-2.9 s per two 64 MiB logs. Now the log is read on the bookie's thread and the loop
    runs between copies of at most COMPACTION_STEP_BYTES; every live entry stays readable."""
    import dataclasses

    from quorumlog.bookie.storage import COMPACTION_STEP_BYTES, BookieStorage

    async def main():
        transport = FakeTransport()
        node = Node(_config(tmp_path), store=MemoryStore(max_entry_bytes=1000), core_factory=SoloCore,
                    transport=transport)
        node.bookie.bookie_config = dataclasses.replace(node.bookie.bookie_config,
                                                        entry_log_file_bytes=4 * 1024 * 1024)
        await node.start()
        try:
            s = node.bookie.storage
            body = bytes(16 * 1024)
            for i in range(800):  # 12.5 MiB over 5 ledgers, interleaved: 3 logs of 4 MiB, then the current one
                s.add_entry(i % 5, i // 5, body).result()
            for lid in (0, 1, 2):
                s.delete_ledger(lid).result()
            copied = [0]
            append = s.entry_log.append

            def counting_append(ledger, entry, data):
                copied[0] += len(data)
                return append(ledger, entry, data)

            s.entry_log.append = counting_append
            read_on = []
            read_log = getattr(s.entry_log, "read_log", None)
            if read_log is not None:
                s.entry_log.read_log = lambda log_id: read_on.append(threading.get_ident()) or read_log(log_id)
            most_between_turns = [0]
            done = asyncio.Event()

            async def watch():
                last = 0
                while True:
                    most_between_turns[0] = max(most_between_turns[0], copied[0] - last)
                    last = copied[0]
                    if done.is_set():
                        return
                    await asyncio.sleep(0)

            watcher = asyncio.create_task(watch())
            added = []

            async def keep_adding():  # adds to live ledgers go on between the steps
                entry = 160
                while not done.is_set():
                    for lid in (3, 4):
                        await asyncio.wrap_future(s.add_entry(lid, entry, b"late %d" % entry))
                        added.append((lid, entry))
                    entry += 1

            adder = asyncio.create_task(keep_adding())
            await node.bookie.gc()
            done.set()
            await watcher
            await adder
            assert added
            assert copied[0] >= 3 * 1024 * 1024  # (two fifths of three 4 MiB logs were live)
            assert most_between_turns[0] <= COMPACTION_STEP_BYTES + len(body)
            assert read_on and threading.get_ident() not in read_on
            assert len(s.entry_log.log_ids()) < 4  # the compacted logs are gone
            for i in range(800):
                if i % 5 >= 3:
                    assert s.read_entry(i % 5, i // 5) == body
        finally:
            await node.stop()
        # and from disk, after a restart: the copies were durable and indexed before their old logs went
        reopened = BookieStorage(node.bookie.dir, node.bookie.bookie_config)
        try:
            for i in range(800):
                if i % 5 >= 3:
                    assert reopened.read_entry(i % 5, i // 5) == body
            for lid, entry in added:
                assert reopened.read_entry(lid, entry) == b"late %d" % entry
        finally:
            reopened.close()
    asyncio.run(main())
