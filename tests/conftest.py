"""Settings and shared fixtures for every test: node processes started by the tests inherit the settings through
the environment."""

import contextlib
import os
import subprocess

import pytest

# A node's default data segment is DLedger's 1 GiB, preallocated. Tests start dozens of clusters; at that size
# one run writes ~30 GB, more than a CI machine's disk may hold. Test-sized segments, unless a run says otherwise.
os.environ.setdefault("QUORUMLOG_DATA_SEGMENT_SIZE", str(16 * 1024 * 1024))
os.environ.setdefault("QUORUMLOG_INDEX_SEGMENT_SIZE", str(1024 * 1024))


@pytest.fixture
def tmpfs(tmp_path):
    """mount(size) -> a directory on a tmpfs of that size ("4M"): a filesystem that really fills up (ENOSPC),
    unmounted afterwards. Skips the test where mounting is not allowed (not root)."""
    mounted: list[str] = []

    def mount(size: str) -> str:
        if os.geteuid() != 0:
            pytest.skip("mounting a tmpfs needs root")
        d = tmp_path / f"tmpfs{len(mounted)}"
        d.mkdir()
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(d)], capture_output=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount tmpfs: {r.stderr.decode().strip()}")
        mounted.append(str(d))
        return str(d)

    yield mount
    for d in mounted:
        subprocess.run(["umount", "-l", d], capture_output=True)


@pytest.fixture
def plant():
    """plant(*bugs): the Raft core with those bugs planted (quorumlog/sim/planted_raft.py) until the test ends."""
    from quorumlog.sim.planted_raft import planted

    with contextlib.ExitStack() as stack:
        yield lambda *bugs: stack.enter_context(planted(bugs))
