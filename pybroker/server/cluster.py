"""DescribeCluster (60) and InitProducerId (22).

DescribeCluster reports the unfenced brokers on the request's listener and, as the controller
id, a random one of them (Kafka's KRaft brokers do: admin clients send controller requests to
a broker, which forwards them). v2 (KIP-1073) lists fenced brokers too when asked
(IncludeFencedBrokers) and marks each broker's IsFenced.

Producer ids come in blocks of 1000 from the active controller (a ProducerIdsRecord in
__cluster_metadata; AllocateProducerIds when the controller is another node: Kafka's
RPCProducerIdManager), so ids are never reused across restarts or nodes. While no block can be
had, InitProducerId answers COORDINATOR_LOAD_IN_PROGRESS (retriable), as Kafka's does.
A transactional id goes to the transaction coordinator (pybroker/server/txn.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pybroker.acl import AUTHORIZED_OPERATIONS_OMITTED
from pybroker.protocol.errors import Errors, KafkaError
from pybroker.protocol.messages import (
    DescribeClusterRequest,
    DescribeClusterResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from pybroker.security.authorizer import Op, Res, cluster_authorized_operations
from pybroker.server.metadata import controller_id

if TYPE_CHECKING:
    from pybroker.server.broker import Broker
    from pybroker.server.request_context import RequestContext


def handle_describe_cluster(broker: Broker, ctx: RequestContext, req: DescribeClusterRequest) -> DescribeClusterResponse:
    if ctx.api_version >= 1 and req.endpoint_type not in (1,):
        # 1 = brokers; 2 = controllers (a combined node could answer, but Kafka brokers reject it)
        return DescribeClusterResponse(throttle_time_ms=0, error_code=Errors.UNSUPPORTED_ENDPOINT_TYPE,
                                       error_message="The target broker only supports broker endpoints",
                                       endpoint_type=req.endpoint_type, cluster_id=broker.cluster_id,
                                       controller_id=-1, brokers=[])
    include_fenced = ctx.api_version >= 2 and req.include_fenced_brokers
    brokers = []
    for b in sorted(broker.image.brokers.values(), key=lambda b: b.broker_id):
        # (this node while its controlled shutdown completes stays listed, as in Metadata: see broker_list)
        if b.fenced and not include_fenced and not (b.broker_id == broker.node_id and broker.stopping):
            continue
        endpoint = next((e for e in b.endpoints if e[0] == ctx.conn.listener_name), None)
        if endpoint is not None:
            brokers.append(DescribeClusterResponse.DescribeClusterBroker(
                broker_id=b.broker_id, host=endpoint[1], port=endpoint[2], rack=b.rack, is_fenced=b.fenced))
    ops = cluster_authorized_operations(broker.authorizer, ctx) if req.include_cluster_authorized_operations \
        else AUTHORIZED_OPERATIONS_OMITTED
    return DescribeClusterResponse(
        throttle_time_ms=0, error_code=0, error_message=None, endpoint_type=1, cluster_id=broker.cluster_id,
        controller_id=controller_id(broker), brokers=brokers, cluster_authorized_operations=ops)


class ProducerIdManager:
    """Hands out producer ids from controller-allocated blocks."""

    def __init__(self, controller: Any, node_id: int) -> None:
        self.controller = controller
        self.node_id = node_id
        self._next = 0
        self._end = 0

    async def generate(self) -> int:
        if self._next >= self._end:
            start, length = await self.controller.allocate_producer_ids(self.node_id)
            self._next, self._end = start, start + length
        pid = self._next
        self._next += 1
        return pid


async def handle_init_producer_id(broker: Broker, ctx: RequestContext, req: InitProducerIdRequest) -> InitProducerIdResponse:
    auth = broker.authorizer
    if auth is not None:
        # KafkaApis: WRITE on the transactional id; an idempotent producer needs IDEMPOTENT_WRITE on the
        # cluster or WRITE on some topic (KIP-679, authorizeByResourceType)
        if req.transactional_id is not None:
            ok, code = auth.authorize(ctx, Op.WRITE, Res.TRANSACTIONAL_ID, req.transactional_id), \
                Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        else:
            ok, code = auth.authorize_cluster(ctx, Op.IDEMPOTENT_WRITE) or \
                auth.authorize_by_resource_type(ctx, Op.WRITE, Res.TOPIC), Errors.CLUSTER_AUTHORIZATION_FAILED
        if not ok:
            return InitProducerIdResponse(throttle_time_ms=0, error_code=code, producer_id=-1, producer_epoch=-1)
    if req.transactional_id is not None:
        from pybroker.server.txn import init_transactional_producer

        return await init_transactional_producer(broker, ctx, req)
    try:
        pid = await broker.producer_ids.generate()
    except KafkaError:
        return InitProducerIdResponse(throttle_time_ms=0, error_code=Errors.COORDINATOR_LOAD_IN_PROGRESS,
                                      producer_id=-1, producer_epoch=-1)
    return InitProducerIdResponse(throttle_time_ms=0, error_code=0, producer_id=pid, producer_epoch=0)
