"""The term and vote file: two slots written in turn in place, so saves need no free block."""

import json
import os

import pytest

from quorumlog.raft.types import HardState
from quorumlog.soak.processes import fill_to_last_byte
from quorumlog.server.raft_group.hard_state import (HARD_STATE_FILE, LEGACY_HARD_STATE_FILE, SLOT_BYTES, load_hard_state,
                                         open_hard_state, save_hard_state)


def test_saves_alternate_slots_and_the_newest_valid_one_is_loaded(tmp_path):
    d = str(tmp_path)
    assert open_hard_state(d) == HardState()
    path = os.path.join(d, HARD_STATE_FILE)
    assert os.path.getsize(path) == 2 * SLOT_BYTES
    for term in range(1, 6):
        save_hard_state(d, HardState(term, f"n{term % 3}"))
        assert load_hard_state(d) == HardState(term, f"n{term % 3}")
    save_hard_state(d, HardState(6, None))
    assert load_hard_state(d) == HardState(6, None)
    assert os.path.getsize(path) == 2 * SLOT_BYTES  # in place: the file never grows


@pytest.mark.parametrize("damage", ["torn", "zeroed"])
def test_a_save_torn_by_a_crash_leaves_the_state_before_it(tmp_path, damage):
    d = str(tmp_path)
    open_hard_state(d)
    save_hard_state(d, HardState(3, "n1"))
    save_hard_state(d, HardState(4, "n2"))  # the newer slot
    path = os.path.join(d, HARD_STATE_FILE)
    newer = 0  # (open wrote seq 1 to slot 0; term 3 went to slot 1, term 4 to slot 0)
    with open(path, "r+b") as f:
        assert f.read(SLOT_BYTES).find(b"n2") > 0
        f.seek(newer * SLOT_BYTES + (20 if damage == "torn" else 0))
        f.write(b"\xff" * 8 if damage == "torn" else bytes(SLOT_BYTES))
    assert load_hard_state(d) == HardState(3, "n1")
    save_hard_state(d, HardState(5, "n0"))  # the next save goes over the damaged slot
    assert load_hard_state(d) == HardState(5, "n0")


def test_a_file_with_no_valid_slot_is_an_error_not_an_empty_state(tmp_path):
    d = str(tmp_path)
    open_hard_state(d)
    with open(os.path.join(d, HARD_STATE_FILE), "wb") as f:
        f.write(b"\x01" * (2 * SLOT_BYTES))
    with pytest.raises(RuntimeError, match="neither slot"):
        load_hard_state(d)


def test_a_legacy_json_file_is_taken_over_once(tmp_path):
    d = str(tmp_path)
    with open(os.path.join(d, LEGACY_HARD_STATE_FILE), "w") as f:
        json.dump({"term": 7, "voted_for": "n2"}, f)
    assert open_hard_state(d) == HardState(7, "n2")
    assert not os.path.exists(os.path.join(d, LEGACY_HARD_STATE_FILE))
    save_hard_state(d, HardState(8, None))
    assert open_hard_state(d) == HardState(8, None)


def test_a_save_on_a_full_disk_succeeds(tmpfs):
    """The defect this layout fixes: tmp + rename needs a free block; a full member fail-stopped at its next
    term change."""
    d = tmpfs("1M")
    open_hard_state(d)
    fill_to_last_byte(os.path.join(d, "filler"))
    with pytest.raises(OSError):
        with open(os.path.join(d, "more"), "wb") as f:
            f.write(b"x" * 4096)
            f.flush()
    for term in range(1, 4):
        save_hard_state(d, HardState(term, "n1"))
    assert load_hard_state(d) == HardState(3, "n1")
