"""ISR changes from partition leaders to the active controller (Kafka's AlterPartitionManager).

Concurrency first: trio thread only. `submit` queues one proposed ISR per partition (a second
one for a partition with a proposal queued or in flight is refused: the leader proposes again
after the answer, from the then-current state); one task (`run`) sends everything queued as one
AlterPartition request (v3: topic ids, the new ISR with each member's broker epoch) through the
`send` it was given (the node's controller channel, which finds the active controller and
retries NOT_CONTROLLER), and hands each partition's answer to the proposal's callback. A request
that got no answer at all (no controller within the timeout) is sent again after
`retry_backoff_s`, as Kafka retries until the partition's state moves on.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import AlterPartitionRequest

log = logging.getLogger("pybroker.replica.alter_partition")

ALTER_PARTITION_VERSION = 3
TopicPartition = tuple[str, int]
# callback(error code, the controller's answer for the partition or None)
Callback = Callable[[int, Any], None]


class AlterPartitionItem:
    __slots__ = ("topic", "partition", "topic_id", "leader_epoch", "partition_epoch", "new_isr", "broker_epochs",
                 "callback")

    def __init__(self, topic: str, partition: int, topic_id: bytes, leader_epoch: int, partition_epoch: int,
                 new_isr: list[int], broker_epochs: dict[int, int], callback: Callback) -> None:
        self.topic = topic
        self.partition = partition
        self.topic_id = topic_id
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.new_isr = new_isr
        self.broker_epochs = broker_epochs
        self.callback = callback


class AlterPartitionManager:
    def __init__(self, broker_id: int, broker_epoch: Callable[[], int],
                 send: Callable[[AlterPartitionRequest], Awaitable[Any]], retry_backoff_s: float = 0.1) -> None:
        self.broker_id = broker_id
        self.broker_epoch = broker_epoch
        self.send = send
        self.retry_backoff_s = retry_backoff_s
        self._queued: dict[TopicPartition, AlterPartitionItem] = {}
        self._in_flight: set[TopicPartition] = set()
        self._wake = trio.Event()

    def submit(self, item: AlterPartitionItem) -> bool:
        """Queue a proposal; False when the partition already has one queued or in flight."""
        tp = (item.topic, item.partition)
        if tp in self._queued or tp in self._in_flight:
            return False
        self._queued[tp] = item
        self._wake.set()
        return True

    def pending(self, tp: TopicPartition) -> bool:
        return tp in self._queued or tp in self._in_flight

    def build_request(self, items: list[AlterPartitionItem]) -> AlterPartitionRequest:
        topics: dict[bytes, Any] = {}
        for it in items:
            t = topics.get(it.topic_id)
            if t is None:
                t = topics[it.topic_id] = AlterPartitionRequest.TopicData(topic_name=it.topic, topic_id=it.topic_id,
                                                                          partitions=[])
            t.partitions.append(AlterPartitionRequest.PartitionData(
                partition_index=it.partition, leader_epoch=it.leader_epoch, new_isr=[],  # v3: members with epochs
                new_isr_with_epochs=[AlterPartitionRequest.BrokerState(broker_id=b,
                                                                       broker_epoch=it.broker_epochs.get(b, -1))
                                     for b in it.new_isr],
                leader_recovery_state=0, partition_epoch=it.partition_epoch))
        return AlterPartitionRequest(broker_id=self.broker_id, broker_epoch=self.broker_epoch(),
                                     topics=list(topics.values()))

    async def run(self) -> None:
        while True:
            if not self._queued:
                await self._wake.wait()
                self._wake = trio.Event()
                continue
            items = list(self._queued.values())
            self._queued.clear()
            self._in_flight.update((it.topic, it.partition) for it in items)
            try:
                resp = await self.send(self.build_request(items))
            except Exception as exc:  # no controller answered: every proposal is sent again
                log.info("AlterPartition for %d partition(s) got no answer (%s); retrying", len(items), exc)
                self._in_flight.difference_update((it.topic, it.partition) for it in items)
                for it in items:
                    self._queued.setdefault((it.topic, it.partition), it)
                await trio.sleep(self.retry_backoff_s)
                continue
            self._in_flight.difference_update((it.topic, it.partition) for it in items)
            self._answer(items, resp)

    def _answer(self, items: list[AlterPartitionItem], resp: Any) -> None:
        answers: dict[tuple[bytes, int], Any] = {}
        for t in resp.topics:
            for p in t.partitions:
                answers[(t.topic_id, p.partition_index)] = p
        for it in items:
            if resp.error_code:
                code, found = int(resp.error_code), None
            else:
                found = answers.get((it.topic_id, it.partition))
                code = int(found.error_code) if found is not None else int(Errors.UNKNOWN_SERVER_ERROR)
            try:
                it.callback(code, found)
            except Exception:  # one partition's bug must not stop the others' answers
                log.exception("AlterPartition answer for %s-%d failed", it.topic, it.partition)
