"""DeleteRecords on a leader with followers (Kafka's DelayedDeleteRecords): the answer waits in the
delete-records purgatory until the low watermark (the smallest log start offset among the leader
and the followers on live brokers) reaches the requested offset; followers report theirs in their
fetches. On trio's MockClock, so the timeout is virtual time, not a sleep."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio
import trio.testing

from pybroker.config import BrokerConfig
from pybroker.log.config import LogConfig
from pybroker.log.log import UnifiedLog
from pybroker.log.manager import LogManager
from pybroker.metadata.image import MetadataImage
from pybroker.protocol import messages as m
from pybroker.protocol.errors import Errors
from pybroker.purgatory.timer import SystemTimer
from pybroker.records.batch import build_batch
from pybroker.replication.delayed_delete_records import DeleteRecordsPartitionStatus
from pybroker.replication.partition import Partition
from pybroker.replication.replica_manager import ReplicaManager, log_config

TID = b"\x05" * 16
TP = ("t", 0)


def change(image: MetadataImage, **fields: Any) -> list[Any]:
    record = m.PartitionChangeRecord(partition_id=0, topic_id=TID, **fields)
    image.replay(record)
    return [record]


def fence(image: MetadataImage, broker_id: int) -> list[Any]:
    record = m.BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=broker_id, fenced=1)
    image.replay(record)
    return [record]


def run_leader(tmp_path: Path, body: Callable[[ReplicaManager, MetadataImage, Partition, trio.testing.MockClock],
                                              Awaitable[None]]) -> None:
    """Node 1 leads t-0 (replicas 1, 2, 3, all in sync and caught up at offset 10) with the
    purgatory's timer on a MockClock that only moves when the test jumps it."""
    clock = trio.testing.MockClock()

    async def main() -> None:
        cfg = BrokerConfig({"node.id": "1", "log.dirs": str(tmp_path)})
        lm = LogManager(cfg.log_dirs, 1, default_config=log_config(cfg.topic_defaults()))
        lm.load(0)
        image = MetadataImage()
        for b in (1, 2, 3):  # no endpoints: nothing connects anywhere
            image.replay(m.RegisterBrokerRecord(broker_id=b, broker_epoch=b, fenced=False))
        image.replay(m.TopicRecord(name="t", topic_id=TID))
        image.replay(m.PartitionRecord(partition_id=0, topic_id=TID, replicas=[1, 2, 3], isr=[1, 2, 3], leader=1,
                                       leader_epoch=0, partition_epoch=0, removing_replicas=[], adding_replicas=[]))
        async with trio.open_nursery() as nursery:
            timer = SystemTimer()
            await nursery.start(timer.run)
            lm.spawn = nursery.start_soon  # the flushes and deletions of its logs, as server/broker.py wires it
            rm = ReplicaManager(cfg, lm, image, timer, nursery.start_soon)
            await rm.apply_metadata_records(None)
            p = rm.get_partition(*TP)
            assert p is not None and p.is_leader
            rm.append(p, bytearray(build_batch([(1000, None, b"v%d" % i, ()) for i in range(10)])))
            for follower in (2, 3):
                rm.update_follower_fetch_state(p, follower, 10, follower, 0)
            assert p.high_watermark == 10 and rm.low_watermark(p) == 0
            await body(rm, image, p, clock)
            nursery.cancel_scope.cancel()
        lm.shutdown(0, {})

    trio.run(main, clock=clock)


class Answered:
    """What `delete` returns for a request the replica manager answered without waiting."""

    completed = True
    expired = False


async def delete(rm: ReplicaManager, p: Partition, offset: int, timeout_ms: int = 30_000
                 ) -> tuple[Any, DeleteRecordsPartitionStatus]:
    """DeleteRecords of one partition led here (ReplicaManager.delete_records): the leader's log
    start offset moves, then the request waits in the purgatory unless the low watermark is
    already there."""
    (status,), op = await rm.delete_records(timeout_ms, [(*TP, offset)])
    assert p.log.log_start_offset >= offset
    return (op if op is not None else Answered()), status


