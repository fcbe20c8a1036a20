"""The broker's one source of wall-clock time (Kafka's `Time`), injected, never read directly.

Record timestamps (LogAppendTime), retention, producer and transaction expiry, session
timeouts and checkpoints all take `now_ms` from here. `SystemClock` reads the system clock;
`TrioClock` derives wall time from trio's clock, so a broker run under
`trio.testing.MockClock` sees wall time advance with virtual time: a test of a ten-minute
timeout then takes no time at all, and no test has to sleep.

Deadlines that only order events (purgatory timers, throttles) use trio's clock directly
(`trio.current_time()`), which MockClock already controls.
Concurrency: reads only; safe from any thread (a TrioClock is created inside its trio run).
"""

from __future__ import annotations

import time
from typing import Protocol

import trio


class Clock(Protocol):
    def wall_ms(self) -> int:
        """Milliseconds since the Unix epoch."""
        ...


class SystemClock:
    """The real wall clock."""

    def wall_ms(self) -> int:
        return int(time.time() * 1000)


class TrioClock:
    """Wall time that follows the clock of the trio run it is created in (a MockClock in tests):
    `start_ms` now, then in step. Readable from worker threads too (it keeps the run's clock)."""

    def __init__(self, start_ms: int | None = None) -> None:
        self._clock = trio.lowlevel.current_clock()
        self._start_ms = int(time.time() * 1000) if start_ms is None else start_ms
        self._start = self._clock.current_time()

    def wall_ms(self) -> int:
        return self._start_ms + int((self._clock.current_time() - self._start) * 1000)


SYSTEM_CLOCK = SystemClock()
