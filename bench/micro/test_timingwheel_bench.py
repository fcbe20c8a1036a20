"""Purgatory load: add 10k timers, cancel 90% (requests completed early), advance through
the rest. native/pure wheels vs a heapq with lazy deletion (trio-style)."""

import heapq

import pytest
from _impls import impl_module

N = 10_000


class HeapTimers:
    def __init__(self):
        self.heap = []
        self.live = {}
        self.next_id = 1

    def add(self, deadline, item):
        timer_id = self.next_id
        self.next_id += 1
        self.live[timer_id] = item
        heapq.heappush(self.heap, (deadline, timer_id))
        return timer_id

    def cancel(self, timer_id):
        return self.live.pop(timer_id, None) is not None

    def advance(self, now):
        out = []
        while self.heap and self.heap[0][0] <= now:
            _, timer_id = heapq.heappop(self.heap)
            item = self.live.pop(timer_id, None)
            if item is not None:
                out.append(item)
        return out


def workload(wheel):
    ids = [wheel.add(30_000 + (i * 37) % 5_000, i) for i in range(N)]
    for timer_id in ids[: N * 9 // 10]:
        wheel.cancel(timer_id)
    fired = 0
    for now in range(0, 40_000, 100):
        fired += len(wheel.advance(now))
    return fired


@pytest.mark.parametrize("impl", ["native", "pure", "library"])
def test_timers(benchmark, impl):
    benchmark.group = "timers add10k/cancel9k/advance"
    if impl == "library":
        make = HeapTimers
    else:
        mod = impl_module("timingwheel", impl)
        make = mod.TimingWheel
    assert benchmark(lambda: workload(make())) == N // 10


PENDING = 100_000


def loaded(make):
    """A timer structure with 10^5 pending timers spread over 30..90 s (a busy purgatory)."""
    wheel = make()
    for i in range(PENDING):
        wheel.add(30_000 + (i * 7919) % 60_000, i)
    return wheel


def make_impl(impl):
    return HeapTimers if impl == "library" else impl_module("timingwheel", impl).TimingWheel


@pytest.mark.parametrize("impl", ["native", "pure", "library"])
def test_add_cancel_with_1e5_pending(benchmark, impl):
    """One request parked and completed early: add a timer, cancel it, 10^5 others pending."""
    benchmark.group = "add+cancel with 1e5 pending"
    wheel = loaded(make_impl(impl))
    deadlines = iter(range(10**9))

    def step():
        wheel.cancel(wheel.add(20_000 + next(deadlines) % 5_000, None))

    benchmark(step)
    assert len(wheel) == PENDING if impl != "library" else len(wheel.live) == PENDING


@pytest.mark.parametrize("impl", ["native", "pure", "library"])
def test_advance_1ms_with_1e5_pending(benchmark, impl):
    """The reaper's tick: advance 1 ms at a time through a window where ~1.7 timers/ms expire."""
    benchmark.group = "advance 1 ms with 1e5 pending"
    now = iter(range(30_000, 10**9))

    def setup():
        return (loaded(make_impl(impl)),), {}

    def step(wheel):
        for _ in range(100):
            wheel.advance(next(now))

    benchmark.pedantic(step, setup=setup, rounds=20, iterations=1)
