"""The record formats every layer shares, at the bottom of the house: it imports nothing of ours.

`log_entry` is the replicated log's entry layout (docs/interfaces.md "Entry on disk"), with `_fastcodec.c`, its
optional compiled hot loop, beside it. The store writes it, the transport carries it unchanged, the client and
the Spark source decode it. The formats still to come live here too: RocketMQ's message layout inside an
entry (topics) and the bookies' ledger entries.
"""
