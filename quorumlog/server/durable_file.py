"""Write a small JSON document so that a crash leaves either the old or the new one: temp file, fsync,
rename, fsync of the directory."""

from __future__ import annotations

import json
import os
from typing import Any


def write_json_durably(path: str, doc: Any) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
