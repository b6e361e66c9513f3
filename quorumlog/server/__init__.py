"""The node runtime (layer 5): drives the raft core with real time, group commit, reads, status, metrics.

`run_node(config)` runs one node in the foreground (the CLI's `quorumlog node` calls it); `Node` is the
runtime object for tests that embed nodes in one process.
"""

from .runtime import main, parse_args, run_node

__all__ = ["main", "parse_args", "run_node"]
