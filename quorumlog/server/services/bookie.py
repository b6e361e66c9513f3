"""The node's bookie (docs/interfaces.md "Ledgers": every node is also one): BookieStorage under `data_dir/bookie`,
answering BookieOpRequests (quorumlog/wire/ledger.py) on the node's client port through the sans-I/O
BookieHandler, with checkpoints, disk checks and garbage collection on the node's timers.

Limbo (BookKeeper #2612). The bookie registers itself in `_meta` as `bookies/ID` = {instance_id, address}.
If the record names another instance id (or none), this disk may not be the one the cluster wrote to (wiped,
replaced): every ledger whose ensembles name this bookie and that it does not hold is in limbo, and absent
entries of those ledgers are answered UNKNOWN instead of NO_SUCH_ENTRY, so recovery never takes the lost
copy for an absent one. The set is written to `limbo.json` (fsynced) before the new instance id is
registered, so a restart cannot forget it. Until the bookie has compared with `_meta` once, it cannot tell:
every absent entry is UNKNOWN. "Does not hold" is judged on the ledgers it held when its storage was opened,
before the node's listener served anything: a fencing read that arrives before the registration creates its
ledger's state (the decision is the sans-I/O quorumlog/ledger/limbo.py, which the simulator runs too).

The storage is single-threaded apart from its journal writer: every call here runs on the node's loop; the
journal thread completes add futures, whose answers are sent from the loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

from ...bookie.add_items import scan_adds, scan_multi_adds
from ...bookie.handler import BookieHandler
from ...bookie.storage import CHECKPOINT, BookieConfig, BookieStorage, ReadLog, RemoveLog
from ...codes import ResponseCode
from ...config import NodeConfig
from ...errors import QuorumLogError
from ...ledger.limbo import BookieLimbo
from ...store.disk_guard import used_ratio
from ...wire.ledger import FLAG_RECOVERY, BookieOp, BookieOpRequest, BookieOpResponse, from_op_request, to_op_response
from ..durable_file import write_json_durably
from ..host import Session, send_response
from ..repeated_log import RepeatedLog
from .cluster_calls import BOOKIES_PREFIX, ClusterCalls

log = logging.getLogger(__name__)

BOOKIE_DIR = "bookie"
LIMBO_FILE = "limbo.json"
FRAME_HEADROOM_BYTES = 64 * 1024  # (as config.py's check of max_frame_bytes against entries)
REGISTERED_FILE = "registered.json"  # the instance this disk last registered in `_meta` (ledger/limbo.py)
REGISTER_RETRY_S = 1.0
GC_INTERVAL_MS = 60_000  # BookKeeper gcWaitTime is 15 minutes; our ledgers are deleted by tests and CLI users


Answer = Callable[[BookieOpResponse], None]
Refuse = Callable[[ResponseCode, str], None]


class BookieService:
    serves = (BookieOpRequest,)

    def __init__(self, cfg: NodeConfig, calls: ClusterCalls, stopping: asyncio.Event) -> None:
        self._pending_log = RepeatedLog(log, every_s=60.0)
        self.config = cfg
        self.calls = calls
        self._stopping = stopping
        self.id = cfg.node_id
        self.dir = os.path.join(cfg.data_dir, BOOKIE_DIR)
        self.bookie_config = BookieConfig(journal_max_group_wait_ms=cfg.journal_max_group_wait_ms,
                                          disk_usage_threshold=cfg.bookie_disk_usage_threshold,
                                          disk_usage_lwm=cfg.bookie_disk_usage_lwm,
                                          # (an entry must fit one frame, with its request's headers)
                                          max_entry_bytes=min(cfg.max_ledger_entry_bytes,
                                                              cfg.max_frame_bytes - FRAME_HEADROOM_BYTES))
        self.storage: BookieStorage | None = None
        self.handler: BookieHandler | None = None
        self._limbo = BookieLimbo((), (), None)  # (made again by open(), from limbo.json and what the storage holds)
        self._maintenance = asyncio.Lock()  # a checkpoint and a gc never overlap
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="bookie-checkpoint")
        self._checkpoint_mark: tuple[int, int] | None = None  # a checkpoint between begin and end
        self.requests = 0

    # -- life ----------------------------------------------------------------------------------------------
    def open(self) -> None:
        self.storage = BookieStorage(self.dir, self.bookie_config)
        # before the listener serves: what the bookie holds now is what the disk brought (limbo.py)
        self._limbo = BookieLimbo(_read_json(os.path.join(self.dir, LIMBO_FILE), []), self.storage.ledgers(),
                                  _read_json(os.path.join(self.dir, REGISTERED_FILE), {}).get("instance_id"))
        # (a fenced read's read of the entry after its fence: on the loop, never on the journal's thread)
        self.handler = BookieHandler(self.id, self.storage, self.in_limbo,
                                     asyncio.get_running_loop().call_soon_threadsafe)
        log.info("bookie open node=%s instance=%s ledgers=%d limbo=%d read_only=%s", self.id,
                 self.storage.instance_id, len(self.storage.ledgers()), len(self.limbo), self.storage.read_only)

    def in_limbo(self, ledger_id: int) -> bool:
        return self._limbo.in_limbo(ledger_id)

    @property
    def limbo(self) -> set[int]:
        return self._limbo.ledgers

    @property
    def limbo_known(self) -> bool:
        """Compared with `_meta` since the storage was opened (until then every absent entry is UNKNOWN)."""
        return self._limbo.known

    @limbo_known.setter
    def limbo_known(self, known: bool) -> None:  # (tests: a node without `_meta`)
        self._limbo.known = known

    def close(self) -> None:
        self._executor.shutdown(wait=True)  # a checkpoint's durable part in flight finishes first
        if self.storage is not None:
            if self._checkpoint_mark is not None:  # its task was cancelled (node stopping) after that part ran
                self.storage.checkpoint_end(self._checkpoint_mark)
            self.storage.close()
            self.storage = None

    async def checkpoint(self) -> None:
        """The storage's checkpoint with its fdatasyncs and the index's synced write on a thread: a node under
        load must not stall its loop (and its groups' heartbeats) for them."""
        async with self._maintenance:
            await self._checkpoint()

    async def _checkpoint(self) -> bool:
        """Whether it was done: one that fails (a full disk) leaves the journal whole and is tried again."""
        s = self.storage
        if s is None:
            return False
        try:
            mark, durable_part = s.checkpoint_begin()
            self._checkpoint_mark = mark
            try:
                await asyncio.wrap_future(self._executor.submit(durable_part))
            except OSError:
                self._checkpoint_mark = None
                s.checkpoint_abort()
                raise
        except OSError as e:
            log.warning("bookie checkpoint failed node=%s, tried again at the next one: %s", self.id, e)
            return False
        self._checkpoint_mark = None
        s.checkpoint_end(mark, delete_journal=False)
        # (off the loop too: every add in flight on this bookie would wait out the unlink of a whole journal file)
        await asyncio.wrap_future(self._executor.submit(s.journal.delete_before, mark))
        return True

    def check_disk(self) -> None:
        if self.storage is not None:
            self.storage.check_disk()

    async def gc(self) -> None:
        """The storage's gc with its checkpoint, and the first look at entry logs older than this process (a
        walk of their headers), on the thread. Compaction goes in steps (storage.garbage_steps): the log it
        compacts is read and a log it drops is removed on the thread, its copies are made on the loop in steps
        (256 entries, at most a MiB) with the loop's other work between, and the checkpoint before the old log
        goes is this one (its durable part on the thread). Done at once on the loop it stalled every node together
        (their GC timers agree) for 0.7-2.9 s."""
        async with self._maintenance:
            s = self.storage
            if not await self._checkpoint() or s is None:
                return  # (liveness is judged on a complete index on disk)
            for log_id in s.entry_log.unmapped():
                counts = await asyncio.wrap_future(self._executor.submit(s.entry_log.map_ledgers, log_id))
                s.entry_log.set_ledger_bytes(log_id, counts)
            stats: dict[str, int] = {}
            steps = s.garbage_steps(stats)
            answer: bytes | None = None
            try:
                while True:
                    step = steps.send(answer)
                    answer = None
                    if isinstance(step, ReadLog):
                        answer = await asyncio.wrap_future(self._executor.submit(s.entry_log.read_log, step.log_id))
                    elif isinstance(step, RemoveLog):
                        await asyncio.wrap_future(self._executor.submit(s.entry_log.remove, step.log_id))
                    elif step is CHECKPOINT:
                        if not await self._checkpoint():
                            # (the old log stays: its entries' copies are indexed, the next gc removes it)
                            steps.close()
                            break
                    else:
                        await asyncio.sleep(0)
            except StopIteration:
                pass
            if any(stats.values()):
                log.info("bookie gc node=%s %s", self.id, stats)

    @property
    def state(self) -> str:
        return "read_only" if self.storage is not None and self.storage.read_only else "read_write"

    def info(self) -> dict[str, Any]:
        s = self.storage
        assert s is not None
        used = used_ratio(self.dir)  # (the formula the node's status, the disk guard and read-only mode use)
        return {"bookie_id": self.id, "instance_id": s.instance_id, "state": self.state,
                "disk_used": round(used, 4), "disk_error": None if s.disk_error is None else str(s.disk_error),
                "ledgers": len(s.ledgers()), "limbo": len(self.limbo),
                "limbo_known": self.limbo_known, "requests": self.requests,
                "limbo_ledgers": sorted(self.limbo) if self.limbo_known else []}  # (auto-recovery re-replicates them)

    # -- requests ------------------------------------------------------------------------------------------
    def on_request(self, session: Session, req: BookieOpRequest) -> None:
        self.requests += 1
        rid = req.request_id

        def answer(resp: BookieOpResponse) -> None:
            send_response(session, resp)

        def refuse(code: ResponseCode, message: str) -> None:
            answer(BookieOpResponse(rid, code, req.op, req.ledger_id, req.entry_id, message=message))

        if self.storage is None or self.handler is None:
            return refuse(ResponseCode.LEADER_NOT_READY, "bookie not open")
        if req.op is BookieOp.INFO:
            return answer(BookieOpResponse(rid, ResponseCode.SUCCESS, req.op, data=json.dumps(self.info()).encode()))
        if req.op is BookieOp.ADD_MULTI:
            return self._add_multi(req, answer, refuse)
        if req.ledger_id <= 0 or (req.op in (BookieOp.ADD, BookieOp.READ) and req.entry_id < 0):
            return refuse(ResponseCode.BAD_REQUEST, f"bad ledger {req.ledger_id} / entry {req.entry_id}")
        if req.op is BookieOp.ADD_BATCH:
            return self._add_batch(req, answer, refuse)
        if req.op is BookieOp.WRITE_LAC:
            st = self.storage.ledger_state(req.ledger_id)
            if st is not None and (st.fenced or st.deleted):
                return refuse(ResponseCode.LEDGER_FENCED if st.fenced else ResponseCode.NO_SUCH_LEDGER,
                              f"ledger {req.ledger_id} is {'fenced' if st.fenced else 'deleted'}")
            fut = self.storage.set_explicit_lac(req.ledger_id, req.lac)
            loop = asyncio.get_running_loop()
            fut.add_done_callback(lambda f: loop.call_soon_threadsafe(
                answer, BookieOpResponse(rid, _code(f), req.op, req.ledger_id, lac=req.lac)))
            return None
        try:
            if req.op is BookieOp.DELETE:
                fut: Future = self.storage.delete_ledger(req.ledger_id)
                self._limbo.deleted(req.ledger_id)
                done = lambda f: BookieOpResponse(rid, _code(f), req.op, req.ledger_id)  # noqa: E731
            else:
                fut = self.handler.handle(from_op_request(self.id, req))
                done = lambda f: to_op_response(rid, f.result())  # noqa: E731
        except QuorumLogError as e:
            return refuse(e.code, str(e))
        except (ValueError, OverflowError) as e:
            return refuse(ResponseCode.BAD_REQUEST, str(e))
        loop = asyncio.get_running_loop()

        def finished(f: Future) -> None:  # on the journal's thread, or here if already done
            loop.call_soon_threadsafe(answer, done(f))
        fut.add_done_callback(finished)

    def _add_batch(self, req: BookieOpRequest, answer: Answer, refuse: Refuse) -> None:
        """The batch's adds stored and journalled together; one answer with each entry's code once durable."""
        assert self.handler is not None
        try:
            adds = scan_adds(req.data)
            fut = self.handler.add_batch(req.ledger_id, adds, bool(req.flags & FLAG_RECOVERY))
        except (ValueError, OverflowError) as e:
            return refuse(ResponseCode.BAD_REQUEST, str(e))
        loop = asyncio.get_running_loop()

        def reply(f: Future) -> None:
            code = int(f.result())
            answer(BookieOpResponse(req.request_id, ResponseCode.SUCCESS, req.op, req.ledger_id,
                                    data=adds.results(code)))
        fut.add_done_callback(lambda f: loop.call_soon_threadsafe(reply, f))

    def _add_multi(self, req: BookieOpRequest, answer: Answer, refuse: Refuse) -> None:
        """Adds of several ledgers stored and journalled together; one answer with each add's code."""
        assert self.handler is not None
        try:
            sections = scan_multi_adds(req.data)
            fut = self.handler.add_multi(sections)
        except (ValueError, OverflowError) as e:
            return refuse(ResponseCode.BAD_REQUEST, str(e))
        loop = asyncio.get_running_loop()

        def reply(f: Future) -> None:
            codes = f.result()
            answer(BookieOpResponse(req.request_id, ResponseCode.SUCCESS, req.op, data=b"".join(
                adds.results(int(codes[lid]), lid) for lid, adds in sections)))
        fut.add_done_callback(lambda f: loop.call_soon_threadsafe(reply, f))

    # -- limbo and registration in `_meta` -------------------------------------------------------------------
    async def register(self) -> None:
        """Compare our instance id with `_meta`'s record, settle limbo, register. Retries until done."""
        while self.storage is not None and not self._stopping.is_set():
            try:
                await self._register_once()
                log.info("bookie registered node=%s instance=%s limbo=%d", self.id, self.storage.instance_id,
                         len(self.limbo))
                return
            except (QuorumLogError, OSError, asyncio.TimeoutError) as e:
                # (once a minute at INFO: a cluster whose `_meta` nobody made yet waits for `cluster init`)
                self._pending_log.log("register", logging.INFO, "bookie registration pending node=%s: %s (nodes "
                                      "started by hand: `quorumlog cluster init` makes `_meta`)", self.id, e)
                await asyncio.sleep(REGISTER_RETRY_S)

    async def _register_once(self) -> None:
        assert self.storage is not None
        calls = self.calls
        key = BOOKIES_PREFIX + self.id
        found = await calls.meta_get(key)
        record, version = (json.loads(found.value or b"{}"), found.version) if found is not None else ({}, 0)
        instance = self.storage.instance_id
        if record.get("instance_id") != instance:
            mine = {md.ledger_id for md in await calls.ledgers() if any(self.id in seg.bookies for seg in md.ensembles)}
            new_limbo = self._limbo.on_registration(record.get("instance_id"), instance, mine)
            if new_limbo is not None:
                write_json_durably(os.path.join(self.dir, LIMBO_FILE), sorted(new_limbo))
                log.warning("bookie in limbo node=%s: instance %s is not the registered %s; %d ledgers name this "
                            "bookie but were not here when it opened: absent entries of those answer UNKNOWN",
                            self.id, instance, record.get("instance_id"), len(new_limbo))
                self._limbo.persisted(new_limbo)
        host, port = self.config.address
        value = json.dumps({**record, "instance_id": instance, "address": f"{host}:{port}"}, sort_keys=True).encode()
        if record.get("instance_id") != instance or record.get("address") != f"{host}:{port}":
            await calls.meta("put", key, value, version)
        if self._limbo.registered_here != instance:  # (after the put: a crash before it registers again)
            write_json_durably(os.path.join(self.dir, REGISTERED_FILE), {"instance_id": instance})
        self._limbo.registered(instance)


def _code(f: Future) -> ResponseCode:
    e = f.exception()
    if e is None:
        return ResponseCode.SUCCESS
    return e.code if isinstance(e, QuorumLogError) else ResponseCode.DISK_ERROR


def _read_json(path: str, default: Any) -> Any:
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return default
