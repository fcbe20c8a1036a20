"""A consumer fetch parked at a follower (KIP-392) is answered when the leader epoch moves, as
Kafka's DelayedFetch is (its fetchOffsetSnapshot throws FENCED_LEADER_EPOCH); a leader-only
fetch of a followed partition is refused."""

from __future__ import annotations

from pathlib import Path

import trio

from pybroker.config import BrokerConfig
from pybroker.log.manager import LogManager
from pybroker.metadata.image import MetadataImage
from pybroker.protocol import messages as m
from pybroker.protocol.errors import Errors
from pybroker.purgatory.timer import SystemTimer
from pybroker.replication.fetch_params import FetchParams
from pybroker.replication.replica_manager import ReplicaManager, check_leader_epoch, log_config
from pybroker.server.fetch_session import CachedPartition

TID = b"\x05" * 16


def test_a_parked_follower_read_answers_when_the_leader_epoch_moves(tmp_path: Path) -> None:
    async def main() -> None:
        cfg = BrokerConfig({"node.id": "1", "log.dirs": str(tmp_path)})
        lm = LogManager(cfg.log_dirs, 1, default_config=log_config(cfg.topic_defaults()))
        lm.load(0)
        image = MetadataImage()
        for b in (1, 2, 3):  # no endpoints: the fetcher waits, never connects
            image.replay(m.RegisterBrokerRecord(broker_id=b, broker_epoch=b, fenced=False))
        image.replay(m.TopicRecord(name="t", topic_id=TID))
        image.replay(m.PartitionRecord(partition_id=0, topic_id=TID, replicas=[1, 2, 3], isr=[1, 2, 3], leader=2,
                                       leader_epoch=0, partition_epoch=0, removing_replicas=[], adding_replicas=[]))
        async with trio.open_nursery() as nursery:
            timer = SystemTimer()
            await nursery.start(timer.run)
            lm.spawn = nursery.start_soon  # the flushes and deletions of its logs, as server/broker.py wires it
            rm = ReplicaManager(cfg, lm, image, timer, nursery.start_soon)
            await rm.apply_metadata_records(None)
            p = rm.get_partition("t", 0)
            assert p is not None and not p.is_leader
            assert rm.readable_partition("t", 0, 0, leader_only=True) == Errors.NOT_LEADER_OR_FOLLOWER
            assert rm.readable_partition("t", 0, 0, leader_only=False) is p
            # a consumer's Fetch v11+ at the follower's end, naming leader epoch 0
            params = FetchParams(max_wait_ms=30_000, min_bytes=1, fetch_only_leader=False)
            (read,), op = rm.fetch_messages(params, [CachedPartition("t", TID, 0, 1 << 20, 0, 0)])
            assert op is not None and not op.completed and read.error_code == 0
            # the ISR changes, the epoch does not: still waiting for data
            record = m.PartitionChangeRecord(partition_id=0, topic_id=TID, isr=[1, 2])
            image.replay(record)
            await rm.apply_metadata_records([record])
            assert not op.completed
            # node 3 leads at epoch 1: the parked read answers now, with the epoch error
            record = m.PartitionChangeRecord(partition_id=0, topic_id=TID, leader=3, isr=[1, 2, 3])
            image.replay(record)
            await rm.apply_metadata_records([record])
            assert p.leader_epoch == 1 and op.completed
            assert check_leader_epoch(p, 0) == Errors.FENCED_LEADER_EPOCH
            # its completing read decided again: the epoch error, no records
            assert read.error_code == Errors.FENCED_LEADER_EPOCH and read.regions is None
            nursery.cancel_scope.cancel()
        lm.shutdown(0, {})

    trio.run(main)
