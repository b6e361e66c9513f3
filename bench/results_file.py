"""Where a benchmark's run goes: bench/results/<stem>-<date>.json (the README copies its tables from there)."""

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
