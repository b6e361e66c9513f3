"""raft layer."""
