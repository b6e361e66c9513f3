"""The node's term and vote on disk: a vote granted over the wire must survive a crash (Raft's HardState)."""

from __future__ import annotations

import json
import os

from ..raft.types import HardState
from ..store.files import atomic_write_file  # write, fsync, rename, fsync the dir

HARD_STATE_FILE = "hard_state.json"


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
    atomic_write_file(os.path.join(data_dir, HARD_STATE_FILE), json.dumps(doc).encode())
