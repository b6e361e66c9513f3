"""A short soak on real nodes: every fault kind at least once, 0 checker violations, every cycle recovers.

Network faults use namespaces (veth link down) when run as root, else the TCP proxy alone; the mechanism
that ran is printed on the SOAK line (never a silent skip). FAULT_KINDS includes failing_disk_leader (an
LD_PRELOAD shim built with the C compiler) and, as root, disk_full (tmpfs data dirs)."""

from __future__ import annotations

import pytest

from quorumlog.soak.runner import FAULT_KINDS, MASTER_SLAVE_KINDS, MEMBERSHIP_KINDS, run_soak

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


def test_short_soak_every_fault_kind(tmp_path):
    """With the nodes on mutual TLS and a token, as an operator runs them (the soak passes with
    TLS on); every other test exercises plain TCP."""
    cycles = len(FAULT_KINDS) + 1  # ≥ 10: each kind once (shuffled by the seed), then one drawn at random
    result = run_soak(seed=20261122, cycles=cycles, base_dir=str(tmp_path / "run"), report_root=str(tmp_path),
                      tls=True)
    figures = result.figures()
    assert "mutual TLS" in figures["mechanism"]
    print("\nSOAK", figures)
    assert {c.kind for c in result.cycles} == set(FAULT_KINDS)
    assert result.violations == [], f"{result.violations} (report {result.report_dir})"
    assert result.not_recovered == [], f"cycles without writes after healing: {figures['not_recovered']} " \
                                       f"(report {result.report_dir})"
    assert result.failed_leader_kept_leading == [], figures["disk_fault_cycles"]
    assert figures["skipped_kinds"] == {}, figures["skipped_kinds"]  # a kind that could not run says so
    # A leader whose disk fails or fills hands over: the others keep acknowledging during the hold.
    for c in figures["disk_fault_cycles"]:
        assert c["acks_during_hold"] > 0, c
    assert figures["ops"]["ok"] >= 100 * cycles, figures["ops"]  # the writers really wrote through the faults
    assert figures["committed_entries"] >= figures["ops"]["ok"]
    # The faults bit: with its leader cut off or stopped, the group cannot ack before an election timeout.
    for kind in ("isolate_leader", "pause_leader"):
        assert figures["unavailability_s"][kind]["max"] >= 0.3, (kind, figures["unavailability_s"][kind])


def test_short_soak_membership_changes_among_faults(tmp_path):
    """Replace a kill -9'd follower, remove the leader under load, between kills and partitions: nothing
    acknowledged is lost or duplicated, and the members end with one configuration naming exactly them."""
    kinds = (*MEMBERSHIP_KINDS, "kill9_node", "isolate_leader")
    result = run_soak(seed=20261125, cycles=5, kinds=kinds, base_dir=str(tmp_path / "run"),
                      report_root=str(tmp_path))
    figures = result.figures()
    print("\nSOAK membership", figures["membership_cycles"], figures["ops"])
    assert result.violations == [], f"{result.violations} (report {result.report_dir})"
    assert result.not_recovered == [], figures["not_recovered"]
    changes = [c for c in figures["membership_cycles"] if " added" in c["note"]]
    assert len(changes) >= 2 and {c["kind"] for c in changes} == set(MEMBERSHIP_KINDS), figures["membership_cycles"]
    assert all(c["unavailable_s"] <= 2.0 for c in changes), changes


def test_short_soak_of_a_master_slave_group(tmp_path):
    """Writers on a SYNC_MASTER group with its controller in `_meta`: kill -9 of masters and slaves, a majority
    killed, the master stopped, isolated, its disk failing, all restarted, torn tails — nothing acknowledged is
    lost or duplicated, every cycle recovers, a master that cannot store hands over. (disk_full is left to
    `quorumlog soak --mode master-slave`: the full disk is also that node's `_meta` disk, and the controller's
    own leader moving off it can make the hand-over outlast this check's one-second grace.)"""
    kinds = tuple(k for k in MASTER_SLAVE_KINDS if k in FAULT_KINDS and k != "disk_full")
    result = run_soak(seed=20261126, cycles=len(kinds), kinds=kinds, base_dir=str(tmp_path / "run"),
                      report_root=str(tmp_path), mode="master-slave")
    figures = result.figures()
    print("\nSOAK master/slave", figures["ops"], figures["unavailability_s"])
    assert "master/slave group" in figures["mechanism"]
    assert result.violations == [], f"{result.violations} (report {result.report_dir})"
    assert result.not_recovered == [], figures["not_recovered"]
    assert result.failed_leader_kept_leading == [], figures["disk_fault_cycles"]
    assert figures["ops"]["ok"] >= 100 * len(kinds), figures["ops"]
