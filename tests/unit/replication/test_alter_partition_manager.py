"""AlterPartitionManager on trio's MockClock: proposals queued meanwhile go out together, one per
partition in flight, a request nobody answered is sent again after the backoff, and each
partition's answer reaches its own callback."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from pybroker.protocol import messages as m
from pybroker.protocol.errors import Errors
from pybroker.replication.alter_partition_manager import AlterPartitionItem, AlterPartitionManager

TID = b"\x05" * 16
Resp = m.AlterPartitionResponse


def item(partition: int, isr: list[int], answers: list[tuple[int, int, Any]]) -> AlterPartitionItem:
    return AlterPartitionItem("t", partition, TID, 2, 7, isr, {1: 10, 2: 20, 3: 30},
                              lambda code, found: answers.append((partition, code, found)))


def answer(req: Any, code_for: dict[int, int]) -> Any:
    return Resp(throttle_time_ms=0, error_code=0, topics=[Resp.TopicData(topic_id=t.topic_id, partitions=[
        Resp.PartitionData(partition_index=p.partition_index, error_code=code_for.get(p.partition_index, 0),
                           leader_id=1, leader_epoch=p.leader_epoch,
                           isr=[b.broker_id for b in p.new_isr_with_epochs], leader_recovery_state=0,
                           partition_epoch=p.partition_epoch + 1)
        for p in t.partitions]) for t in req.topics])


def test_batching_one_in_flight_per_partition_and_retries() -> None:
    sent: list[Any] = []
    answers: list[tuple[int, int, Any]] = []
    release = trio.Event()
    fail_next = [True]

    async def send(req: Any) -> Any:
        sent.append(req)
        if fail_next[0]:
            fail_next[0] = False
            raise RuntimeError("no active controller answered")
        await release.wait()
        return answer(req, {1: Errors.INVALID_UPDATE_VERSION})

    async def main() -> None:
        manager = AlterPartitionManager(1, lambda: 10, send, retry_backoff_s=0.5)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(manager.run)
            assert manager.submit(item(0, [1, 2], answers))
            assert manager.submit(item(1, [1, 3], answers))
            assert not manager.submit(item(0, [1], answers))  # one per partition
            await trio.testing.wait_all_tasks_blocked()
            assert len(sent) == 1  # both partitions in one request, which failed
            await trio.sleep(0.4)
            assert len(sent) == 1  # still backing off
            await trio.sleep(0.2)
            await trio.testing.wait_all_tasks_blocked()
            assert len(sent) == 2 and manager.pending(("t", 0))  # sent again, in flight
            assert not manager.submit(item(0, [1], answers))
            req = sent[1]
            assert req.broker_id == 1 and req.broker_epoch == 10
            parts = req.topics[0].partitions
            assert [(p.partition_index, [b.broker_id for b in p.new_isr_with_epochs],
                     [b.broker_epoch for b in p.new_isr_with_epochs], p.new_isr, p.partition_epoch) for p in parts] \
                == [(0, [1, 2], [10, 20], [], 7), (1, [1, 3], [10, 30], [], 7)]
            release.set()
            await trio.testing.wait_all_tasks_blocked()
            assert [(p, code) for p, code, _ in answers] == [(0, 0), (1, Errors.INVALID_UPDATE_VERSION)]
            assert answers[0][2].partition_epoch == 8 and answers[0][2].isr == [1, 2]
            assert not manager.pending(("t", 0)) and manager.submit(item(0, [1], answers))
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
