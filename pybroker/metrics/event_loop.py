"""How idle the event loop is: pybroker's equivalent of Kafka's idle-percent metrics.

Kafka has network threads (NetworkProcessorAvgIdlePercent) and request handler threads
(RequestHandlerAvgIdlePercent); pybroker has one trio event loop doing both jobs, so both
metrics report the fraction of time the loop waited for I/O with nothing to run. A trio
instrument times each wait: `before_io_wait` / `after_io_wait` are called once per scheduler
batch, and only waits with a timeout > 0 count (a zero timeout means tasks were ready: a poll,
not idleness). The cost is two calls and two clock reads per batch, and only while the metrics
endpoint is on.

Value semantics, as Strimzi exports the two metrics:
- RequestHandlerAvgIdlePercent is a Kafka Meter whose MeanRate Strimzi exports: the idle
  fraction since start (`idle_fraction_since_start`).
- NetworkProcessorAvgIdlePercent is a windowed average in Kafka (two 30 s samples); here the idle
  fraction over the last 30-60 s, sampled at scrapes (`windowed_idle_fraction`), or since start
  until a scrape 30 s old exists.
Both are fractions in [0, 1], as Kafka's are despite the name. `idle_seconds` is also exported
as a counter (pybroker_eventloop_idle_seconds_total), so Prometheus can take any window.

Concurrency: the instrument runs on the trio thread; the read methods are called there too.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

import trio

WINDOW_S = 30.0


class EventLoopIdle(trio.abc.Instrument):
    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self.started = clock()
        self.idle_seconds = 0.0
        self._wait_start: float | None = None
        self._samples: deque[tuple[float, float]] = deque([(self.started, 0.0)])

    def before_io_wait(self, timeout: float) -> None:
        self._wait_start = self._clock() if timeout > 0 else None

    def after_io_wait(self, timeout: float) -> None:
        if self._wait_start is not None:
            self.idle_seconds += self._clock() - self._wait_start
            self._wait_start = None

    def idle_fraction_since_start(self) -> float:
        elapsed = self._clock() - self.started
        return min(1.0, self.idle_seconds / elapsed) if elapsed > 0 else 1.0

    def windowed_idle_fraction(self) -> float:
        """Idle fraction since the newest sample at least WINDOW_S old (one sample per call)."""
        now = self._clock()
        samples = self._samples
        samples.append((now, self.idle_seconds))
        while len(samples) > 2 and samples[1][0] <= now - WINDOW_S:
            samples.popleft()
        t0, idle0 = samples[0]
        elapsed = now - t0
        return min(1.0, (self.idle_seconds - idle0) / elapsed) if elapsed > 0 else 1.0
