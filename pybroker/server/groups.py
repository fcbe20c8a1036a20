"""Classic group membership and admin APIs: JoinGroup (11) v0-9, Heartbeat (12) v0-4,
LeaveGroup (13) v0-5, SyncGroup (14) v0-5, DescribeGroups (15) v0-6, ListGroups (16) v0-5,
DeleteGroups (42) v0-2.

DescribeGroups describes classic groups only, as Kafka's: a group that does not exist or is a
KIP-848 consumer group is "Dead" without an error before v6, and GROUP_ID_NOT_FOUND with
Kafka's message ("Group g not found." / "Group g is not a classic group.") from v6 (KIP-1043).

Thin translations onto pybroker.coordinators.group.coordinator.GroupCoordinator; the rules
live there. A coordinator error (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, ...) goes
where each API carries errors. JoinGroup and SyncGroup may wait (rebalance), so these
handlers are async; one request in flight per connection is what the clients expect too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pybroker.protocol.errors import Errors, KafkaError
from pybroker.protocol.messages import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from pybroker.security.authorizer import Op, Res

if TYPE_CHECKING:
    from pybroker.server.broker import Broker
    from pybroker.server.request_context import RequestContext


def check_group(broker: Broker, ctx: RequestContext, group_id: str, op: int = Op.READ) -> None:
    """KafkaApis: READ on the group for membership APIs; raises GROUP_AUTHORIZATION_FAILED so the
    handler answers as for any coordinator error (no authorizer: one `is None` test)."""
    auth = broker.authorizer
    if auth is not None and not auth.authorize(ctx, op, Res.GROUP, group_id):
        raise KafkaError(Errors.GROUP_AUTHORIZATION_FAILED)


def client_host(ctx: RequestContext) -> str:
    peer = getattr(ctx.conn, "peer", None)
    host = peer[0] if isinstance(peer, tuple) and peer else str(peer or "")
    return "/" + host  # Kafka reports the InetAddress form, "/127.0.0.1"


async def handle_join_group(broker: Broker, ctx: RequestContext, req: JoinGroupRequest) -> JoinGroupResponse:
    v = ctx.api_version
    try:
        check_group(broker, ctx, req.group_id)
        resp = await broker.group_coordinator.join_group(req, v, ctx.client_id or "", client_host(ctx))
    except KafkaError as exc:
        resp = JoinGroupResponse(throttle_time_ms=0, error_code=exc.code, generation_id=-1, protocol_type=None,
                                 protocol_name=None, leader="", skip_assignment=False,
                                 member_id=req.member_id or "", members=[])
    if v < 7 and resp.protocol_name is None:
        resp.protocol_name = ""  # not nullable before v7
    return resp


async def handle_sync_group(broker: Broker, ctx: RequestContext, req: SyncGroupRequest) -> SyncGroupResponse:
    try:
        check_group(broker, ctx, req.group_id)
        return await broker.group_coordinator.sync_group(req, ctx.api_version)
    except KafkaError as exc:
        return SyncGroupResponse(throttle_time_ms=0, error_code=exc.code, protocol_type=None, protocol_name=None,
                                 assignment=b"")


async def handle_heartbeat(broker: Broker, ctx: RequestContext, req: HeartbeatRequest) -> HeartbeatResponse:
    try:
        check_group(broker, ctx, req.group_id)
        code = await broker.group_coordinator.heartbeat(req, ctx.api_version)
    except KafkaError as exc:
        code = exc.code
    return HeartbeatResponse(throttle_time_ms=0, error_code=code)


async def handle_leave_group(broker: Broker, ctx: RequestContext, req: LeaveGroupRequest) -> LeaveGroupResponse:
    try:
        check_group(broker, ctx, req.group_id)
        return await broker.group_coordinator.leave_group(req, ctx.api_version)
    except KafkaError as exc:
        return LeaveGroupResponse(throttle_time_ms=0, error_code=exc.code, members=[])


async def handle_list_groups(broker: Broker, ctx: RequestContext, req: ListGroupsRequest) -> ListGroupsResponse:
    v = ctx.api_version
    states = list(req.states_filter) if v >= 4 else []
    types = list(req.types_filter) if v >= 5 else []
    error, groups = await broker.group_coordinator.list_groups(states, types)
    auth = broker.authorizer
    if auth is not None and not auth.authorize_cluster(ctx, Op.DESCRIBE):
        # without DESCRIBE on the cluster, only the groups the caller may DESCRIBE are listed
        visible = auth.filter_authorized(ctx, Op.DESCRIBE, Res.GROUP, (g.group_id for g in groups))
        groups = [g for g in groups if g.group_id in visible]
    return ListGroupsResponse(throttle_time_ms=0, error_code=error, groups=groups)


async def handle_describe_groups(broker: Broker, ctx: RequestContext, req: DescribeGroupsRequest) -> DescribeGroupsResponse:
    include_ops = ctx.api_version >= 3 and req.include_authorized_operations
    out = []
    for gid in req.groups:
        try:
            check_group(broker, ctx, gid, Op.DESCRIBE)
            out.append(await broker.group_coordinator.describe_group(gid, include_ops, ctx.api_version))
            if include_ops and broker.authorizer is not None and not out[-1].error_code:
                out[-1].authorized_operations = broker.authorizer.authorized_operations(ctx, Res.GROUP, gid)
        except KafkaError as exc:
            out.append(DescribeGroupsResponse.DescribedGroup(
                error_code=exc.code, group_id=gid, group_state="", protocol_type="", protocol_data="", members=[],
                authorized_operations=-2147483648))
    return DescribeGroupsResponse(throttle_time_ms=0, groups=out)


async def handle_delete_groups(broker: Broker, ctx: RequestContext, req: DeleteGroupsRequest) -> DeleteGroupsResponse:
    names = list(req.groups_names)
    denied: list[str] = []
    if broker.authorizer is not None:
        allowed = broker.authorizer.filter_authorized(ctx, Op.DELETE, Res.GROUP, names)
        denied = list(dict.fromkeys(g for g in names if g not in allowed))
        names = [g for g in names if g in allowed]
    results = await broker.group_coordinator.delete_groups(names) if names or not denied else []
    results = list(results) + [(g, Errors.GROUP_AUTHORIZATION_FAILED) for g in denied]
    return DeleteGroupsResponse(throttle_time_ms=0, results=[
        DeleteGroupsResponse.DeletableGroupResult(group_id=g, error_code=code) for g, code in results])



