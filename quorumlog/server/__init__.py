"""The node runtime: a host for groups of every kind (host.py), driven through one interface with real time,
group commit, reads, status and metrics; raft_group/ and master_slave/ are the kinds, services/ what they serve.

`run_node(config)` runs one node in the foreground (the CLI's `quorumlog node` calls it); `Node` is the
runtime object for tests that embed nodes in one process.
"""

from .runtime import main, parse_args, run_node

__all__ = ["main", "parse_args", "run_node"]
