"""Aiven's `upload.rate.limit.bytes.per.second`: every upload of one RSM shares one schedule, so
together they read (and send) at most `rate` bytes per second on average.

`acquire(n)` books the next n/rate seconds of the schedule and sleeps until its booking starts;
it is called from the copy's worker thread before each chunk is read, never on the event loop.
Thread-safe (one lock around the booking; the sleep is outside it).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class RateLimiter:
    def __init__(self, rate: int, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.rate = rate
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._next_free = clock()

    def acquire(self, n: int) -> None:
        with self._lock:
            now = self._clock()
            start = max(now, self._next_free)
            self._next_free = start + n / self.rate
        if start > now:
            self._sleep(start - now)


__all__ = ["RateLimiter"]
