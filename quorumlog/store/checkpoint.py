"""The `checkpoint` file: end index and committed index, replaced atomically (DLedger keeps the same pair).

Text `key=value` lines plus a CRC32C line, so a reader can tell a damaged file from a valid one; the atomic
replace means a crash leaves the old or the new file, never a mix.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import CorruptEntry
from ..format.log_entry import crc32c
from .files import atomic_write_file

CHECKPOINT_NAME = "checkpoint"


@dataclass(frozen=True, slots=True)
class Checkpoint:
    end_index: int  # every entry <= end_index was durable (data fdatasynced, index units too) when written
    committed_index: int
    begin_index: int = 0  # where the log starts when it holds no entry (a follower reset to its leader's begin)


def encode_checkpoint(cp: Checkpoint) -> bytes:
    body = f"end_index={cp.end_index}\ncommitted_index={cp.committed_index}\n"
    if cp.begin_index:  # older readers ignore the extra key
        body += f"begin_index={cp.begin_index}\n"
    body = body.encode()
    return body + f"crc={crc32c(body)}\n".encode()


def decode_checkpoint(data: bytes, path: str = CHECKPOINT_NAME) -> Checkpoint:
    cut = data.rfind(b"crc=")
    body = data[:cut]
    try:
        crc = int(data[cut + 4:].strip())
        fields = dict(line.split("=", 1) for line in body.decode().splitlines())
        cp = Checkpoint(int(fields["end_index"]), int(fields["committed_index"]), int(fields.get("begin_index", 0)))
    except (ValueError, KeyError, UnicodeDecodeError) as e:
        raise CorruptEntry(f"checkpoint {path} unreadable: {e!r}") from None
    if cut < 0 or crc != crc32c(body):
        raise CorruptEntry(f"checkpoint {path} crc mismatch")
    return cp


def read_checkpoint(path: str) -> Checkpoint | None:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    return decode_checkpoint(data, path)


def write_checkpoint(path: str, cp: Checkpoint) -> None:
    atomic_write_file(path, encode_checkpoint(cp))


def remove_stale_tmp(directory: str) -> None:
    tmp = os.path.join(directory, CHECKPOINT_NAME + ".tmp")
    if os.path.exists(tmp):
        os.unlink(tmp)
