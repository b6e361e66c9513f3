"""Spark's topic reader builds its Arrow columns with numpy (spark/topic.py messages_batch): the same batch as
decoding each message, for any messages (properties, unicode, empty keys and tags take or skip the fast path)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from quorumlog.spark.topic import _batch_slow, messages_batch
from quorumlog.topic.message import Message, encode
from quorumlog.wire.client import PulledMessage

texts = st.text(max_size=12)
messages = st.builds(Message, st.just("flights"), st.binary(max_size=40), st.integers(0, 7), texts, texts,
                     st.one_of(st.just({}), st.dictionaries(st.text(min_size=1, max_size=4), texts, max_size=2)),
                     st.integers(0, 2**40))


@settings(max_examples=200, deadline=None)
@given(st.lists(messages, min_size=1, max_size=30))
def test_the_columnar_batch_equals_decoding_each_message(ms):
    pulled = [PulledMessage(i, 1000 + i, 2, 1_700_000_000_000 + i, encode(m)) for i, m in enumerate(ms)]
    assert messages_batch(pulled).equals(_batch_slow(pulled))
    assert messages_batch(pulled).num_rows == len(ms)
