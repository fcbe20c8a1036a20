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
top-level error and each described group's own. While share.version is 0 these APIs answer
UNSUPPORTED_VERSION before anything else (server/share_version.py, wrapped in server/dispatch.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pybroker.acl import AUTHORIZED_OPERATIONS_OMITTED, GROUP_OPERATIONS
from pybroker.coordinators.group.share_group_manager import heartbeat_error
from pybroker.protocol.errors import Errors, KafkaError
from pybroker.protocol.messages import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsResponse,
    DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsResponse,
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse,
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
                        group_id=gid, group_state="", group_epoch=0, assignment_epoch=0, assignor_name="",
                        members=[], authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)
            out.append(group)
        except KafkaError as exc:
            out.append(D.DescribedGroup(error_code=exc.code, error_message=exc.message, group_id=gid, group_state="",
                                        group_epoch=0, assignment_epoch=0, assignor_name="", members=[],
                                        authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
    return D(throttle_time_ms=0, groups=out)


ZERO_UUID = bytes(16)


def _message(code: int) -> str:
    return Errors.for_code(code).name


async def handle_describe_share_group_offsets(broker: Broker, ctx: RequestContext,
                                              req: DescribeShareGroupOffsetsRequest) -> DescribeShareGroupOffsetsResponse:
    R = DescribeShareGroupOffsetsResponse
    auth = broker.authorizer
    out = []
    for g in req.groups:
        gid = g.group_id
        if auth is not None and not auth.authorize(ctx, Op.DESCRIBE, Res.GROUP, gid):
            out.append(R.DescribeShareGroupOffsetsResponseGroup(group_id=gid, topics=[],
                                                                error_code=int(Errors.GROUP_AUTHORIZATION_FAILED),
                                                                error_message=None))
            continue
        if g.topics is not None and not g.topics:
            out.append(R.DescribeShareGroupOffsetsResponseGroup(group_id=gid, topics=[], error_code=0,
                                                                error_message=None))
            continue
        denied: list[tuple[str, list[int]]] = []
        wanted: list[tuple[str, list[int]]] | None = None
        if g.topics is not None:
            names = [t.topic_name for t in g.topics]
            allowed = set(names) if auth is None else auth.filter_authorized(ctx, Op.DESCRIBE, Res.TOPIC, names)
            wanted = [(t.topic_name, list(t.partitions)) for t in g.topics if t.topic_name in allowed]
            denied = [(t.topic_name, list(t.partitions)) for t in g.topics if t.topic_name not in allowed]
        try:
            rows = await broker.group_coordinator.describe_share_group_offsets(gid, wanted)
        except KafkaError as exc:
            out.append(R.DescribeShareGroupOffsetsResponseGroup(group_id=gid, topics=[], error_code=exc.code,
                                                                error_message=exc.message or _message(exc.code)))
            continue
        if g.topics is None and auth is not None:  # all topics: the ones the caller may not see are left out
            visible = auth.filter_authorized(ctx, Op.DESCRIBE, Res.TOPIC, [name for name, _t, _r in rows])
            rows = [r for r in rows if r[0] in visible]
        topics = [R.DescribeShareGroupOffsetsResponseTopic(topic_name=name, topic_id=tid, partitions=[
            R.DescribeShareGroupOffsetsResponsePartition(partition_index=p, start_offset=start, leader_epoch=epoch,
                                                         error_code=0, error_message=None)
            for p, start, epoch in parts]) for name, tid, parts in rows]
        code = int(Errors.TOPIC_AUTHORIZATION_FAILED)
        topics += [R.DescribeShareGroupOffsetsResponseTopic(topic_name=name, topic_id=ZERO_UUID, partitions=[
            R.DescribeShareGroupOffsetsResponsePartition(partition_index=p, start_offset=-1, leader_epoch=0,
                                                         error_code=code, error_message=_message(code))
            for p in parts]) for name, parts in denied]
        out.append(R.DescribeShareGroupOffsetsResponseGroup(group_id=gid, topics=topics, error_code=0,
                                                            error_message=None))
    return R(throttle_time_ms=0, groups=out)


async def handle_alter_share_group_offsets(broker: Broker, ctx: RequestContext, req: AlterShareGroupOffsetsRequest
                                           ) -> AlterShareGroupOffsetsResponse:
    R = AlterShareGroupOffsetsResponse
    gid = req.group_id

    def topic(name: str, tid: bytes | None, parts: list[tuple[int, int]]) -> AlterShareGroupOffsetsResponse.AlterShareGroupOffsetsResponseTopic:
        return R.AlterShareGroupOffsetsResponseTopic(topic_name=name, topic_id=tid or ZERO_UUID, partitions=[
            R.AlterShareGroupOffsetsResponsePartition(partition_index=p, error_code=code,
                                                      error_message=_message(code) if code else None)
            for p, code in parts])

    def whole(code: int, message: str | None = None) -> AlterShareGroupOffsetsResponse:
        return R(throttle_time_ms=0, error_code=code, error_message=message or _message(code), responses=[
            topic(t.topic_name, None, [(p.partition_index, code) for p in t.partitions]) for t in req.topics])
    auth = broker.authorizer
    if auth is not None and not auth.authorize(ctx, Op.READ, Res.GROUP, gid):
        return whole(int(Errors.GROUP_AUTHORIZATION_FAILED))
    if not gid:
        return whole(int(Errors.INVALID_GROUP_ID))
    early: list[AlterShareGroupOffsetsResponse.AlterShareGroupOffsetsResponseTopic] = []
    wanted: list[tuple[str, list[tuple[int, int]]]] = []
    for t in req.topics:
        parts = [(p.partition_index, p.start_offset) for p in t.partitions]
        if auth is not None and not auth.authorize(ctx, Op.READ, Res.TOPIC, t.topic_name):
            early.append(topic(t.topic_name, None, [(p, int(Errors.TOPIC_AUTHORIZATION_FAILED)) for p, _ in parts]))
        elif broker.image.topics_by_name.get(t.topic_name) is None:
            early.append(topic(t.topic_name, None, [(p, int(Errors.UNKNOWN_TOPIC_OR_PARTITION)) for p, _ in parts]))
        else:
            wanted.append((t.topic_name, parts))
    try:
        rows = await broker.group_coordinator.alter_share_group_offsets(gid, wanted) if wanted else []
    except KafkaError as exc:
        return whole(exc.code, exc.message)
    return R(throttle_time_ms=0, error_code=0, error_message=None,
             responses=early + [topic(name, tid, parts) for name, tid, parts in rows])


async def handle_delete_share_group_offsets(broker: Broker, ctx: RequestContext, req: DeleteShareGroupOffsetsRequest
                                            ) -> DeleteShareGroupOffsetsResponse:
    R = DeleteShareGroupOffsetsResponse
    gid = req.group_id

    def whole(code: int, message: str | None = None) -> DeleteShareGroupOffsetsResponse:
        return R(throttle_time_ms=0, error_code=code, error_message=message or _message(code), responses=[])
    auth = broker.authorizer
    if auth is not None and not auth.authorize(ctx, Op.DELETE, Res.GROUP, gid):
        return whole(int(Errors.GROUP_AUTHORIZATION_FAILED))
    if not gid:
        return whole(int(Errors.INVALID_GROUP_ID))
    out = []
    names = []
    for t in req.topics:
        if auth is not None and not auth.authorize(ctx, Op.READ, Res.TOPIC, t.topic_name):
            code = int(Errors.TOPIC_AUTHORIZATION_FAILED)
            out.append(R.DeleteShareGroupOffsetsResponseTopic(topic_name=t.topic_name, topic_id=ZERO_UUID,
                                                              error_code=code, error_message=_message(code)))
        else:
            names.append(t.topic_name)
    try:
        rows = await broker.group_coordinator.delete_share_group_offsets(gid, names)
    except KafkaError as exc:
        return whole(exc.code, exc.message)
    out += [R.DeleteShareGroupOffsetsResponseTopic(topic_name=name, topic_id=tid, error_code=code, error_message=msg)
            for name, tid, code, msg in rows]
    return R(throttle_time_ms=0, error_code=0, error_message=None, responses=out)
