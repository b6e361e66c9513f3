"""Spark's topic reader builds its Arrow columns in one C pass (topic/_fastmessage.c pulled_columns), or with
numpy without it (spark/topic.py messages_batch): either gives the same batch as decoding each message, for any
messages (properties, unicode, empty keys and tags take or skip the fast paths), and an entry that is not a
readable message is refused either way."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quorumlog.spark import topic as spark_topic
from quorumlog.spark.topic import _batch_slow, messages_batch
from quorumlog.topic.message import Message, encode
from quorumlog.wire.client import PulledMessage

texts = st.text(max_size=12)
messages = st.builds(Message, st.just("flights"), st.binary(max_size=40), st.integers(0, 7), texts, texts,
                     st.one_of(st.just({}), st.dictionaries(st.text(min_size=1, max_size=4), texts, max_size=2)),
                     st.integers(0, 2**40))
PATHS = ["compiled", "numpy"]


@pytest.fixture(params=PATHS)
def path(request):
    """(the patch is the fixture's for the whole test, not per hypothesis example: nothing else changes it)"""
    if request.param == "compiled" and spark_topic.fast is None:
        pytest.skip("topic/_fastmessage.c not built")
    with pytest.MonkeyPatch.context() as mp:
        if request.param == "numpy":
            mp.setattr(spark_topic, "fast", None)
        yield request.param


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ms=st.lists(messages, min_size=1, max_size=30))
def test_the_columnar_batch_equals_decoding_each_message(path, ms):
    pulled = [PulledMessage(i, 1000 + i, 2, 1_700_000_000_000 + i, encode(m)) for i, m in enumerate(ms)]
    assert messages_batch(pulled).equals(_batch_slow(pulled))
    assert messages_batch(pulled).num_rows == len(ms)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ms=st.lists(messages, min_size=1, max_size=8), at=st.integers(0, 60), xor=st.integers(1, 255))
def test_a_damaged_entry_gives_the_same_batch_or_is_refused(path, ms, at, xor):
    bodies = [encode(m) for m in ms]
    b = bodies[-1]
    bodies[-1] = b[:at % len(b)] + bytes([b[at % len(b)] ^ xor]) + b[at % len(b) + 1:]
    pulled = [PulledMessage(i, 1000 + i, 2, 1_700_000_000_000 + i, body) for i, body in enumerate(bodies)]
    try:
        want = _batch_slow(pulled)
    except (spark_topic.OptionError, OverflowError):  # (not a message; a born timestamp past year 9999)
        with pytest.raises(Exception):
            messages_batch(pulled)
    else:
        assert messages_batch(pulled).equals(want)
