"""How idle the event loop is: pybroker's equivalent of Kafka's idle-percent metrics.

Kafka has network threads (NetworkProcessorAvgIdlePercent) and request handler threads
(RequestHandlerAvgIdlePercent); pybroker has one trio event loop doing both jobs, so both
metrics report the fraction of wall time the loop's thread did *not* spend on the CPU: waiting in
epoll for I/O, or for the GIL or a core. It is read from the thread's own CPU clock
(`time.thread_time()`, CLOCK_THREAD_CPUTIME_ID) at scrape time, on the loop's thread, so it costs
the request path nothing. (A trio instrument timing each I/O wait was tried first: it cost
~1 µs per scheduler batch, a few percent of a small request.)

Value semantics, as Strimzi exports the two metrics:
- RequestHandlerAvgIdlePercent is a Kafka Meter whose MeanRate Strimzi exports: the idle
  fraction since start (`idle_fraction_since_start`).
- NetworkProcessorAvgIdlePercent is a windowed average in Kafka (two 30 s samples); here the idle
  fraction over the last 30-60 s, sampled at scrapes (`windowed_idle_fraction`), or since start
  until a scrape 30 s old exists.
Both are fractions in [0, 1], as Kafka's are despite the name. `idle_seconds()` is also exported
as a counter (pybroker_eventloop_idle_seconds_total), so Prometheus can take any window.

Concurrency: create it and call every method on the trio thread (the CPU clock is per thread).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

WINDOW_S = 30.0


class EventLoopIdle:
    def __init__(self, wall: Callable[[], float] = time.perf_counter,
                 cpu: Callable[[], float] = time.thread_time) -> None:
        self._wall = wall
        self._cpu = cpu
        self.started = wall()
        self._cpu_started = cpu()
        self._samples: deque[tuple[float, float]] = deque([(self.started, 0.0)])

    def _now(self) -> tuple[float, float]:
        """(wall seconds, idle seconds) since start."""
        now = self._wall()
        busy = self._cpu() - self._cpu_started
        return now, max(0.0, (now - self.started) - busy)

    def idle_seconds(self) -> float:
        return self._now()[1]

    def idle_fraction_since_start(self) -> float:
        now, idle = self._now()
        elapsed = now - self.started
        return min(1.0, idle / elapsed) if elapsed > 0 else 1.0

    def windowed_idle_fraction(self) -> float:
        """Idle fraction since the newest sample at least WINDOW_S old (one sample per call)."""
        now, idle = self._now()
        samples = self._samples
        samples.append((now, idle))
        while len(samples) > 2 and samples[1][0] <= now - WINDOW_S:
            samples.popleft()
        t0, idle0 = samples[0]
        elapsed = now - t0
        return max(0.0, min(1.0, (idle - idle0) / elapsed)) if elapsed > 0 else 1.0
