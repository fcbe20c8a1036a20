"""Timing wheel: native and pure against a heapq oracle over random add/cancel/advance runs.

The oracle is the specification: advance(now) returns exactly the pending items with
deadline <= now, ordered by (deadline, id); next_deadline() is a lower bound of the
earliest pending deadline. The twins must also agree with each other on next_deadline.
"""

import heapq

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

TWIN = "timingwheel"


class HeapOracle:
    def __init__(self):
        self.heap = []
        self.pending = {}
        self.next_id = 1

    def add(self, deadline, item):
        timer_id = self.next_id
        self.next_id += 1
        self.pending[timer_id] = (deadline, item)
        heapq.heappush(self.heap, (deadline, timer_id))
        return timer_id

    def cancel(self, timer_id):
        return self.pending.pop(timer_id, None) is not None

    def advance(self, now):
        out = []
        while self.heap and self.heap[0][0] <= now:
            _, timer_id = heapq.heappop(self.heap)
            entry = self.pending.pop(timer_id, None)
            if entry is not None:
                out.append(entry[1])
        return out

    def earliest(self):
        return min((d for d, _ in self.pending.values()), default=None)


delay = st.one_of(st.integers(-30, 30), st.integers(0, 2_000), st.integers(0, 10**7),
                  st.integers(0, 10**15))
op = st.one_of(
    st.tuples(st.just("add"), delay),
    st.tuples(st.just("cancel"), st.integers(0, 60)),
    st.tuples(st.just("advance"), st.sampled_from([0, 1, 2, 5, 19, 20, 21, 399, 400, 5_000,
                                                   10**6, 10**9])),
)


@settings(max_examples=150, deadline=None)
@given(tick=st.sampled_from([1, 1, 2, 7, 10]), wheel_size=st.sampled_from([2, 3, 8, 20, 64]),
       start=st.integers(0, 10**6), ops=st.lists(op, max_size=200))
def test_random_runs_match_oracle(twins, tick, wheel_size, start, ops):
    native_mod, pure_mod = twins
    wheels = [native_mod.TimingWheel(tick, wheel_size, start),
              pure_mod.TimingWheel(tick, wheel_size, start)]
    oracle = HeapOracle()
    now = start
    for kind, arg in ops:
        if kind == "add":
            deadline = now + arg
            ids = {w.add(deadline, ("item", deadline)) for w in wheels}
            assert ids == {oracle.add(deadline, ("item", deadline))}
        elif kind == "cancel":
            expected = oracle.cancel(arg)
            assert [w.cancel(arg) for w in wheels] == [expected, expected]
        else:
            now += arg
            expected = oracle.advance(now)
            assert [w.advance(now) for w in wheels] == [expected, expected]
        assert [len(w) for w in wheels] == [len(oracle.pending)] * 2
        hints = [w.next_deadline() for w in wheels]
        assert hints[0] == hints[1]
        earliest = oracle.earliest()
        if earliest is None:
            assert hints[0] is None
        else:
            assert hints[0] is not None and hints[0] <= earliest


@settings(max_examples=30, deadline=None)
@given(deadlines=st.lists(st.integers(0, 10**5), min_size=1, max_size=3000))
def test_many_timers_and_exact_next_deadline(twins, deadlines):
    """Without cancels the hint is exact, and advancing to it fires the earliest timer."""
    for mod in twins:
        wheel = mod.TimingWheel()
        for i, d in enumerate(deadlines):
            wheel.add(d, i)
        fired = []
        while len(wheel):
            hint = wheel.next_deadline()
            batch = wheel.advance(hint)
            assert batch and all(deadlines[i] == hint for i in batch)
            fired += batch
        assert fired == sorted(range(len(deadlines)), key=lambda i: (deadlines[i], i))


def test_cancel_heavy_workload_keeps_heap_small(twins):
    """Request timeouts that complete early: add + cancel, over and over."""
    for mod in twins:
        wheel = mod.TimingWheel(1, 20, 0)
        for now in range(0, 20_000):
            timer_id = wheel.add(now + 30_000, now)
            assert wheel.cancel(timer_id)
            assert not wheel.cancel(timer_id)
            if now % 100 == 0:
                assert wheel.advance(now) == []
        assert len(wheel) == 0 and wheel.next_deadline() is None


@pytest.mark.parametrize("args", [(0,), (1, 1), (1, 20, -1), (1.5,), (1, 2**21)])
def test_bad_constructor_arguments(twins, args):
    native_mod, pure_mod = twins
    errors = []
    for mod in twins:
        with pytest.raises((ValueError, TypeError)) as info:
            mod.TimingWheel(*args)
        errors.append(info.type)
    assert errors[0] is errors[1]


def test_out_of_range_deadline(twins):
    for mod in twins:
        wheel = mod.TimingWheel()
        with pytest.raises(OverflowError):
            wheel.add(1 << 63, None)
        timer_id = wheel.add((1 << 63) - 1, "far")
        assert wheel.next_deadline() == (1 << 63) - 1
        assert wheel.advance((1 << 63) - 1) == ["far"] and timer_id == 1
