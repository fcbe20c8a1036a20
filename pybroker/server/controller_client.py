"""What a broker's own components ask of the active controller: topic creation (Kafka's
AutoTopicCreationManager: auto-created topics, __consumer_offsets, __transaction_state) and
producer id blocks (Kafka's RPCProducerIdManager: AllocateProducerIds).

When this node's controller is active the calls go straight to it. Otherwise they are Kafka
RPCs to the active controller's controller listener (CreateTopics v7, AllocateProducerIds v0)
through the node's ControllerChannel. A remote CreateTopics answer is followed by waiting, up to
a few seconds, until this node's image holds the created topics, so a caller that goes on to
read the image (Metadata answering an auto-creation, a coordinator routing to its partition)
finds them; a topic still missing then reads as not there yet (callers answer
LEADER_NOT_AVAILABLE / COORDINATOR_NOT_AVAILABLE, which clients retry).

Errors: KafkaError(REQUEST_TIMED_OUT) when no controller answered in time; a refused topic is a
TopicResult with its error, as from the local controller.
Concurrency: trio thread.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import trio

from pybroker.controller.controller import TopicResult
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors, KafkaError
from pybroker.protocol.messages import AllocateProducerIdsRequest, CreateTopicsRequest
from pybroker.server.controller_channel import ControllerUnavailable

if TYPE_CHECKING:
    from pybroker.server.broker import Broker

CREATE_TOPICS_VERSION = 7
ALLOCATE_PRODUCER_IDS_VERSION = 0
VISIBLE_WAIT_S = 5.0

TopicSpec = tuple[str, int, int, Mapping[int, Sequence[int]], Mapping[str, str | None]]


class ControllerClient:
    def __init__(self, broker: Broker, request_timeout_s: Callable[[], float]) -> None:
        self.broker = broker
        self.request_timeout_s = request_timeout_s

    def _local(self) -> Any:
        controller = self.broker.quorum_controller
        return controller if controller is not None and controller.active else None

    async def create_topics(self, topics: Sequence[TopicSpec], validate_only: bool = False) -> list[TopicResult]:
        local = self._local()
        if local is not None:
            try:
                return list(await local.create_topics(topics, validate_only=validate_only))
            except KafkaError as exc:
                if exc.code != Errors.NOT_CONTROLLER:
                    raise
        req = CreateTopicsRequest(timeout_ms=int(self.request_timeout_s() * 1000), validate_only=validate_only,
                                  topics=[CreateTopicsRequest.CreatableTopic(
                                      name=name, num_partitions=np_ if not assignments else -1,
                                      replication_factor=rf if not assignments else -1,
                                      assignments=[CreateTopicsRequest.CreatableReplicaAssignment(
                                          partition_index=p, broker_ids=list(b)) for p, b in assignments.items()],
                                      configs=[CreateTopicsRequest.CreatableTopicConfig(name=k, value=v)
                                               for k, v in configs.items()])
                                      for name, np_, rf, assignments, configs in topics])
        try:
            resp: Any = await self.broker.forwarding_channel.send(
                ApiKey.CREATE_TOPICS, CREATE_TOPICS_VERSION, req, self.request_timeout_s(),
                is_not_controller=lambda b: any(t.error_code == Errors.NOT_CONTROLLER for t in b.topics))
        except ControllerUnavailable as exc:
            raise KafkaError(Errors.REQUEST_TIMED_OUT, str(exc)) from None
        results = [TopicResult(t.name, t.error_code, t.error_message, t.topic_id, t.num_partitions,
                               t.replication_factor) for t in resp.topics]
        # TOPIC_ALREADY_EXISTS: another broker's creation won the race; it is committed too
        created = [r.name for r in results if not r.error or r.error == Errors.TOPIC_ALREADY_EXISTS]
        if created and not validate_only:
            image = self.broker.image
            with trio.move_on_after(VISIBLE_WAIT_S):
                await self.broker.loader.wait_for(lambda: all(n in image.topics_by_name for n in created))
        return results

    async def allocate_producer_ids(self, broker_id: int) -> tuple[int, int]:
        local = self._local()
        epoch = self.broker.lifecycle.broker_epoch if self.broker.lifecycle is not None else -1
        if local is not None:
            try:
                start, length = await local.allocate_producer_ids(broker_id, epoch)
                return int(start), int(length)
            except KafkaError as exc:
                if exc.code != Errors.NOT_CONTROLLER:
                    raise
        try:
            resp: Any = await self.broker.forwarding_channel.send(
                ApiKey.ALLOCATE_PRODUCER_IDS, ALLOCATE_PRODUCER_IDS_VERSION,
                AllocateProducerIdsRequest(broker_id=broker_id, broker_epoch=epoch), self.request_timeout_s())
        except ControllerUnavailable as exc:
            raise KafkaError(Errors.REQUEST_TIMED_OUT, str(exc)) from None
        if resp.error_code:
            raise KafkaError(resp.error_code, "AllocateProducerIds failed")
        return int(resp.producer_id_start), int(resp.producer_id_len)
