"""The registry of a node's metrics: providers that read the broker's own numbers at scrape time.

Nothing here runs on the request path. The broker's objects keep their numbers where they work
(plain ints on a `TopicStats` slot, a purgatory's watch lists, the group coordinator's groups);
a *provider* is a function that reads some of them and returns metric `Family`s, plain data
that can cross to another thread. `snapshot()` calls every provider on the trio thread, so each
reads the broker's state between two task steps, without locks; prometheus.py formats the
families elsewhere. A provider over something large (10,000 partitions) is a coroutine that
checkpoints every few hundred items, so a scrape never holds the loop for long; it must then
re-check what it reads after each checkpoint (a partition may have gone meanwhile).

A `Family` is named as Prometheus exposes it (the names Strimzi's JMX-exporter rules give Kafka's
MBeans), with one kind:
- "counter": samples are (label values, number); the name ends in `_total`.
- "gauge": samples are (label values, number).
- "summary": samples are (label values, HistogramSnapshot); exposed as Strimzi renders Kafka's
  histograms: `name{quantile="0.50"}` ... `{quantile="0.999"}` and `name_count`, plus `name_sum`
  (Strimzi's rules omit it; it lets Prometheus compute means).

Concurrency: `add` at start-up, `snapshot` on the trio thread.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("pybroker.metrics")


@dataclass(slots=True)
class Family:
    name: str
    kind: str  # "counter" | "gauge" | "summary"
    help: str
    labels: tuple[str, ...] = ()
    samples: list[tuple[tuple[str, ...], Any]] = field(default_factory=list)

    def add(self, value: Any, *label_values: str) -> Family:
        self.samples.append((label_values, value))
        return self


def gauge(name: str, help: str, value: float) -> Family:
    return Family(name, "gauge", help).add(value)


def counter(name: str, help: str, value: float) -> Family:
    return Family(name, "counter", help).add(value)


Provider = Callable[[], Sequence[Family] | Awaitable[Sequence[Family]]]


class MetricsRegistry:
    def __init__(self) -> None:
        self._providers: list[Provider] = []

    def add(self, provider: Provider) -> None:
        self._providers.append(provider)

    async def snapshot(self) -> list[Family]:
        """Every provider's families. A failing provider is logged and left out of this scrape:
        a bug in one metric must not take the endpoint (or the broker) down."""
        out: list[Family] = []
        for provider in self._providers:
            try:
                result = provider()
                out.extend(await result if inspect.isawaitable(result) else result)
            except Exception:
                log.exception("metrics provider %s failed", getattr(provider, "__qualname__", provider))
        return out
