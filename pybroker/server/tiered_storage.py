"""Tiered storage on a node (KIP-405): building the RemoteLogManager and its two plug-ins from
the broker config, as Kafka's BrokerServer does when remote.log.storage.system.enable is true.

- RemoteStorageManager: remote.log.storage.manager.class.name (Aiven's
  `io.aiven.kafka.tieredstorage.RemoteStorageManager`, pybroker's own class name) with the
  properties under remote.log.storage.manager.impl.prefix (`rsm.config.`), prefix stripped:
  pybroker/log/remote/storage (factory.py). A class name that is not known is a StartupError.
- RemoteLogMetadataManager: remote.log.metadata.manager.class.name, Kafka's
  TopicBasedRemoteLogMetadataManager (the default; pybroker's own class name is accepted too)
  with the properties under remote.log.metadata.manager.impl.prefix (`rlmm.config.`), talking to
  this node's own listener remote.log.metadata.manager.listener.name (else the inter-broker
  listener) with that listener's TLS/SASL client settings: pybroker/tiered/topic_based_rlmm.py.
- The RemoteLogManager (replication/remote_log_manager.py) gets both, the node's clock, and the
  replica manager's partitions (ReplicaManager.attach_remote_log_manager).

Off by default: without remote.log.storage.system.enable nothing here runs and no log is tiered.
Concurrency: `start_remote_log_manager` runs on the trio thread; the plug-ins' construction
(which may touch the filesystem or start threads) runs in a worker thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from pybroker.config import REMOTE_LOG_METADATA_MANAGER_CLASS_NAME, ConfigError
from pybroker.log.remote.remote_log_metadata_manager import RemoteLogMetadataManager
from pybroker.log.remote.remote_storage_manager import RemoteStorageManager
from pybroker.log.remote.storage import create_remote_storage_manager
from pybroker.protocol.client_security import ClientSecurity
from pybroker.replication.remote_log_manager import RemoteLogManager
from pybroker.security.sasl.listener import client_sasl
from pybroker.security.ssl_factory import ClientSsl
from pybroker.tiered.topic_based_rlmm import TopicBasedRemoteLogMetadataManager

if TYPE_CHECKING:
    from pybroker.server.broker import Broker

# the RemoteLogMetadataManager class names this node implements (Kafka's, and pybroker's own)
RLMM_CLASS_NAMES = frozenset({REMOTE_LOG_METADATA_MANAGER_CLASS_NAME,
                              "pybroker.tiered.topic_based_rlmm.TopicBasedRemoteLogMetadataManager"})


class TieredStorageConfigError(ConfigError):
    """The tiered storage settings do not make a working setup (one line, names the key)."""


def _rlmm_security(broker: Broker, listener: str) -> ClientSecurity:
    """The client settings of this node's connections to its own `listener`."""
    cfg = broker.config
    protocol = cfg.listener_protocol(listener)
    if listener == cfg.inter_broker_listener_name:
        return ClientSecurity(protocol, broker.inter_broker_client_ssl, broker.inter_broker_client_sasl)
    client_ssl = ClientSsl.of(cfg, listener) if protocol in ("SSL", "SASL_SSL") else None
    ssl_ctx = client_ssl.context if client_ssl is not None else None
    sasl = (client_sasl(cfg, listener, "sasl.mechanism.inter.broker.protocol")
            if protocol.startswith("SASL") else None)
    return ClientSecurity(protocol, ssl_ctx, sasl)


def build_plugins(broker: Broker) -> tuple[RemoteStorageManager, RemoteLogMetadataManager]:
    """The RSM and the (started) RLMM of a node (blocking: a worker thread)."""
    cfg = broker.config
    rsm_class = cfg["remote.log.storage.manager.class.name"]
    if not rsm_class:
        raise TieredStorageConfigError("remote.log.storage.system.enable is true but "
                                       "remote.log.storage.manager.class.name is not set")
    rsm = create_remote_storage_manager(rsm_class, cfg.prefixed(cfg["remote.log.storage.manager.impl.prefix"]))
    rlmm_class = str(cfg["remote.log.metadata.manager.class.name"]).strip()
    if rlmm_class not in RLMM_CLASS_NAMES:
        rsm.close()
        raise TieredStorageConfigError(
            f"Invalid value {rlmm_class} for configuration remote.log.metadata.manager.class.name: unknown "
            f"remote log metadata manager (pybroker implements {', '.join(sorted(RLMM_CLASS_NAMES))})")
    listener = cfg["remote.log.metadata.manager.listener.name"] or cfg.inter_broker_listener_name
    endpoint = next((e for e in broker.advertised if e.listener_name == listener), None)
    if endpoint is None:
        rsm.close()
        raise TieredStorageConfigError(
            f"Invalid value {listener} for configuration remote.log.metadata.manager.listener.name: "
            "not a listener of this broker")
    host = endpoint.host or "127.0.0.1"
    rlmm = TopicBasedRemoteLogMetadataManager(
        bootstrap_servers=f"[{host}]:{endpoint.port}" if ":" in host else f"{host}:{endpoint.port}",
        node_id=broker.node_id, configs=cfg.prefixed(cfg["remote.log.metadata.manager.impl.prefix"]),
        security=_rlmm_security(broker, listener), standalone=cfg.standalone)
    rlmm.start()
    return rsm, rlmm


async def start_remote_log_manager(broker: Broker, nursery: trio.Nursery) -> RemoteLogManager:
    """Build the plug-ins and the RemoteLogManager, attach it to the replica manager and run its
    tasks in `nursery`. Raises ConfigError for settings that cannot work."""
    rsm, rlmm = await trio.to_thread.run_sync(build_plugins, broker)
    rlm = RemoteLogManager(broker.config, broker.node_id, rsm, rlmm, clock=broker.clock)
    broker.replica_manager.attach_remote_log_manager(rlm)
    await nursery.start(rlm.run)
    return rlm


__all__ = ["RLMM_CLASS_NAMES", "TieredStorageConfigError", "build_plugins", "start_remote_log_manager"]
