"""quorumlog/heap.py: the node fixes glibc's heap thresholds at start (the binding must work where glibc is)."""

import platform
import subprocess
import sys

import pytest


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_keep_freed_buffers_stops_refaulting_big_buffers():
    # In a fresh process: a mix of big buffers that glibc's moving thresholds serve with fresh mmaps (each
    # allocation the largest so far, then trimmed) is faulted in again every round; with the thresholds fixed,
    # the freed heap is reused and the rounds after the first fault next to nothing.
    script = """
import resource, sys
from quorumlog.heap import keep_freed_buffers
if sys.argv[1] == "fixed":
    assert keep_freed_buffers()
def round_():
    for mib in (1, 2, 3, 4):
        b = bytearray(mib << 20)  # zero-filled: every page touched
        del b
round_()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    round_()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""
    faults = {mode: int(subprocess.run([sys.executable, "-c", script, mode], capture_output=True, text=True,
                                       check=True).stdout) for mode in ("moving", "fixed")}
    assert faults["fixed"] < 100, faults  # (20 rounds of 10 MiB are 51,200 pages)
    assert faults["moving"] > 500, faults  # (measured: ~1,000; the pattern still shows the difference)
