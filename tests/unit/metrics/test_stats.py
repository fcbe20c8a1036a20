"""Kafka's sampled rates (pybroker/metrics/stats.py): Rate's window never shorter than
samples - 1 whole windows, SimpleRate's never shorter than one, both sliding the same way."""

from __future__ import annotations

from pybroker.metrics.stats import Rate, SimpleRate


def test_simple_rate_measures_a_first_burst_over_one_window_not_ten():
    simple, rate = SimpleRate(11, 1000), Rate(11, 1000)
    for r in (simple, rate):
        r.record(1000.0, 0)
    assert simple.window_size(0) == 1000 and simple.measure(0) == 1000.0
    assert rate.window_size(0) == 10_000 and rate.measure(0) == 100.0
    # 2.5 s after the first sample started: SimpleRate counts the real span
    assert simple.window_size(2500) == 2500 and simple.measure(2500) == 400.0
    # past ten whole windows both measure the same span
    simple.record(1000.0, 10_500)
    rate.record(1000.0, 10_500)
    assert simple.measure(10_500) == rate.measure(10_500) == 2000.0 / 10.5


def test_simple_rate_forgets_samples_older_than_its_windows():
    r = SimpleRate(11, 1000)
    r.record(5000.0, 0)
    for t in range(1000, 11_000, 1000):
        r.record(100.0, t)
    # at 11 s the first sample (last event at 0) is 11 windows old: reset to start now
    assert r.measure(11_000) == 1000.0 / 10.0
    assert r.measure(30_000) == 0.0  # idle for 11 windows: nothing left


def test_a_rate_with_no_sample_measures_zero():
    assert SimpleRate(11, 1000).measure(123) == 0.0
    assert Rate(11, 1000).measure(123) == 0.0
