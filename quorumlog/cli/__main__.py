"""`python -m quorumlog.cli ...`: the same command as the `quorumlog` console script (used in cluster.json argv)."""

from .main import main

main()
