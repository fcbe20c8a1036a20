"""The Prometheus endpoint: `GET /metrics` over HTTP on `metrics.listener`, served on the event
loop, formatted by prometheus_client in one worker thread.

What runs where, and why:
- HTTP on the loop: one trio task per connection reads the request head (a few hundred bytes)
  and writes the answer with non-blocking sends, microseconds of loop time per scrape. A thread
  per connection (wsgiref's ThreadingWSGIServer, before) let 1,500 half-sent `GET /metr`
  requests make 1,503 threads that starved the loop of the GIL: ApiVersions took seconds.
- Bounded: at most `MAX_CONNECTIONS` (16) connections at once. A connection has
  `HEADER_TIMEOUT_S` (5 s) to send its request head (at most `MAX_HEAD_BYTES`, 16 KiB) and
  `SEND_TIMEOUT_S` (30 s) to take its answer, then it is closed. When all 16 are open, a new
  connection evicts the oldest one still sending its head (a scraper sends its head at once, a
  slowloris never finishes it), or is closed when all 16 are being answered. One HTTP request per
  connection (`Connection: close`), as wsgiref served it.
- The numbers are read on the loop: `MetricsRegistry.snapshot()` copies them into plain `Family`
  data in task steps of its own (250 partitions, ~1.2 ms per step), so no broker structure is
  read while the loop mutates it and no lock is needed. One snapshot at a time, shared: a scrape
  that arrives while one is being taken waits for it, so waiting scrapes never queue a snapshot
  each. Scrapes asking for the same format share one rendering too.
- Formatting off the loop: prometheus_client's WSGI app (the exposition text, OpenMetrics for
  `Accept: application/openmetrics-text`, `?name[]=` filters, gzip) runs in a trio worker thread
  under a CapacityLimiter of 1, so at most one thread formats: rendering 10,000 partitions
  (~100,000 samples, ~0.5 s of CPU) on the loop would stall every connection for that long.
  Process metrics (process_*) and /proc/self/io are read in that thread too (only the kernel).
  The price of the thread: while it formats it shares the GIL with the loop, whose steps may wait
  up to the 5 ms switch interval.

The listener is `http://host:port` (port 0 picks a free port; `[::1]` for IPv6); the bound
address is logged as "serving Prometheus metrics on http://host:port/metrics" once bound.
(Not "listening on": harnesses find the Kafka port by that phrase.) It binds before the logs
load, so a port in use is a start-up error and a scrape during recovery already answers with
`kafka_server_kafkaserver_brokerstate 2`. Any path answers with the metrics, as
prometheus_client's app does. Shutdown closes the listener and every connection with the node's
nursery; a rendering in progress finishes first (worker threads are not abandoned).
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable, Iterable, Sequence
from contextvars import ContextVar
from socket import AF_INET, AF_INET6, SO_REUSEADDR, SOL_SOCKET
from typing import Any
from urllib.parse import parse_qs, unquote

import trio
from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    CollectorRegistry,
    make_wsgi_app,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from pybroker.metrics.histogram import HistogramSnapshot
from pybroker.metrics.registry import Family, MetricsRegistry

log = logging.getLogger("pybroker.metrics")

MAX_CONNECTIONS = 16
HEADER_TIMEOUT_S = 5.0
SEND_TIMEOUT_S = 30.0
MAX_HEAD_BYTES = 16 * 1024
# accept failures that mean "no descriptors or memory right now" (as net/server.py; trio's serve_listeners)
ACCEPT_CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
ACCEPT_BACKOFF_S = 0.1

# the families of the scrape being rendered, set in the rendering thread around the WSGI call
_FAMILIES: ContextVar[Sequence[Family]] = ContextVar("pybroker_metrics_families", default=())


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
    """prometheus_client's view of a MetricsRegistry snapshot: the families `take_snapshot` returns."""

    def __init__(self, take_snapshot: Callable[[], Sequence[Family]]) -> None:
        self._take = take_snapshot

    def collect(self) -> Iterable[Metric]:
        for f in self._take():
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


class _Shared:
    """A result several tasks wait for: the first starts the work, the others wait on `done`."""

    __slots__ = ("done", "value")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.value: Any = None


