"""The `_meta` group's versioned key/value store: a deterministic state machine over committed entries.

etcd's data model, driven by our log: every command is one entry's body (`encode_put`, `encode_delete`),
applied in index order by every replica, so every replica holds the same map. The entry's index is the
store's revision: a key carries the revision that created it, the revision of its last change and its
`version` (1 when created, +1 per put; a deleted key is absent, version 0). `expected_version` makes a put or
delete a compare-and-set (0: create only); a mismatch changes nothing and answers
METADATA_VERSION_CONFLICT with the current version — BookKeeper's metadata updates and the controller's
state rely on exactly that.

Watchers resume from a revision: the last `history_limit` changes are kept (`changes_since`); a revision
older than that answers WATCH_COMPACTED (list again, then watch from the list's revision), as etcd's
compaction does. A snapshot holds the map, the applied index and the history (its newest changes up to
MAX_SNAPSHOT_HISTORY_BYTES), so a restart or a snapshot install does not compact watches that were fine.

Sans-I/O: no clock, no threads, no files. The node runtime decides when entries are committed and applies
them; the same code runs in the simulator.
"""

from __future__ import annotations

import bisect
import struct
from collections import deque

from ..codes import ResponseCode
from ..errors import BadRequest, CorruptEntry, WatchCompacted
from ..format.log_entry import crc32c
from ..frozen import frozen

MAX_KEY_BYTES = 1024
MAX_VALUE_BYTES = 1 << 20
DEFAULT_HISTORY_LIMIT = 10_000
# The history a snapshot carries, at most: far below the 64 MiB frame a snapshot is fetched in (a full
# history of 1 MiB values would not fit); older changes are compacted in the snapshot.
MAX_SNAPSHOT_HISTORY_BYTES = 4 << 20

_PUT, _DELETE = 1, 2
_CMD = struct.Struct(">BBqH")  # op, has_expected, expected_version, key size; key; [value size u32; value]
_U32 = struct.Struct(">I")
_SNAP_HEAD = struct.Struct(">IHqqI")  # magic, version, applied_index, revision, key count
_SNAP_KEY = struct.Struct(">HIqqq")  # key size, value size, create_revision, mod_revision, version
_SNAP_HISTORY = struct.Struct(">qI")  # compacted through (revision), change count
_SNAP_CHANGE = struct.Struct(">qqHBI")  # revision, version, key size, has value, value size
_SNAP_MAGIC, _SNAP_VERSION = 0x514C4B56, 2  # "QLKV"; version 1 had no history


@frozen
class KeyValue:
    key: str
    value: bytes
    version: int
    create_revision: int
    mod_revision: int


@frozen
class Change:
    """One applied mutation, for watchers: `value` None and `version` 0 for a delete."""

    revision: int
    key: str
    value: bytes | None
    version: int


@frozen
class Result:
    code: ResponseCode
    version: int  # the key's version after the command (SUCCESS) or as found (METADATA_VERSION_CONFLICT)
    revision: int  # the store's revision after the command


# -- commands (log entry bodies) ----------------------------------------------------------------------------
def _check_key(key: str) -> bytes:
    raw = key.encode()
    if not raw or len(raw) > MAX_KEY_BYTES:
        raise BadRequest(f"key of {len(raw)} bytes: must be 1..{MAX_KEY_BYTES}")
    return raw


def _check_expected(expected_version: int | None) -> None:
    if expected_version is not None and expected_version < 0:
        raise BadRequest(f"expected_version {expected_version} < 0")


def encode_put(key: str, value: bytes, expected_version: int | None = None) -> bytes:
    raw = _check_key(key)
    _check_expected(expected_version)
    if len(value) > MAX_VALUE_BYTES:
        raise BadRequest(f"value of {len(value)} bytes > {MAX_VALUE_BYTES}")
    head = _CMD.pack(_PUT, expected_version is not None, expected_version or 0, len(raw))
    return head + raw + _U32.pack(len(value)) + bytes(value)


def encode_delete(key: str, expected_version: int | None = None) -> bytes:
    raw = _check_key(key)
    _check_expected(expected_version)
    return _CMD.pack(_DELETE, expected_version is not None, expected_version or 0, len(raw)) + raw


