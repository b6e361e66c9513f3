"""The disk guard refuses appends above the ratio and takes them again as soon as statvfs says so."""

import pytest

from quorumlog.errors import DiskFull
from quorumlog.store import disk_guard
from quorumlog.store.disk_guard import DiskGuard


@pytest.fixture
def disk(monkeypatch):
    """The guard's clock and statvfs reading, driven by the test."""
    state = {"now": 100.0, "ratio": 0.5, "statvfs_calls": 0}

    def used_ratio(path):
        state["statvfs_calls"] += 1
        return state["ratio"]
    monkeypatch.setattr(disk_guard, "used_ratio", used_ratio)
    monkeypatch.setattr(disk_guard.time, "monotonic", lambda: state["now"])
    return state


def test_appends_are_checked_against_a_cached_reading_while_they_go_on(disk):
    g = DiskGuard("/x", 0.85, 1000)
    for _ in range(100):
        g.check()
        disk["now"] += 0.001
    assert disk["statvfs_calls"] == 1  # (one reading per interval: 100 checks in 0.1 s)


def test_a_full_disk_is_asked_again_at_each_check_so_appends_resume_as_soon_as_space_returns(disk):
    g = DiskGuard("/x", 0.85, 1000)
    disk["ratio"] = 0.99
    disk["now"] += 1.0
    with pytest.raises(DiskFull):
        g.check()
    disk["ratio"] = 0.30  # space back, 10 ms later: no interval to wait out
    disk["now"] += 0.01
    g.check()
    assert g.ratio == 0.30


def test_after_enospc_below_the_ratio_appends_are_held_for_an_interval_then_the_ratio_decides(disk):
    """ENOSPC while statvfs claims room (out of inodes, say): refused for the interval, not a failed write per
    batch."""
    g = DiskGuard("/x", 0.85, 1000)
    g.check()
    g.mark_full()
    for _ in range(10):
        disk["now"] += 0.05
        with pytest.raises(DiskFull):
            g.check()
    disk["now"] += 0.6
    g.check()  # the reading says 50%: taken again


def test_after_enospc_appends_resume_as_soon_as_space_is_freed(disk):
    g = DiskGuard("/x", 0.85, 1000)
    g.check()
    disk["ratio"] = 1.0
    g.mark_full()
    disk["now"] += 0.01
    with pytest.raises(DiskFull):
        g.check()
    disk["ratio"] = 0.40  # the filler deleted
    disk["now"] += 0.01
    g.check()
