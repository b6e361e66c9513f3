"""The writer core alone (quorumlog/ledger/writer.py), answers fed by hand: which answers count after an
ensemble change."""

from __future__ import annotations

from quorumlog.codes import ResponseCode
from quorumlog.ledger import LedgerWriterCore, NeedEnsembleChange
from quorumlog.ledger.metadata import LedgerMetadata, Segment
from quorumlog.wire.ledger import AddResponse

OK = ResponseCode.SUCCESS


def test_a_late_answer_from_a_bookie_replaced_while_a_second_one_failed_is_not_counted():
    """Entry 0 on (a, b); b fails, then c fails before the change replacing b is written. Once b is replaced
    by d (and c still waits for its own change), b's late SUCCESS must not count: the metadata places entry 0
    on (a, d), and an ack on {a, b} would be closed away by a recovery that reads a and d."""
    md = LedgerMetadata(1, 3, 2, 2, (Segment(0, ("a", "b", "c")),), version=1)
    w = LedgerWriterCore(md)
    w.add(1, b"x")
    assert sorted(m.to for m in w.take_messages()) == ["a", "b"]
    w.bookie_failed("b")
    assert w.take()[2] == [NeedEnsembleChange(0, frozenset({"b"}))]
    w.bookie_failed("c")  # while the change replacing b is being written
    w.ensemble_changed(md.with_ensemble(0, ("a", "d", "c")))  # (only b replaced: c failed after it was asked)
    messages, done, requests = w.take()
    assert requests == [NeedEnsembleChange(0, frozenset({"c"}))] and messages == [] and done == []
    w.on_response(AddResponse("a", 1, 0, OK))
    w.on_response(AddResponse("b", 1, 0, OK))  # late, from the replaced bookie
    assert w.lac == -1 and w.take()[1] == []
    assert w.pending[0].write_set == ("a", "d")
    w.ensemble_changed(md.with_ensemble(0, ("a", "d", "e")))
    messages, done, _ = w.take()
    assert [m.to for m in messages] == ["d"] and done == []  # a's ack is kept: a is in the new write set
    w.on_response(AddResponse("d", 1, 0, OK))
    assert w.lac == 0 and [(d.request_id, d.code) for d in w.take()[1]] == [(1, OK)]


def test_an_entry_over_the_cap_is_refused_before_anything_is_sent_and_takes_no_entry_id():
    md = LedgerMetadata(1, 3, 2, 2, (Segment(0, ("a", "b", "c")),), version=1)
    w = LedgerWriterCore(md, max_entry_bytes=10)
    assert w.add(1, b"x" * 11) == -1
    messages, done, requests = w.take()
    assert messages == [] and requests == [] and [(d.request_id, d.code) for d in done] == \
        [(1, ResponseCode.ENTRY_TOO_LARGE)]
    assert w.add(2, b"x" * 10) == 0 and len(w.take_messages()) == 2


def test_the_ledger_entry_cap_is_below_the_journal_record_and_every_frame_cap():
    from quorumlog.bookie.journal import MAX_RECORD_BYTES
    from quorumlog.client.pool import DEFAULT_MAX_FRAME_BYTES
    from quorumlog.config import CONFIG_KEYS
    from quorumlog.transport.frames import MAX_FRAME_BYTES
    from quorumlog.wire.ledger import ENTRY_HEADER, LEDGER_ENTRY_BYTES_CEILING, MAX_LEDGER_ENTRY_BYTES

    assert MAX_LEDGER_ENTRY_BYTES <= LEDGER_ENTRY_BYTES_CEILING
    assert LEDGER_ENTRY_BYTES_CEILING + ENTRY_HEADER.size + 64 <= MAX_RECORD_BYTES
    defaults = {k.name: k.default for k in CONFIG_KEYS}
    assert LEDGER_ENTRY_BYTES_CEILING + 64 * 1024 <= min(MAX_FRAME_BYTES, defaults["max_frame_bytes"],
                                                      DEFAULT_MAX_FRAME_BYTES)  # (the node's, the client's)
    assert defaults["max_ledger_entry_bytes"] == MAX_LEDGER_ENTRY_BYTES


def test_the_client_raises_entry_too_large_and_sends_nothing():
    import asyncio
    from types import SimpleNamespace

    import pytest

    from quorumlog.client.ledgers import LedgerWriter
    from quorumlog.errors import EntryTooLarge

    async def main():
        queued = []
        md = LedgerMetadata(1, 3, 2, 2, (Segment(0, ("a", "b", "c")),), version=1)
        w = LedgerWriter(None, md, 0, SimpleNamespace(queue=lambda writer, messages: queued.extend(messages)),
                         max_entry_bytes=10)
        with pytest.raises(EntryTooLarge):
            await w.add_entry(b"x" * 11)
        assert queued == [] and w.core.next_entry == 0
    asyncio.run(main())