def test_the_answer_waits_for_every_follower_to_report_the_new_log_start(tmp_path: Path) -> None:
    async def body(rm: ReplicaManager, image: MetadataImage, p: Partition, clock: trio.testing.MockClock) -> None:
        op, result = await delete(rm, p, 5)
        assert not op.completed and p.log.log_start_offset == 5
        assert (result.error_code, result.low_watermark) == (Errors.REQUEST_TIMED_OUT, 0)
        rm.update_follower_fetch_state(p, 2, 10, 2, 5)  # follower 2 followed; 3 has not yet
        assert not op.completed and rm.low_watermark(p) == 0
        rm.update_follower_fetch_state(p, 3, 10, 3, 5)
        assert op.completed and not op.expired
        assert (result.error_code, result.low_watermark) == (0, 5)
        assert not rm.delete_records_purgatory.watched()
        # already there: answered without waiting (one replica's case too)
        op, result = await delete(rm, p, 3)
        assert op.completed and (result.error_code, result.low_watermark) == (0, 5)

    run_leader(tmp_path, body)


def test_a_stopped_follower_in_the_isr_holds_it_until_the_timeout(tmp_path: Path) -> None:
    async def body(rm: ReplicaManager, image: MetadataImage, p: Partition, clock: trio.testing.MockClock) -> None:
        op, result = await delete(rm, p, 6, timeout_ms=30_000)
        rm.update_follower_fetch_state(p, 2, 10, 2, 6)
        clock.jump(29.9)
        await trio.testing.wait_all_tasks_blocked()
        assert not op.completed and 3 in p.isr
        clock.jump(0.2)
        await trio.testing.wait_all_tasks_blocked()
        assert op.completed and op.expired
        # Kafka's answer: REQUEST_TIMED_OUT with the low watermark the request found
        assert (result.error_code, result.low_watermark) == (Errors.REQUEST_TIMED_OUT, 0)
        assert p.log.log_start_offset == 6  # the leader's start moved all the same

    run_leader(tmp_path, body)


def test_a_fenced_follower_is_not_waited_for(tmp_path: Path) -> None:
    async def body(rm: ReplicaManager, image: MetadataImage, p: Partition, clock: trio.testing.MockClock) -> None:
        op, result = await delete(rm, p, 4)
        rm.update_follower_fetch_state(p, 2, 10, 2, 4)
        assert not op.completed
        # follower 3's broker is fenced while the request waits: it no longer counts (the
        # deliberate difference: Kafka would re-check only when a watermark rises)
        await rm.apply_metadata_records(fence(image, 3))
        assert op.completed and not op.expired
        assert (result.error_code, result.low_watermark) == (0, 4)
        # and a request made while it is fenced is answered at once
        op, result = await delete(rm, p, 7)
        assert not op.completed  # follower 2 is still at 4
        rm.update_follower_fetch_state(p, 2, 10, 2, 7)
        assert op.completed and (result.error_code, result.low_watermark) == (0, 7)

    run_leader(tmp_path, body)


def test_a_lost_leadership_answers_and_a_new_leader_knows_no_followers_log_starts(tmp_path: Path) -> None:
    async def body(rm: ReplicaManager, image: MetadataImage, p: Partition, clock: trio.testing.MockClock) -> None:
        op, result = await delete(rm, p, 2)
        rm.update_follower_fetch_state(p, 2, 10, 2, 2)
        assert not op.completed  # 3 is still at 0
        # node 2 takes over: the waiting request is answered NOT_LEADER_OR_FOLLOWER
        await rm.apply_metadata_records(change(image, leader=2))
        assert op.completed and (result.error_code, result.low_watermark) == (Errors.NOT_LEADER_OR_FOLLOWER, -1)
        # leading again: every follower's state is unknown until it fetches (Kafka's new Replica)
        await rm.apply_metadata_records(change(image, leader=1))
        assert p.is_leader and p.leader_epoch == 2 and rm.low_watermark(p) == -1
        op, result = await delete(rm, p, 2)
        assert (result.error_code, result.low_watermark) == (Errors.REQUEST_TIMED_OUT, -1)
        rm.update_follower_fetch_state(p, 2, 10, 2, 2)
        assert not op.completed  # 3 has not fetched from this leader yet
        rm.update_follower_fetch_state(p, 3, 10, 3, 2)
        assert op.completed and (result.error_code, result.low_watermark) == (0, 2)
        # re-elected at a new epoch without leaving (Kafka's isNewLeader false): the followers'
        # log starts are kept
        await rm.apply_metadata_records(change(image, leader=1))
        assert p.leader_epoch == 3 and rm.low_watermark(p) == 2

    run_leader(tmp_path, body)


