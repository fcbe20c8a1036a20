"""The checkpoint timers, on virtual time: the replica manager writes the high watermarks to
replication-offset-checkpoint every replica.high.watermark.checkpoint.interval.ms (Kafka's 5 s),
the log manager the recovery points every log.flush.offset.checkpoint.interval.ms (60 s), each
on its own timer (the log manager's alone: tests/unit/log/test_manager_tasks.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import trio
import trio.testing

from pybroker.config import BrokerConfig
from pybroker.log.checkpoint import OffsetCheckpointFile
from pybroker.log.manager import LogManager
from pybroker.metadata.image import MetadataImage
from pybroker.protocol import messages as m
from pybroker.purgatory.timer import SystemTimer
from pybroker.records.batch import build_batch
from pybroker.replication.replica_manager import ReplicaManager, log_config

TID = b"\x05" * 16


def checkpoint(path: Path) -> dict:
    return OffsetCheckpointFile(path).read() if path.exists() else {}


async def until(condition: Callable[[], bool]) -> None:
    """Poll a file the checkpointer writes from a worker thread (virtual time)."""
    while True:
        if condition():
            return
        await trio.sleep(0.5)


def test_high_watermarks_and_recovery_points_are_checkpointed_on_their_own_timers(tmp_path: Path) -> None:
    async def main() -> None:
        cfg = BrokerConfig({"node.id": "1", "log.dirs": str(tmp_path)})
        assert cfg["replica.high.watermark.checkpoint.interval.ms"] == 5000  # Kafka's default
        lm = LogManager(cfg.log_dirs, 1, default_config=log_config(cfg.topic_defaults()), config=cfg)
        lm.load(0)
        image = MetadataImage()
        image.replay(m.RegisterBrokerRecord(broker_id=1, broker_epoch=1, fenced=False))
        image.replay(m.TopicRecord(name="t", topic_id=TID))
        image.replay(m.PartitionRecord(partition_id=0, topic_id=TID, replicas=[1], isr=[1], leader=1,
                                       leader_epoch=0, partition_epoch=0, removing_replicas=[], adding_replicas=[]))
        hw_file = tmp_path / "replication-offset-checkpoint"
        rp_file = tmp_path / "recovery-point-offset-checkpoint"
        async with trio.open_nursery() as nursery:
            timer = SystemTimer()
            await nursery.start(timer.run)
            lm.spawn = nursery.start_soon  # the flushes and deletions of its logs, as server/broker.py wires it
            rm = ReplicaManager(cfg, lm, image, timer, nursery.start_soon)
            await rm.apply_metadata_records(None)
            p = rm.get_partition("t", 0)
            assert p is not None
            rm.append(p, bytearray(build_batch([(1000, None, b"v", ())] * 3)))
            assert p.high_watermark == 3  # the leader alone is the ISR
            await nursery.start(rm.run_high_watermark_checkpointer)
            await nursery.start(lm.run_recovery_point_checkpointer)
            start = trio.current_time()
            await until(lambda: checkpoint(hw_file).get(("t", 0)) == 3)
            # within the HW interval (plus one tick), long before the recovery-point one
            assert trio.current_time() - start <= 5.0 + 5.0
            assert ("t", 0) not in checkpoint(rp_file)
            await until(lambda: ("t", 0) in checkpoint(rp_file))
            assert trio.current_time() - start >= 60.0
            nursery.cancel_scope.cancel()
        lm.shutdown(0)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0.05))
