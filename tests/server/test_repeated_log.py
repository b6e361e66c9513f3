"""RepeatedLog: a warning that repeats while its condition lasts is logged once per period, with a count."""

import logging

from quorumlog.server import repeated_log
from quorumlog.server.repeated_log import RepeatedLog


def test_a_repeating_line_is_logged_once_per_period_with_the_count_it_stood_for(caplog, monkeypatch):
    now = [100.0]
    monkeypatch.setattr(repeated_log.time, "monotonic", lambda: now[0])
    logger = logging.getLogger("test.repeated")
    rl = RepeatedLog(logger, every_s=10)
    caplog.set_level(logging.DEBUG, logger="test.repeated")
    for i in range(5):
        rl.log("full", logging.ERROR, "store failed n=%d", i)
        now[0] += 1
    rl.log("other", logging.WARNING, "a different condition")  # its own key: logged at once
    now[0] = 111.0
    rl.log("full", logging.ERROR, "store failed n=%d", 5)
    at_level = [(r.levelno, r.getMessage()) for r in caplog.records if r.levelno > logging.DEBUG]
    assert at_level == [(logging.ERROR, "store failed n=0"), (logging.WARNING, "a different condition"),
                        (logging.ERROR, "store failed n=5 (and 4 more like it in the last 11 s)")]
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG] == \
        ["store failed n=%d" % i for i in range(1, 5)]