def decode_command(body: bytes) -> tuple[int, str, bytes | None, int | None]:
    """(op, key, value or None, expected_version or None); CorruptEntry if the body is not a command."""
    view = memoryview(body)
    try:
        op, has_expected, expected, key_size = _CMD.unpack_from(view, 0)
        off = _CMD.size
        key = bytes(view[off:off + key_size]).decode()
        if len(key.encode()) != key_size or not key_size:
            raise ValueError("short key")
        off += key_size
        value = None
        if op == _PUT:
            (size,) = _U32.unpack_from(view, off)
            off += _U32.size
            value = bytes(view[off:off + size])
            if len(value) != size:
                raise ValueError("short value")
            off += size
        elif op != _DELETE:
            raise ValueError(f"unknown op {op}")
        if off != len(view) or has_expected not in (0, 1):
            raise ValueError("trailing bytes" if off != len(view) else "bad flag")
    except (struct.error, UnicodeDecodeError, ValueError) as e:
        raise CorruptEntry(f"not a kv command: {e}") from None
    return op, key, value, expected if has_expected else None


# -- the state machine ----------------------------------------------------------------------------------------
def _key_and_value(data, off: int, key_size: int, value_size: int) -> tuple[str, bytes, int]:
    """A snapshot record's key and value at `off`, and the offset after them."""
    key = bytes(data[off:off + key_size]).decode()
    off += key_size
    return key, bytes(data[off:off + value_size]), off + value_size


