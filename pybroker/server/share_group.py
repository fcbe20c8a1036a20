"""KIP-932 share groups, the group coordinator's APIs: ShareGroupHeartbeat (76) v1,
ShareGroupDescribe (77) v1, DescribeShareGroupOffsets (90) v0, AlterShareGroupOffsets (91) v0 and
DeleteShareGroupOffsets (92) v0.

Thin translations onto GroupCoordinator (pybroker/coordinators/group/coordinator.py and
share_group_manager.py hold the rules), with Kafka's KafkaApis checks in front:
- ShareGroupHeartbeat: READ on the group (GROUP_AUTHORIZATION_FAILED), DESCRIBE on every
  subscribed topic (TOPIC_AUTHORIZATION_FAILED);
- ShareGroupDescribe: DESCRIBE on each group; a group whose members hold a topic the caller may
  not DESCRIBE is answered TOPIC_AUTHORIZATION_FAILED;
- DescribeShareGroupOffsets: DESCRIBE on the group, topics the caller may not DESCRIBE are left
  out (all topics) or answered TOPIC_AUTHORIZATION_FAILED (named topics);
- AlterShareGroupOffsets: READ on the group, READ on each topic;
- DeleteShareGroupOffsets: DELETE on the group, READ on each topic.
A coordinator error (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, ...) is the heartbeat's
top-level error and each described group's own. Share groups are always enabled (pybroker has
no share.version feature gate yet: Kafka answers UNSUPPORTED_VERSION while it is off).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pybroker.acl import AUTHORIZED_OPERATIONS_OMITTED, GROUP_OPERATIONS
from pybroker.coordinators.group.share_group_manager import heartbeat_error
from pybroker.protocol.errors import Errors, KafkaError
from pybroker.protocol.messages import (
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)
from pybroker.security.authorizer import Op, Res
from pybroker.server.groups import check_group, client_host

if TYPE_CHECKING:
    from pybroker.server.broker import Broker
    from pybroker.server.request_context import RequestContext


async def handle_share_group_heartbeat(broker: Broker, ctx: RequestContext, req: ShareGroupHeartbeatRequest
                                       ) -> ShareGroupHeartbeatResponse:
    try:
        check_group(broker, ctx, req.group_id)
        auth = broker.authorizer
        if auth is not None and req.subscribed_topic_names:
            names = set(req.subscribed_topic_names)
            if len(auth.filter_authorized(ctx, Op.DESCRIBE, Res.TOPIC, names)) < len(names):
                return heartbeat_error(Errors.TOPIC_AUTHORIZATION_FAILED)
        return await broker.group_coordinator.share_group_heartbeat(req, ctx.client_id or "", client_host(ctx))
    except KafkaError as exc:
        return heartbeat_error(exc.code, exc.message)


async def handle_share_group_describe(broker: Broker, ctx: RequestContext, req: ShareGroupDescribeRequest
                                      ) -> ShareGroupDescribeResponse:
    D = ShareGroupDescribeResponse
    ops = GROUP_OPERATIONS if req.include_authorized_operations else AUTHORIZED_OPERATIONS_OMITTED
    auth = broker.authorizer
    out = []
    for gid in req.group_ids:
        try:
            check_group(broker, ctx, gid, Op.DESCRIBE)
            group = await broker.group_coordinator.share_group_describe(gid, ops)
            if req.include_authorized_operations and auth is not None and not group.error_code:
                group.authorized_operations = auth.authorized_operations(ctx, Res.GROUP, gid)
            if auth is not None and not group.error_code:
                topics = {tp.topic_name for m in group.members for tp in m.assignment.topic_partitions}
                if topics and len(auth.filter_authorized(ctx, Op.DESCRIBE, Res.TOPIC, topics)) < len(topics):
                    group = D.DescribedGroup(
                        error_code=int(Errors.TOPIC_AUTHORIZATION_FAILED),
                        error_message="The group has described topic(s) that the client is not authorized to describe.",
                        group_id=gid, group_state="", group_epoch=-1, assignment_epoch=-1, assignor_name="",
                        members=[], authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)
            out.append(group)
        except KafkaError as exc:
            out.append(D.DescribedGroup(error_code=exc.code, error_message=exc.message, group_id=gid, group_state="",
                                        group_epoch=-1, assignment_epoch=-1, assignor_name="", members=[],
                                        authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
    return D(throttle_time_ms=0, groups=out)
