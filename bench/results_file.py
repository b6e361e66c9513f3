"""Where a benchmark's run goes: bench/results/<stem>-<date>.json (the README copies its tables from there);
the page cache emptied between workloads, so one's figure does not depend on what ran before it; and the CPU
the processes of a run used."""

from __future__ import annotations

import datetime as dt
import json
import os
import resource


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


def process_cpu_s(pid: int) -> float:
    """User + kernel CPU-seconds a process has used so far (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()  # (after the command name, which may hold spaces)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def children_cpu_s() -> float:
    """User + kernel CPU-seconds of this process's children that ended (generators run with subprocess.run)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def cluster_node_pids(data_dir: str) -> dict[str, int]:
    """Node id -> pid of a `quorumlog cluster up` cluster (its cluster.json)."""
    with open(os.path.join(data_dir, "cluster.json")) as f:
        return {n["id"]: n["pid"] for n in json.load(f)["nodes"]}
