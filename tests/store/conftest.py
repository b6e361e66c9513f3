"""Fixtures: the same behaviour suite runs against MemoryStore and FileStore."""

from __future__ import annotations

import pytest

from quorumlog.store import FileStore, MemoryStore, StoreConfig

MAX_ENTRY_BYTES = 1024
# Tiny segments so every test crosses segment and index-segment boundaries.
SMALL = StoreConfig(data_segment_size_bytes=4096, index_segment_size_bytes=32 * 8, max_entry_bytes=MAX_ENTRY_BYTES,
                    disk_full_ratio=1.0, checkpoint_interval_ms=0)


@pytest.fixture
def small_config() -> StoreConfig:
    return SMALL


@pytest.fixture(params=["memory", "file"])
def store(request, tmp_path):
    if request.param == "memory":
        s = MemoryStore(max_entry_bytes=MAX_ENTRY_BYTES)
    else:
        s = FileStore(str(tmp_path / "g"), SMALL)
    yield s
    s.close()
