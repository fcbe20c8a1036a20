"""KIP-848 consumer groups: ConsumerGroupHeartbeat (68) v0-1 and ConsumerGroupDescribe (69) v0-1.

Thin translations onto GroupCoordinator.consumer_group_heartbeat / consumer_group_describe; the
rules live in pybroker/coordinators/group/consumer_group_manager.py. v0 heartbeats get a
member id from the coordinator, v1 members bring their own. ConsumerGroupDescribe v1 adds each
member's type (KIP-1099: 0 a classic-protocol member of a migrated group, 1 a consumer-protocol
member); a group that is missing or not a consumer group is GROUP_ID_NOT_FOUND with Kafka's
message at every version. A coordinator error
(NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, ...) is the heartbeat's top-level error, and
each described group's own error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pybroker.coordinators.group.consumer_group_manager import heartbeat_error
from pybroker.protocol.errors import KafkaError
from pybroker.protocol.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from pybroker.security.authorizer import Op, Res
from pybroker.server.groups import check_group, client_host

if TYPE_CHECKING:
    from pybroker.server.broker import Broker
    from pybroker.server.request_context import RequestContext


async def handle_consumer_group_heartbeat(broker: Broker, ctx: RequestContext, req: ConsumerGroupHeartbeatRequest
                                          ) -> ConsumerGroupHeartbeatResponse:
    try:
        check_group(broker, ctx, req.group_id)
        return await broker.group_coordinator.consumer_group_heartbeat(req, ctx.api_version, ctx.client_id or "",
                                                                       client_host(ctx))
    except KafkaError as exc:
        return heartbeat_error(exc.code)


async def handle_consumer_group_describe(broker: Broker, ctx: RequestContext, req: ConsumerGroupDescribeRequest
                                         ) -> ConsumerGroupDescribeResponse:
    out = []
    for gid in req.group_ids:
        try:
            check_group(broker, ctx, gid, Op.DESCRIBE)
            out.append(await broker.group_coordinator.consumer_group_describe(gid, req.include_authorized_operations))
            if req.include_authorized_operations and broker.authorizer is not None and not out[-1].error_code:
                out[-1].authorized_operations = broker.authorizer.authorized_operations(ctx, Res.GROUP, gid)
        except KafkaError as exc:
            out.append(ConsumerGroupDescribeResponse.DescribedGroup(
                error_code=exc.code, error_message=None, group_id=gid, group_state="", group_epoch=-1,
                assignment_epoch=-1, assignor_name="", members=[], authorized_operations=-2147483648))
    return ConsumerGroupDescribeResponse(throttle_time_ms=0, groups=out)
