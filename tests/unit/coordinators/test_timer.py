"""PurgatoryTimer on a real SystemTimer (native timing wheel) with an injected clock.

Rescheduling a key is lazy (the old wheel entry stays, and re-arms itself when it fires
early); what callers see must be exactly a keyed deadline: the latest schedule of a key
replaces the earlier one, its operation runs once, at its deadline, unless cancelled.
Checked against that model for random sequences of schedules, cancels and clock moves."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pybroker.coordinators.timer import PurgatoryTimer
from pybroker.purgatory.purgatory import DelayedOperationPurgatory
from pybroker.purgatory.timer import SystemTimer


class Clock:
    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        return self.now


def make_timer() -> tuple[Clock, PurgatoryTimer, SystemTimer, list[tuple[str, int, int]]]:
    clock = Clock()
    system_timer = SystemTimer(now_ms=clock)
    ran: list[tuple[str, int, int]] = []  # (key, tag of the operation, time it ran)
    timer = PurgatoryTimer(DelayedOperationPurgatory("test", system_timer), clock, lambda _r: None)
    timer.resume()
    return clock, timer, system_timer, ran


def op(ran: list, key: str, tag: int):
    def run(now: int) -> None:
        ran.append((key, tag, now))
    return run


def test_reschedule_later_moves_the_deadline_without_a_new_wheel_entry():
    clock, timer, wheel, ran = make_timer()
    timer.schedule("k", 100, op(ran, "k", 1), kind="heartbeat")
    for t in (1_020, 1_040, 1_060, 1_080):
        clock.now = t
        wheel.advance()
        timer.schedule("k", 100, op(ran, "k", t), kind="heartbeat")
        assert len(wheel) == 1 and len(timer) == 1
    clock.now = 1_100  # the first deadline: re-arms instead of running
    wheel.advance()
    assert ran == [] and timer.is_scheduled("k") and len(wheel) == 1
    clock.now = 1_179
    wheel.advance()
    assert ran == []
    clock.now = 1_180
    wheel.advance()
    assert ran == [("k", 1_080, 1_180)]
    assert not timer.is_scheduled("k") and len(timer) == 0 and len(wheel) == 0


def test_reschedule_earlier_replaces_the_operation():
    clock, timer, wheel, ran = make_timer()
    timer.schedule("k", 500, op(ran, "k", 1), kind="heartbeat")
    timer.schedule("k", 100, op(ran, "k", 2), kind="heartbeat")
    assert len(wheel) == 1
    clock.now = 1_100
    wheel.advance()
    assert ran == [("k", 2, 1_100)]
    clock.now = 2_000
    wheel.advance()
    assert ran == [("k", 2, 1_100)] and len(wheel) == 0


def test_cancel_after_a_lazy_reschedule():
    clock, timer, wheel, ran = make_timer()
    timer.schedule("k", 100, op(ran, "k", 1), kind="heartbeat")
    clock.now = 1_050
    timer.schedule("k", 100, op(ran, "k", 2), kind="heartbeat")
    clock.now = 1_100
    wheel.advance()  # re-armed for 1_150
    timer.cancel("k")
    clock.now = 1_200
    wheel.advance()
    assert ran == [] and len(wheel) == 0 and not timer.is_scheduled("k")


def test_an_operation_with_a_condition_is_never_rescheduled_lazily():
    clock, timer, wheel, ran = make_timer()
    ready = [False]
    timer.schedule("join", 100, op(ran, "join", 1), kind="join", try_complete=lambda: ready[0])
    timer.schedule("join", 200, op(ran, "join", 2), kind="join", try_complete=lambda: ready[0])
    ready[0] = True
    timer.check("join")
    assert ran == [("join", 2, 1_000)] and len(wheel) == 0


KEYS = ["a", "b", "c"]
steps = st.lists(st.one_of(
    st.tuples(st.just("schedule"), st.sampled_from(KEYS), st.integers(0, 300), st.sampled_from(["heartbeat", "task"])),
    st.tuples(st.just("cancel"), st.sampled_from(KEYS)),
    st.tuples(st.just("advance"), st.integers(0, 250)),
), max_size=40)


@settings(max_examples=150, deadline=None)
@given(steps)
def test_behaves_as_keyed_deadlines(program):
    clock, timer, wheel, ran = make_timer()
    model: dict[str, tuple[int, int]] = {}  # key -> (deadline, tag)
    expected: list[tuple[str, int, int]] = []
    for tag, step in enumerate(program):
        if step[0] == "schedule":
            _, key, delay, kind = step
            timer.schedule(key, delay, op(ran, key, tag), kind=kind)
            model[key] = (clock.now + delay, tag)
        elif step[0] == "cancel":
            timer.cancel(step[1])
            model.pop(step[1], None)
        else:
            clock.now += step[1]
            wheel.advance()
            for key, (deadline, t) in list(model.items()):
                if deadline <= clock.now:
                    expected.append((key, t, clock.now))
                    del model[key]
        assert sorted(ran) == sorted(expected)
        assert {k for k in KEYS if timer.is_scheduled(k)} == set(model)
        assert len(timer) == len(model) == len(wheel)
