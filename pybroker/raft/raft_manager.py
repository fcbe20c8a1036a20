"""One node's KRaft parts, wired (Kafka's KafkaRaftManager).

    manager = await RaftManager.open(node_id=1, cluster_id=..., metadata_log_dir=...,
                                     quorum=QuorumConfig.from_properties(props))
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.driver.run)
        ... manager.driver.handle_request / append / register ...
    await manager.close()

`open` opens (and recovers) `<metadata_log_dir>/__cluster_metadata-0` and its `quorum-state`
file in a worker thread, then builds the KafkaRaftClient and its RaftDriver. Retention and
segment settings come from `metadata_log_settings(props)` (Kafka's metadata.log.segment.bytes,
metadata.max.retention.bytes, metadata.max.retention.ms).

Concurrency: `open` and `close` await worker threads; the rest is the driver's (raft_driver.py).
"""

from __future__ import annotations

import random as _random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import trio

from pybroker.raft.kafka_metadata_log import (
    DEFAULT_RETENTION_BYTES,
    DEFAULT_RETENTION_MS,
    DEFAULT_SEGMENT_BYTES,
    METADATA_LOG_SEGMENT_BYTES,
    METADATA_MAX_RETENTION_BYTES,
    METADATA_MAX_RETENTION_MS,
    KafkaMetadataLog,
)
from pybroker.raft.quorum_config import PropertySource, QuorumConfig
from pybroker.raft.quorum_state_store import QUORUM_STATE_FILE, FileQuorumStateStore
from pybroker.raft.raft_client import LOG_CLEANER_INTERVAL_MS, KafkaRaftClient
from pybroker.raft.raft_driver import RaftDriver
from pybroker.raft.voter_set import DEFAULT_CONTROLLER_LISTENER


def metadata_log_settings(props: PropertySource | Mapping[str, Any]) -> dict[str, int]:
    return {
        "segment_bytes": int(props.get(METADATA_LOG_SEGMENT_BYTES, DEFAULT_SEGMENT_BYTES)),
        "retention_bytes": int(props.get(METADATA_MAX_RETENTION_BYTES, DEFAULT_RETENTION_BYTES)),
        "retention_ms": int(props.get(METADATA_MAX_RETENTION_MS, DEFAULT_RETENTION_MS)),
    }


class RaftManager:
    def __init__(self, log: KafkaMetadataLog, client: KafkaRaftClient, driver: RaftDriver) -> None:
        self.log = log
        self.client = client
        self.driver = driver

    @classmethod
    async def open(cls, *, node_id: int | None, cluster_id: str, metadata_log_dir: str | Path,
                   quorum: QuorumConfig, listener_name: str = DEFAULT_CONTROLLER_LISTENER,
                   local_listeners: Mapping[str, tuple[str, int]] | None = None, serde: Any = None,
                   directory_id: bytes | None = None, random: _random.Random | None = None,
                   log_settings: Mapping[str, int] | None = None,
                   log_cleaner_interval_ms: int = LOG_CLEANER_INTERVAL_MS) -> RaftManager:
        settings = dict(log_settings or {})
        log = await trio.to_thread.run_sync(lambda: KafkaMetadataLog(metadata_log_dir, **settings))
        store = FileQuorumStateStore(log.dir / QUORUM_STATE_FILE)
        client = KafkaRaftClient(
            node_id=node_id, config=quorum, log=log, store=store, cluster_id=cluster_id,
            random=random or _random.Random(), serde=serde, directory_id=directory_id,
            listener_name=listener_name, local_listeners=local_listeners,
            log_cleaner_interval_ms=log_cleaner_interval_ms)
        return cls(log, client, RaftDriver(client))

    async def close(self) -> None:
        """fsync and close the log (after the driver stopped)."""
        await trio.to_thread.run_sync(self.log.close)
