"""The loop lag accounting and its pause rule, driven by explicit wakes (no clock)."""

from quorumlog.server.loop_lag import LoopLag, LoopLagMonitor, merge_buckets, quantile_ms


def test_a_late_wake_is_counted_one_wake_later_unless_a_sigcont_explains_it():
    seen = []
    paused = []
    m = LoopLagMonitor(seen.append, lambda: paused.append(1))
    m.woke(1.0)
    m.woke(700.0)  # late: held
    assert seen == [0.001]
    m.woke(0.5)  # no SIGCONT came: it was the loop's own stall
    assert seen == [0.001, 0.7, 0.0005] and m.lag.max_ms == 700.0
    m.woke(5_000.0)  # the process was stopped for 5 s ...
    m.resumed()  # ... and SIGCONT arrived
    m.woke(2.0)
    assert m.lag.paused == 1 and paused == [1]
    assert m.lag.max_ms == 700.0 and m.lag.samples == 4


def test_quantiles_come_from_the_fine_buckets_and_add_up_across_processes():
    a, b = LoopLag(), LoopLag()
    for _ in range(998):
        a.observe(0.4)
    a.observe(37.2)
    b.observe(250.0)
    s = a.summary()
    assert s["max_ms"] == 37.2 and s["p99_ms"] == 1.0 and s["p999_ms"] == 37.2
    both = merge_buckets([a.buckets(), b.buckets()])
    assert sum(both.values()) == 1000
    assert quantile_ms(both, 0.999, 250.0) == 38.0
    assert quantile_ms(both, 1.0, 250.0) == 250.0
    assert quantile_ms({}, 0.999, 0.0) == 0.0
