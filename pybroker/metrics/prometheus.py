"""The Prometheus endpoint: `GET /metrics` over HTTP on `metrics.listener`, served by prometheus_client.

Threads and the event loop (why this shape): prometheus_client's WSGI server runs in its own
thread, one more thread per scrape, and formats the exposition there, so rendering tens of
thousands of samples (10,000 partitions: ~0.5 s of CPU) never runs on the event loop. What it
formats, though, is read *on* the loop: the scrape thread asks the loop for
`MetricsRegistry.snapshot()` through `trio.from_thread.run`, and the providers copy the broker's
numbers into plain `Family` data in task steps of their own (250 partitions, ~1.2 ms per step).
So no broker structure (dicts of partitions, purgatory watch lists, group maps) is ever read
while the loop mutates it, no lock is needed, and the request path never sees
prometheus_client. (Reading those structures from the scrape thread would mostly work under the
GIL, but a dict resized mid-iteration raises, and a partition could be read half-updated.)
Percentiles are sorted, and text encoded, in the scrape thread. Process metrics (process_*) and
/proc/self/io come from that thread too: they read only the kernel. The price of a thread: while
it formats, it shares the GIL with the loop, whose steps may then wait up to the 5 ms switch
interval.

The listener is `http://host:port` (port 0 picks a free port; `[::1]` for IPv6); the bound
address is logged as "serving Prometheus metrics on http://host:port/metrics" once bound.
(Not "listening on": harnesses find the Kafka port by that phrase.) It binds before the logs
load, so a port in use is a start-up error and a scrape during recovery already answers with
`kafka_server_kafkaserver_brokerstate 2`.

Any path answers with the metrics (prometheus_client's WSGI app), `?name[]=` filters them, and
`Accept: application/openmetrics-text` gets OpenMetrics. Shutdown stops the HTTP thread within
`POLL_INTERVAL_S`; a scrape in flight when the loop has ended answers with the thread-side
metrics only.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import BaseServer
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

import trio
from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    CollectorRegistry,
    make_wsgi_app,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from pybroker.metrics.histogram import HistogramSnapshot
from pybroker.metrics.registry import Family, MetricsRegistry

log = logging.getLogger("pybroker.metrics")

POLL_INTERVAL_S = 0.1


def to_prometheus(f: Family) -> Metric:
    """A registry Family as prometheus_client's metric object."""
    if f.kind == "counter":
        c = CounterMetricFamily(f.name, f.help, labels=f.labels)
        for values, v in f.samples:
            c.add_metric(values, v)
        return c
    if f.kind == "gauge":
        g = GaugeMetricFamily(f.name, f.help, labels=f.labels)
        for values, v in f.samples:
            g.add_metric(values, v)
        return g
    # Strimzi's rendering of a Kafka histogram: quantile gauges + _count, with _sum added
    m = Metric(f.name, f.help, "summary")
    for values, snap in f.samples:
        assert isinstance(snap, HistogramSnapshot)
        labels = dict(zip(f.labels, values, strict=True))
        for q, v in snap.quantiles():
            m.add_sample(f.name, {**labels, "quantile": q}, v)
        m.add_sample(f"{f.name}_count", labels, snap.count)
        m.add_sample(f"{f.name}_sum", labels, snap.sum)
    return m


class SnapshotCollector(Collector):
    """prometheus_client's view of a MetricsRegistry: each scrape takes one snapshot on the loop."""

    def __init__(self, take_snapshot: Callable[[], list[Family]]) -> None:
        self._take = take_snapshot

    def collect(self) -> Iterable[Metric]:
        try:
            families = self._take()
        except (trio.RunFinishedError, trio.Cancelled):
            return  # the node has stopped: only the thread-side metrics remain
        for f in families:
            yield to_prometheus(f)


class LinuxIoCollector(Collector):
    """Kafka's KafkaServer linux-disk-read-bytes / linux-disk-write-bytes gauges (/proc/self/io:
    bytes this process made the block layer read and write). Read in the scrape thread."""

    def collect(self) -> Iterable[Metric]:
        try:
            with open("/proc/self/io") as f:
                fields = dict(line.split(": ", 1) for line in f.read().splitlines() if ": " in line)
        except OSError:
            return
        for key, name in (("read_bytes", "read"), ("write_bytes", "write")):
            if key in fields:
                yield GaugeMetricFamily(f"kafka_server_kafkaserver_linux_disk_{name}_bytes",
                                        f"bytes this process caused to be {name} from storage (/proc/self/io)",
                                        value=int(fields[key]))


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass  # one line per scrape on stderr would drown the broker's log


def _server_class(host: str) -> type[ThreadingWSGIServer]:
    class Server(ThreadingWSGIServer):
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        allow_reuse_address = True
    return Server


class MetricsServer:
    """The HTTP endpoint of one node's metrics; `serve` runs it as a task of the broker's nursery."""

    def __init__(self, host: str, port: int, registry: MetricsRegistry) -> None:
        self.host = host
        self.port = port
        self.registry = registry
        self.url: str | None = None  # http://host:port/metrics once bound
        self.bound_port: int | None = None
        self._httpd: BaseServer | None = None

    def _collectors(self, token: trio.lowlevel.TrioToken) -> CollectorRegistry:
        reg = CollectorRegistry(auto_describe=False)  # one per node: an EmbeddedBroker's test process may run several
        reg.register(SnapshotCollector(lambda: trio.from_thread.run(self.registry.snapshot, trio_token=token)))
        reg.register(LinuxIoCollector())
        ProcessCollector(registry=reg)
        reg.register(PLATFORM_COLLECTOR)
        reg.register(GC_COLLECTOR)
        return reg

    def _bind(self, app: Any) -> BaseServer:
        # in a worker thread: HTTPServer.server_bind looks the host name up (getfqdn)
        return make_server(self.host, self.port, app, _server_class(self.host), handler_class=_QuietHandler)

    async def serve(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        app = make_wsgi_app(self._collectors(trio.lowlevel.current_trio_token()))
        httpd = self._httpd = await trio.to_thread.run_sync(self._bind, app)
        host, port = httpd.socket.getsockname()[:2]  # type: ignore[attr-defined]
        self.bound_port = int(port)
        self.url = f"http://{f'[{host}]' if ':' in str(host) else host}:{port}/metrics"
        thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": POLL_INTERVAL_S},
                                  name="pybroker-metrics", daemon=True)
        thread.start()
        log.info("serving Prometheus metrics on %s", self.url)
        try:
            task_status.started(self.url)
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(self._close, httpd, thread)

    @staticmethod
    def _close(httpd: BaseServer, thread: threading.Thread) -> None:
        httpd.shutdown()  # returns once serve_forever has seen the request (POLL_INTERVAL_S)
        httpd.server_close()
        thread.join(5)
