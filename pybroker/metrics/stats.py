"""Sampled rates (Kafka's org.apache.kafka.common.metrics.stats Rate and SimpleRate over a
WindowedSum), shared by the client quotas (server/quota.py) and the replication throttles
(replication/replication_quota_manager.py).

A rate keeps `num_samples` windows of `window_ms` each (plus Kafka's extra overlapping one).
Recording adds to the current sample, starting a new one when the current is `window_ms` old.
A sample whose last event is `num_samples * window_ms` old is reset. The rate is the sum of
the samples over a window size in seconds, and the two classes differ only in that size:

- `Rate` (client quotas): now - oldest sample start, but never less than `num_samples - 1`
  whole windows, so a burst right after start-up is measured over 10 s, not over the few ms
  it took.
- `SimpleRate` (replication quotas): now - oldest sample start, but never less than one window.

Worked example, 11 x 1 s, 1000 bytes recorded at t=0 and measured at t=0: `Rate` gives
1000 / 10 s = 100 B/s, `SimpleRate` 1000 / 1 s = 1000 B/s; measured at t=10.5 s both give
1000 / 10.5 s.

Time is passed in (`now_ms`, milliseconds of any monotonic clock). Concurrency: one thread.
"""

from __future__ import annotations

__all__ = ["Rate", "SimpleRate"]


class Rate:
    """Kafka's Rate(WindowedSum) with its MetricConfig: per-second rate over sampled windows.

    Samples are [start_ms, last_event_ms, value]; num_samples + 1 are kept (Kafka's extra
    "overlapping" placeholder)."""

    __slots__ = ("samples", "current", "num_samples", "window_ms", "last_record_ms")

    def __init__(self, num_samples: int, window_ms: int) -> None:
        self.samples: list[list[float]] = []
        self.current = 0
        self.num_samples = num_samples
        self.window_ms = window_ms
        self.last_record_ms = 0

    def record(self, value: float, now_ms: int) -> None:
        if not self.samples:
            self.samples.append([now_ms, now_ms, 0.0])
        sample = self.samples[self.current]
        if now_ms - sample[0] >= self.window_ms:
            self.current = (self.current + 1) % (self.num_samples + 1)
            if self.current >= len(self.samples):
                sample = [now_ms, now_ms, 0.0]
                self.samples.append(sample)
            else:
                sample = self.samples[self.current]
                sample[0], sample[1], sample[2] = now_ms, now_ms, 0.0
        sample[2] += value
        sample[1] = now_ms
        self.last_record_ms = now_ms

    def _purge(self, now_ms: int) -> None:
        expire_age = self.num_samples * self.window_ms
        for s in self.samples:
            if now_ms - s[1] >= expire_age:
                s[0], s[1], s[2] = now_ms, now_ms, 0.0

    def _elapsed(self, now_ms: int) -> int:
        """now - the oldest sample's start, after purging (Kafka's stat.oldest(now))."""
        self._purge(now_ms)
        if not self.samples:
            self.samples.append([now_ms, now_ms, 0.0])
        return int(now_ms - min(s[0] for s in self.samples))

    def window_size(self, now_ms: int) -> int:
        elapsed = self._elapsed(now_ms)
        full_windows = int(elapsed // self.window_ms)
        min_full = self.num_samples - 1
        if full_windows < min_full:
            elapsed += (min_full - full_windows) * self.window_ms
        return max(int(elapsed), 1)

    def measure(self, now_ms: int) -> float:
        """Per second."""
        self._purge(now_ms)
        total = sum(s[2] for s in self.samples)
        return total / (self.window_size(now_ms) / 1000.0)


class SimpleRate(Rate):
    """Kafka's SimpleRate: the window is the time since the oldest sample started, at least one
    whole window (the replication quotas' measure)."""

    __slots__ = ()

    def window_size(self, now_ms: int) -> int:
        return max(self._elapsed(now_ms), self.window_ms)
