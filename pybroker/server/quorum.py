"""DescribeQuorum (KIP-595/836/853): the metadata quorum as its leader reports it.

Only the Raft leader of __cluster_metadata knows every voter's and observer's log end offset
and fetch times, so the answer is its KafkaRaftClient's (pybroker/raft: leader id and epoch,
high watermark, each voter and observer with its log end offset, last fetch and last caught-up
timestamps, and the voters' controller listeners for v2). A broker listener of a node that does
not lead the quorum forwards the request to the active controller (server/forwarding.py), as
Kafka's brokers do; a controller listener answers from its own Raft client (NOT_LEADER_OR_FOLLOWER
in the partition when it does not lead).

A request that does not name exactly __cluster_metadata partition 0 gets, for every requested
partition, UNKNOWN_TOPIC_OR_PARTITION with Errors' message (top-level error 0, no nodes), here,
without asking the Raft client. Without DESCRIBE on the cluster (an authorizer on): the top-level
CLUSTER_AUTHORIZATION_FAILED, as ControllerApis.handleDescribeQuorum.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pybroker.controller.metadata_log import METADATA_TOPIC
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import DescribeQuorumRequest, DescribeQuorumResponse
from pybroker.security.authorizer import Op
from pybroker.server.auth_helper import require_cluster

if TYPE_CHECKING:
    from pybroker.server.broker import Broker
    from pybroker.server.request_context import RequestContext

_UNKNOWN_TOPIC_MESSAGE = "This server does not host this topic-partition."


def valid_request(req: DescribeQuorumRequest) -> bool:
    topics = req.topics
    return (len(topics) == 1 and topics[0].topic_name == METADATA_TOPIC and len(topics[0].partitions) == 1
            and topics[0].partitions[0].partition_index == 0)


async def handle_describe_quorum(broker: Broker, ctx: RequestContext, req: DescribeQuorumRequest
                                 ) -> DescribeQuorumResponse:
    require_cluster(broker, ctx, Op.DESCRIBE)
    if not valid_request(req):
        return DescribeQuorumResponse(error_code=0, topics=[DescribeQuorumResponse.TopicData(
            topic_name=t.topic_name, partitions=[DescribeQuorumResponse.PartitionData(
                partition_index=p.partition_index, error_code=Errors.UNKNOWN_TOPIC_OR_PARTITION,
                error_message=_UNKNOWN_TOPIC_MESSAGE) for p in t.partitions]) for t in req.topics])
    assert broker.raft is not None
    response: DescribeQuorumResponse = await broker.raft.driver.handle_request(ApiKey.DESCRIBE_QUORUM,
                                                                             ctx.api_version, req)
    return response
