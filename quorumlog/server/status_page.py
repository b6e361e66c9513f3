"""The status page at `/` on a node's HTTP port (docs/interfaces.md "The status page"): one static HTML file with
its script inline — no build step, nothing fetched from elsewhere — that polls this node's `/cluster` (every
node as it reports itself, and the ledgers under re-replication) once a second and draws it. A token given
in the page's URL (`/?token=T`) goes with each poll as a bearer header."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources


@lru_cache(maxsize=1)
def _page() -> bytes:
    return resources.files(__package__).joinpath("status_page.html").read_bytes()


def status_page() -> tuple[str, bytes]:
    return "text/html; charset=utf-8", _page()
