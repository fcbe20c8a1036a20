"""makeLeader / makeFollower as the metadata image moves a partition's leadership
(ReplicaManager.apply_metadata_records): who fetches, the leader epoch cache, and what waiting
acks=all produces are told."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from pybroker.config import BrokerConfig
from pybroker.log.manager import LogManager
from pybroker.metadata.image import MetadataImage
from pybroker.protocol import messages as m
from pybroker.protocol.errors import Errors
from pybroker.purgatory.timer import SystemTimer
from pybroker.records.batch import build_batch
from pybroker.replication.replica_manager import ReplicaManager, log_config

TID = b"\x03" * 16


def change(image: MetadataImage, **fields: Any) -> list[Any]:
    record = m.PartitionChangeRecord(partition_id=0, topic_id=TID, **fields)
    image.replay(record)
    return [record]


def test_leadership_moves_away_and_back(tmp_path: Path) -> None:
    async def main() -> None:
        cfg = BrokerConfig({"node.id": "1", "log.dirs": str(tmp_path)})
        lm = LogManager(cfg.log_dirs, 1, default_config=log_config(cfg.topic_defaults()))
        lm.load(0)
        image = MetadataImage()
        for b in (1, 2):  # broker 2 has no endpoint here: its fetcher waits, never connects
            image.replay(m.RegisterBrokerRecord(broker_id=b, broker_epoch=b, fenced=False))
        image.replay(m.TopicRecord(name="t", topic_id=TID))
        image.replay(m.PartitionRecord(partition_id=0, topic_id=TID, replicas=[1, 2], isr=[1, 2], leader=1,
                                       leader_epoch=0, partition_epoch=0, removing_replicas=[], adding_replicas=[]))
        async with trio.open_nursery() as nursery:
            timer = SystemTimer()
            await nursery.start(timer.run)
            lm.spawn = nursery.start_soon  # the flushes and deletions of its logs, as server/broker.py wires it
            rm = ReplicaManager(cfg, lm, image, timer, nursery.start_soon)
            await rm.apply_metadata_records(None)
            p = rm.get_partition("t", 0)
            assert p is not None and p.is_leader and rm.fetcher_manager.fetch_state(("t", 0)) is None
            (resp,), op = rm.append_records(30_000, -1, [("t", 0, bytearray(build_batch([(1000, None, b"v", ())])))])
            assert p.high_watermark == 0  # follower 2 (in the ISR) has not fetched yet
            assert op is not None and not op.completed and resp.base_offset == 0

            # node 2 is elected: this node follows it, and the waiting acks=all produce is told
            await rm.apply_metadata_records(change(image, leader=2))
            assert not p.is_leader and p.leader_epoch == 1
            assert op.completed and resp.error_code == Errors.NOT_LEADER_OR_FOLLOWER and resp.base_offset == -1
            state = rm.fetcher_manager.fetch_state(("t", 0))
            # its log has an epoch history: it fetches at once, at its log end with its latest
            # epoch, and the leader's answer says whether it must cut (KIP-320)
            assert state is not None and not state.truncating and state.leader_epoch == 1
            assert (state.fetch_offset, state.last_fetched_epoch) == (1, 0)
            assert rm.leader_partition("t", 0) == Errors.NOT_LEADER_OR_FOLLOWER

            # an ISR-only change keeps the same fetch state
            await rm.apply_metadata_records(change(image, isr=[2]))
            assert rm.fetcher_manager.fetch_state(("t", 0)) is state and p.isr == [2]

            # leadership comes back at epoch 2: no fetching, the epoch starts at the log end
            await rm.apply_metadata_records(change(image, leader=1, isr=[1, 2]))
            assert p.is_leader and p.leader_epoch == 2
            assert rm.fetcher_manager.fetch_state(("t", 0)) is None and not rm.fetcher_manager.fetchers
            assert p.log.leader_epoch_cache.entries()[-1] == (2, 1)
            assert p.remote[2].log_end_offset == -1  # follower state starts unknown
            rm.update_follower_fetch_state(p, 2, 1, 2)
            assert p.high_watermark == 1
            assert rm.last_offset_for_leader_epoch("t", 0, 2, 0) == (0, 0, 1)
            assert rm.leader_partition("t", 0, current_leader_epoch=1) == Errors.FENCED_LEADER_EPOCH
            assert rm.leader_partition("t", 0, current_leader_epoch=3) == Errors.UNKNOWN_LEADER_EPOCH
            nursery.cancel_scope.cancel()
        lm.shutdown(0, {})

    trio.run(main)
