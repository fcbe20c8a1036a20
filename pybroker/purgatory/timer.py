"""One timing wheel and the one task that ticks it (Kafka's SystemTimer + reaper thread).

Every timeout in the broker (fetch max wait, produce timeout, later join/heartbeat
deadlines) is a timer on this wheel; no operation sleeps in a task of its own. The reaper
sleeps until the wheel's next deadline or until an earlier timer is added, then advances
the wheel and runs the expired callbacks.

Time: `now_ms()` reads trio's clock (monotonic, milliseconds), so tests that run under
trio's MockClock control it. Concurrency: used only from the trio thread; callbacks run
in the reaper task and must not block (they may start tasks in the nursery they hold).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import trio

from pybroker._native import timingwheel


def trio_now_ms() -> int:
    return int(trio.current_time() * 1000)


class SystemTimer:
    def __init__(self, tick_ms: int = 1, wheel_size: int = 20,
                 now_ms: Callable[[], int] = trio_now_ms) -> None:
        self._now_ms = now_ms
        self._wheel = timingwheel.TimingWheel(tick_ms, wheel_size, now_ms())
        self._wakeup = trio.Event()
        self._next_deadline: float = math.inf

    def now_ms(self) -> int:
        return self._now_ms()

    def __len__(self) -> int:
        return len(self._wheel)

    def add(self, delay_ms: int, callback: Callable[[], None]) -> int:
        """Run `callback` after `delay_ms`; returns a timer id for `cancel`."""
        deadline = self._now_ms() + max(0, int(delay_ms))
        tid: int = self._wheel.add(deadline, callback)
        if deadline < self._next_deadline:
            self._next_deadline = deadline
            self._wakeup.set()
        return tid

    def cancel(self, timer_id: int) -> bool:
        return bool(self._wheel.cancel(timer_id))

    def advance(self) -> int:
        """Expire due timers now; returns how many ran (the reaper's step, also for tests)."""
        expired = self._wheel.advance(self._now_ms())
        for callback in expired:
            callback()
        nd = self._wheel.next_deadline()
        self._next_deadline = math.inf if nd is None else nd
        return len(expired)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The reaper: the one task that ticks the wheel. Runs until cancelled."""
        task_status.started()
        while True:
            self.advance()
            self._wakeup = trio.Event()
            if self._next_deadline == math.inf:
                await self._wakeup.wait()
                continue
            delay = (self._next_deadline - self._now_ms()) / 1000.0
            if delay > 0:
                with trio.move_on_after(delay):
                    await self._wakeup.wait()
