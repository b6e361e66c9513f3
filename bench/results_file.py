"""Where a benchmark's run goes: bench/results/<stem>-<date>.json (the README copies its tables from there);
and the page cache emptied between workloads, so one's figure does not depend on what ran before it."""

from __future__ import annotations

import datetime as dt
import json
import os


def write(out_dir: str, stem: str, doc: dict, results: dict) -> str:
    """Write `doc` as <out_dir>/<stem>-<today>.json, print `results` and the path; returns the path."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{stem}-{dt.date.today().isoformat()}.json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    print(json.dumps(results, indent=1))
    print(f"results: {path}")
    return path


def empty_page_cache() -> str:
    """sync, then /proc/sys/vm/drop_caches (when writable: root). On this VM a page cache growing into memory
    not used lately cost up to 4x the kernel CPU per GB written (dd: 4.8 s for 2 GB, against 0.4-0.6 s into
    pages just freed), so without it a workload's figure depended on what ran before it. Says what it did."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return "emptied before each workload (sync; echo 3 > /proc/sys/vm/drop_caches)"
    except OSError as e:
        return f"synced before each workload, not emptied ({e.strerror})"
