"""The node's term and vote on disk: a vote granted over the wire must survive a crash (Raft's HardState).

The file holds two fixed slots, written in turn in place (pwrite + fdatasync): a save allocates no block, so a
member whose disk is full still follows term changes and votes (a write-tmp-and-rename save needed free blocks
and fail-stopped the member at its next term change). A slot is [magic, seq, term, vote length, vote, crc32c];
load takes the valid slot with the higher seq. A crash mid-save tears only the slot being written, whose state
was not yet counted on (the core sends nothing that depends on it before the save returns): the other slot
holds the state before it.
"""

from __future__ import annotations

import json
import os
import struct

from ...format.log_entry import crc32c
from ...raft.types import HardState
from ...store.files import atomic_write_file, fsync_dir

HARD_STATE_FILE = "hard_state"
LEGACY_HARD_STATE_FILE = "hard_state.json"  # (written by tmp + rename up to 2026-11: read once, then replaced)
SLOT_BYTES = 4096  # a page each: writing one slot never rewrites the other's page
_HEAD = struct.Struct("<4sQQH")  # magic, seq, term, vote length (0: no vote); the vote, then crc32c of it all
_MAGIC = b"QLHS"
_CRC = struct.Struct("<I")
MAX_VOTE_BYTES = SLOT_BYTES - _HEAD.size - _CRC.size


def load_hard_state(data_dir: str) -> HardState:
    """The last saved term and vote (HardState() in a new data dir)."""
    found = _read(data_dir)
    if found is not None:
        return found[1]
    legacy = os.path.join(data_dir, LEGACY_HARD_STATE_FILE)
    try:
        with open(legacy, "rb") as f:
            doc = json.loads(f.read())
    except FileNotFoundError:
        return HardState()
    except (ValueError, OSError) as e:
        raise RuntimeError(f"cannot read {legacy}: {e}") from e
    return HardState(term=int(doc["term"]), voted_for=doc.get("voted_for"))


def open_hard_state(data_dir: str) -> HardState:
    """load_hard_state, creating the file if it is not there yet: at open, while the node has not voted, so the
    saves that follow never need a block."""
    found = _read(data_dir)
    if found is not None:
        return found[1]
    hs = load_hard_state(data_dir)  # (a legacy file's, or a new data dir's)
    save_hard_state(data_dir, hs)
    return hs


def save_hard_state(data_dir: str, hard_state: HardState) -> None:
    """Durable when this returns. The first save in a data dir creates the file (tmp + rename: it needs blocks,
    once); every later one overwrites the older slot in place."""
    path = os.path.join(data_dir, HARD_STATE_FILE)
    found = _read(data_dir)
    if found is None:
        atomic_write_file(path, _slot(1, hard_state) + bytes(SLOT_BYTES))
        try:  # (the new file wins over the legacy one from here on; removing it is tidiness)
            os.unlink(os.path.join(data_dir, LEGACY_HARD_STATE_FILE))
            fsync_dir(data_dir)
        except FileNotFoundError:
            pass
        return
    seq, _, slot = found
    fd = os.open(path, os.O_WRONLY)
    try:
        data = _slot(seq + 1, hard_state)
        if os.pwrite(fd, data, (1 - slot) * SLOT_BYTES) != len(data):
            raise OSError(f"{path}: short write")
        os.fdatasync(fd)
    finally:
        os.close(fd)


def _slot(seq: int, hs: HardState) -> bytes:
    vote = (hs.voted_for or "").encode()
    if len(vote) > MAX_VOTE_BYTES:
        raise ValueError(f"node id of {len(vote)} bytes cannot be a vote")
    body = _HEAD.pack(_MAGIC, seq, hs.term, len(vote)) + vote
    return (body + _CRC.pack(crc32c(body))).ljust(SLOT_BYTES, b"\0")


def _read(data_dir: str) -> tuple[int, HardState, int] | None:
    """(seq, state, slot index) of the newer valid slot; None if there is no file. A file with no valid slot
    raises: it was created whole (tmp + rename), so one slot always holds a state unless the disk lies."""
    path = os.path.join(data_dir, HARD_STATE_FILE)
    try:
        with open(path, "rb") as f:
            data = f.read(2 * SLOT_BYTES)
    except FileNotFoundError:
        return None
    best = None
    for i in range(2):
        slot = data[i * SLOT_BYTES:(i + 1) * SLOT_BYTES]
        if len(slot) < _HEAD.size:
            continue
        magic, seq, term, n = _HEAD.unpack_from(slot)
        end = _HEAD.size + n
        if magic != _MAGIC or end + _CRC.size > len(slot) or \
                _CRC.unpack_from(slot, end)[0] != crc32c(slot[:end]):
            continue
        if best is None or seq > best[0]:
            best = (seq, HardState(term=term, voted_for=slot[_HEAD.size:end].decode() or None), i)
    if best is None:
        raise RuntimeError(f"cannot read {path}: neither slot holds a valid hard state")
    return best
