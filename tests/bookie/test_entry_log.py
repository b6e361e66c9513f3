"""The entry log hands its bytes to the OS a MiB at a time and starts their writeback at once."""

from __future__ import annotations


def test_the_entry_log_starts_writeback_of_each_range_it_hands_to_the_os(tmp_path, monkeypatch):
    """So a checkpoint's fdatasync finds little dirty (store/files.py start_writeback): each write_out's bytes,
    at their offset in the current log, and a new log's from 0."""
    from quorumlog.bookie import entry_log
    from quorumlog.store import files
    assert files._sync_file_range is not None  # (Linux)
    files.start_writeback(-1, 0, 4096)  # a failure only loses the head start: nothing raised
    calls = []
    monkeypatch.setattr(entry_log, "start_writeback", lambda fd, offset, length: calls.append((offset, length)))
    el = entry_log.EntryLogger(str(tmp_path), file_bytes=1 << 30)
    size = entry_log._HEAD.size + 1000
    for e in range(3):
        el.append(1, e, b"x" * 1000)
    el.write_out()
    el.append(1, 3, b"y" * 1000)
    el.write_out()
    el.roll()
    el.append(1, 4, b"z" * 1000)
    el.write_out()
    assert calls == [(0, 3 * size), (3 * size, size), (0, size)]
