"""The idempotent-producer window: only forgotten seqs are 'too old'; out-of-order new seqs are new."""

from __future__ import annotations

from quorumlog.store.base import PRODUCER_WINDOW_BATCHES


def test_out_of_order_seqs_are_new_until_something_is_forgotten(store):
    store.append_batch(1, [b"x"], 1, producer=(5, 7))
    # seq 6 was in flight behind 7 (pipelining): nothing forgotten yet, so it is judged new.
    assert store.producer_window_floor(5) is None
    assert store.find_producer_batch(5, 6) is None


def test_floor_is_just_above_the_highest_forgotten_seq(store):
    for seq in range(PRODUCER_WINDOW_BATCHES + 3):
        store.append_batch(1, [b"%d" % seq], 1, producer=(5, seq))
    assert store.producer_window_floor(5) == 3  # seqs 0, 1, 2 were evicted
    assert store.find_producer_batch(5, 2) is None
    hit = store.find_producer_batch(5, 3)
    assert (hit.first_index, hit.last_index) == (3, 3)
    assert store.producer_window_floor(6) is None  # another client is unaffected


# -- the producer snapshot ------------------------------------------------------------------
import dataclasses  # noqa: E402
import os  # noqa: E402

import pytest  # noqa: E402

from quorumlog.store import FileStore, StoreConfig  # noqa: E402

from .conftest import SMALL  # noqa: E402

RARE_CHECKPOINTS = dataclasses.replace(SMALL, checkpoint_interval_ms=3_600_000)


def _kill(s: FileStore) -> None:
    s._close_files()  # kill -9: no clean close
    s._closed = True


def _old_client_then_traffic(path: str, traffic: int) -> FileStore:
    s = FileStore(path, RARE_CHECKPOINTS)
    s.append_batch(1, [b"a", b"b"], 1, producer=(77, 0))  # an old client's batch
    s.flush()
    s.checkpoint()  # its snapshot
    for i in range(traffic):  # other clients' traffic after it, far more than any tail scan would cover
        s.append_batch(1, [b"t%d" % i], 2, producer=(1_000 + i % 5, i // 5))
    s.flush()
    return s


def test_an_old_clients_retry_is_recognised_after_a_restart(tmp_path):
    """The table used to be rebuilt from the last 100,000 entries only: a client whose last batch was older
    had its retry appended twice. The snapshot plus the entries after it give back the whole table."""
    path = str(tmp_path / "g")
    roomy = StoreConfig(data_segment_size_bytes=8 << 20, index_segment_size_bytes=32 << 16, max_entry_bytes=1024,
                        disk_full_ratio=1.0, checkpoint_interval_ms=3_600_000)
    s = FileStore(path, roomy)
    s.append_batch(1, [b"a", b"b"], 1, producer=(77, 0))  # an old client's batch
    s.flush()
    s.checkpoint()
    for i in range(300):  # 120,000 entries of other clients after it, more than the old 100,000-entry scan
        s.append_batch(1, [b"t"] * 400, 2, producer=(1_000 + i % 5, i // 5))
    s.flush()
    _kill(s)
    with FileStore(path, roomy) as s2:
        hit = s2.find_producer_batch(77, 0)
        assert hit is not None and (hit.first_index, hit.last_index) == (0, 1)
        assert s2.end_index == 1 + 300 * 400
        assert s2.find_producer_batch(1_004, 59) is not None  # batches after the snapshot: from the scan
        assert s2.find_producer_batch(1_004, 60) is None


def test_without_a_snapshot_the_whole_log_is_scanned(tmp_path):
    path = str(tmp_path / "g")
    s = _old_client_then_traffic(path, 50)
    _kill(s)
    os.unlink(os.path.join(path, "producers"))
    with FileStore(path, RARE_CHECKPOINTS) as s2:
        assert s2.find_producer_batch(77, 0) is not None
    with open(os.path.join(path, "producers"), "r+b") as f:  # a damaged snapshot is ignored, not trusted
        f.seek(10)
        f.write(b"\xff\xff")
    with FileStore(path, RARE_CHECKPOINTS) as s3:
        assert s3.find_producer_batch(77, 0) is not None


@pytest.mark.parametrize("snapshot_after_truncate", [True, False])
def test_a_snapshot_never_names_a_batch_that_a_truncate_replaced(tmp_path, snapshot_after_truncate):
    """A follower's truncate drops batches; new entries then reuse their indexes. Whether or not the snapshot
    written by the truncate landed, a restart must not answer the old seq with the new entries' indexes."""
    path = str(tmp_path / "g")
    s = FileStore(path, RARE_CHECKPOINTS)
    s.append_batch(1, [b"base"], 1)
    s.set_committed_index(0)
    s.append_batch(1, [b"x"], 1, producer=(9, 0))  # index 1: uncommitted, will be replaced
    s.flush()
    s.checkpoint()
    stale = open(os.path.join(path, "producers"), "rb").read()
    s.truncate_after(0)
    s.append_batch(2, [b"y"], 1, producer=(8, 0))  # index 1 again, another client's batch
    s.flush()
    _kill(s)
    if not snapshot_after_truncate:  # the crash came before the truncate's snapshot reached the disk
        with open(os.path.join(path, "producers"), "wb") as f:
            f.write(stale)
    with FileStore(path, RARE_CHECKPOINTS) as s2:
        assert s2.find_producer_batch(9, 0) is None
        hit = s2.find_producer_batch(8, 0)
        assert hit is not None and hit.last_index == 1
