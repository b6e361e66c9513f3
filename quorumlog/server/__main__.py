"""`python -m quorumlog.server --id n0 --peers ... --data-dir ...`: one node in the foreground."""

import sys

from .runtime import main

sys.exit(main())
