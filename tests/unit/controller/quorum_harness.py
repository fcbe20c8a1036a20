"""A QuorumController on a real one-voter Raft quorum in this process (files in a temp dir):
the same Raft client, loader and controller a node runs, without sockets. Brokers join with
real BrokerRegistration / BrokerHeartbeat requests, so they are unfenced as a node's are."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import trio

from pybroker.config import BrokerConfig
from pybroker.controller import features as feature_control
from pybroker.controller.controller import QuorumController
from pybroker.controller.metadata_log import MetadataRecordSerde
from pybroker.metadata.image import MetadataImage
from pybroker.metadata.loader import MetadataLoader
from pybroker.protocol import messages as m
from pybroker.raft.quorum_config import QuorumConfig
from pybroker.raft.raft_manager import RaftManager

CLUSTER_ID = "harnessClusterId000000"
WAIT_S = 20


class Quorum:
    def __init__(self, manager: RaftManager, image: MetadataImage, loader: MetadataLoader,
                 controller: QuorumController) -> None:
        self.manager, self.image, self.loader, self.controller = manager, image, loader, controller

    async def register(self, broker_id: int, rack: str | None = None, fenced: bool = False,
                       previous_broker_epoch: int = -1) -> int:
        """Register a broker (a new incarnation; unfenced unless `fenced`); its broker epoch.
        `previous_broker_epoch`: the epoch a clean shutdown left (-1: none, a crash)."""
        req = m.BrokerRegistrationRequest(
            broker_id=broker_id, cluster_id=CLUSTER_ID, incarnation_id=uuid.uuid4().bytes,
            listeners=[m.BrokerRegistrationRequest.Listener(name="PLAINTEXT", host="127.0.0.1",
                                                            port=9000 + broker_id, security_protocol=0)],
            features=[m.BrokerRegistrationRequest.Feature(name=n, min_supported_version=lo, max_supported_version=hi)
                      for n, (lo, hi) in sorted(feature_control.SUPPORTED_FEATURES.items())],
            rack=rack, log_dirs=[uuid.uuid4().bytes], previous_broker_epoch=previous_broker_epoch)
        error, epoch, message = await self.controller.register_broker(req)
        assert error == 0, message
        if not fenced:
            await self.heartbeat(broker_id, epoch)
        return epoch

    async def heartbeat(self, broker_id: int, epoch: int, *, want_fence: bool = False,
                        want_shut_down: bool = False) -> tuple[int, bool, bool, bool]:
        return await self.controller.broker_heartbeat(m.BrokerHeartbeatRequest(
            broker_id=broker_id, broker_epoch=epoch, current_metadata_offset=self.loader.applied_offset,
            want_fence=want_fence, want_shut_down=want_shut_down))


@asynccontextmanager
async def one_voter_quorum(directory: Path, overrides: Mapping[str, Any] | None = None,
                           brokers: Mapping[int, str | None] | None = None) -> AsyncIterator[Quorum]:
    """A running quorum whose controller is active, with `brokers` (id -> rack) registered
    and unfenced (default: broker 1)."""
    cfg = BrokerConfig({"log.dirs": str(directory), **(overrides or {})})
    manager = await RaftManager.open(node_id=1, cluster_id=CLUSTER_ID, metadata_log_dir=directory,
                                     quorum=replace(QuorumConfig.from_properties(cfg), voters={1: ("127.0.0.1", 1)}),
                                     serde=MetadataRecordSerde())
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(manager.driver.run)
            image = MetadataImage()
            loader = MetadataLoader(image, lambda: manager.client.high_watermark)
            await nursery.start(loader.run)
            manager.driver.register(loader)
            loader.start_publishing()
            controller = QuorumController(cfg, image, manager.driver, loader, cluster_id=CLUSTER_ID,
                                          now_ms=lambda: int(time.time() * 1000),
                                          next_append_offset=lambda: manager.client.next_append_offset)
            loader.leader_listeners.append(controller.handle_leader_change)
            await nursery.start(controller.run)
            with trio.fail_after(WAIT_S):
                while not controller.active:
                    await controller.activated.wait()
            quorum = Quorum(manager, image, loader, controller)
            with trio.fail_after(WAIT_S):
                for broker_id, rack in (brokers if brokers is not None else {1: None}).items():
                    await quorum.register(broker_id, rack)
            yield quorum
            nursery.cancel_scope.cancel()
    finally:
        await manager.close()
