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
