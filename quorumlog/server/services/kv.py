"""The key/value requests of a group that runs the KV state machine (the `_meta` group), on one replica.

- get, list: linearizable. The core confirms a ReadIndex (raft/read_index.py); the answer waits until this
  replica applied that index, then reads the state machine.
- put, delete: one log entry each (meta/kv.py's command), with the client's producer id and sequence so a
  retry is deduplicated by the core; answered with the result that entry produced once applied.
- watch: changes after a revision under a prefix, held while there are none (long poll); served by the
  member asked, in log order, so a client resuming from its last revision misses nothing.
- snapshot: this member's state, for a member that must install one (state_machine_host.py); snapshot_chunk:
  the same in pieces of SNAPSHOT_CHUNK_BYTES (request: revision = the snapshot's index, -1 for a new one,
  expected_version = the byte offset; answer: revision = its index, version = its size), so a snapshot larger
  than a frame (a topic group's consume queues can be) installs too.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from typing import Any, Callable, cast

from ...codes import ResponseCode
from ...errors import BadRequest, QuorumLogError, WatchCompacted
from ...meta.kv import encode_delete, encode_put
from ...raft.types import ClientAppend, ClientRead, Completion
from ...transport.client_connection import ClientConnection
from ...transport.frames import MAX_FRAME_BYTES
from ...wire.client import KvItem, KvRequest, KvResponse
from ..host import Handled, ConsensusGroup, Pending, ServedGroup, Session, send_response

log = logging.getLogger(__name__)

MAX_WATCH_WAIT_MS = 60_000
SNAPSHOT_FETCH_TIMEOUT_MS = 10_000
SNAPSHOT_RETRY_S = 0.2
SNAPSHOT_CHUNK_BYTES = 16 << 20  # one answer's share of a snapshot: well inside a frame
assert SNAPSHOT_CHUNK_BYTES + (1 << 20) < MAX_FRAME_BYTES


Answer = Callable[..., None]


class KvService:
    serves = (KvRequest,)

    def __init__(self, replica: ServedGroup) -> None:
        self.replica = replica
        self._tasks: set[asyncio.Task] = set()
        self._installing = False
        self._serving: tuple[int, bytes] | None = None  # the snapshot being sent in chunks: (index, data)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- requests ------------------------------------------------------------------------------------------
    def on_request(self, session: Session, req: KvRequest) -> Handled:
        r = self.replica
        sm = r.sm

        def answer(code: ResponseCode, message: str = "", **fields: Any) -> None:
            send_response(session, KvResponse(req.request_id, code, message=message, **fields))

        if sm is None:
            return answer(ResponseCode.BAD_REQUEST, f"group {r.group!r} runs no key/value store (the `_meta` "
                                                    f"group does)")
        if r.stopping:
            return answer(ResponseCode.LEADER_NOT_READY, "node shutting down")
        op = req.op
        if r.state_machine != "kv" and op not in ("snapshot", "snapshot_chunk"):
            return answer(ResponseCode.BAD_REQUEST,
                          f"group {r.group!r} runs {r.state_machine!r}, not a key/value store")
        if op == "snapshot":
            index, data = sm.runner.take_snapshot()
            return answer(ResponseCode.SUCCESS, revision=index, data=data)
        if op == "snapshot_chunk":
            return self._snapshot_chunk(req, answer)
        if op == "watch":
            return self._watch(session, req)
        if op in ("get", "list"):
            if op == "get" and not req.key:
                return answer(ResponseCode.BAD_REQUEST, "get: empty key")
            self._consensus().submit(ClientRead, Pending(lambda c: self.completed(session, req, c, read=True)))
            return None
        if op in ("put", "delete"):
            expected = None if req.expected_version == -1 else req.expected_version
            try:
                body = (encode_put(req.key, req.value, expected) if op == "put"
                        else encode_delete(req.key, expected))
            except BadRequest as e:
                return answer(ResponseCode.BAD_REQUEST, f"{op}: {e}")
            self._consensus().submit(lambda rid: ClientAppend(rid, (body,), req.client_id, req.seq),
                                     Pending(lambda c: self.completed(session, req, c, read=False)))
            return None
        return answer(ResponseCode.BAD_REQUEST, f"unknown kv op {op!r} (get, list, put, delete, watch, "
                                                f"snapshot, snapshot_chunk)")

    def _consensus(self) -> ConsensusGroup:
        return cast(ConsensusGroup, self.replica)  # (only a Raft group runs the key/value state machine)

    def _snapshot_chunk(self, req: KvRequest, answer: Answer) -> None:
        """One piece of a snapshot: offset 0 takes a new one, which the later pieces are cut from."""
        offset = req.expected_version
        if offset <= 0 or self._serving is None:
            self._serving = self.replica.sm.runner.take_snapshot()
        index, data = self._serving
        if (offset > 0 and req.revision != index) or not 0 <= offset <= len(data):
            return answer(ResponseCode.INCONSISTENT_STATE, f"snapshot {req.revision} at byte {offset}: serving "
                                                           f"{index} of {len(data)} bytes: start again")
        return answer(ResponseCode.SUCCESS, revision=index, version=len(data),
                      data=data[max(offset, 0):max(offset, 0) + SNAPSHOT_CHUNK_BYTES])

    async def _watch(self, session: Session, req: KvRequest) -> None:
        sm = self.replica.sm
        wait_s = min(max(req.wait_ms, 0), MAX_WATCH_WAIT_MS) / 1000
        try:
            changes = await sm.wait_change(req.revision, req.key, wait_s)
        except WatchCompacted as e:
            send_response(session, KvResponse(req.request_id, ResponseCode.WATCH_COMPACTED, revision=sm.kv.revision,
                                              message=str(e)))
            return
        items = tuple(KvItem(c.key, c.value, c.version, 0, c.revision) for c in changes)
        revision = changes[-1].revision if changes else max(req.revision, sm.kv.revision)
        send_response(session, KvResponse(req.request_id, ResponseCode.SUCCESS, revision=revision, items=items))

    def completed(self, session: Session, req: KvRequest, c: Completion, read: bool) -> None:
        if c.code != ResponseCode.SUCCESS:
            send_response(session, KvResponse(req.request_id, c.code, c.leader_id, message=c.message))
            return
        self._spawn(self._answer_applied(session, req, c.last_index, read))

    async def _answer_applied(self, session: Session, req: KvRequest, index: int, read: bool) -> None:
        r = self.replica
        sm = r.sm
        await sm.wait_applied(index)
        kv = sm.kv
        if read:
            found = [kv.get(req.key)] if req.op == "get" else kv.list(req.key)
            items = tuple(KvItem(x.key, x.value, x.version, x.create_revision, x.mod_revision)
                          for x in found if x is not None)
            send_response(session, KvResponse(req.request_id, ResponseCode.SUCCESS, revision=kv.revision, items=items))
            return
        result = sm.result_of(index)
        message = f"{req.op} {req.key!r}: version is {result.version if result else 0}"
        if result is None:
            # a retry of a write applied long ago (deduplicated by the core): its result is no longer kept
            expected = None if req.expected_version == -1 else req.expected_version
            result = kv.retried_outcome(index, req.op, req.key, expected)
            message = (f"{req.op} {req.key!r}: a retry of the write at index {index}, whose outcome is no longer "
                       f"known: read the key (version {result.version}) and decide")
        r.metrics.count_request(result.code.name)
        send_response(session, KvResponse(req.request_id, result.code, version=result.version, revision=result.revision,
                                          message="" if result.code == ResponseCode.SUCCESS else message))

    # -- applying, snapshots -------------------------------------------------------------------------------
    def on_commit(self, committed: int) -> None:
        sm = self.replica.sm
        if sm.on_commit(committed):
            self._spawn(sm.save_snapshot())
        if sm.needs_snapshot and not self._installing:
            self._installing = True
            self._tell_core(True)
            self._spawn(self._install_snapshot())

    def _tell_core(self, needed: bool) -> None:
        """A Raft member takes no leadership while it needs a snapshot (raft/core.py SnapshotNeeded)."""
        self.replica.on_snapshot_needed(needed)

    def _snapshot_source(self, attempt: int) -> str | None:
        """The leader; never ourselves (a member that leads while it needs a snapshot would ask itself forever):
        then the other members in turn, one of which holds a snapshot that covers our gap."""
        r = self.replica
        leader = r.leader_id
        if leader is not None and leader != r.config.node_id and leader in r.links:
            return leader
        others = sorted(r.links)
        return others[attempt % len(others)] if others else None

    async def _install_snapshot(self) -> None:
        """Fetch a snapshot until one covers what our log lacks, then apply on from it."""
        r = self.replica
        attempt = 0
        try:
            while r.sm.needs_snapshot and not r.stopping:
                leader = self._snapshot_source(attempt)
                attempt += 1
                address = r.links.get(leader) if leader else None
                if address is None:
                    await asyncio.sleep(SNAPSHOT_RETRY_S)
                    continue
                try:
                    conn = await ClientConnection.open(*address, group=r.group,
                                                       client_name=f"{r.config.node_id}-snapshot",
                                                       token=r.config.auth_token() or "",
                                                       ssl_context=r.host.client_tls(),
                                                       server_hostname=leader)
                    try:
                        data = await fetch_snapshot(conn)
                    finally:
                        await conn.close()
                    started = time.perf_counter()
                    await r.sm.install(data)
                    log.warning("snapshot installed node=%s group=%s from=%s applied=%d bytes=%d in %.3f s",
                                r.config.node_id, r.group, leader, r.sm.applied_index, len(data),
                                time.perf_counter() - started)
                except (QuorumLogError, OSError) as e:
                    log.warning("snapshot fetch from %s failed node=%s group=%s: %s", leader, r.config.node_id,
                                r.group, e)
                    await asyncio.sleep(SNAPSHOT_RETRY_S)
                    continue
                if r.sm.needs_snapshot:  # the leader's was older than our gap: ask again shortly
                    await asyncio.sleep(SNAPSHOT_RETRY_S)
        finally:
            self._installing = False
        if not r.stopping:
            if not r.sm.needs_snapshot:
                self._tell_core(False)
            self.on_commit(r.store.committed_index)

    def status(self) -> dict[str, Any]:
        r = self.replica
        sm = r.sm
        out = {"kind": r.state_machine, "applied_index": sm.applied_index, "snapshot_index": sm.runner.snapshot_index,
               "snapshots_installed": sm.installs, "needs_snapshot": sm.needs_snapshot}
        if r.state_machine == "kv":
            out.update(revision=sm.kv.revision, keys=len(sm.kv.list()))
        else:
            out.update(queues=len(sm.machine.queues), messages=sm.machine.messages)
        return out

    def close(self) -> None:
        for t in self._tasks:
            t.cancel()
        if self.replica.sm is not None:
            self.replica.sm.close()


async def fetch_snapshot(conn: ClientConnection) -> bytes:
    """A member's snapshot, chunk by chunk (one of any size); from a node that predates chunks, whole."""
    parts: list[bytes] = []
    index, offset = -1, 0
    while True:
        resp = await conn.call(KvRequest(conn.next_request_id(), "snapshot_chunk", revision=index,
                                         expected_version=offset), SNAPSHOT_FETCH_TIMEOUT_MS)
        if resp.code == ResponseCode.BAD_REQUEST and offset == 0:  # (an older node: no chunks)
            resp = await conn.call(KvRequest(conn.next_request_id(), "snapshot"), SNAPSHOT_FETCH_TIMEOUT_MS)
            if resp.code != ResponseCode.SUCCESS:
                raise QuorumLogError.for_code(resp.code, resp.message)
            return resp.data
        if resp.code != ResponseCode.SUCCESS:
            raise QuorumLogError.for_code(resp.code, resp.message)
        index = resp.revision
        parts.append(resp.data)
        offset += len(resp.data)
        if offset >= resp.version:
            return b"".join(parts)
        if not resp.data:
            raise QuorumLogError.for_code(ResponseCode.INCONSISTENT_STATE, f"empty chunk at byte {offset}")

