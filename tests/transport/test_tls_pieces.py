"""Writes to a TLS transport go as pieces of at least a record (transport/_io.py tls_pieces): uvloop's TLS
layer seals each buffer of a writelines call on its own, so the many small buffers of a batch (a header and a
body per entry) would each become a TLS record."""

from __future__ import annotations

import asyncio

from hypothesis import given, strategies as st

from quorumlog.transport._io import TLS_RECORD_BYTES, _WriteCork, tls_pieces


@given(st.lists(st.integers(0, 3 * TLS_RECORD_BYTES), max_size=60))
def test_pieces_keep_every_byte_in_order_and_fill_records(sizes):
    buffers = [bytes([i % 251]) * n for i, n in enumerate(sizes)]
    pieces = tls_pieces(buffers)
    assert b"".join(pieces) == b"".join(buffers)
    assert len(pieces) <= len(buffers)
    # small buffers are joined up to a record: a short piece only ends the list or comes before a big buffer
    for p, q in zip(pieces, pieces[1:]):
        assert len(p) >= TLS_RECORD_BYTES or len(q) >= TLS_RECORD_BYTES


class _Transport:
    def __init__(self, tls: bool) -> None:
        self.tls = tls
        self.calls: list[list] = []

    def get_extra_info(self, name, default=None):
        return object() if name == "ssl_object" and self.tls else default

    def is_closing(self) -> bool:
        return False

    def writelines(self, buffers) -> None:
        self.calls.append(list(buffers))


def test_a_corked_batch_of_small_bodies_reaches_tls_as_records_and_tcp_as_is():
    async def main() -> dict[bool, list[list]]:
        out = {}
        for tls in (False, True):
            t = _Transport(tls)
            cork = _WriteCork(t)
            bodies = [b"h" * 40] + [b"x" * 1024] * 1024  # an append of 1,024 entries of 1 KiB
            cork.write(bodies, sum(map(len, bodies)))
            cork.flush()
            out[tls] = t.calls
        return out

    calls = asyncio.run(main())
    assert [len(c) for c in calls[False]] == [1025]  # TCP: one writev of the buffers as they are
    assert [len(c) for c in calls[True]] == [64]  # TLS: the header and 16 bodies, then 63 pieces of 16 bodies
    assert b"".join(calls[True][0]) == b"".join(calls[False][0])
