"""One pybroker node (broker, controller or both), from start-up to clean shutdown.

Every node runs the KRaft quorum's client on `__cluster_metadata` (pybroker/raft): a voter when
its node id is one of `controller.quorum.voters` (or it is standalone: no quorum configured, a
one-voter quorum of itself), else an observer. Its metadata image is replayed only from
committed records, by the metadata loader (pybroker/metadata/loader.py), which then runs the
publishers in order: dynamic broker configs, the replica manager (creates and deletes the
partition logs this node hosts), the coordinators, the quotas.

While it starts, ApiVersions is answered at once and every other request waits until the node
is ready (docs/ARCHITECTURE.md, "Start-up, recovery and thousands of partitions").

Start-up, in order:
 1. bind the listeners (port 0 picks a free port): broker listeners, and the controller
    listeners (served at once: the quorum's Raft RPCs need them before anything else);
 2. check and load the log dirs (formatted by `pybroker storage format`; a standalone node or a
    configured `cluster.id` formats them on first start), in worker threads;
 3. open the Raft client (log, quorum-state, snapshots) and the loader; a controller-role node
    starts its QuorumController, active only while this node leads the quorum;
 4. wait until the loader has caught up with the high watermark (a quorum leader is known);
 5. install the publishers and publish the whole image once (hosted partitions' logs exist
    before anything serves);
 6. broker role: register with the active controller and heartbeat (BrokerLifecycleManager);
    once the controller says this broker caught up with its registration, ask to be unfenced
    and wait until the image shows it unfenced;
 7. start the background tasks, log "listening on ..." for each broker listener, serve.
Requests on broker listeners that arrive before that wait.

Shutdown (SIGTERM/SIGINT or `request_shutdown()`): with controlled.shutdown.enable (the
default) a controlled shutdown first, while still serving: the broker heartbeats want_shut_down
and the controller moves its leaderships away (clients are told NOT_LEADER_OR_FOLLOWER, with the
new leader, and retry there) until it leads nothing and is fenced, for at most
CONTROLLED_SHUTDOWN_TIMEOUT_S. Then stop accepting on broker listeners, wake every waiting
fetch/produce/join/sync so it answers now, let each connection finish the request in hand; a
leader of the quorum hands leadership over (EndQuorumEpoch); then flush every log, write the
checkpoints and the clean-shutdown marker. Controller listeners close last. Without controlled
shutdown the node just stops heartbeating, and the controller fences it after
broker.session.timeout.ms, as Kafka's.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import socket
import ssl
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import trio

from pybroker.clock import SYSTEM_CLOCK, Clock
from pybroker.config import BrokerConfig, ConfigError, Endpoint, parse_metrics_listener
from pybroker.controller import features as feature_control
from pybroker.controller.bootstrap_metadata import read_bootstrap_records, read_bootstrap_voters
from pybroker.controller.controller import QuorumController
from pybroker.controller.metadata_log import MetadataRecordSerde
from pybroker.coordinators.group.coordinator import GroupCoordinator
from pybroker.coordinators.share.coordinator import ShareCoordinator
from pybroker.coordinators.txn.add_partitions_manager import AddPartitionsToTxnManager
from pybroker.coordinators.txn.coordinator import TransactionCoordinator
from pybroker.coordinators.txn.marker_channel import TransactionMarkerChannelManager
from pybroker.log.errors import LogError, MetaPropertiesError
from pybroker.log.file_lock import DirectoryLockedError, lock_dirs, release_all
from pybroker.log.manager import LogManager
from pybroker.log.meta_properties import ensure_log_dirs, read_meta_properties, uuid_from_str
from pybroker.metadata.image import MetadataImage
from pybroker.metadata.loader import Delta, MetadataLoader
from pybroker.metrics.request_metrics import RequestMetrics
from pybroker.net.connection import Handler
from pybroker.net.sasl import SaslChannelBuilder
from pybroker.net.server import ChannelBuilder, SocketServer
from pybroker.net.tls import TlsChannelBuilder
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.api_keys import preload as preload_protocol
from pybroker.protocol.errors import Errors, KafkaError
from pybroker.protocol.sasl_client import SaslClientConfig
from pybroker.purgatory.timer import SystemTimer
from pybroker.raft.kafka_metadata_log import METADATA_DIR
from pybroker.raft.quorum_config import QuorumConfig
from pybroker.raft.quorum_state_store import QuorumStateError
from pybroker.raft.raft_manager import RaftManager, metadata_log_settings
from pybroker.raft.snapshot_policy import SnapshotPolicy
from pybroker.replication.alter_partition_manager import (
    ALTER_PARTITION_VERSION,
    AlterPartitionManager,
)
from pybroker.replication.leader_end_point import remote_leader_end_points
from pybroker.replication.remote_log_manager import RemoteLogManager
from pybroker.replication.replica_manager import ReplicaManager, log_config
from pybroker.security.authorizer import StandardAuthorizer
from pybroker.security.sasl.listener import (
    ListenerSasl,
    client_sasl,
    image_credentials,
    image_tokens,
)
from pybroker.security.ssl_factory import ClientSsl, ListenerSsl
from pybroker.server import controller_apis
from pybroker.server.api_versions import SUPPORTED
from pybroker.server.broker_lifecycle_manager import BrokerLifecycleManager
from pybroker.server.cluster import ProducerIdManager
from pybroker.server.controller_channel import ControllerChannel
from pybroker.server.controller_client import ControllerClient
from pybroker.server.dispatch import ControllerDispatcher, RequestDispatcher, api_names
from pybroker.server.dynamic_config import DynamicBrokerConfig
from pybroker.server.fetch_session import FetchManager, FetchSessionCache
from pybroker.server.quorum import valid_request
from pybroker.server.quota import QuotaManagers, ip_connection_rates
from pybroker.server.sasl_requests import illegal_state_response
from pybroker.server.snapshot_generator import SnapshotGenerator
from pybroker.server.txn import local_add_or_verify
from pybroker.server.write_txn_markers import write_txn_markers
from pybroker.share.default_persister import DefaultStatePersister
from pybroker.share.share_partition_manager import SharePartitionManager

log = logging.getLogger("pybroker")

SHUTDOWN_GRACE_S = 30.0
# Kafka bounds the whole shutdown by 5 minutes; the controller answers a controlled shutdown in
# a few heartbeats, and the lifecycle manager gives up sooner when no controller answers at all
CONTROLLED_SHUTDOWN_TIMEOUT_S = 60.0
RAFT_SHUTDOWN_S = 5.0
RAFT_FETCH_SILENCE_MS = 600  # a voter's fetches long-poll 500 ms at most
SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}


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
        self.raft_ready = trio.Event()  # the controller listener may hand requests to the Raft client
        self._shutdown = trio.Event()
        self.bound: list[Endpoint] = []
        self.advertised: list[Endpoint] = []
        self.controller_bound: list[Endpoint] = []
        self.raft: RaftManager | None = None
        self.loader: MetadataLoader
        self.quorum_controller: QuorumController | None = None  # controller role only
        self.lifecycle: BrokerLifecycleManager | None = None
        self.controller_server: SocketServer | None = None
        self.forwarding_channel: ControllerChannel
        self.membership_channel: ControllerChannel
        self.alter_partition_channel: ControllerChannel | None = None
        self.controller_client = ControllerClient(self, lambda: float(config["request.timeout.ms"]) / 1000)
        self.replica_manager: ReplicaManager
        self.log_manager: LogManager
        self.producer_ids: ProducerIdManager
        self.group_coordinator: GroupCoordinator
        self.txn_coordinator: TransactionCoordinator
        self.share_coordinator: ShareCoordinator
        self.share_persister: DefaultStatePersister
        self.share_partition_manager: SharePartitionManager
        self.add_partitions_manager: AddPartitionsToTxnManager
        self.server: SocketServer
        # tiered storage (KIP-405): only with remote.log.storage.system.enable
        self.remote_log_manager: RemoteLogManager | None = None
        # TLS (security/ssl_factory.py): each SSL listener's server side, and this node's client
        # contexts for its peers' inter-broker and controller listeners (None: plaintext)
        self.listener_tls: dict[str, ListenerSsl] = {}
        self.inter_broker_client_ssl: ssl.SSLContext | None = None
        self.controller_client_ssl: ssl.SSLContext | None = None
        # this node's SASL logins to its peers' inter-broker and controller listeners (SASL_* only)
        self.inter_broker_client_sasl: SaslClientConfig | None = None
        self.controller_client_sasl: SaslClientConfig | None = None
        self._listener_sasl: list[ListenerSasl] = []  # every SASL listener's setup (_channels), run in _run
        self.dynamic_config = DynamicBrokerConfig(config)  # KIP-226 layers over `config`
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
        self._metadata_dir_id: str | None = None
        self._log_dir_ids: list[bytes] = []
        self.controller_advertised: list[Endpoint] = []

    @property
    def stopping(self) -> bool:
        return self._shutdown.is_set()

    def request_shutdown(self) -> None:
        self._shutdown.set()

    @property
    def is_active_controller(self) -> bool:
        return self.quorum_controller is not None and self.quorum_controller.active

    @property
    def controller(self) -> QuorumController:
        """This node's controller while it is the active one (handlers of controller APIs);
        KafkaError(NOT_CONTROLLER) otherwise."""
        controller = self.quorum_controller
        if controller is None or not controller.active:
            raise KafkaError(Errors.NOT_CONTROLLER, f"node {self.node_id} is not the active controller")
        return controller

    def handles_locally(self, api_key: int, body: Any = None) -> bool:
        """Whether a request Kafka forwards to the controller is answered here: this node's
        controller is the active one (DescribeQuorum: this node leads the quorum)."""
        if api_key == ApiKey.DESCRIBE_QUORUM:
            return (body is not None and not valid_request(body)) or \
                (self.raft is not None and self.raft.client.is_leader)
        return self.is_active_controller

    # ------------------------------------------------------------------ endpoints

    def _advertised_for(self, bound: list[Endpoint], advertised_cfg: list[Endpoint]) -> list[Endpoint]:
        by_name = {e.listener_name: e for e in bound}
        out = []
        for e in bound:
            adv = next((a for a in advertised_cfg if a.listener_name == e.listener_name), None) \
                if self.config["advertised.listeners"] else None
            if adv is not None:
                port = adv.port or by_name[e.listener_name].port
                out.append(Endpoint(e.listener_name, adv.host or socket.getfqdn(), port, e.security_protocol))
            else:
                out.append(Endpoint(e.listener_name, e.host or socket.getfqdn(), e.port, e.security_protocol))
        return out

    def _advertised(self) -> list[Endpoint]:
        return self._advertised_for(self.bound, self.config.advertised_broker_listeners)

    # ------------------------------------------------------------------ storage

    def _check_storage(self) -> tuple[str, dict[Path, Any]]:
        """meta.properties of every log dir and the metadata dir (blocking): the cluster id.
        Unformatted dirs are formatted only on a standalone node or with `cluster.id` set."""
        cfg = self.config
        dirs = list(dict.fromkeys([*cfg.log_dirs, cfg.metadata_log_dir]))
        found = {}
        for d in dirs:
            meta = read_meta_properties(d) if Path(d).exists() else None
            if meta is not None:
                found[d] = meta
        if not found and not cfg.standalone and not cfg["cluster.id"]:
            raise StartupError(f"no formatted log directory in {', '.join(dirs)}: run `pybroker storage format "
                               "-t <cluster id> -c <config file>` on every node with one cluster id "
                               "(`pybroker storage random-uuid` makes one)")
        try:
            return ensure_log_dirs(dirs, self.node_id, cfg["cluster.id"])
        except MetaPropertiesError as exc:
            raise StartupError(str(exc)) from None

    async def _load_storage(self, nursery: trio.Nursery) -> None:
        cfg = self.config
        self.cluster_id, metas = await trio.to_thread.run_sync(self._check_storage)
        self._metadata_dir_id = metas[Path(cfg.metadata_log_dir)].directory_id
        self._log_dir_ids = [uuid_from_str(metas[Path(d)].directory_id) for d in cfg.log_dirs
                             if metas[Path(d)].directory_id]
        default = log_config(cfg.topic_defaults())
        self.log_manager = LogManager(cfg.log_dirs, self.node_id, cluster_id=self.cluster_id,
                                      default_config=default,
                                      producer_id_expiration_ms=cfg["producer.id.expiration.ms"],
                                      recovery_threads=cfg["num.recovery.threads.per.data.dir"],
                                      config=cfg, clock=self.clock, spawn=nursery.start_soon)
        await trio.to_thread.run_sync(self.log_manager.load, self.clock.wall_ms())

    # ------------------------------------------------------------------ the quorum

    def _quorum(self) -> tuple[QuorumConfig, str, dict[str, tuple[str, int]]]:
        """(quorum settings, the controller listener name, this node's controller endpoints)."""
        cfg = self.config
        base = QuorumConfig.from_properties(cfg)
        if cfg.standalone:
            # a one-voter quorum of itself, reachable (for DescribeQuorum's sake) at its first listener
            ep = (self.advertised or self.controller_advertised)[0]
            address = (ep.host, ep.port)
            return replace(base, voters={self.node_id: address}), ep.listener_name, {ep.listener_name: address}
        name = cfg.controller_listener_names[0]
        local = {e.listener_name: (e.host, e.port) for e in self.controller_advertised}
        voters = dict(cfg.quorum_voters)
        if not voters:
            voters = read_bootstrap_voters(Path(cfg.metadata_log_dir) / METADATA_DIR, name)
            if not voters and cfg.is_controller:
                raise StartupError("controller.quorum.voters is not set and the metadata log holds no voter set: "
                                   "format this controller with `pybroker storage format --standalone` or "
                                   "`--initial-controllers`")
        return replace(base, voters=voters), name, local

    def _build_tls(self) -> None:
        """The TLS contexts of the SSL listeners and of this node's own connections to its peers'
        inter-broker and controller listeners (each with that listener's ssl.* values, as Kafka's
        inter-broker clients take them); StartupError (one line, exit 2) for one that does not load."""
        cfg = self.config
        try:
            self.listener_tls = {e.listener_name: ListenerSsl.of(cfg, e.listener_name) for e in cfg.listeners
                                 if e.security_protocol in ("SSL", "SASL_SSL")}
            clients: dict[str, ClientSsl | None] = {}
            if cfg.is_broker and cfg.inter_broker_listener_name:
                clients[cfg.inter_broker_listener_name] = ClientSsl.of(cfg, cfg.inter_broker_listener_name)
            if cfg.controller_listener_names:
                name = cfg.controller_listener_names[0]
                clients[name] = clients.get(name) or ClientSsl.of(cfg, name)
        except ConfigError as exc:
            raise StartupError(str(exc)) from None
        inter_broker = clients.get(cfg.inter_broker_listener_name) if cfg.is_broker else None
        controller = clients.get(cfg.controller_listener_names[0]) if cfg.controller_listener_names else None
        self.inter_broker_client_ssl = inter_broker.context if inter_broker is not None else None
        self.controller_client_ssl = controller.context if controller is not None else None
        try:
            self.inter_broker_client_sasl = (client_sasl(cfg, cfg.inter_broker_listener_name,
                                                         "sasl.mechanism.inter.broker.protocol")
                                             if cfg.is_broker and cfg.inter_broker_listener_name else None)
            self.controller_client_sasl = (client_sasl(cfg, cfg.controller_listener_names[0],
                                                       "sasl.mechanism.controller.protocol")
                                           if cfg.controller_listener_names else None)
        except ConfigError as exc:
            raise StartupError(str(exc)) from None
        self.dynamic_config.listener_tls = self.listener_tls
        self.dynamic_config.client_tls = {n: c for n, c in clients.items() if c is not None}

    def _apply_ip_connection_rates(self) -> None:
        """KIP-612: the image's connection_creation_rate quotas of ip entities -> the client
        listeners' connection quotas (Kafka's ClientQuotaMetadataManager)."""
        server = getattr(self, "server", None)
        if server is not None:
            server.quotas.set_ip_quotas(*ip_connection_rates(self.image.client_quotas))

    def _channels(self, dispatcher: Handler, endpoints: list[Endpoint] | None = None) -> dict[str, ChannelBuilder]:
        """Each non-PLAINTEXT listener's channel builder (of `endpoints`, default all): TLS for
        SSL, SASL (over TLS for SASL_SSL) for SASL_*, with `dispatcher` answering a
        pre-authentication ApiVersions; StartupError for a SASL listener pybroker cannot serve
        (security/sasl/listener.py)."""
        cfg = self.config
        channels: dict[str, ChannelBuilder] = {}
        credentials = image_credentials(lambda: self.image)
        secret = cfg["delegation.token.secret.key"]
        tokens = image_tokens(lambda: self.image, secret) if secret else None
        for ep in cfg.listeners if endpoints is None else endpoints:
            tls = self.listener_tls.get(ep.listener_name)
            if ep.security_protocol == "SSL" and tls is not None:
                channels[ep.listener_name] = TlsChannelBuilder(tls)
            elif ep.security_protocol.startswith("SASL_"):
                try:
                    # a controller listener authenticates peers before the node serves; a broker
                    # listener's logins wait until its image is replayed (SCRAM users, tokens)
                    controller = ep.listener_name.upper() in (n.upper() for n in cfg.controller_listener_names)
                    sasl = ListenerSasl.of(cfg, ep.listener_name, credentials, self.clock.wall_ms, tokens,
                                           None if controller else self.ready.wait)
                except ConfigError as exc:
                    raise StartupError(str(exc)) from None
                self._listener_sasl.append(sasl)
                channels[ep.listener_name] = SaslChannelBuilder(sasl, dispatcher, tls, illegal_state_response)
        return channels

    async def _open_raft(self, nursery: trio.Nursery) -> None:
        cfg = self.config
        quorum, listener_name, local_listeners = self._quorum()
        directory_id = uuid_from_str(self._metadata_dir_id) if self._metadata_dir_id else None
        try:
            self.raft = await RaftManager.open(
                node_id=self.node_id, cluster_id=self.cluster_id, metadata_log_dir=cfg.metadata_log_dir,
                quorum=quorum, listener_name=listener_name, local_listeners=local_listeners,
                serde=MetadataRecordSerde(), directory_id=directory_id,
                log_settings=metadata_log_settings(cfg),
                # Kafka checks for metadata log cleanup every 60 s (a constant); tests shorten it
                log_cleaner_interval_ms=int(os.environ.get("PYBROKER_METADATA_CLEANER_INTERVAL_MS", "60000")))
        except (LogError, OSError, ValueError) as exc:
            raise StartupError(f"cannot open the metadata log in {cfg.metadata_log_dir}: {exc}") from None
        self.raft.driver.ssl_context = self.controller_client_ssl
        self.raft.driver.sasl = self.controller_client_sasl
        try:
            await nursery.start(self.raft.driver.run)
        except QuorumStateError as exc:
            raise StartupError(
                f"{exc}. Stop every node whose quorum-state file is unusable, move those files "
                f"away and start the nodes again: each resumes from its metadata log's last "
                f"epoch") from None
        self.raft_ready.set()
        client = self.raft.client
        self.loader = MetadataLoader(self.image, lambda: client.high_watermark)
        await nursery.start(self.loader.run)
        self.raft.driver.register(self.loader)

        def leader() -> tuple[int | None, tuple[str, int] | None]:
            leader_id, address = client.leader_address()
            if leader_id == self.node_id:
                return leader_id, None  # this node's own controller is (about to be) active
            return leader_id, address

        async def wait_for_change(seconds: float) -> None:
            with trio.move_on_after(seconds):
                assert self.raft is not None
                epoch, leader_id = client.epoch, client.quorum.leader_id
                try:
                    await self.raft.driver.wait_for(lambda: client.epoch != epoch
                                                    or client.quorum.leader_id != leader_id
                                                    or self.is_active_controller)
                except RuntimeError:  # the driver stopped (shutting down): just wait out the backoff
                    await trio.sleep_forever()

        async def local(api_key: int, version: int, body: Any) -> Any:
            return await controller_apis.handle(self, None, api_key, version, 0, f"node-{self.node_id}", body)

        def channel(name: str, attempt_timeout_ms: int = cfg["controller.quorum.request.timeout.ms"]
                    ) -> ControllerChannel:
            return ControllerChannel(name=name, client_id=f"{name}-{self.node_id}",
                                     local_handler=local if cfg.is_controller else None,
                                     local_active=lambda: self.is_active_controller, leader=leader,
                                     wait_for_change=wait_for_change,
                                     retry_backoff_ms=max(100, cfg["controller.quorum.retry.backoff.ms"]),
                                     attempt_timeout_ms=attempt_timeout_ms, ssl_context=self.controller_client_ssl,
                                     sasl=self.controller_client_sasl)

        # a forwarded admin request may keep the controller busy for a while (a CreateTopics of
        # thousands of partitions): cut short, its retry would find its own work done
        self.forwarding_channel = channel("forwarding", cfg["controller.socket.timeout.ms"])
        self.membership_channel = channel("heartbeat")
        # ISR changes have their own channel (Kafka's alter-partition channel): a slow CreateTopics
        # on the forwarding one must not hold back an ISR shrink
        self.alter_partition_channel = channel("alter-partition")
        if cfg.is_controller:
            self.quorum_controller = controller = QuorumController(
                cfg, self.image, self.raft.driver, self.loader, cluster_id=self.cluster_id,
                now_ms=self.clock.wall_ms, next_append_offset=lambda: client.next_append_offset,
                bootstrap_records=lambda: read_bootstrap_records(Path(cfg.metadata_log_dir)),
                placer=None)
            self.loader.leader_listeners.append(controller.handle_leader_change)
            await nursery.start(controller.run)

    async def _wait_caught_up(self) -> None:
        """Until the loader reached a known high watermark once (a leader was found)."""
        assert self.raft is not None
        client = self.raft.client
        waited = 0
        while not self.loader.caught_up.is_set():
            with trio.move_on_after(5):
                await self.loader.caught_up.wait()
            if self.loader.caught_up.is_set():
                break
            self._check_cluster_id()
            waited += 5
            log.info("waiting for the metadata quorum (%ds; leader %s, epoch %d, high watermark %s)", waited,
                     client.quorum.leader_id, client.epoch, client.high_watermark)

    def _check_cluster_id(self) -> None:
        assert self.raft is not None
        peer = self.raft.client.inconsistent_cluster_id_from
        if peer is not None:
            raise StartupError(f"this node's storage belongs to cluster {self.cluster_id}, but node {peer} of "
                               "the controller quorum answered INCONSISTENT_CLUSTER_ID (meta.properties of "
                               "another cluster: reformat with the quorum's cluster id)")

    # ------------------------------------------------------------------ publishers

    def _install_publishers(self, nursery: trio.Nursery, timer: SystemTimer) -> None:
        cfg = self.config
        loader = self.loader
        # dynamic broker configs first: every later reader (topic defaults included) sees them,
        # and as the first publisher a change reaches `config` before the replica manager
        if self.dynamic_config.reload(self.image.configs):
            self.dynamic_config.apply_runtime(self)

        def dynamic(delta: Delta) -> None:
            if delta.records is None:
                if self.dynamic_config.reload(self.image.configs):
                    self.dynamic_config.apply_runtime(self)
            else:
                self.dynamic_config.on_metadata(self, self.image.configs, delta.records)

        loader.add_publisher("dynamic broker configs", dynamic)
        self.authorizer = StandardAuthorizer.from_config(cfg, self.image)
        if cfg.is_broker:
            self.replica_manager = ReplicaManager(cfg, self.log_manager, self.image, timer, nursery.start_soon,
                                                  self.clock, remote_leader_end_points(
                                                      cfg, self.image, self.inter_broker_client_ssl,
                                                      self.inter_broker_client_sasl))
            self.replica_manager.load_high_watermarks()
            self.dynamic_config.apply_runtime(self)  # the replication throttle rates (KIP-73)
            self.replica_manager.alter_partition_manager = alter = AlterPartitionManager(
                self.node_id, self._broker_epoch, self._send_alter_partition,
                retry_backoff_s=max(0.05, cfg["controller.quorum.retry.backoff.ms"] / 1000))
            nursery.start_soon(alter.run)
            loader.add_publisher("replica manager", lambda d: self.replica_manager.apply_metadata_records(d.records))
            self.producer_ids = ProducerIdManager(self.controller_client, self.node_id)
            # KIP-932: the share coordinator (__share_group_state, coordinators/share) and the
            # persister through which share partitions and the group coordinator reach it (built
            # first: the group coordinator takes the persister)
            self.share_coordinator = ShareCoordinator(cfg, self.replica_manager, self.controller_client,
                                                      self.image, nursery.start_soon)
            self.share_persister = DefaultStatePersister(
                node_id=self.node_id, image=self.image, listener_name=cfg.inter_broker_listener_name,
                coordinator=self.share_coordinator, request_timeout_ms=cfg["request.timeout.ms"],
                ssl_context=self.inter_broker_client_ssl,
                sasl=self.inter_broker_client_sasl)

            def share_metadata(_d: Delta) -> None:
                self.share_coordinator.on_metadata()
                self.share_persister.notify_metadata()
            loader.add_publisher("share coordinator", share_metadata)
            nursery.start_soon(self.share_coordinator.run_pruner)
            nursery.start_soon(self.share_coordinator.run_cold_snapshotter)
            # the group coordinator loads the __consumer_offsets partitions it leads in worker
            # threads; until a partition is loaded its groups answer COORDINATOR_LOAD_IN_PROGRESS
            # share groups initialize and delete share-partition state through the share
            # coordinator's Persister (KIP-932), when this broker has one
            self.group_coordinator = GroupCoordinator(cfg, self.replica_manager, self.controller_client, self.image,
                                                      nursery.start_soon,
                                                      share_persister=self.share_persister)
            loader.add_publisher("group coordinator", lambda _d: self.group_coordinator.on_metadata())
            # markers go to each partition's leader: WriteTxnMarkers over the inter-broker listener,
            # or straight to this node's own handler for the partitions it leads
            markers = TransactionMarkerChannelManager(
                node_id=self.node_id, image=self.image, listener_name=cfg.inter_broker_listener_name,
                local_write=lambda req: write_txn_markers(self, req), request_timeout_ms=cfg["request.timeout.ms"],
                ssl_context=self.inter_broker_client_ssl, sasl=self.inter_broker_client_sasl)
            self.txn_coordinator = TransactionCoordinator(cfg, self.replica_manager, self.controller_client,
                                                          self.image, self.producer_ids, self.group_coordinator,
                                                          nursery.start_soon, markers)
            loader.add_publisher("transaction coordinator", lambda _d: self.txn_coordinator.on_metadata())
            # a partition leader asks a producer's transaction coordinator to verify or add a partition
            # (KIP-890): this node's own coordinator directly, another's with AddPartitionsToTxn v5
            self.add_partitions_manager = AddPartitionsToTxnManager(
                node_id=self.node_id, image=self.image, listener_name=cfg.inter_broker_listener_name,
                partition_for=self.txn_coordinator.partition_for,
                local=lambda *a: local_add_or_verify(self, *a), request_timeout_ms=cfg["request.timeout.ms"],
                ssl_context=self.inter_broker_client_ssl, sasl=self.inter_broker_client_sasl)
            self.replica_manager.add_partitions_manager = self.add_partitions_manager  # Produce's verification
            # KIP-932: the share partitions this node leads (ShareFetch / ShareAcknowledge); the
            # persister is the share coordinator's client when this node has one, else None
            self.share_partition_manager = SharePartitionManager(
                cfg, self.replica_manager, self.image, timer, nursery, self.share_persister,
                self.clock.wall_ms)
            loader.add_publisher("share partitions", lambda _d: self.share_partition_manager.on_metadata())

            def quotas(delta: Delta) -> None:
                if delta.records is None:
                    self.quotas.apply_image(self.image.client_quotas)
                else:
                    self.quotas.on_metadata(self.image, delta.records)
                if delta.records is None or any(type(r).__name__ == "ClientQuotaRecord" for r in delta.records):
                    self._apply_ip_connection_rates()

            loader.add_publisher("client quotas", quotas)
        assert self.raft is not None
        self.snapshots = SnapshotGenerator(self.raft.driver, self.image,
                                           SnapshotPolicy.from_properties(cfg, self.clock.wall_ms()),
                                           self.clock.wall_ms, nursery.start_soon)
        loader.add_publisher("snapshot generator", self.snapshots.publish)

    def _broker_epoch(self) -> int:
        return self.lifecycle.broker_epoch if self.lifecycle is not None else -1

    async def _send_alter_partition(self, body: Any) -> Any:
        assert self.alter_partition_channel is not None
        return await self.alter_partition_channel.send(ApiKey.ALTER_PARTITION, ALTER_PARTITION_VERSION, body,
                                                       float(self.config["request.timeout.ms"]) / 1000)

    # ------------------------------------------------------------------ broker membership

    async def _join_cluster(self, nursery: trio.Nursery) -> None:
        """Register with the active controller and wait until unfenced (broker role)."""
        cfg = self.config
        listeners = [(e.listener_name, e.host, e.port, SECURITY_PROTOCOL_IDS.get(e.security_protocol, 0))
                     for e in self.advertised]
        self.lifecycle = BrokerLifecycleManager(
            node_id=self.node_id, cluster_id=self.cluster_id, channel=self.membership_channel, listeners=listeners,
            features=dict(feature_control.SUPPORTED_FEATURES), rack=cfg["broker.rack"],
            log_dir_ids=self._log_dir_ids, metadata_offset=lambda: self.loader.applied_offset,
            heartbeat_interval_ms=cfg["broker.heartbeat.interval.ms"],
            session_timeout_ms=cfg["broker.session.timeout.ms"],
            previous_broker_epoch=self.log_manager.previous_broker_epoch)
        lifecycle = self.lifecycle
        if self.quorum_controller is not None:
            self.quorum_controller.local_incarnation = (self.node_id, lifecycle.incarnation_id)
        await nursery.start(lifecycle.run)
        await self._wait_lifecycle(lifecycle.caught_up, "to catch up with the metadata log")
        # nothing to recover beyond what the loader published: ready to be unfenced at once
        lifecycle.set_ready_to_unfence()
        await self._wait_lifecycle(lifecycle.unfenced, "to be unfenced")
        me = self.node_id
        await self.loader.wait_for(lambda: me in self.image.brokers and not self.image.brokers[me].fenced)

    async def _wait_lifecycle(self, event: trio.Event, what: str) -> None:
        assert self.lifecycle is not None
        waited = 0
        while not event.is_set():
            with trio.move_on_after(5):
                await event.wait()
            if self.lifecycle.fatal is not None:
                raise StartupError(str(self.lifecycle.fatal))
            if not event.is_set():
                self._check_cluster_id()
                waited += 5
                log.info("waiting %ds for the active controller %s", waited, what)
        if self.lifecycle.fatal is not None:
            raise StartupError(str(self.lifecycle.fatal))

    # ------------------------------------------------------------------ the node

    async def run(self, *, task_status: trio.TaskStatus[list[Endpoint]] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until request_shutdown(); every data directory is locked (`.lock`) throughout."""
        dirs = [*self.config.log_dirs, self.config.metadata_log_dir]
        try:
            locks = await trio.to_thread.run_sync(lock_dirs, dirs)
        except DirectoryLockedError as exc:
            raise StartupError(str(exc)) from None
        except OSError as exc:
            raise StartupError(f"cannot lock the log dirs {', '.join(dict.fromkeys(dirs))}: "
                               f"{exc.strerror or exc}") from None
        try:
            await self._run(task_status)
        finally:
            # after the clean shutdown marker: a next process may start only once this one is done
            release_all(locks)

    async def _run(self, task_status: trio.TaskStatus[list[Endpoint]]) -> None:
        cfg = self.config
        timer = SystemTimer()
        async with trio.open_nursery() as nursery:
            timing = time.perf_counter if self.request_metrics is not None else None
            broker_eps = cfg.broker_listeners if cfg.is_broker else []
            controller_eps = cfg.controller_listeners if cfg.is_controller else []
            self._build_tls()
            dispatcher = RequestDispatcher(self)
            auth_delay_ms = cfg["connection.failed.authentication.delay.ms"]
            self._listener_sasl = []
            # each server's own listeners only: a SASL listener's setup (and its JWKS refresh) once
            channels = self._channels(dispatcher, broker_eps)
            controller_dispatcher = ControllerDispatcher(self)
            controller_channels = self._channels(controller_dispatcher, controller_eps)
            for sasl in self._listener_sasl:  # OAUTHBEARER's JWKS loaded before any listener serves
                try:
                    await nursery.start(sasl.run)
                except ConfigError as exc:
                    raise StartupError(str(exc)) from None
            try:
                if broker_eps:
                    self.server = SocketServer(broker_eps, dispatcher, cfg["socket.request.max.bytes"],
                                               cfg, timing, cfg["connections.max.idle.ms"], channels=channels,
                                               failed_authentication_delay_ms=auth_delay_ms)
                    self._apply_ip_connection_rates()
                    self.bound = await nursery.start(self.server.serve, nursery)
                if controller_eps:
                    self.controller_server = SocketServer(controller_eps, controller_dispatcher,
                                                          cfg["socket.request.max.bytes"], cfg,
                                                          max_idle_ms=cfg["connections.max.idle.ms"],
                                                          channels=controller_channels,
                                                          failed_authentication_delay_ms=auth_delay_ms)
                    self.controller_bound = await nursery.start(self.controller_server.serve, nursery)
            except OSError as exc:
                raise StartupError(f"cannot bind {', '.join(map(str, cfg.listeners))}: {exc.strerror or exc}"
                                   ) from None
            if not broker_eps and self.controller_server is not None:
                self.server = self.controller_server  # a controller-only node's only server
            if self.metrics_address is not None and cfg.is_broker:  # the broker's meters (not on a controller-only node)
                try:
                    self.metrics_url = await nursery.start(self._serve_metrics, *self.metrics_address)
                except OSError as exc:
                    raise StartupError(f"cannot bind metrics.listener {cfg['metrics.listener']}: "
                                       f"{exc.strerror or exc}") from None
            try:
                await self._load_storage(nursery)
            except (LogError, OSError, ValueError) as exc:
                raise StartupError(f"cannot load log dirs {', '.join(cfg.log_dirs)}: {exc}") from None
            self.advertised = self._advertised()
            self.controller_advertised = self._advertised_for(self.controller_bound,
                                                              cfg.advertised_controller_listeners)
            await self._open_raft(nursery)
            await self._wait_caught_up()
            self._install_publishers(nursery, timer)
            self.loader.start_publishing()
            await self.loader.wait_for_offset(self.image.offset)  # the first, full publish
            await nursery.start(timer.run)
            if cfg.is_broker:
                await self._join_cluster(nursery)
                # the log manager's tasks (retention, flusher, its checkpoints, cleaner, producer
                # expiration), then the replica manager's (the HW checkpoint, ISR expiration)
                await nursery.start(self.log_manager.run)
                await nursery.start(self.replica_manager.run_high_watermark_checkpointer)
                await nursery.start(self.replica_manager.run_isr_expiration)
                if cfg["remote.log.storage.system.enable"]:  # tiered storage (server/tiered_storage.py)
                    # imported only here: a node without tiered storage loads no object-store client
                    from pybroker.server.tiered_storage import start_remote_log_manager

                    try:
                        self.remote_log_manager = await start_remote_log_manager(self, nursery)
                    except ConfigError as exc:
                        raise StartupError(str(exc)) from None
            for ep in self.bound if cfg.is_broker else self.controller_bound:
                log.info("listening on %s (node.id=%d, cluster.id=%s, roles=%s, log.dirs=%s)", ep, self.node_id,
                         self.cluster_id, ",".join(sorted(cfg.process_roles)), ",".join(cfg.log_dirs))
            if cfg.is_broker:
                for ep in self.controller_bound:
                    log.info("controller listener on %s", ep)
            self.ready.set()
            task_status.started(self.bound or self.controller_bound)
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

    def _quorum_leaderless_s(self) -> float | None:
        """For a controlled shutdown's wait: None while this voter's metadata quorum has a working
        leader (a remote one, or this node with a majority of voters fetching),
        else for how long it is known to have had none (0 when it just noticed). None on a node
        that is no voter: it cannot tell, and waits for its session instead."""
        raft = self.raft
        if raft is None or not raft.client.quorum.is_voter():
            return None
        q = raft.client.quorum
        if q.is_follower and q.has_remote_leader():  # (a prospective voter still names its old leader)
            return None
        if q.is_leader:
            state: Any = q.state
            if q.is_only_voter():
                return None
            # followers fetch at least every fetch max wait (500 ms): a majority silent for longer
            # is gone or cut off, and the leader cannot commit the fence that grants the shutdown
            silent_ms = raft.driver.now_ms() - state.majority_contact_ms
            return None if silent_ms < RAFT_FETCH_SILENCE_MS else silent_ms / 1000
        return 0.0

    async def _stop(self, timer: SystemTimer) -> None:
        log.info("shutting down")
        cfg = self.config
        if cfg.is_broker:
            if self.lifecycle is not None and cfg["controlled.shutdown.enable"]:
                # Kafka's BrokerServer.shutdown: leaderships move away while this node still serves
                if not await self.lifecycle.shutdown(
                        timeout_s=CONTROLLED_SHUTDOWN_TIMEOUT_S, quorum_leaderless_s=self._quorum_leaderless_s,
                        no_leader_grace_s=cfg["controller.quorum.election.timeout.ms"] / 1000) \
                        and not self.lifecycle.quorum_gone:
                    log.error("Timed out waiting for the controller to approve controlled shutdown")
            self.server.begin_shutdown()
            # answer every JoinGroup/SyncGroup still waiting (NOT_COORDINATOR) and stop the deadlines
            self.group_coordinator.shutdown()
            self.txn_coordinator.shutdown()
            self.share_coordinator.shutdown()
            self.share_partition_manager.shutdown()
            rm = self.replica_manager
            if self.remote_log_manager is not None:  # its tasks stop, the RSM and RLMM close
                await self.remote_log_manager.close()
            rm.fetcher_manager.shutdown()
            for purgatory in (rm.fetch_purgatory, rm.produce_purgatory, rm.delete_records_purgatory):
                for ops in list(purgatory._watchers.values()):
                    for op in ops:
                        op.force_complete()
            if not await self.server.wait_idle(SHUTDOWN_GRACE_S):
                log.warning("connections still busy after %.0fs; closing them", SHUTDOWN_GRACE_S)
            if self.lifecycle is not None:
                self.lifecycle.close()
        if self.raft is not None:
            # a quorum leader hands over first (EndQuorumEpoch), so the others elect at once
            # the voters elect a successor within an election timeout when they can: waiting
            # longer only delays the last nodes of a cluster stopping together, who cannot
            handover_s = min(RAFT_SHUTDOWN_S, max(0.5, cfg["controller.quorum.election.timeout.ms"] / 1000))
            if self.lifecycle is not None and self.lifecycle.quorum_gone:
                handover_s = 0.0  # no voter has fetched for an election timeout: nobody to hand over to
            if not await self.raft.driver.shutdown(handover_s) and handover_s:
                log.info("the metadata quorum had not elected another leader within %.1fs", handover_s)
        if self.controller_server is not None:  # last: the quorum needed it until now
            self.controller_server.begin_shutdown()
        for channel in (getattr(self, "forwarding_channel", None), getattr(self, "membership_channel", None),
                        self.alter_partition_channel, getattr(self, "add_partitions_manager", None),
                        getattr(self, "share_persister", None)):
            if channel is not None:
                await channel.aclose()
        if self.raft is not None:
            await self.raft.close()
        if cfg.is_broker:
            hws = self.replica_manager.high_watermarks()
            epoch = self.lifecycle.broker_epoch if self.lifecycle is not None else -1
            await trio.to_thread.run_sync(self.log_manager.shutdown, self.clock.wall_ms(), hws, epoch)
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
    # every codec a request or the shutdown may need, loaded now and frozen with the rest
    try:
        loaded = await trio.to_thread.run_sync(preload_protocol, set(SUPPORTED))
        log.debug("loaded the codecs of %d messages and records", loaded)
    except (OSError, ImportError) as exc:
        # out of descriptors (EMFILE) just as the node started, say: the node goes on serving and
        # the codecs not loaded yet load on first use, as they did before the preload
        log.warning("could not load every protocol codec at start (%s); the rest load on first use", exc)
    gc.collect(1)
    gc.freeze()
    # partitions created later join it too, a batch at a time: a full collection of 10,000 new
    # partitions' objects stalled the loop ~100 ms (bench/recovery), and this one scans only
    # what came since the last freeze (logs hold no reference cycle, so deleted ones still go)
    if broker.config.is_broker:  # a controller-only node hosts no partitions
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
                    if not broker.ready.is_set():
                        # still starting (waiting for the quorum, say): nothing to hand over
                        raise StartupError(f"stopped by {signal.Signals(signum).name} before serving")
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
