"""ElectLeaders (43) v0-2, AlterPartitionReassignments (45) v0, ListPartitionReassignments (46)
v0: the KRaft controller's partition-admin answers (Kafka's ReplicationControlManager behind
QuorumController; a broker forwards these requests to it unchanged).

- ElectLeaders: the active controller elects (controller/replication_control.py) and commits
  the PartitionChangeRecords before answering. Per partition, as Kafka: a partition led by its
  first replica (PREFERRED) or with any leader (UNCLEAN) answers ELECTION_NOT_NEEDED (84,
  "Leader election not needed for topic partition."); an election that finds nobody answers
  PREFERRED_LEADER_NOT_AVAILABLE (PREFERRED: the preferred replica is not in the ISR or cannot
  lead, and no other can either) or ELIGIBLE_LEADERS_NOT_AVAILABLE (UNCLEAN: no live replica);
  an unknown topic or partition UNKNOWN_TOPIC_OR_PARTITION ("No such topic as T" / "No such
  partition as T-P"). A null topic list means every partition of every topic, internal ones
  included, and Kafka then leaves out the partitions whose election was not needed: each topic
  appears with an empty partition list. An empty list answers an empty response at once. An
  election type other than 0/1 fails the whole request with INVALID_REQUEST ("Unknown election
  type N"), at the top level (v1+) and on every requested partition
  (ElectLeadersRequest.getErrorResponse). A node that is not the active controller answers
  NOT_CONTROLLER (the forwarding broker retries at the new one).
- AlterPartitionReassignments: UNKNOWN_TOPIC_OR_PARTITION for a topic or partition the
  cluster lacks; null replicas (cancel) NO_REASSIGNMENT_IN_PROGRESS, since none ever runs;
  a target replica list is validated as Kafka's validateManualPartitionAssignment (empty
  list, a broker that is not registered, a broker named twice -> INVALID_REPLICA_ASSIGNMENT
  with Kafka's messages); a valid target equal to the current replicas is a no-op success.
  An empty topic list answers at once (top-level error message "" there, null otherwise,
  as Kafka's response defaults make it).
- ListPartitionReassignments: nothing is ever reassigning, so the answer is always an empty
  list; Kafka silently leaves out unknown topics and partitions rather than erroring.

**Difference:** pybroker's controller cannot move replicas yet, so a valid target replica set
other than the current one (only possible with several registered brokers) answers
INVALID_REPLICA_ASSIGNMENT. timeout_ms is never waited on: an election commits before the
answer.

Concurrency: trio thread; reassignments read the metadata image, elections go through the
controller's lock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)

if TYPE_CHECKING:
    from pybroker.server.broker import Broker
    from pybroker.server.request_context import RequestContext

PREFERRED, UNCLEAN = 0, 1
NO_REASSIGNMENT_IN_PROGRESS_MESSAGE = "No partition reassignment is in progress."

ElectionResult = ElectLeadersResponse.ReplicaElectionResult
PartitionResult = ElectLeadersResponse.PartitionResult
TopicResponse = AlterPartitionReassignmentsResponse.ReassignableTopicResponse
PartitionResponse = AlterPartitionReassignmentsResponse.ReassignablePartitionResponse

# ------------------------------------------------------------------------------ ElectLeaders


async def handle_elect_leaders(broker: Broker, ctx: RequestContext, req: ElectLeadersRequest) -> ElectLeadersResponse:
    requested = req.topic_partitions
    if requested is not None and not requested:
        return ElectLeadersResponse(throttle_time_ms=0, error_code=0, replica_election_results=[])
    election_type = req.election_type if ctx.api_version >= 1 else PREFERRED
    if election_type not in (PREFERRED, UNCLEAN):
        message = f"Unknown election type {election_type}"
        return ElectLeadersResponse(throttle_time_ms=0, error_code=Errors.INVALID_REQUEST, replica_election_results=[
            ElectionResult(topic=t.topic, partition_result=[
                PartitionResult(partition_id=p, error_code=Errors.INVALID_REQUEST, error_message=message)
                for p in t.partitions])
            for t in requested or []])
    wanted = None if requested is None else [(t.topic, list(t.partitions)) for t in requested]
    results = await broker.controller.elect_leaders(election_type, wanted)
    return ElectLeadersResponse(throttle_time_ms=0, error_code=0, replica_election_results=[
        ElectionResult(topic=name, partition_result=[
            PartitionResult(partition_id=pid, error_code=code, error_message=message)
            for pid, code, message in partitions])
        for name, partitions in results])


# ------------------------------------------------------------------ partition reassignments


def _validate_target(image: Any, replicas: list[int]) -> str | None:
    """Kafka's validateManualPartitionAssignment: the reason a target is invalid, or None."""
    if not replicas:
        return "The manual partition assignment includes an empty replica list."
    previous = None
    for broker_id in sorted(replicas):
        if broker_id not in image.brokers:
            return (f"The manual partition assignment includes broker {broker_id}, but no such broker "
                    "is registered.")
        if broker_id == previous:
            return f"The manual partition assignment includes the broker {previous} more than once."
        previous = broker_id
    return None


def _reassign(image: Any, topic: str, partition: int, replicas: list[int] | None) -> tuple[int, str | None]:
    t = image.topic(topic)
    if t is None:
        return Errors.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic named {topic}."
    reg = t.partitions.get(partition)
    if reg is None:
        return Errors.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find partition {topic}:{partition}."
    if replicas is None:
        # a partition is reassigning only while it has adding/removing replicas: never here
        return Errors.NO_REASSIGNMENT_IN_PROGRESS, NO_REASSIGNMENT_IN_PROGRESS_MESSAGE
    reason = _validate_target(image, replicas)
    if reason is not None:
        return Errors.INVALID_REPLICA_ASSIGNMENT, reason
    if sorted(replicas) != sorted(reg.replicas):
        return Errors.INVALID_REPLICA_ASSIGNMENT, "Moving replicas between brokers is not supported by this node."
    return 0, None


def handle_alter_partition_reassignments(broker: Broker, ctx: RequestContext,
                                         req: AlterPartitionReassignmentsRequest) -> AlterPartitionReassignmentsResponse:
    if not req.topics:
        return AlterPartitionReassignmentsResponse(throttle_time_ms=0, error_code=0, error_message="", responses=[])
    image = broker.image
    responses = []
    for t in req.topics:
        partitions = []
        for p in t.partitions:
            code, message = _reassign(image, t.name, p.partition_index, p.replicas)
            partitions.append(PartitionResponse(partition_index=p.partition_index, error_code=code,
                                                error_message=message))
        responses.append(TopicResponse(name=t.name, partitions=partitions))
    return AlterPartitionReassignmentsResponse(throttle_time_ms=0, error_code=0, error_message=None,
                                               responses=responses)


def handle_list_partition_reassignments(broker: Broker, ctx: RequestContext,
                                        req: ListPartitionReassignmentsRequest) -> ListPartitionReassignmentsResponse:
    # Kafka lists only partitions with adding/removing replicas and skips unknown ones
    # silently, whether the topics are named or null (all): on this node the list is empty.
    return ListPartitionReassignmentsResponse(throttle_time_ms=0, error_code=0, error_message=None, topics=[])
