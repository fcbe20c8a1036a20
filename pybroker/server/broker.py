"""One pybroker node (combined broker + controller), from start-up to clean shutdown.

Start-up, in order: bind the listeners (port 0 picks a free port), load and recover the
log dirs and the __cluster_metadata log in worker threads, replay the metadata into the
image, register this node with its bound endpoints, create the partition logs it hosts,
then log "listening on ..." and serve. Meanwhile ApiVersions is answered at once and every other
request waits (docs/ARCHITECTURE.md, "Start-up, recovery and thousands of partitions").

Shutdown (SIGTERM/SIGINT or `request_shutdown()`): stop accepting, wake every waiting
fetch/produce/join/sync so it answers now, let each connection finish the request in hand, then
flush every log, write the checkpoints and the clean-shutdown marker.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import socket
import time

import trio

from pybroker.clock import SYSTEM_CLOCK, Clock
from pybroker.config import BrokerConfig, Endpoint, parse_metrics_listener
from pybroker.controller.controller import QuorumController
from pybroker.controller.metadata_log import MetadataLog
from pybroker.coordinators.group.coordinator import GroupCoordinator
from pybroker.coordinators.txn.coordinator import TransactionCoordinator
from pybroker.log.errors import LogError
from pybroker.log.manager import LogManager
from pybroker.metadata.image import MetadataImage
from pybroker.metrics.request_metrics import RequestMetrics
from pybroker.net.server import SocketServer
from pybroker.purgatory.timer import SystemTimer
from pybroker.replication.replica_manager import ReplicaManager, log_config
from pybroker.security.authorizer import StandardAuthorizer
from pybroker.server.api_versions import SUPPORTED
from pybroker.server.cluster import ProducerIdManager
from pybroker.server.dispatch import RequestDispatcher, api_names
from pybroker.server.dynamic_config import DynamicBrokerConfig
from pybroker.server.fetch_session import FetchManager, FetchSessionCache
from pybroker.server.quota import QuotaManagers

log = logging.getLogger("pybroker")

SHUTDOWN_GRACE_S = 30.0


class StartupError(Exception):
    """The node cannot start (bad storage, port in use, ...): one line for the person."""


class Broker:
    def __init__(self, config: BrokerConfig, clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        self.clock = clock  # every wall-clock read of the node (TrioClock under MockClock in tests)
        self.node_id = config.node_id
        self.cluster_id = ""
        self.image = MetadataImage()
        self.ready = trio.Event()
        self.stopped = trio.Event()
        self._shutdown = trio.Event()
        self.bound: list[Endpoint] = []
        self.advertised: list[Endpoint] = []
        self.controller: QuorumController
        self.replica_manager: ReplicaManager
        self.log_manager: LogManager
        self.metadata_log: MetadataLog
        self.producer_ids: ProducerIdManager
        self.group_coordinator: GroupCoordinator
        self.txn_coordinator: TransactionCoordinator
        self.server: SocketServer
        self.dynamic_config: DynamicBrokerConfig  # KIP-226 layers over `config`
        # client byte-rate quotas (KIP-13); filled from the image's ClientQuotaRecords
        self.quotas = QuotaManagers(config["quota.window.num"], config["quota.window.size.seconds"])
        # authorizer.class.name: None (no authorizer) costs handlers one `is None` test
        self.authorizer: StandardAuthorizer | None = None
        # metrics.listener (pybroker/metrics): unset = no endpoint and no per-request timing at all
        self.metrics_address = parse_metrics_listener("metrics.listener", config["metrics.listener"])
        self.request_metrics = (RequestMetrics(api_names(), SUPPORTED)
                                if self.metrics_address is not None else None)
        self.metrics_url: str | None = None  # http://host:port/metrics once bound
        # incremental fetch sessions (KIP-227), Kafka's FetchManager
        self.fetch_manager = FetchManager(FetchSessionCache.create(config["max.incremental.fetch.session.cache.slots"]))

    @property
    def stopping(self) -> bool:
        return self._shutdown.is_set()

    def request_shutdown(self) -> None:
        self._shutdown.set()

    def _advertised(self) -> list[Endpoint]:
        by_name = {e.listener_name: e for e in self.bound}
        if self.config["advertised.listeners"]:
            out = []
            for e in self.config.advertised_listeners:
                port = e.port or by_name.get(e.listener_name, e).port
                out.append(Endpoint(e.listener_name, e.host or socket.getfqdn(), port, e.security_protocol))
            return out
        return [Endpoint(e.listener_name, e.host or socket.getfqdn(), e.port, e.security_protocol)
                for e in self.bound]

    async def _load_storage(self) -> None:
        cfg = self.config
        default = log_config(cfg.topic_defaults())
        self.log_manager = LogManager(cfg.log_dirs, self.node_id, cluster_id=cfg["cluster.id"],
                                      default_config=default,
                                      producer_id_expiration_ms=cfg["producer.id.expiration.ms"],
                                      recovery_threads=cfg["num.recovery.threads.per.data.dir"])
        await trio.to_thread.run_sync(self.log_manager.load, self.clock.wall_ms())
        self.cluster_id = self.log_manager.cluster_id or ""
        from pathlib import Path

        meta_dir = Path(cfg.metadata_log_dir)
        clean = self.log_manager.had_clean_shutdown.get(meta_dir, False)
        self.metadata_log = await trio.to_thread.run_sync(
            lambda: MetadataLog(meta_dir, clean_shutdown=clean,
                                segment_bytes=cfg["metadata.log.segment.bytes"], clock=self.clock))

    async def run(self, *, task_status: trio.TaskStatus[list[Endpoint]] = trio.TASK_STATUS_IGNORED) -> None:
        cfg = self.config
        timer = SystemTimer()
        async with trio.open_nursery() as nursery:
            self.server = SocketServer(cfg.listeners, RequestDispatcher(self), cfg["socket.request.max.bytes"],
                                       cfg["max.connections"],
                                       time.perf_counter if self.request_metrics is not None else None)
            try:
                self.bound = await nursery.start(self.server.serve, nursery)
            except OSError as exc:
                raise StartupError(f"cannot bind {', '.join(map(str, cfg.listeners))}: {exc.strerror or exc}"
                                   ) from None
            if self.metrics_address is not None:
                try:
                    self.metrics_url = await nursery.start(self._serve_metrics, *self.metrics_address)
                except OSError as exc:
                    raise StartupError(f"cannot bind metrics.listener {cfg['metrics.listener']}: "
                                       f"{exc.strerror or exc}") from None
            try:
                await self._load_storage()
            except (LogError, OSError, ValueError) as exc:
                raise StartupError(f"cannot load log dirs {', '.join(cfg.log_dirs)}: {exc}") from None
            self.advertised = self._advertised()
            self.image = MetadataImage()
            self.controller = QuorumController(cfg, self.image, self.metadata_log)
            self.authorizer = StandardAuthorizer.from_config(cfg, self.image)
            await self.controller.load_and_register(self.advertised, self.cluster_id)
            # dynamic broker configs first: every later reader (topic defaults included) sees them,
            # and as the first listener a change reaches `config` before the replica manager
            self.dynamic_config = DynamicBrokerConfig(cfg)
            if self.dynamic_config.reload(self.image.configs):
                self.dynamic_config.apply_runtime(self)
            self.controller.listeners.insert(
                0, lambda records: self.dynamic_config.on_metadata(self, self.image.configs, records))
            self.replica_manager = ReplicaManager(cfg, self.log_manager, self.image, timer, nursery.start_soon,
                                                  self.clock)
            self.replica_manager.load_high_watermarks()
            self.replica_manager.apply_metadata()
            self.controller.listeners.append(self.replica_manager.apply_metadata_records)
            self.producer_ids = ProducerIdManager(self.controller, self.node_id)
            # the group coordinator loads the __consumer_offsets partitions it leads in worker
            # threads; until a partition is loaded its groups answer COORDINATOR_LOAD_IN_PROGRESS
            self.group_coordinator = GroupCoordinator(cfg, self.replica_manager, self.controller, self.image,
                                                      nursery.start_soon)
            self.controller.listeners.append(lambda _records: self.group_coordinator.on_metadata())
            self.txn_coordinator = TransactionCoordinator(cfg, self.replica_manager, self.controller, self.image,
                                                          self.producer_ids, self.group_coordinator,
                                                          nursery.start_soon)
            self.controller.listeners.append(lambda _records: self.txn_coordinator.on_metadata())
            self.quotas.apply_image(self.image.client_quotas)
            self.controller.listeners.append(lambda records: self.quotas.on_metadata(self.image, records))
            await nursery.start(timer.run)
            self.group_coordinator.on_metadata()
            self.txn_coordinator.on_metadata()
            await nursery.start(self.replica_manager.run_checkpointer)
            await nursery.start(self.replica_manager.run_retention)
            await nursery.start(self.replica_manager.run_producer_expiration)
            await nursery.start(self.replica_manager.run_cleaner)
            for ep in self.bound:
                log.info("listening on %s (node.id=%d, cluster.id=%s, log.dirs=%s)", ep, self.node_id,
                         self.cluster_id, ",".join(cfg.log_dirs))
            self.ready.set()
            task_status.started(self.bound)
            await self._shutdown.wait()
            await self._stop(timer)
            nursery.cancel_scope.cancel()
        self.stopped.set()

    async def _serve_metrics(self, host: str, port: int, *,
                             task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        """The Prometheus endpoint (pybroker/metrics), bound before the logs load so a scrape during
        recovery already answers."""
        from pybroker.metrics.event_loop import EventLoopIdle
        from pybroker.metrics.prometheus import MetricsServer
        from pybroker.metrics.registry import MetricsRegistry
        from pybroker.server.broker_metrics import register_broker_metrics

        registry = MetricsRegistry()
        register_broker_metrics(registry, self, EventLoopIdle())  # created here: on the loop's thread
        await MetricsServer(host, port, registry).serve(task_status=task_status)

    async def _stop(self, timer: SystemTimer) -> None:
        log.info("shutting down")
        self.server.begin_shutdown()
        # answer every JoinGroup/SyncGroup still waiting (NOT_COORDINATOR) and stop the deadlines
        self.group_coordinator.shutdown()
        self.txn_coordinator.shutdown()
        rm = self.replica_manager
        for purgatory in (rm.fetch_purgatory, rm.produce_purgatory):
            for ops in list(purgatory._watchers.values()):
                for op in ops:
                    op.force_complete()
        if not await self.server.wait_idle(SHUTDOWN_GRACE_S):
            log.warning("connections still busy after %.0fs; closing them", SHUTDOWN_GRACE_S)
        hws = rm.high_watermarks()
        await trio.to_thread.run_sync(lambda: self.metadata_log.close())
        await trio.to_thread.run_sync(self.log_manager.shutdown, self.clock.wall_ms(), hws)
        log.info("shut down cleanly")


async def _freeze_startup_heap(broker: Broker) -> None:
    """Once serving, move every object allocated at start-up (config, metadata image, the
    protocol codecs, ...) into the collector's permanent generation: a full collection of that
    heap took ~20 ms on the event loop, which set the p99 of the latency benchmark. Only for a
    node that owns its process (EmbeddedBroker shares its host's heap and is left alone).
    The young generations are collected first, not the whole heap: with 10,000 partitions
    loaded that full collection stalled the loop ~250 ms just as the clients waiting for the
    node were answered (bench/recovery); what start-up left as cyclic garbage in the oldest
    generation, if anything, stays frozen."""
    await broker.ready.wait()
    gc.collect(1)
    gc.freeze()
    # partitions created later join it too, a batch at a time: a full collection of 10,000 new
    # partitions' objects stalled the loop ~100 ms (bench/recovery), and this one scans only
    # what came since the last freeze (logs hold no reference cycle, so deleted ones still go)
    broker.replica_manager.after_create = _freeze_new_objects


def _freeze_new_objects() -> None:
    gc.collect()
    gc.freeze()


async def _serve_until_signal(config: BrokerConfig) -> None:
    broker = Broker(config)
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            async def watch_signals() -> None:
                async for signum in signals:
                    log.info("received %s", signal.Signals(signum).name)
                    broker.request_shutdown()
                    return

            nursery.start_soon(watch_signals)
            nursery.start_soon(_freeze_startup_heap, broker)
            await broker.run()
            nursery.cancel_scope.cancel()


def raise_open_file_limit() -> None:
    """Lift the soft RLIMIT_NOFILE to the hard limit, as the JVM does for Kafka (MaxFDLimit):
    every segment holds a descriptor for its .log and one per mapped index."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 1 << 20, hard))
    except (ImportError, ValueError, OSError):  # pragma: no cover - not permitted / not POSIX
        pass


def run_broker(config: BrokerConfig) -> int:
    """Run a node until SIGTERM/SIGINT; returns the process exit code."""
    raise_open_file_limit()
    try:
        instruments = []
        trace_ms = os.environ.get("PYBROKER_TRACE_STALLS_MS")
        if trace_ms:
            from pybroker.server.stall_tracer import StallTracer

            instruments.append(StallTracer(float(trace_ms)))
        trio.run(_serve_until_signal, config, instruments=instruments)
    except BaseExceptionGroup as group:
        # surface the first StartupError (one line for the person) rather than a trio traceback
        match, _ = group.split(StartupError)
        if match is not None:
            exc: BaseException = match
            while isinstance(exc, BaseExceptionGroup):
                exc = exc.exceptions[0]
            raise exc from None
        raise
    return 0


__all__ = ["Broker", "StartupError", "run_broker"]
