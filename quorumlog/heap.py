"""Keep big freed buffers in the process's heap (glibc's mallopt), for the processes that move bulk data.

A node allocates a buffer per big frame it receives (1 MiB batches), and TLS adds more: the encrypted copy of
each write, the memory BIOs. glibc serves each allocation above its mmap threshold (128 KiB at first, moved up
to the size last freed) with a fresh mmap, and trims the heap's free top above twice that: either way the next
big buffer is pages the kernel must fault in and zero again. Measured with `bench/tls.py` (4 writers of 1 MiB
batches, 2 cores): page faults, clear_page and memset were about 8% of the nodes' cycles under TLS, and fixing
both thresholds moved the medians from 69 to 78 MB/s with TLS and from 101 to 107 without. On a VM that hands
freed pages back to its host (free page reporting, as here) a refault costs more again.

Nodes and `quorumlog bench` set them; the client library does not (a library leaves its host process's malloc
alone). In the generator of 1 MiB batches under TLS they took its kernel CPU from 0.88-0.93 to 0.32-0.40 s/GB
(2026-11-27, 4 runs).

The cost is memory that stays mapped after a burst: at most TRIM_THRESHOLD of free heap top is kept (freed
buffers inside the heap are reused whatever their place). Buffers larger than MMAP_THRESHOLD are still mmapped.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1  # (glibc malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's own ceiling for its moving threshold (64-bit)
TRIM_THRESHOLD = 64 * 1024 * 1024


def keep_freed_buffers() -> bool:
    """Fix glibc's thresholds (setting them stops their moving); False where there is no glibc mallopt."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        mallopt = libc.mallopt if libc is not None else None
    except (OSError, AttributeError):
        mallopt = None
    if mallopt is None:
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    ok = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    if not ok:
        log.warning("mallopt refused the heap thresholds: big buffers are mmapped afresh each time")
    return ok
