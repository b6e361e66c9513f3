"""`python -m quorumlog.cli ...`: the same command as the `quorumlog` console script (used in cluster.json argv)."""

from . import collector

collector.pause()  # (main() resumes it once the command's modules are loaded)
from .main import main  # noqa: E402

main()