def test_a_follower_removed_from_the_replicas_no_longer_counts(tmp_path: Path) -> None:
    async def body(rm: ReplicaManager, image: MetadataImage, p: Partition, clock: trio.testing.MockClock) -> None:
        op, result = await delete(rm, p, 3)
        rm.update_follower_fetch_state(p, 2, 10, 2, 3)
        assert not op.completed
        await rm.apply_metadata_records(change(image, replicas=[1, 2], isr=[1, 2], leader=1))
        assert op.completed and (result.error_code, result.low_watermark) == (0, 3)

    run_leader(tmp_path, body)


def test_low_watermark_counts_every_live_replica_in_the_isr_or_not(tmp_path: Path) -> None:
    log = UnifiedLog(tmp_path / "t-0", LogConfig(), topic="t", partition=0)
    p = Partition("t", 0, TID, log, local_id=1, leader_id=1, leader_epoch=0, partition_epoch=0,
                  replicas=[1, 2, 3, 4], isr=[1, 2])
    p.make_leader(now_ms=0)
    log.append_as_leader(bytearray(build_batch([(1000, None, b"v", ())] * 8)), 0, 0)
    log.high_watermark = 8
    log.increment_log_start_offset(6)
    alive = {1, 2, 3, 4}
    assert p.low_watermark_if_leader(alive.__contains__) == -1  # nobody has fetched yet
    for replica, start in ((2, 6), (3, 2), (4, 0)):  # 3 and 4 are outside the ISR
        p.update_follower_fetch_state(replica, 8, 8, 0, log_start_offset=start)
    assert p.low_watermark_if_leader(alive.__contains__) == 0
    alive.discard(4)  # fenced
    assert p.low_watermark_if_leader(alive.__contains__) == 2
    alive.discard(3)
    assert p.low_watermark_if_leader(alive.__contains__) == 6  # the leader's own start
    log.close()


def test_delete_records_answers_each_partition_as_kafka(tmp_path: Path) -> None:
    """ReplicaManager.delete_records and Partition.delete_records_on_leader without the wire:
    Kafka's deleteRecordsOnLocalLog order, and the high watermark standing for offset -1."""

    async def body(rm: ReplicaManager, image: MetadataImage, p: Partition, clock: trio.testing.MockClock) -> None:
        statuses, op = await rm.delete_records(30_000, [
            ("__consumer_offsets", 0, 1), ("t", 9, 1), ("t", 0, 11), ("t", 0, -5), ("t", 0, -1)])
        assert [(s.error_code, s.low_watermark) for s in statuses] == [
            (Errors.INVALID_TOPIC_EXCEPTION, -1), (Errors.UNKNOWN_TOPIC_OR_PARTITION, -1),
            (Errors.OFFSET_OUT_OF_RANGE, -1), (Errors.OFFSET_OUT_OF_RANGE, -1),
            (Errors.REQUEST_TIMED_OUT, 0)]  # -1: the high watermark, 10; the followers are at 0
        assert statuses[-1].required_offset == 10 and p.log.log_start_offset == 10
        assert op is not None and not op.completed
        for follower in (2, 3):
            rm.update_follower_fetch_state(p, follower, 10, follower, 10)
        assert op.completed and (statuses[-1].error_code, statuses[-1].low_watermark) == (0, 10)
        # a compacted topic's records are not deleted; a follower deletes nothing as leader
        p.log.config = LogConfig().with_overrides({"cleanup.policy": "compact"})
        (s,), op = await rm.delete_records(30_000, [("t", 0, 10)])
        assert op is None and s.error_code == Errors.POLICY_VIOLATION
        p.log.config = LogConfig()
        await rm.apply_metadata_records(change(image, leader=2))
        (s,), op = await rm.delete_records(30_000, [("t", 0, 10)])
        assert op is None and s.error_code == Errors.NOT_LEADER_OR_FOLLOWER

    run_leader(tmp_path, body)
