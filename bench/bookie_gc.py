"""How long a bookie GC that compacts holds a node's event loop: at once (collect_garbage) or in steps
(garbage_steps, as the node drives it: the log read and removed, and the checkpoint's durable part, on its thread).

    python bench/bookie_gc.py [--entry-bytes 65536] [--mode once|steps] [--dir /tmp/bookie-gc]

Writes ~140 MiB (two 64 MiB entry logs and the current one) over 10 interleaved ledgers, deletes 6 of them (40 %
live: every full log is compacted), then times the GC. `steps` prints the longest step on the loop.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from quorumlog.bookie.storage import CHECKPOINT, BookieStorage, ReadLog, RemoveLog  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--entry-bytes", type=int, default=65536)
    p.add_argument("--mode", choices=("once", "steps"), default="steps")
    p.add_argument("--dir", default="/tmp/bookie-gc")
    a = p.parse_args()
    shutil.rmtree(a.dir, ignore_errors=True)
    s = BookieStorage(a.dir)
    body = os.urandom(a.entry_bytes)
    pending = []
    for i in range((140 * 1024 * 1024) // a.entry_bytes):
        pending.append(s.add_entry(i % 10, i // 10, body))
        if len(pending) > 512:
            for f in pending:
                f.result()
            pending = []
    for f in pending:
        f.result()
    for lid in range(6):
        s.delete_ledger(lid).result()
    s.checkpoint()
    os.sync()
    if a.mode == "once":
        t = time.perf_counter()
        stats = s.collect_garbage()
        print(a.entry_bytes, a.mode, stats, "held the loop %.0f ms" % ((time.perf_counter() - t) * 1000))
    else:
        stats: dict = {}
        steps = s.garbage_steps(stats)
        answer, longest, total, n = None, 0.0, 0.0, 0
        try:
            while True:
                t = time.perf_counter()
                step = steps.send(answer)
                dt = time.perf_counter() - t
                longest, total, n, answer = max(longest, dt), total + dt, n + 1, None
                if isinstance(step, ReadLog):  # (these three: on the node's bookie thread)
                    answer = s.entry_log.read_log(step.log_id)
                elif isinstance(step, RemoveLog):
                    s.entry_log.remove(step.log_id)
                elif step is CHECKPOINT:
                    mark, durable_part = s.checkpoint_begin()
                    durable_part()
                    s.checkpoint_end(mark)
        except StopIteration:
            pass
        print(a.entry_bytes, a.mode, stats, "steps %d, longest on the loop %.1f ms, all steps %.0f ms"
              % (n, longest * 1000, total * 1000))
    s.close()
    shutil.rmtree(a.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
