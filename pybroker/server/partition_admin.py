"""ElectLeaders (43) v0-2, AlterPartitionReassignments (45) v0-1, ListPartitionReassignments (46)
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
- AlterPartitionReassignments: the active controller starts, changes or cancels each
  partition's reassignment (controller/replication_control.py), one batch for the whole
  request. UNKNOWN_TOPIC_OR_PARTITION for a topic or partition the cluster lacks; null replicas
  (cancel) on a partition not reassigning NO_REASSIGNMENT_IN_PROGRESS; a target replica list is
  validated as Kafka's validateManualPartitionAssignment (empty list, a broker that is not
  registered, a broker named twice -> INVALID_REPLICA_ASSIGNMENT with Kafka's messages); v1
  with AllowReplicationFactorChange false (KIP-860) then refuses a target whose size differs
  from the replica set the partition is heading for: INVALID_REPLICATION_FACTOR "The replication
  factor is changed from N to M"; the answer echoes the flag. An empty topic list answers at once (top-level error message "" there, null otherwise, as
  Kafka's response defaults make it). timeout_ms is never waited on: the change commits before
  the answer; the new replicas catch up afterwards.
- ListPartitionReassignments: the partitions with adding or removing replicas, every topic's
  for a null list; Kafka silently leaves out unknown topics and partitions rather than erroring.

Authorization (ControllerApis): ElectLeaders and AlterPartitionReassignments need ALTER on the
cluster, ListPartitionReassignments DESCRIBE; without it the whole request gets
CLUSTER_AUTHORIZATION_FAILED (server/auth_helper.py, the error shapes in server/error_responses.py).

Concurrency: trio thread; elections and reassignments go through the controller's lock, the
listing reads the committed image.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)
from pybroker.security.authorizer import Op
from pybroker.server.auth_helper import require_cluster

if TYPE_CHECKING:
    from pybroker.server.broker import Broker
    from pybroker.server.request_context import RequestContext

PREFERRED, UNCLEAN = 0, 1

ElectionResult = ElectLeadersResponse.ReplicaElectionResult
PartitionResult = ElectLeadersResponse.PartitionResult
TopicResponse = AlterPartitionReassignmentsResponse.ReassignableTopicResponse
PartitionResponse = AlterPartitionReassignmentsResponse.ReassignablePartitionResponse
Ongoing = ListPartitionReassignmentsResponse.OngoingTopicReassignment
OngoingPartition = ListPartitionReassignmentsResponse.OngoingPartitionReassignment

# ------------------------------------------------------------------------------ ElectLeaders


async def handle_elect_leaders(broker: Broker, ctx: RequestContext, req: ElectLeadersRequest) -> ElectLeadersResponse:
    require_cluster(broker, ctx, Op.ALTER)
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


async def handle_alter_partition_reassignments(broker: Broker, ctx: RequestContext,
                                               req: AlterPartitionReassignmentsRequest
                                               ) -> AlterPartitionReassignmentsResponse:
    require_cluster(broker, ctx, Op.ALTER)
    if not req.topics:
        return AlterPartitionReassignmentsResponse(throttle_time_ms=0, error_code=0, error_message="", responses=[])
    allow_rf_change = req.allow_replication_factor_change if ctx.api_version >= 1 else True
    results = await broker.controller.alter_partition_reassignments(
        [(t.name, [(p.partition_index, None if p.replicas is None else list(p.replicas)) for p in t.partitions])
         for t in req.topics], allow_rf_change)
    return AlterPartitionReassignmentsResponse(throttle_time_ms=0, error_code=0, error_message=None,
                                               allow_replication_factor_change=allow_rf_change, responses=[
        TopicResponse(name=name, partitions=[
            PartitionResponse(partition_index=pid, error_code=code, error_message=message)
            for pid, code, message in partitions])
        for name, partitions in results])


def handle_list_partition_reassignments(broker: Broker, ctx: RequestContext,
                                        req: ListPartitionReassignmentsRequest) -> ListPartitionReassignmentsResponse:
    require_cluster(broker, ctx, Op.DESCRIBE)
    # Kafka lists only partitions with adding/removing replicas and skips unknown ones silently
    requested = None if req.topics is None else [(t.name, list(t.partition_indexes)) for t in req.topics]
    return ListPartitionReassignmentsResponse(throttle_time_ms=0, error_code=0, error_message=None, topics=[
        Ongoing(name=name, partitions=[
            OngoingPartition(partition_index=pid, replicas=replicas, adding_replicas=adding, removing_replicas=removing)
            for pid, replicas, adding, removing in partitions])
        for name, partitions in broker.controller.list_partition_reassignments(requested)])