class _BadRequest(Exception):
    pass


Response = tuple[str, list[tuple[str, str]], bytes]


def parse_head(head: bytes) -> dict[str, str]:
    """The WSGI environ prometheus_client's app reads, from an HTTP/1.x request head."""
    lines = head.decode("latin-1").split("\n")
    parts = lines[0].strip().split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        raise _BadRequest(lines[0][:100])
    method, target, _version = parts
    path, _, query = target.partition("?")
    environ = {"REQUEST_METHOD": method, "PATH_INFO": unquote(path), "QUERY_STRING": query}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            environ["HTTP_" + name.strip().upper().replace("-", "_")] = value.strip()
    return environ


class MetricsServer:
    """The HTTP endpoint of one node's metrics; `serve` runs it as a task of the broker's nursery.

    Concurrency: every method on the trio thread but `_render`, which runs in a worker thread."""

    def __init__(self, host: str, port: int, registry: MetricsRegistry) -> None:
        self.host = host
        self.port = port
        self.registry = registry
        self.url: str | None = None  # http://host:port/metrics once bound
        self.bound_port: int | None = None
        self._app = make_wsgi_app(self._collectors())
        self._render_limiter = trio.CapacityLimiter(1)
        self._reading: dict[trio.CancelScope, None] = {}  # connections still sending their head, oldest first
        self._answering = 0
        self._snapshot: _Shared | None = None  # the snapshot being taken
        self._responses: dict[tuple[str | None, ...], _Shared] = {}  # renderings in progress, by request
        self.evicted = 0  # connections closed to make room (for tests and debugging)

    @staticmethod
    def _collectors(auto_describe: bool = False) -> CollectorRegistry:
        # one per node: an EmbeddedBroker's test process may run several. `auto_describe` (the
        # registry collects once at registration to learn the names) is what `?name[]=` filters
        # need: prometheus_client restricts a registry to the collectors it knows by name.
        reg = CollectorRegistry(auto_describe=auto_describe)
        reg.register(SnapshotCollector(_FAMILIES.get))
        reg.register(LinuxIoCollector())
        ProcessCollector(registry=reg)
        reg.register(PLATFORM_COLLECTOR)
        reg.register(GC_COLLECTOR)
        return reg

    async def _bind(self) -> trio.SocketListener:
        sock = trio.socket.socket(AF_INET6 if ":" in self.host else AF_INET)
        try:
            sock.setsockopt(SOL_SOCKET, SO_REUSEADDR, 1)
            await sock.bind((self.host, self.port))
            sock.listen(128)
        except BaseException:
            sock.close()
            raise
        return trio.SocketListener(sock)

    async def serve(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        listener = await self._bind()
        host, port = listener.socket.getsockname()[:2]
        self.bound_port = int(port)
        self.url = f"http://{f'[{host}]' if ':' in str(host) else host}:{port}/metrics"
        log.info("serving Prometheus metrics on %s", self.url)
        async with listener, trio.open_nursery() as nursery:
            task_status.started(self.url)
            await self._accept_loop(listener, nursery)

    async def _accept_loop(self, listener: trio.SocketListener, nursery: trio.Nursery) -> None:
        failing = False
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                if exc.errno not in ACCEPT_CAPACITY_ERRNOS:
                    raise
                if not failing:
                    log.warning("metrics endpoint cannot accept connections: %s; retrying every %d ms",
                                exc.strerror or exc, ACCEPT_BACKOFF_S * 1000)
                    failing = True
                await trio.sleep(ACCEPT_BACKOFF_S)
                continue
            failing = False
            if len(self._reading) + self._answering >= MAX_CONNECTIONS:
                if not self._reading:
                    await stream.aclose()  # all 16 are being answered
                    continue
                oldest = next(iter(self._reading))
                del self._reading[oldest]
                oldest.cancel()
                self.evicted += 1
            nursery.start_soon(self._serve_connection, stream, nursery)

    async def _serve_connection(self, stream: trio.SocketStream, nursery: trio.Nursery) -> None:
        """One request: read its head, answer, close."""
        try:
            scope = trio.CancelScope(deadline=trio.current_time() + HEADER_TIMEOUT_S)
            self._reading[scope] = None
            with scope:
                try:
                    environ = parse_head(await self._read_head(stream))
                except _BadRequest as exc:
                    log.debug("metrics endpoint: bad request %r", str(exc))
                    environ = None
            self._reading.pop(scope, None)
            if scope.cancelled_caught:
                return  # too slow to send its head, or evicted by a newer connection
            self._answering += 1
            try:
                if environ is None:
                    response: Response = ("400 Bad Request", [("Content-Type", "text/plain")], b"bad request\n")
                else:
                    response = await self._response(environ, nursery)
                status, headers, body = response
                head = "".join([f"HTTP/1.1 {status}\r\n", *(f"{k}: {v}\r\n" for k, v in headers),
                                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"])
                with trio.move_on_after(SEND_TIMEOUT_S):
                    await stream.send_all(head.encode("latin-1") + body)
            finally:
                self._answering -= 1
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError, EOFError) as exc:
            log.debug("metrics connection ended: %s", exc)
        finally:
            await stream.aclose()

    @staticmethod
    async def _read_head(stream: trio.SocketStream) -> bytes:
        """The request head up to its blank line; _BadRequest past MAX_HEAD_BYTES, EOFError at EOF."""
        buf = bytearray()
        while True:
            chunk = await stream.receive_some(4096)
            if not chunk:
                raise EOFError("closed before the end of the request head")
            searched = max(0, len(buf) - 3)
            buf += chunk
            for end in (b"\r\n\r\n", b"\n\n"):
                i = buf.find(end, searched)
                if i >= 0:
                    return bytes(buf[:i])
            if len(buf) > MAX_HEAD_BYTES:
                raise _BadRequest("request head too long")

    async def _response(self, environ: dict[str, str], nursery: trio.Nursery) -> Response:
        """prometheus_client's answer to `environ`, shared with scrapes asking the same meanwhile."""
        key = tuple(environ.get(k) for k in ("REQUEST_METHOD", "QUERY_STRING", "HTTP_ACCEPT",
                                             "HTTP_ACCEPT_ENCODING")) + (str(environ["PATH_INFO"] == "/favicon.ico"),)
        shared = self._responses.get(key)
        if shared is None:
            shared = self._responses[key] = _Shared()
            # in the server's nursery, not this connection's task: the scrapes sharing it must not
            # lose it when the one that started it is cancelled
            nursery.start_soon(self._make_response, key, environ, shared)
        await shared.done.wait()
        if shared.value is None:
            return "503 Service Unavailable", [("Content-Type", "text/plain")], b"metrics unavailable\n"
        return shared.value

    async def _make_response(self, key: tuple[str | None, ...], environ: dict[str, str], shared: _Shared) -> None:
        try:
            wants_metrics = environ["REQUEST_METHOD"] == "GET" and environ["PATH_INFO"] != "/favicon.ico"
            families = await self._families() if wants_metrics else []
            shared.value = await trio.to_thread.run_sync(self._render, families, environ,
                                                         limiter=self._render_limiter)
        except Exception:
            log.exception("metrics endpoint: rendering failed")
        finally:
            del self._responses[key]
            shared.done.set()

    async def _families(self) -> list[Family]:
        """A snapshot of the registry: the one being taken, or a new one."""
        shared = self._snapshot
        if shared is None:
            shared = self._snapshot = _Shared()
            try:
                shared.value = await self.registry.snapshot()
            finally:
                self._snapshot = None
                shared.done.set()
        else:
            await shared.done.wait()
        return shared.value or []

    def _render(self, families: list[Family], environ: dict[str, str]) -> Response:
        """In the worker thread: prometheus_client's WSGI app, with `families` as the registry's."""
        started: list[Any] = []

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
            started[:] = [status, headers]

        token = _FAMILIES.set(families)
        try:
            filtered = "name[]" in parse_qs(environ["QUERY_STRING"])
            app = make_wsgi_app(self._collectors(True)) if filtered else self._app
            body = b"".join(app(environ, start_response))
        finally:
            _FAMILIES.reset(token)
        return started[0], started[1], body
