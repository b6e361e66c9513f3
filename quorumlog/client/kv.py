"""The metadata store's client calls (docs/interfaces.md "The metadata store"): `Client.kv_get/kv_put/kv_list/
kv_delete/kv_watch` send KvRequests to the `_meta` group's leader through a Client bound to that group.

Reads are linearizable (the leader confirms a ReadIndex with a quorum before it answers); puts and deletes
carry the client's producer id and a sequence, so a retry after a lost answer is applied once. A watch
long-polls from a revision and resumes after the last change it yielded, across leader changes.
"""

from __future__ import annotations

from typing import Any, AsyncIterator, Callable, Protocol

from ..errors import BadRequest
from ..meta.kv import Change, KeyValue
from ..wire.client import KvItem, KvRequest, KvResponse



class MetaClient(Protocol):
    """What the kv calls need of a client bound to `_meta` (client.py's Client)."""
    client_id: int

    def next_seq(self) -> int: ...

    async def call_leader(self, make: Callable[[int], Any], what: str, *, extra_ms: int = 0) -> Any: ...

META_GROUP = "_meta"
WATCH_POLL_MS = 5_000  # one long-poll; the node answers at the first change


def _key_value(it: KvItem) -> KeyValue:
    return KeyValue(it.key, it.value or b"", it.version, it.create_revision, it.mod_revision)


class KvCalls:
    """The kv_* calls of one Client bound to the `_meta` group."""

    def __init__(self, client: MetaClient) -> None:
        self.client = client

    async def _call(self, make, what: str) -> KvResponse:
        return await self.client.call_leader(make, what)

    async def get(self, key: str) -> tuple[bytes, int] | None:
        resp = await self._call(lambda rid: KvRequest(rid, "get", key), f"kv get {key!r}")
        if not resp.items:
            return None
        it = resp.items[0]
        return it.value or b"", it.version

    async def get_entry(self, key: str) -> KeyValue | None:
        resp = await self._call(lambda rid: KvRequest(rid, "get", key), f"kv get {key!r}")
        return _key_value(resp.items[0]) if resp.items else None

    async def list(self, prefix: str = "") -> tuple[list[KeyValue], int]:
        resp = await self._call(lambda rid: KvRequest(rid, "list", prefix), f"kv list {prefix!r}")
        return [_key_value(it) for it in resp.items], resp.revision

    async def put(self, key: str, value: bytes, expected_version: int | None,
                  idempotency: tuple[int, int] | None = None) -> int:
        if expected_version is not None and expected_version < 0:
            raise BadRequest(f"expected_version {expected_version} < 0")
        client_id, seq = self._key(idempotency)
        resp = await self._call(lambda rid: KvRequest(rid, "put", key, bytes(value), _expected(expected_version),
                                                      client_id=client_id, seq=seq),
                                f"kv put {key!r}")
        return resp.version

    async def delete(self, key: str, expected_version: int | None, idempotency: tuple[int, int] | None = None) -> int:
        client_id, seq = self._key(idempotency)
        resp = await self._call(lambda rid: KvRequest(rid, "delete", key, b"", _expected(expected_version),
                                                      client_id=client_id, seq=seq),
                                f"kv delete {key!r}")
        return resp.revision

    def _key(self, idempotency: tuple[int, int] | None) -> tuple[int, int]:
        """The write's (client_id, seq): the caller's, which a new client may reuse to retry a write whose
        answer was lost, or this client's id and its next sequence."""
        return idempotency if idempotency is not None else (self.client.client_id, self.client.next_seq())

    async def watch(self, prefix: str, revision: int | None) -> AsyncIterator[Change]:
        if revision is None:
            _, revision = await self.list(prefix)  # from now: what a list at this moment would not show
        while True:
            rev = revision
            resp = await self._call(lambda rid: KvRequest(rid, "watch", prefix, revision=rev, wait_ms=WATCH_POLL_MS),
                                    f"kv watch {prefix!r}")
            for it in resp.items:
                yield Change(it.mod_revision, it.key, it.value, it.version)
                revision = it.mod_revision
            revision = max(revision, resp.revision) if not resp.items else revision


def _expected(expected_version: int | None) -> int:
    return -1 if expected_version is None else expected_version
