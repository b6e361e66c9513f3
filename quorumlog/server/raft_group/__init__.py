"""A Raft group on a node: its replica (the raft core driven with real time, store and group commit)."""
