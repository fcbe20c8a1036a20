"""DescribeQuorum (KIP-595/836/853): the metadata quorum as its leader reports it.

pybroker is always a combined broker+controller and the only voter of its quorum, so it
answers as Kafka's KafkaRaftClient leader does (a Kafka broker that is not a controller
would forward instead):
- the request must name exactly one topic, __cluster_metadata, with exactly partition 0;
  anything else gets, for every requested partition, UNKNOWN_TOPIC_OR_PARTITION with
  Errors' message (top-level error 0, no nodes);
- otherwise: leader id = this node, leader epoch = the epoch the metadata log's batches
  carry (pybroker has no elections, so it is 0; Kafka's first election makes it 1), high
  watermark = the metadata log end offset (with one voter an fsynced append is committed);
- current voters: this node, log end offset = the log end, last fetch and last caught-up
  timestamps both "now" (Kafka's RaftUtil.toReplicaState does this for the leader), replica
  directory id zero (a kraft.version 0 static voter has none); observers: none;
- v2 nodes: this node with its listeners. With static voters Kafka lists the first
  controller listener; pybroker serves the controller APIs on its own listeners, so it lists
  those named in controller.listener.names if any are, else all its advertised listeners.
Success responses keep the generated defaults for the nullable error messages (""), as
Kafka's generated classes do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pybroker.controller.metadata_log import METADATA_TOPIC
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import DescribeQuorumRequest, DescribeQuorumResponse

if TYPE_CHECKING:
    from pybroker.server.broker import Broker
    from pybroker.server.request_context import RequestContext

_NO_DIRECTORY_ID = bytes(16)
_UNKNOWN_TOPIC_MESSAGE = "This server does not host this topic-partition."


def controller_endpoints(broker: Broker) -> list[Any]:
    endpoints = list(getattr(broker, "advertised", []) or [])
    names = [n.upper() for n in (broker.config["controller.listener.names"] or [])]
    named = [e for e in endpoints if e.listener_name.upper() in names]
    return named or endpoints


def handle_describe_quorum(broker: Broker, ctx: RequestContext, req: DescribeQuorumRequest) -> DescribeQuorumResponse:
    topics = req.topics
    valid = (len(topics) == 1 and topics[0].topic_name == METADATA_TOPIC and len(topics[0].partitions) == 1
             and topics[0].partitions[0].partition_index == 0)
    if not valid:
        return DescribeQuorumResponse(error_code=0, topics=[DescribeQuorumResponse.TopicData(
            topic_name=t.topic_name, partitions=[DescribeQuorumResponse.PartitionData(
                partition_index=p.partition_index, error_code=Errors.UNKNOWN_TOPIC_OR_PARTITION,
                error_message=_UNKNOWN_TOPIC_MESSAGE) for p in t.partitions]) for t in topics])
    now = broker.clock.wall_ms()
    node_id = broker.node_id
    metadata_log = broker.metadata_log
    end = metadata_log.end_offset
    leader = DescribeQuorumResponse.ReplicaState(
        replica_id=node_id, replica_directory_id=_NO_DIRECTORY_ID, log_end_offset=end,
        last_fetch_timestamp=now, last_caught_up_timestamp=now)
    partition = DescribeQuorumResponse.PartitionData(
        partition_index=0, error_code=0, leader_id=node_id, leader_epoch=metadata_log.leader_epoch,
        high_watermark=end, current_voters=[leader], observers=[])
    nodes = [DescribeQuorumResponse.Node(node_id=node_id, listeners=[
        DescribeQuorumResponse.Listener(name=e.listener_name, host=e.host, port=e.port)
        for e in controller_endpoints(broker)])]
    return DescribeQuorumResponse(error_code=0, topics=[DescribeQuorumResponse.TopicData(
        topic_name=METADATA_TOPIC, partitions=[partition])], nodes=nodes)
