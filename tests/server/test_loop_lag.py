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
    m.woke(400.0, cpu_wait_ms=390.0)  # late because the thread waited for a CPU
    m.woke(1.0)
    assert m.lag.max_ms == 700.0 and m.less_cpu_wait.max_ms == 700.0
    m.woke(900.0, cpu_wait_ms=100.0)
    m.woke(1.0)
    assert m.lag.max_ms == 900.0 and m.less_cpu_wait.max_ms == 800.0
    s = m.summary()
    assert s["max_ms"] == 900.0 and s["less_cpu_wait"]["max_ms"] == 800.0 and s["paused"] == 1


def test_a_sigcont_handled_before_the_stops_late_wake_still_explains_it():
    """After a stop the loop may run the SIGCONT handler before the sleeper's overdue wake (both are ready in
    the same turn): the late wake is the stop's, not lag (the e2e test saw an 800 ms stop counted as lag)."""
    m = LoopLagMonitor()
    m.woke(1.0)
    m.resumed()  # SIGCONT first ...
    m.woke(800.0)  # ... then the wake that was due during the stop
    m.woke(1.0)
    assert m.lag.paused == 1 and m.lag.max_ms == 1.0
    m.resumed()  # a SIGCONT without a stop explains nothing later
    m.woke(1.0)
    m.woke(300.0)
    m.woke(1.0)
    assert m.lag.paused == 1 and m.lag.max_ms == 300.0


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


def test_a_soak_adds_up_every_node_process_and_keeps_each_ones_latest_report():
    from quorumlog.soak.loop_lag import LoopLagTally

    def report(*lags):
        lag = LoopLag()
        for x in lags:
            lag.observe(x)
        return {**lag.summary(), "less_cpu_wait": lag.summary()}

    t = LoopLagTally()
    t.record({"n0": {"pid": 10, "loop_lag": report(1.0)}, "n1": {"pid": 11, "loop_lag": report(2.0)}})
    t.record({"n0": {"pid": 10, "loop_lag": report(1.0, 3.0)}, "n1": RuntimeError("unreachable")})
    t.record({"n0": {"pid": 12, "loop_lag": report(450.0)}})  # n0 restarted: a new process, added to the old
    f = t.figures()
    assert f["processes"] == 3 and f["samples"] == 4
    assert f["max_ms"] == 450.0 and f["over_200_ms"] == 1
    assert f["max_ms_by_node"] == {"n0": 450.0, "n1": 2.0}
    assert f["less_cpu_wait"]["max_ms"] == 450.0 and f["less_cpu_wait"]["samples"] == 4
