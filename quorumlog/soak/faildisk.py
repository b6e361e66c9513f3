"""A disk that starts failing, for real node processes: the LD_PRELOAD shim faildisk.c, compiled at test
time with the machine's C compiler (cc/gcc) into a cache directory.

    env = failing_disk_env(data_dir, trigger_path)   # add to the node's environment at start
    Path(trigger_path).touch()                       # from now on writes/fsyncs under data_dir give EIO
    os.unlink(trigger_path)                          # and now they work again

Device-mapper (dm-flakey/dm-error) is not available on our machines (FAULT-NOTES.md); a shim needs neither
root nor a kernel module, and it hits exactly the calls the store makes (pwrite/pwritev/fdatasync).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "faildisk.c")


class NoCompiler(RuntimeError):
    """No C compiler on this machine: the failing-disk fault cannot be injected."""


def compiler() -> str | None:
    for cc in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if cc and shutil.which(cc):
            return shutil.which(cc)
    return None


def build(cache_dir: str | None = None) -> str:
    """The path of the compiled shim (built once per source version); raises NoCompiler."""
    with open(SOURCE, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:12]
    cache_dir = cache_dir or os.path.join(tempfile.gettempdir(), "quorumlog-faildisk")
    os.makedirs(cache_dir, exist_ok=True)
    lib = os.path.join(cache_dir, f"faildisk-{digest}.so")
    if os.path.exists(lib):
        return lib
    cc = compiler()
    if cc is None:
        raise NoCompiler("no C compiler (cc/gcc/clang) on PATH to build the failing-disk shim")
    tmp = f"{lib}.{os.getpid()}.tmp"
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", tmp, SOURCE, "-ldl"], check=True,
                   capture_output=True, timeout=120)
    os.replace(tmp, lib)  # atomic: concurrent builders each produce a whole file
    return lib


def failing_disk_env(data_dir: str, trigger_path: str, lib: str | None = None) -> dict[str, str]:
    """Environment variables that load the shim for writes under data_dir, armed by trigger_path."""
    return {"LD_PRELOAD": lib or build(), "QL_FAILDISK_DIR": os.path.abspath(data_dir),
            "QL_FAILDISK_TRIGGER": os.path.abspath(trigger_path)}
