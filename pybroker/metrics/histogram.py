"""A Kafka-style histogram: the latest samples in a fixed ring, percentiles computed at read.

Format: the last `RESERVOIR_SIZE` (1024) values in a ring of C doubles (`array('d')`), plus the
count and the sum of every value since start. `update(v)` writes one slot in place: nothing is
allocated per sample beyond the float the caller already made.

Percentiles are Yammer's `Snapshot.getValue` (Kafka's histograms are Yammer histograms): sort the
retained values, take position q * (n + 1), interpolate between its neighbours; 0 when empty.
The quantiles exported are Kafka's 50/75/95/98/99/999thPercentile attributes, labelled the way
Strimzi's JMX-exporter rules render them (`quantile="0.50"` ... `quantile="0.999"`).

**Deliberate difference:** Kafka's histograms keep an exponentially decaying reservoir (1028
samples, biased towards the last ~5 minutes); this one keeps the last 1024 samples (Dropwizard's
SlidingWindowReservoir). Under steady traffic both describe the recent past; for a rarely used API
the window reaches further back. Values are float milliseconds where Kafka rounds to whole ones,
so sub-millisecond requests do not all read 0.

Concurrency: `update` runs on the trio thread; `snapshot` copies there too (a plain copy of the
ring, ~1 µs), and the copy's percentiles are computed wherever the scrape is formatted.
"""

from __future__ import annotations

from array import array

RESERVOIR_SIZE = 1024
MASK = RESERVOIR_SIZE - 1
# Kafka's percentile attributes (50thPercentile ... 999thPercentile) as Strimzi labels them: "0.$N"
QUANTILES: tuple[tuple[str, float], ...] = (
    ("0.50", 0.50), ("0.75", 0.75), ("0.95", 0.95), ("0.98", 0.98), ("0.99", 0.99), ("0.999", 0.999))


def new_ring() -> array[float]:
    return array("d", bytes(8 * RESERVOIR_SIZE))


class HistogramSnapshot:
    """A copy of a histogram taken at one instant; safe to read from any thread."""

    __slots__ = ("values", "count", "sum")

    def __init__(self, values: array[float], count: int, total: float) -> None:
        self.values = values  # the retained samples, unsorted
        self.count = count
        self.sum = total

    def quantiles(self) -> list[tuple[str, float]]:
        """(label, value) for each of QUANTILES (Yammer's interpolation; 0.0 when empty)."""
        ordered = sorted(self.values)
        n = len(ordered)
        out = []
        for label, q in QUANTILES:
            if n == 0:
                out.append((label, 0.0))
                continue
            pos = q * (n + 1)
            if pos < 1:
                value = ordered[0]
            elif pos >= n:
                value = ordered[-1]
            else:
                lower = ordered[int(pos) - 1]
                value = lower + (pos - int(pos)) * (ordered[int(pos)] - lower)
            out.append((label, value))
        return out


def snapshot_ring(ring: array[float], count: int, total: float) -> HistogramSnapshot:
    """Copy the filled part of a ring written as `ring[count & MASK] = v; count += 1`."""
    return HistogramSnapshot(ring[:min(count, RESERVOIR_SIZE)], count, total)


class Histogram:
    """One histogram (e.g. Kafka's LogFlushRateAndTimeMs)."""

    __slots__ = ("values", "count", "sum")

    def __init__(self) -> None:
        self.values = new_ring()
        self.count = 0
        self.sum = 0.0

    def update(self, value: float) -> None:
        self.values[self.count & MASK] = value
        self.count += 1
        self.sum += value

    def snapshot(self) -> HistogramSnapshot:
        return snapshot_ring(self.values, self.count, self.sum)
