"""The bookie's index: its checkpoint batch is made durable by an fdatasync of RocksDB's WAL that releases the
GIL (rocksdict keeps the GIL through a synced write, fsync included, so a checkpoint on another thread froze the
node's event loop for as long as the disk took)."""

from __future__ import annotations

import os
import threading
import time

from quorumlog.bookie import index as index_module
from quorumlog.bookie.index import LedgerIndex

SLOW_SYNC_S = 0.3


def test_a_checkpoint_syncs_the_wal_without_holding_the_gil_and_its_batch_survives_a_reopen(tmp_path, monkeypatch):
    ix = LedgerIndex(str(tmp_path / "index"))
    for e in range(100):
        ix.put(7, e, (1, e * 100))
    synced: list[str] = []
    real_fdatasync = os.fdatasync

    def slow_fdatasync(fd: int) -> None:  # a slow disk: the GIL must be free meanwhile
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        time.sleep(SLOW_SYNC_S)
        real_fdatasync(fd)
    monkeypatch.setattr(index_module.os, "fdatasync", slow_fdatasync)
    ix.begin_commit()
    done = threading.Event()
    t = threading.Thread(target=lambda: (ix.write_commit((3, 4096)), done.set()))
    t.start()
    spins, longest, last = 0, 0.0, time.perf_counter()
    while not done.is_set():  # a busy Python loop, as an event loop's thread is
        now = time.perf_counter()
        longest, last = max(longest, now - last), now
        spins += 1
    t.join()
    ix.end_commit()
    assert any(os.path.basename(p).endswith(".log") for p in synced), synced  # the WAL, synced by us
    assert longest < SLOW_SYNC_S / 2, f"the main thread waited {longest:.3f} s during the sync"
    ix.close()
    again = LedgerIndex(str(tmp_path / "index"))
    assert again.mark() == (3, 4096) and again.get(7, 99) == (1, 9900) and again.last_entry(7) == 99
    again.close()

