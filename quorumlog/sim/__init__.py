"""Deterministic cluster simulator (TigerBeetle's VOPR in spirit): one seed → one hostile world → one trace.

    from quorumlog.sim import run_seed
    result = run_seed(42)          # SimResult: ok, violation, steps, virtual_ms, wall_s, stats
    python -m quorumlog.sim --seeds 2000
    python -m quorumlog.sim --seed 42 --trace
"""

from .checker import Violation
from .options import PLANTED_BUGS, SimOptions
from .world import SimResult, World, run_seed

__all__ = ["PLANTED_BUGS", "SimOptions", "SimResult", "Violation", "World", "run_seed"]
