"""The node's term and vote on disk: a vote granted over the wire must survive a crash (Raft's HardState)."""

from __future__ import annotations

import json
import os

from ..raft.types import HardState

HARD_STATE_FILE = "hard_state.json"


def _atomic_write(path: str, data: bytes) -> None:
    try:
        from ..store.files import atomic_write_file  # the store's helper: write, fsync, rename, fsync dir
    except ImportError:  # the store package not landed yet: same steps here
        atomic_write_file = _atomic_write_fallback
    atomic_write_file(path, data)


def _atomic_write_fallback(path: str, data: bytes) -> None:
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dfd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def load_hard_state(data_dir: str) -> HardState:
    path = os.path.join(data_dir, HARD_STATE_FILE)
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read())
    except FileNotFoundError:
        return HardState()
    except (ValueError, OSError) as e:
        # A torn hard-state file cannot happen (atomic replace); a garbled one means the disk lies.
        raise RuntimeError(f"cannot read {path}: {e}") from e
    return HardState(term=int(doc["term"]), voted_for=doc.get("voted_for"))


def save_hard_state(data_dir: str, hard_state: HardState) -> None:
    """Durable when this returns (write, fsync, rename, fsync directory)."""
    doc = {"term": hard_state.term, "voted_for": hard_state.voted_for}
    _atomic_write(os.path.join(data_dir, HARD_STATE_FILE), json.dumps(doc).encode())