class KVStore:
    def __init__(self, history_limit: int = DEFAULT_HISTORY_LIMIT) -> None:
        self._kv: dict[str, KeyValue] = {}
        self._sorted: list[str] = []  # keys in order, for prefix lists
        self.applied_index = -1
        self.revision = -1  # the index of the last applied mutation (-1: none yet; a log's first entry is 0)
        self._history: deque[Change] = deque(maxlen=history_limit)
        self._compacted_through = -1  # changes at or below this revision are not in the history

    # -- applying committed entries --------------------------------------------------------------------
    def apply(self, index: int, body: bytes, timestamp_ms: int = 0) -> Result:
        """Apply the committed entry `index` (each once, in order). A body that is not a command (a no-op,
        damage) changes nothing and answers BAD_REQUEST: every replica answers the same."""
        if index <= self.applied_index:
            raise ValueError(f"entry {index} applied out of order (applied through {self.applied_index})")
        self.applied_index = index
        try:
            op, key, value, expected = decode_command(body)
        except CorruptEntry:
            return Result(ResponseCode.BAD_REQUEST, 0, self.revision)
        current = self._kv.get(key)
        have = current.version if current else 0
        if expected is not None and expected != have:
            return Result(ResponseCode.METADATA_VERSION_CONFLICT, have, self.revision)
        if op == _DELETE:
            if current is None:
                return Result(ResponseCode.SUCCESS, 0, self.revision)  # nothing to delete: no new revision
            self.revision = index
            del self._kv[key]
            del self._sorted[bisect.bisect_left(self._sorted, key)]
            self._record(Change(index, key, None, 0))
            return Result(ResponseCode.SUCCESS, 0, index)
        assert value is not None
        self.revision = index
        if current is None:
            kv = KeyValue(key, value, 1, index, index)
            bisect.insort(self._sorted, key)
        else:
            kv = KeyValue(key, value, have + 1, current.create_revision, index)
        self._kv[key] = kv
        self._record(Change(index, key, value, kv.version))
        return Result(ResponseCode.SUCCESS, kv.version, index)

    def _record(self, change: Change) -> None:
        history = self._history
        if len(history) == history.maxlen:
            self._compacted_through = history[0].revision
        history.append(change)

    def retried_outcome(self, index: int, op: str, key: str, expected_version: int | None) -> Result:
        """The answer to a retry of the write applied at `index` (the log deduplicated it) when its own result
        is no longer kept (pushed out, or a restart). An unconditional put or delete always succeeded. A
        compare-and-set succeeded for sure only if it is still the key's last change; otherwise it may have
        conflicted or been overwritten since, so the answer is "outcome unknown" (DUPLICATE_SEQUENCE_TOO_OLD:
        read the key and decide) — never a SUCCESS the write may not have had."""
        current = self._kv.get(key)
        if expected_version is None:
            return Result(ResponseCode.SUCCESS, current.version if current and op == "put" else 0, self.revision)
        if op == "put" and current is not None and current.mod_revision == index:
            return Result(ResponseCode.SUCCESS, current.version, self.revision)
        return Result(ResponseCode.DUPLICATE_SEQUENCE_TOO_OLD, current.version if current else 0, self.revision)

    # -- reads -------------------------------------------------------------------------------------------
    def get(self, key: str) -> KeyValue | None:
        return self._kv.get(key)

    def list(self, prefix: str = "") -> list[KeyValue]:
        """Every key starting with `prefix`, in key order."""
        keys = self._sorted
        i = bisect.bisect_left(keys, prefix)
        out = []
        while i < len(keys) and keys[i].startswith(prefix):
            out.append(self._kv[keys[i]])
            i += 1
        return out

    def changes_since(self, revision: int, prefix: str = "") -> list[Change]:
        """Changes with a revision above `revision` to keys starting with `prefix`, oldest first. Raises
        WatchCompacted when changes after `revision` are no longer kept."""
        if revision < self._compacted_through:
            raise WatchCompacted(f"revision {revision} is compacted (history kept from "
                                 f"{self._compacted_through + 1}); list again and watch from its revision")
        return [c for c in self._history if c.revision > revision and c.key.startswith(prefix)]

    # -- snapshots -----------------------------------------------------------------------------------------
    def snapshot(self) -> bytes:
        """The map, the applied index and the watch history, deterministic (keys in order), CRC-protected."""
        parts = [_SNAP_HEAD.pack(_SNAP_MAGIC, _SNAP_VERSION, self.applied_index, self.revision, len(self._kv))]
        for key in self._sorted:
            kv = self._kv[key]
            raw = key.encode()
            parts.append(_SNAP_KEY.pack(len(raw), len(kv.value), kv.create_revision, kv.mod_revision, kv.version))
            parts.append(raw)
            parts.append(kv.value)
        kept, compacted = self._snapshot_history()
        parts.append(_SNAP_HISTORY.pack(compacted, len(kept)))
        for c in kept:
            raw = c.key.encode()
            value = c.value if c.value is not None else b""
            parts.append(_SNAP_CHANGE.pack(c.revision, c.version, len(raw), c.value is not None, len(value)))
            parts.append(raw)
            parts.append(value)
        body = b"".join(parts)
        return body + _U32.pack(crc32c(body))

    def _snapshot_history(self) -> tuple[list[Change], int]:
        """The newest changes that fit MAX_SNAPSHOT_HISTORY_BYTES, and the revision the rest is compacted to."""
        kept: list[Change] = []
        size = 0
        compacted = self._compacted_through
        for c in reversed(self._history):
            cost = _SNAP_CHANGE.size + len(c.key.encode()) + len(c.value or b"")
            if size + cost > MAX_SNAPSHOT_HISTORY_BYTES:
                compacted = max(compacted, c.revision)
                break
            kept.append(c)
            size += cost
        kept.reverse()
        return kept, compacted

    @classmethod
    def restore(cls, data: bytes, history_limit: int = DEFAULT_HISTORY_LIMIT) -> "KVStore":
        """A store as of the snapshot, with the history it carries (a version 1 snapshot has none: watchers of
        earlier revisions get WatchCompacted)."""
        if len(data) < _SNAP_HEAD.size + _U32.size or _U32.unpack_from(data, len(data) - 4)[0] != crc32c(data[:-4]):
            raise CorruptEntry("kv snapshot: crc mismatch or truncated")
        magic, version, applied, revision, n = _SNAP_HEAD.unpack_from(data, 0)
        if magic != _SNAP_MAGIC or version not in (1, _SNAP_VERSION):
            raise CorruptEntry(f"kv snapshot: magic {magic:#x} version {version}")
        store = cls(history_limit)
        store._compacted_through = revision
        off = _SNAP_HEAD.size
        try:
            for _ in range(n):
                key_size, value_size, create, mod, ver = _SNAP_KEY.unpack_from(data, off)
                key, value, off = _key_and_value(data, off + _SNAP_KEY.size, key_size, value_size)
                store._kv[key] = KeyValue(key, value, ver, create, mod)
            if version >= 2:
                store._compacted_through, count = _SNAP_HISTORY.unpack_from(data, off)
                off += _SNAP_HISTORY.size
                for _ in range(count):
                    rev, ver, key_size, has_value, value_size = _SNAP_CHANGE.unpack_from(data, off)
                    key, value, off = _key_and_value(data, off + _SNAP_CHANGE.size, key_size, value_size)
                    store._record(Change(rev, key, value if has_value else None, ver))
        except (struct.error, UnicodeDecodeError) as e:
            raise CorruptEntry(f"kv snapshot: {e}") from None
        if off != len(data) - 4:
            raise CorruptEntry("kv snapshot: length mismatch")
        store._sorted = sorted(store._kv)
        store.applied_index, store.revision = applied, revision
        return store
