"""quorumlog.Client: the asyncio client (aiokafka's producer shape).

Leader discovery from any member (status), NOT_LEADER redirects, bounded retries with backoff, idempotent
appends (a random 64-bit client id and one increasing seq per batch, reused on every retry of that batch),
and coalescing of concurrent `append()` calls into few AppendRequest frames, many in flight on one connection.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import warnings
from typing import Any, AsyncIterator, Callable, Iterable, Sequence

from ..codes import ResponseCode
from ..errors import (BadRequest, EmptyBatch, EntryTooLarge, IndexGap, MetadataVersionConflict, NetworkError,
                      NotCommittedYet, NotLeader, QuorumLogError, RemovedByRetention, Timeout, UnknownGroup)
from ..peers import Address, parse_address, parse_peers
from ..transport.tls import client_context as tls_client_context
from ..format.log_entry import Records
from ..format.log_entry import decode_records
from ..wire.client import (AppendRequest, AppendResponse, ReadRequest, ReadResponse, StatusRequest,
                           StatusResponse, TransferLeaderRequest, TransferLeaderResponse, MemberChangeRequest,
                           MemberChangeResponse)
from ..meta.kv import Change, KeyValue
from .accumulator import Accumulator, PendingAppend
from .kv import META_GROUP, KvCalls
from .pool import DEFAULT_MAX_FRAME_BYTES, ConnectionPool
from .retry import Deadline, backoff_ms, is_leader_search, is_retriable, timeout_error
from .types import WRITABLE_ROLES, AppendResult, Entry, NodeStatus

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_MS = 10_000  # one user call, all retries included
DEFAULT_REQUEST_TIMEOUT_MS = 3_000  # one request on the wire (> DLedger's max_wait_ack_ms of 2.5 s)
DEFAULT_MAX_RETRIES = 20
DEFAULT_MAX_BATCH_BYTES = 1024 * 1024
DEFAULT_MAX_IN_FLIGHT = 32  # AppendRequests in flight per client
DEFAULT_READ_MAX_BYTES = 1024 * 1024
FOLLOW_WAIT_MS = 1_000  # one long-poll of read(follow=True); the node answers early when something commits
U64_MAX = (1 << 64) - 1
assert DEFAULT_REQUEST_TIMEOUT_MS <= DEFAULT_TIMEOUT_MS


def _new_client_id() -> int:
    """A random non-zero 63-bit id (0 means "not idempotent" on the wire). (os.urandom, as `secrets` does:
    importing `secrets` costs every command hashlib's 10 ms.)"""
    return int.from_bytes(os.urandom(8), "big") >> 1 or 1


class Client:
    """Talks to one quorumlog group. Use as `async with quorumlog.Client(peers) as client:`.

    `append()` from many tasks at once is coalesced into few frames; each caller still gets its own index.
    Cancelling an awaiting `append()` drops the entry only if it has not left yet; once its frame is on the
    wire it may still commit (and retries of that frame continue for the other callers in it).

    Retries: while the leader must be found again (NOT_LEADER, a dead or silent node, an election) the client
    asks again every ≤ 50 ms until `timeout_ms`, since every wait there adds to the failover users see; other
    retriable failures (LEADER_PENDING_FULL, WAIT_QUORUM_ACK_TIMEOUT, ...) are retried at most `max_retries`
    times with exponential backoff up to 1 s. Non-retriable codes raise at once.
    """

    def __init__(self, peers: str | dict[str, Address], *, group: str = "default",
                 timeout_ms: int = DEFAULT_TIMEOUT_MS, request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS,
                 max_retries: int = DEFAULT_MAX_RETRIES, client_id: int | None = None, linger_ms: float = 0,
                 max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, token: str | None = None,
                 tls_ca: str | None = None, tls_cert: str | None = None, tls_key: str | None = None) -> None:
        self._closed = True  # until fully constructed, so __del__ of a failed __init__ stays quiet
        self._token = token  # the cluster's shared token; None: QUORUMLOG_TOKEN if set
        self._tls = (tls_ca, tls_cert, tls_key)  # tls_ca: TLS to nodes whose certificates it issued
        ssl_context = tls_client_context(*self._tls) if tls_ca or tls_cert else None
        self.peers: dict[str, Address] = dict(parse_peers(peers) if isinstance(peers, str) else peers)
        if not self.peers:
            raise ValueError("peers: no members")
        if timeout_ms <= 0 or request_timeout_ms <= 0:
            raise ValueError(f"timeout_ms={timeout_ms} and request_timeout_ms={request_timeout_ms} must be > 0")
        if max_retries < 0 or max_in_flight < 1 or max_batch_bytes < 1 or linger_ms < 0:
            raise ValueError("max_retries ≥ 0, max_in_flight ≥ 1, max_batch_bytes ≥ 1, linger_ms ≥ 0 required")
        if client_id is not None and not 0 < client_id < U64_MAX:
            raise ValueError(f"client_id {client_id} must be in 1..2**64-2 (2**64-1 tags membership entries)")
        self.group = group
        self.timeout_ms = timeout_ms
        self.request_timeout_ms = request_timeout_ms
        self.max_retries = max_retries
        self.client_id = client_id if client_id is not None else _new_client_id()
        self.linger_ms = linger_ms
        self.max_batch_bytes = max_batch_bytes
        self.max_in_flight = max_in_flight
        self._pool = ConnectionPool(self.peers, group=group, client_name=f"client-{self.client_id:016x}",
                                    max_frame_bytes=max_frame_bytes, token=token, ssl_context=ssl_context)
        self._rng = random.Random()
        self._next_request_id = 0
        self._next_seq = 0
        self.acked_index = -1  # the highest index this client has had acknowledged (read-your-writes)
        self.suggested_slave: str | None = None  # the last slave a master told this client's reads to go to
        self._leader_id: str | None = None
        self._discovery: asyncio.Future | None = None
        self._accumulator: Accumulator | None = None
        self._kv_calls: KvCalls | None = None
        self._located = False  # the `_meta` lookup of the group's members was tried (_locate_group)
        # the last leader discovery's unreachable members: (id, address, why), for the error if none leads
        self._unreachable: list[tuple[str, str, str]] = []
        self._closed = False
        self._close_done = False
        self.frames_sent = 0  # AppendRequest frames sent (first tries and retries), for tests and bench

    # -- lifecycle ---------------------------------------------------------------------------------
    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def close(self) -> None:
        """Flush pending appends (bounded by timeout_ms), then close every connection. Idempotent."""
        if self._close_done:
            return
        self._closed = True
        self._close_done = True
        if self._accumulator is not None:
            await self._accumulator.close(self.timeout_ms)
        if self._kv_calls is not None and self._kv_calls.client is not self:
            await self._kv_calls.client.close()
        await self._pool.close()

    def __del__(self) -> None:
        if not getattr(self, "_close_done", True):
            warnings.warn(f"quorumlog.Client {getattr(self, 'client_id', 0):016x} was never closed",
                          ResourceWarning, stacklevel=2)

    @property
    def leader_id(self) -> str | None:
        """The member this client currently believes leads (None until discovered)."""
        return self._leader_id

    def _check_open(self) -> None:
        """For new user calls: refused once close() began."""
        if self._closed:
            raise NetworkError("client is closed")

    def _check_alive(self) -> None:
        """For retry loops: appends already accepted keep retrying while close() flushes them."""
        if self._pool.closed:
            raise NetworkError("client is closed")

    def _request_id(self) -> int:
        self._next_request_id += 1
        return self._next_request_id

    def next_seq(self) -> int:
        """The next batch sequence of this client (increasing; one per batch, kept across its retries)."""
        seq = self._next_seq
        self._next_seq += 1
        return seq

    # -- appends -----------------------------------------------------------------------------------
    async def append(self, body: bytes) -> AppendResult:
        """Append one entry; concurrent calls share frames. Returns once a majority has it (committed)."""
        self._check_open()
        body = _as_bytes(body)
        if self._accumulator is None:
            self._accumulator = Accumulator(self._send_coalesced, linger_ms=self.linger_ms,
                                            max_batch_bytes=self.max_batch_bytes, max_in_flight=self.max_in_flight)
        return await self._accumulator.add(body)

    async def append_batch(self, bodies: Iterable[bytes], *, client_id: int | None = None,
                           seq: int | None = None) -> list[AppendResult]:
        """Append bodies as one atomic batch (consecutive indexes, all or none).

        `client_id`/`seq` fix the idempotence key, e.g. a Spark task that must append nothing twice across
        its own retries; by default the client's id and its next seq. A key the group has seen answers with
        the original indexes and stores nothing.
        """
        self._check_open()
        batch = tuple(_as_bytes(b) for b in bodies)
        if not batch:
            raise EmptyBatch("append_batch: no bodies")
        client_id, seq = _idempotency(client_id, seq, "append_batch") or (self.client_id, self.next_seq())
        resp = await self._append_with_retries(batch, client_id, seq)
        offsets = resp.offsets or (-1,) * (resp.last_index - resp.first_index + 1)
        return [AppendResult(resp.first_index + k, resp.term, offsets[k]) for k in range(len(offsets))]

    async def _send_coalesced(self, pending: Sequence[PendingAppend]) -> None:
        """The accumulator's sender: one idempotent batch for many callers, each gets its own index."""
        bodies = tuple(p.body for p in pending)
        try:
            resp = await self._append_with_retries(bodies, self.client_id, self.next_seq())
        except EntryTooLarge as e:
            if len(pending) == 1:
                _fail(pending, e)
                return
            # One caller's entry sank a shared batch: give every caller its own batch, so only it fails.
            for p in pending:
                await self._send_coalesced((p,))
            return
        except BaseException as e:
            _fail(pending, e if isinstance(e, Exception) else NetworkError("client is closing"))
            if not isinstance(e, Exception):
                raise
            return
        offsets = resp.offsets
        for i, p in enumerate(pending):
            if not p.future.done():  # a cancelled caller: the entry is committed all the same
                p.future.set_result(AppendResult(resp.first_index + i, resp.term, offsets[i] if offsets else -1))

    async def _append_with_retries(self, bodies: tuple[bytes, ...], client_id: int, seq: int) -> AppendResponse:
        count = len(bodies)

        def request() -> AppendRequest:
            self.frames_sent += 1
            return AppendRequest(self._request_id(), bodies, client_id, seq)

        resp: AppendResponse = await self._leader_call(request, f"append of {count} entries (seq {seq})")
        if resp.last_index - resp.first_index + 1 != count or resp.first_index < 0:
            raise BadRequest(f"append: the node answered indexes {resp.first_index}..{resp.last_index} "
                             f"for {count} entries")
        self.acked_index = max(self.acked_index, resp.last_index)
        return resp

    # -- leader calls: discovery, redirect, retries -------------------------------------------------
    async def call_leader(self, make: Callable[[int], Any], what: str, *, extra_ms: int = 0) -> Any:
        """For the calls built on this client (kv, topics, consumer groups, the HA controller): make(request_id)
        sent to the group's leader until SUCCESS, as every call of this client is (see _leader_call)."""
        self._check_open()
        return await self._leader_call(lambda: make(self._request_id()), what, extra_ms)

    async def call_member(self, node_id: str, make: Callable[[int], Any], *, extra_ms: int = 0) -> Any:
        """make(request_id) to one member, once (a read from a chosen replica); its response, whatever its code."""
        self._check_open()
        return await self._pool.call(node_id, make(self._request_id()), self.request_timeout_ms + extra_ms)

    async def _leader_call(self, make_request, what: str, extra_ms: int = 0):
        """Send make_request() to the leader until SUCCESS, following NOT_LEADER and retrying what may pass.

        Every attempt of an idempotent append carries the same client_id/seq, so a retry after a lost
        answer returns the first attempt's indexes instead of storing the batch twice. `extra_ms`: how long
        the node may hold the request on purpose (a long poll), added to every timeout.
        """
        deadline = Deadline.after_ms(self.timeout_ms + extra_ms)
        full_ms = self.request_timeout_ms + extra_ms
        attempt = 0
        other_failures = 0  # max_retries bounds these; the search for a leader is bounded by timeout_ms
        last: BaseException | None = None
        unknown = False  # an attempt reached a node and its outcome was never learned
        while True:
            self._check_alive()
            redirect = False
            leader: str | None = None
            cut = False
            try:
                leader = await self._find_leader(deadline)
                budget_ms = deadline.remaining_ms()
                cut = budget_ms < full_ms
                await self._pool.get(leader, max(1.0, min(full_ms, budget_ms)))  # (connected: nothing sent yet)
                try:
                    resp = await self._pool.call(leader, make_request(), max(1.0, min(full_ms, budget_ms)))
                except QuorumLogError:
                    unknown = True  # sent (or being sent) when the connection broke or time ran out
                    raise
                if resp.code == ResponseCode.SUCCESS:
                    return resp
                err = error_of(resp)
                unknown = unknown or resp.code in _UNKNOWN_OUTCOME
                if resp.code == ResponseCode.NOT_LEADER:
                    redirect = self._on_not_leader(leader, err.leader_id)
                raise err
            except QuorumLogError as e:
                e.outcome_unknown = unknown
                if not is_retriable(e):
                    raise
                if _cut_short(e, cut, last):
                    raise _with_outcome(timeout_error(f"{what}: {attempt + 1} attempts", last), unknown)
                if isinstance(e, Timeout) and cut and deadline.expired:
                    raise _with_outcome(Timeout(f"{what}: no answer within the call's {self.timeout_ms + extra_ms} "
                                                f"ms ({attempt + 1} attempts)"), unknown) from None
                last = e
                if leader is not None and not isinstance(e, NotLeader) and e.code in (
                        ResponseCode.NETWORK_ERROR, ResponseCode.TIMEOUT):
                    self._forget_leader(leader)  # it may be dead or paused: ask the group again
            attempt += 1
            if not is_leader_search(last):
                other_failures += 1
            if other_failures > self.max_retries or deadline.expired:
                raise _with_outcome(timeout_error(f"{what}: {attempt} attempts", last), unknown)
            if redirect and attempt <= len(self.peers):
                log.debug("redirect to leader=%s", self._leader_id)
                continue  # a named new leader: go there at once
            await asyncio.sleep(min(backoff_ms(attempt, self._rng, last), deadline.remaining_ms()) / 1000)

    def _on_not_leader(self, asked: str, named: str | None) -> bool:
        """Remember the leader a NOT_LEADER named; True when it names a member we did not just ask."""
        if named and named != asked and named in self.peers:
            self._leader_id = named
            return True
        self._forget_leader(asked)
        return False

    def _forget_leader(self, node_id: str) -> None:
        if self._leader_id == node_id:
            self._leader_id = None

    async def _find_leader(self, deadline: Deadline) -> str:
        if self._leader_id is not None:
            return self._leader_id
        # One discovery at a time; concurrent callers share its answer.
        if self._discovery is None or self._discovery.done():
            self._discovery = asyncio.ensure_future(self._discover_leader())
        leader = await asyncio.shield(self._discovery)
        if leader is None:
            if self._unreachable and len(self._unreachable) == len(self.peers):
                raise NetworkError(unreachable_summary(self._unreachable))  # the cause first, said once
            why = "; ".join(f"{nid}: {error}" for nid, _, error in self._unreachable[:3])
            raise NotLeader("no leader known yet (election in progress or members unreachable"
                            + (f": {why})" if why else ")"))
        self._leader_id = leader
        return leader

    async def _discover_leader(self) -> str | None:
        """Ask every member's status at once; the first that says it leads wins, else the newest term's
        leader_id that any member names. A refusal no retry can fix (wrong group, unknown member) is raised."""
        tasks = [asyncio.ensure_future(self._status_or_error(nid)) for nid in self.peers]
        best: tuple[int, str] | None = None
        fatal: QuorumLogError | None = None
        self._unreachable = []
        try:
            for fut in asyncio.as_completed(tasks):
                st, err = await fut
                if err is not None and not is_retriable(err):
                    fatal = err
                if not st.reachable:
                    self._unreachable.append((st.id, st.address, str(err) if err is not None else st.error))
                    continue
                if st.role in WRITABLE_ROLES:
                    return st.id if st.id in self.peers else None
                if st.leader_id in self.peers and (best is None or st.term > best[0]):
                    best = (st.term, st.leader_id)
        finally:
            for t in tasks:
                t.cancel()
        if best is None and fatal is not None:
            if isinstance(fatal, UnknownGroup) and not self._located:
                found = await self._locate_group()
                if found:
                    return await self._discover_leader()
                if found is None:  # `_meta` could not answer now (no leader yet): a retry may find the group
                    raise NotLeader(f"{fatal}; its members could not be looked up in `_meta` yet")
            raise fatal
        return best[1] if best else None

    async def _locate_group(self) -> bool | None:
        """None of our peers hosts the group: look its members up in the `_meta` group's record (`groups/NAME`,
        `nodes/ID`, kept by `group create`) and add them to our peers. Once per client, unless `_meta` could
        not answer (None: asked again at the next discovery); False: it has no other member to offer."""
        if self.group == META_GROUP:
            self._located = True
            return False
        try:
            kv = self._kv()
            record = await kv.get(f"groups/{self.group}")
            if record is None:
                self._located = True
                return False
            added = False
            for nid in json.loads(record[0])["members"]:
                node = await kv.get(f"nodes/{nid}") if nid not in self.peers else None
                if node is not None:
                    self.peers[nid] = parse_address(json.loads(node[0])["address"], what=f"node {nid!r}")
                    added = True
            if added:
                log.info("group %s located through _meta: members %s", self.group, sorted(self.peers))
            self._located = True
            return added
        except QuorumLogError as e:
            log.debug("cannot locate group %s through _meta: %s", self.group, e)
            if e.retriable:
                return None
            self._located = True
            return False
        except (ValueError, KeyError, TypeError) as e:
            log.debug("cannot locate group %s through _meta: %s", self.group, e)
            self._located = True
            return False

    # -- reads -------------------------------------------------------------------------------------
    async def read_records(self, start: int, *, end: int = -1, max_bytes: int = DEFAULT_READ_MAX_BYTES,
                           node: str | None = None, wait_ms: int = 0,
                           linearizable: bool = False) -> tuple[Records, int, int]:
        """Raw committed records from `start` (≤ end when end ≥ 0), no decoding: (records, committed_index,
        begin_index). From `node` when given, else from the leader (read-your-writes). An empty read has
        records.count == 0. wait_ms > 0 long-polls: the node answers as soon as `start` commits. linearizable: the
        leader confirms with a quorum that it still leads first (ReadIndex), so the answer holds every entry
        committed before the call."""
        return (await self._read_records(start, end, max_bytes, node, wait_ms, linearizable))[:3]

    async def _read_records(self, start: int, end: int, max_bytes: int, node: str | None,
                            wait_ms: int, linearizable: bool = False) -> tuple[Records, int, int, str | None]:
        """read_records and the slave a master/slave group's master suggested reading from next."""
        self._check_open()
        if start < 0 or max_bytes < 1 or wait_ms < 0:
            raise ValueError(f"read: start={start} max_bytes={max_bytes} wait_ms={wait_ms}")
        if linearizable and node is not None:
            raise ValueError("read: a linearizable read goes to the leader: no node can be named")
        if node is not None and node not in self.peers:
            raise ValueError(f"read: unknown node {node!r} (members: {', '.join(self.peers)})")
        deadline = Deadline.after_ms(self.timeout_ms + wait_ms)
        full_ms = wait_ms + self.request_timeout_ms
        attempt = 0
        other_failures = 0  # max_retries bounds these; the search for a leader is bounded by timeout_ms
        last: BaseException | None = None
        while True:
            self._check_alive()
            target = node
            cut = False
            try:
                if target is None:
                    target = await self._find_leader(deadline)
                req = ReadRequest(self._request_id(), start, end, max_bytes, wait_ms, linearizable)
                budget_ms = deadline.remaining_ms()
                cut = budget_ms < full_ms
                resp: ReadResponse = await self._pool.call(target, req, max(1.0, min(full_ms, budget_ms)))
                if resp.code == ResponseCode.SUCCESS:
                    records = resp.records if resp.records is not None else Records(start, start - 1, (), 0)
                    return records, resp.committed_index, resp.begin_index, resp.suggest_slave
                raise QuorumLogError.for_code(resp.code, resp.message)
            except QuorumLogError as e:
                if not is_retriable(e) or isinstance(e, NotLeader) and node is not None:
                    raise
                if _cut_short(e, cut, last):
                    raise timeout_error(f"read from {start}: {attempt + 1} attempts", last)
                last = e
                if node is None and target is not None:
                    self._forget_leader(target)
            attempt += 1
            if not is_leader_search(last):
                other_failures += 1
            if other_failures > self.max_retries or deadline.expired:
                raise timeout_error(f"read from {start}: {attempt} attempts", last)
            await asyncio.sleep(min(backoff_ms(attempt, self._rng, last), deadline.remaining_ms()) / 1000)

    async def get(self, index: int) -> Entry:
        """The committed entry at `index`. Refused with a kind of IndexOutOfRange that says why: NotCommittedYet
        (past the committed index), IndexGap (committed, but a new leader's no-op or a membership change: indexes
        can have gaps) or RemovedByRetention (before the log's begin index).

        Read-your-writes: an index this client has had acknowledged is always found, also right after a
        failover, when the new leader's committed index has not yet reached it (its no-op commits within a
        round trip): the read then waits on the leader for the index to commit, within `timeout_ms`.
        What reads guarantee is in the README ("What reads guarantee").
        """
        own_write = index <= self.acked_index
        records, committed, begin = await self.read_records(index, end=index,
                                                            wait_ms=self.timeout_ms if own_write else 0)
        for e in _decode(records):
            if e.index == index:
                return e
        where = f"(begin_index={begin}, committed_index={committed})"
        if index < begin:
            raise RemovedByRetention(f"index {index} was removed by retention {where}")
        if index > committed:
            raise NotCommittedYet(f"index {index} is not committed yet {where}")
        raise IndexGap(f"index {index} holds no entry: a leader's no-op or a membership change {where}")

    async def read(self, start: int = 0, end: int | None = None, follow: bool = False,
                   node: str | None = None, *, max_bytes: int = DEFAULT_READ_MAX_BYTES,
                   linearizable: bool = False) -> AsyncIterator[Entry]:
        """Committed entries start..end (inclusive; end None: up to the commit point, or forever with follow).

        follow=True long-polls the node (ReadRequest.wait_ms) and yields entries as they commit.

        linearizable=True: the leader confirms it still leads with a quorum before its first answer (ReadIndex),
        so the read holds every entry committed before it began, also one acknowledged to another client just
        now. A plain read (the default) is served from what the leader it reaches has committed: a deposed
        leader that does not know it yet may serve a read that misses the newest entries.

        A master/slave group's master may answer that this reader is far behind (`suggest_slave`, RocketMQ's
        suggestPullingFromSlave): the next reads then go to that slave (`suggested_slave` names it), and back
        to the master once the slave fails or has nothing more (it serves up to the confirm offset it heard).
        """
        next_index = start
        via = node  # where the next read goes: the caller's node, else the leader or the slave it suggested
        while end is None or next_index <= end:
            try:
                records, committed, begin, suggest = await self._read_records(
                    next_index, -1 if end is None else end, max_bytes, via,
                    FOLLOW_WAIT_MS if follow and via == node else 0, linearizable and next_index == start)
            except QuorumLogError as e:
                if via == node:
                    raise
                log.info("read from %d: the suggested slave %s failed (%s): back to the master", next_index, via, e)
                via = node
                continue
            if node is None and via is None and suggest in self.peers and not linearizable:
                via = self.suggested_slave = suggest
            if records.count <= 0:
                if via != node:  # the slave holds no more: the master says where the end is
                    via = node
                    continue
                if follow:
                    continue  # the long-poll expired with nothing new: ask again
                if next_index < begin:
                    raise RemovedByRetention(f"read: index {next_index} is before begin_index {begin} (retention)")
                return
            for e in _decode(records):
                yield e
            next_index = records.last_index + 1

    # -- status and leadership ---------------------------------------------------------------------
    async def status(self) -> list[NodeStatus]:
        """One NodeStatus per member, in peers order; a member that does not answer has role "unreachable"."""
        self._check_open()
        out = list(await asyncio.gather(*(self._status_of(nid) for nid in self.peers)))
        leaders = [s for s in out if s.role in WRITABLE_ROLES]
        if leaders:
            self._leader_id = max(leaders, key=lambda s: s.term).id
        return out

    async def _status_of(self, node_id: str) -> NodeStatus:
        return (await self._status_or_error(node_id))[0]

    async def _status_or_error(self, node_id: str) -> tuple[NodeStatus, QuorumLogError | None]:
        host, port = self.peers[node_id]
        address = f"{host}:{port}"
        try:
            resp: StatusResponse = await self._pool.call(node_id, StatusRequest(self._request_id()),
                                                         self.request_timeout_ms)
            if resp.code != ResponseCode.SUCCESS:
                err = QuorumLogError.for_code(resp.code, f"status of {node_id}")
                return NodeStatus.unreachable(node_id, address, ResponseCode.of(resp.code).name), err
            return NodeStatus.from_json(node_id, address, resp.status_json), None
        except QuorumLogError as e:
            return NodeStatus.unreachable(node_id, address, f"{e.code.name}: {e}"), e
        except ValueError as e:
            return NodeStatus.unreachable(node_id, address, f"bad status document: {e}"), None

    async def transfer_leader(self, to: str) -> str:
        """Hand leadership to member `to`; returns the leader the group reports afterwards."""
        self._check_open()
        if to not in self.peers:
            raise ValueError(f"transfer_leader: unknown node {to!r} (members: {', '.join(self.peers)})")

        def request() -> TransferLeaderRequest:
            return TransferLeaderRequest(self._request_id(), to)

        resp: TransferLeaderResponse = await self._leader_call(request, f"transfer leadership to {to}")
        self._leader_id = resp.leader_id if resp.leader_id in self.peers else to
        return self._leader_id


    # -- the metadata store (`_meta` group; client/kv.py) -------------------------------------------
    def _kv(self) -> KvCalls:
        if self._kv_calls is None:
            meta = self if self.group == META_GROUP else Client(
                self.peers, group=META_GROUP, timeout_ms=self.timeout_ms, request_timeout_ms=self.request_timeout_ms,
                max_retries=self.max_retries, token=self._token, tls_ca=self._tls[0], tls_cert=self._tls[1],
                tls_key=self._tls[2])
            self._kv_calls = KvCalls(meta)
        return self._kv_calls

    async def kv_get(self, key: str) -> tuple[bytes, int] | None:
        """(value, version) of `key`, or None; linearizable (the leader confirms with a quorum first)."""
        return await self._kv().get(key)

    async def kv_put(self, key: str, value: bytes, expected_version: int | None = None, *,
                     client_id: int | None = None, seq: int | None = None) -> int:
        """Store `value` under `key`; returns its new version. `expected_version` makes it a compare-and-set
        (0: create only); a mismatch raises MetadataVersionConflict and changes nothing. `client_id`/`seq` fix
        the write's idempotence key (as append_batch's): a retry with the same key, from any client, is applied
        once and answers the first one's version (within the last 4096 writes the group remembers)."""
        return await self._kv().put(key, value, expected_version, _idempotency(client_id, seq))

    async def kv_list(self, prefix: str = "") -> list[KeyValue]:
        """Every key under `prefix`, in key order (KeyValue: key, value, version, create/mod revision)."""
        return (await self._kv().list(prefix))[0]

    async def kv_delete(self, key: str, expected_version: int | None = None, *,
                        client_id: int | None = None, seq: int | None = None) -> int:
        """Delete `key` (compare-and-set with `expected_version`); returns the store's revision after it.
        `client_id`/`seq`: as kv_put's."""
        return await self._kv().delete(key, expected_version, _idempotency(client_id, seq))

    def kv_watch(self, prefix: str = "", revision: int | None = None) -> AsyncIterator[Change]:
        """Changes under `prefix` after `revision` (default: from now), in order, forever: `async for change in
        client.kv_watch("nodes/")`. A change has revision, key, value (None: deleted) and version. Raises
        WatchCompacted when the store no longer keeps changes that old (list again, watch from its revision)."""
        return self._kv().watch(prefix, revision)

    async def change_member(self, change: str, node_id: str, address: str = "") -> int:
        """One membership change of the group (quorumlog/raft/membership.py): "add_learner" (with the
        host:port the members reach it at), "promote" or "remove". Returns the configuration entry's index once
        it is committed. Raises MemberExists, UnknownMember, LearnerNotCaughtUp, LastVoter, NewQuorumNotAlive,
        ConfigChangeInProgress (each after the retries the timeout allows, where a retry may pass)."""
        self._check_open()

        def request() -> MemberChangeRequest:
            return MemberChangeRequest(self._request_id(), change, node_id, address)

        resp: MemberChangeResponse = await self._leader_call(request, f"{change} {node_id}")
        return resp.index


def unreachable_summary(failures: list[tuple[str, str, str]]) -> str:
    """Why no member answered, the cause first: members that failed alike share one line ("cannot connect to
    every member: [Errno 111] Connection refused (n0 127.0.0.1:7001, n1 127.0.0.1:7002)"), not one hint each."""
    by_cause: dict[str, list[str]] = {}
    for node_id, address, error in failures:
        by_cause.setdefault(error.replace(address, "{member}"), []).append(f"{node_id} {address}")
    if len(by_cause) == 1:
        (cause, members), = by_cause.items()
        return (cause.replace("{member}", "every member") if "{member}" in cause else f"every member: {cause}") \
            + f" ({', '.join(members)})"
    return "no member answered: " + "; ".join(f"{', '.join(members)}: {cause.replace('{member}', 'it')}"
                                              for cause, members in by_cause.items())


def _idempotency(client_id: int | None, seq: int | None, what: str = "kv write") -> tuple[int, int] | None:
    """A caller's idempotence key, checked, or None for the client's own."""
    if (client_id is None) != (seq is None):
        raise ValueError(f"{what}: give both client_id and seq, or neither")
    if client_id is None or seq is None:
        return None
    if not 0 < client_id < U64_MAX or seq < 0:
        raise ValueError(f"{what}: client_id {client_id} must be in 1..2**64-2 and seq {seq} ≥ 0")
    return client_id, seq


# Answers that do not say whether the request was applied: it may still commit.
_UNKNOWN_OUTCOME = frozenset({ResponseCode.TIMEOUT, ResponseCode.WAIT_QUORUM_ACK_TIMEOUT, ResponseCode.TERM_CHANGED,
                              ResponseCode.NETWORK_ERROR})


def error_of(resp: Any) -> QuorumLogError:
    """The error a refusal stands for, with what the answer tells beyond its code (the leader it names, the
    version a compare-and-set found)."""
    err = QuorumLogError.for_code(resp.code, getattr(resp, "message", "") or "",
                                  leader_id=getattr(resp, "leader_id", None))
    if isinstance(err, MetadataVersionConflict):
        err.current_version = getattr(resp, "version", None)
    return err


def _with_outcome(err: QuorumLogError, unknown: bool) -> QuorumLogError:
    err.outcome_unknown = unknown
    return err


def _cut_short(e: QuorumLogError, cut: bool, last: BaseException | None) -> bool:
    """An attempt that timed out on a budget the call's own deadline had cut short, after a real error: the
    caller should see that error, not Timeout (CI: a promote retried LEARNER_NOT_CAUGHT_UP into its last
    millisecond and raised "no response within 1 ms"; later a sync append to SIGSTOPped slaves did the same,
    its last attempt given 1.x ms, the timer 1 ms, so the deadline had not quite expired when it timed out)."""
    return isinstance(e, Timeout) and cut and isinstance(last, QuorumLogError) and not isinstance(last, Timeout)


def _decode(records: Records) -> list[Entry]:
    out: list[Entry] = []
    for chunk in records.chunks:
        out.extend(Entry.from_stored(e.index, e.term, e.timestamp_ms, e.body) for e in decode_records(chunk))
    return out


def _as_bytes(body) -> bytes:
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body)
    if isinstance(body, str):
        return body.encode()
    raise TypeError(f"an entry body must be bytes (or str, sent as UTF-8), not {type(body).__name__}")


def _fail(pending: Sequence[PendingAppend], err: BaseException) -> None:
    for p in pending:
        if not p.future.done():
            p.future.set_exception(err)


__all__ = ["Client"]
