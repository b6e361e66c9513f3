"""Settings for every test: node processes started by the tests inherit them through the environment."""

import os

# A node's default data segment is DLedger's 1 GiB, preallocated. Tests start dozens of clusters; at that size
# one run writes ~30 GB, more than a CI machine's disk may hold. Test-sized segments, unless a run says otherwise.
os.environ.setdefault("QUORUMLOG_DATA_SEGMENT_SIZE", str(16 * 1024 * 1024))
os.environ.setdefault("QUORUMLOG_INDEX_SEGMENT_SIZE", str(1024 * 1024))
