"""Committed offsets: OffsetCommit (8) v2-10, OffsetFetch (9) v1-10, OffsetDelete (47) v0.

OffsetFetch shapes: v0-7 one group (`topics` null from v2 = every committed partition),
v8+ a batch of groups each with its own error. A partition without a commit answers offset
-1, metadata "" and no error, as Kafka does. require_stable (v7+): a partition with pending
transactional offsets (an open transaction's TxnOffsetCommit) answers UNSTABLE_OFFSET_COMMIT
with offset -1 in that partition, at every version (the group/top-level error stays 0), so the
client retries; with topics null only committed partitions are listed (Kafka's
fetchAllOffsets). Without require_stable the last committed offset is returned.

OffsetCommit v10 / OffsetFetch v10 name topics by id (KIP-848), resolved through the metadata
image as Kafka's KafkaApis does: an id the image lacks answers UNKNOWN_TOPIC_ID for each of its
partitions (offset -1 in OffsetFetch) before any authorization; the answers carry the ids. An
OffsetFetch v10 for all of a group's offsets lists only topics that still have an id (a deleted
topic's offsets cannot be named).

Coordinator errors go top-level where the version has one (OffsetFetch v2+, per group v8+,
OffsetDelete), else on every partition. OffsetFetch v9 carries member id + epoch: a consumer
group (KIP-848) answers UNKNOWN_MEMBER_ID / STALE_MEMBER_EPOCH for a member it does not know at
that epoch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pybroker.protocol.errors import Errors, KafkaError
from pybroker.protocol.messages import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from pybroker.security.authorizer import Op, Res

if TYPE_CHECKING:
    from pybroker.security.authorizer import StandardAuthorizer
    from pybroker.server.broker import Broker
    from pybroker.server.request_context import RequestContext

R = OffsetFetchResponse


def _split_unknown_partitions(broker: Broker, req: OffsetCommitRequest) -> list[Any]:
    """Take partitions of topics the cluster does not have out of `req` (Kafka's KafkaApis
    answers them UNKNOWN_TOPIC_OR_PARTITION without asking the coordinator)."""
    unknown = []
    known_topics = []
    for t in req.topics:
        image_topic = broker.image.topic(t.name)
        bad = [p for p in t.partitions if image_topic is None or p.partition_index not in image_topic.partitions]
        if bad:
            unknown.append(OffsetCommitResponse.OffsetCommitResponseTopic(name=t.name, partitions=[
                OffsetCommitResponse.OffsetCommitResponsePartition(
                    partition_index=p.partition_index, error_code=Errors.UNKNOWN_TOPIC_OR_PARTITION)
                for p in bad]))
            t.partitions = [p for p in t.partitions if p not in bad]
        if t.partitions:
            known_topics.append(t)
    req.topics = known_topics
    return unknown


def _split_unauthorized_topics(auth: StandardAuthorizer, ctx: RequestContext, req: Any) -> list[Any]:
    """KafkaApis: a commit needs READ on each topic; the others answer TOPIC_AUTHORIZATION_FAILED."""
    allowed = auth.filter_authorized(ctx, Op.READ, Res.TOPIC, (t.name for t in req.topics))
    denied = [t for t in req.topics if t.name not in allowed]
    req.topics = [t for t in req.topics if t.name in allowed]
    return [OffsetCommitResponse.OffsetCommitResponseTopic(name=t.name, partitions=[
        OffsetCommitResponse.OffsetCommitResponsePartition(partition_index=p.partition_index,
                                                           error_code=Errors.TOPIC_AUTHORIZATION_FAILED)
        for p in t.partitions]) for t in denied]


def _commit_error(req: OffsetCommitRequest, code: int) -> OffsetCommitResponse:
    return OffsetCommitResponse(throttle_time_ms=0, topics=[
        OffsetCommitResponse.OffsetCommitResponseTopic(name=t.name, partitions=[
            OffsetCommitResponse.OffsetCommitResponsePartition(partition_index=p.partition_index, error_code=code)
            for p in t.partitions]) for t in req.topics])


def _names_for_ids(broker: Broker, topics: list[Any]) -> dict[str, bytes]:
    """v10: set each request topic's name from its id ("" for an id the image lacks, or the zero
    id); returns name -> id to put the ids back on the answer."""
    by_id = broker.image.topics_by_id
    ids: dict[str, bytes] = {}
    for t in topics:
        known = by_id.get(t.topic_id) if t.topic_id != bytes(16) else None
        t.name = known.name if known is not None else ""
        if t.name:
            ids[t.name] = t.topic_id
    return ids


def _split_unknown_ids(req: Any, response_topic: Any, response_partition: Any, **fields: Any) -> list[Any]:
    """Take the topics whose id resolved to no name out of `req`: UNKNOWN_TOPIC_ID on each partition."""
    bad = [t for t in req.topics if not t.name]
    req.topics = [t for t in req.topics if t.name]
    return [response_topic(name="", topic_id=t.topic_id, partitions=[
        response_partition(partition_index=getattr(p, "partition_index", p), error_code=Errors.UNKNOWN_TOPIC_ID,
                           **fields) for p in getattr(t, "partitions", None) or getattr(t, "partition_indexes", [])])
        for t in bad]


async def handle_offset_commit(broker: Broker, ctx: RequestContext, req: OffsetCommitRequest) -> OffsetCommitResponse:
    auth = broker.authorizer
    v = ctx.api_version
    denied: list[Any] = []
    if auth is not None:  # KafkaApis: READ on the group, then READ on each topic
        if not auth.authorize(ctx, Op.READ, Res.GROUP, req.group_id):
            return _commit_error(req, Errors.GROUP_AUTHORIZATION_FAILED)
    ids = _names_for_ids(broker, req.topics) if v >= 10 else {}
    unknown_ids = _split_unknown_ids(req, OffsetCommitResponse.OffsetCommitResponseTopic,
                                     OffsetCommitResponse.OffsetCommitResponsePartition) if v >= 10 else []
    if auth is not None:
        denied = _split_unauthorized_topics(auth, ctx, req)
    unknown = unknown_ids + denied + _split_unknown_partitions(broker, req)
    if not req.topics and unknown:
        resp = OffsetCommitResponse(throttle_time_ms=0, topics=unknown)
    else:
        try:
            resp = await broker.group_coordinator.commit_offsets(req, v)
        except KafkaError as exc:
            resp = _commit_error(req, exc.code)
        resp.topics.extend(unknown)
    for t in resp.topics:
        if t.name:
            t.topic_id = ids.get(t.name, bytes(16))
    return resp


async def _fetch_group(broker: Broker, ctx: RequestContext, group_id: str, topics: list[tuple[str, list[int]]] | None,
                       member_id: str | None = None, member_epoch: int = -1, require_stable: bool = False
                       ) -> tuple[int, list[tuple[str, list[tuple[int, Any, int]]]]]:
    """(group error, [(topic, [(partition, OffsetAndMetadata or None, partition error)])])."""
    auth = broker.authorizer
    denied: list[tuple[str, list[int]]] = []
    try:
        if auth is not None:  # KafkaApis: DESCRIBE on the group; topics not DESCRIBE-able are hidden
            if not auth.authorize(ctx, Op.DESCRIBE, Res.GROUP, group_id):
                raise KafkaError(Errors.GROUP_AUTHORIZATION_FAILED)
            if topics is not None:
                allowed = auth.filter_authorized(ctx, Op.DESCRIBE, Res.TOPIC, (t for t, _ in topics))
                denied = [(t, ps) for t, ps in topics if t not in allowed]
                topics = [(t, ps) for t, ps in topics if t in allowed]
        found = await broker.group_coordinator.fetch_offsets(group_id, topics, member_id, member_epoch,
                                                             require_stable)
    except KafkaError as exc:
        return exc.code, [(t, [(p, None, 0) for p in parts]) for t, parts in (topics or []) + denied]
    if auth is not None and topics is None:
        allowed = auth.filter_authorized(ctx, Op.DESCRIBE, Res.TOPIC, (t for t, _ in found))
        found = [(t, parts) for t, parts in found if t in allowed]
    return 0, list(found) + [(t, [(p, None, Errors.TOPIC_AUTHORIZATION_FAILED) for p in ps]) for t, ps in denied]


async def handle_offset_fetch(broker: Broker, ctx: RequestContext, req: OffsetFetchRequest) -> OffsetFetchResponse:
    v = ctx.api_version
    if v >= 8:
        groups_out = []
        for g in req.groups:
            unknown_ids: list[Any] = []
            if v >= 10 and g.topics is not None:
                _names_for_ids(broker, g.topics)
                unknown_ids = _split_unknown_ids(g, R.OffsetFetchResponseTopics, R.OffsetFetchResponsePartitions,
                                                 committed_offset=-1, committed_leader_epoch=-1, metadata="")
            wanted = None if g.topics is None else [(t.name, list(t.partition_indexes)) for t in g.topics]
            if wanted == [] and unknown_ids:
                groups_out.append(R.OffsetFetchResponseGroup(group_id=g.group_id, error_code=0, topics=unknown_ids))
                continue
            # v9: a consumer-protocol member names itself; its epoch is checked (KIP-848)
            member_id, member_epoch = (g.member_id, g.member_epoch) if v >= 9 else (None, -1)
            error, found = await _fetch_group(broker, ctx, g.group_id, wanted, member_id, member_epoch,
                                              req.require_stable)
            if error:  # a group-level error carries no topics (Kafka's handleOffsetFetchException)
                groups_out.append(R.OffsetFetchResponseGroup(group_id=g.group_id, error_code=error, topics=[]))
                continue
            topics = [R.OffsetFetchResponseTopics(name=topic, partitions=[
                R.OffsetFetchResponsePartitions(
                    partition_index=p, committed_offset=om.offset if om else -1,
                    committed_leader_epoch=om.leader_epoch if om else -1,
                    metadata=om.metadata if om else "", error_code=code)
                for p, om, code in parts]) for topic, parts in found]
            if v >= 10:
                topics = _with_topic_ids(broker, topics) + unknown_ids
            groups_out.append(R.OffsetFetchResponseGroup(group_id=g.group_id, error_code=0, topics=topics))
        return OffsetFetchResponse(throttle_time_ms=0, groups=groups_out, topics=[], error_code=0)
    wanted = None if req.topics is None else [(t.name, list(t.partition_indexes)) for t in req.topics]
    error, found = await _fetch_group(broker, ctx, req.group_id, wanted, require_stable=v >= 7 and req.require_stable)
    per_partition_error = error if v < 2 else 0
    if error and v >= 2:  # the top-level error alone, as Kafka answers (v0/v1 have no top-level error)
        found = []
    topics_out = [R.OffsetFetchResponseTopic(name=topic, partitions=[
        R.OffsetFetchResponsePartition(partition_index=p, committed_offset=om.offset if om else -1,
                                       committed_leader_epoch=om.leader_epoch if om else -1,
                                       metadata=om.metadata if om else "", error_code=per_partition_error or code)
        for p, om, code in parts]) for topic, parts in found]
    return OffsetFetchResponse(throttle_time_ms=0, topics=topics_out, error_code=error if v >= 2 else 0,
                               groups=[])


def _with_topic_ids(broker: Broker, topics: list[Any]) -> list[Any]:
    """v10 answers name topics by id: each gets its id from the image; a topic without one (deleted
    since the commit) cannot be named and is left out, as Kafka's fetchAllOffsetsForGroup does."""
    out = []
    for t in topics:
        image_topic = broker.image.topic(t.name)
        if image_topic is not None and image_topic.topic_id != bytes(16):
            t.topic_id = image_topic.topic_id
            out.append(t)
    return out


async def handle_offset_delete(broker: Broker, ctx: RequestContext, req: OffsetDeleteRequest) -> OffsetDeleteResponse:
    wanted = [(t.name, [p.partition_index for p in t.partitions]) for t in req.topics]
    auth = broker.authorizer
    denied: list[tuple[str, list[tuple[int, int]]]] = []
    try:
        if auth is not None:  # KafkaApis: DELETE on the group, READ on each topic
            if not auth.authorize(ctx, Op.DELETE, Res.GROUP, req.group_id):
                raise KafkaError(Errors.GROUP_AUTHORIZATION_FAILED)
            allowed = auth.filter_authorized(ctx, Op.READ, Res.TOPIC, (t for t, _ in wanted))
            denied = [(t, [(p, Errors.TOPIC_AUTHORIZATION_FAILED) for p in ps]) for t, ps in wanted if t not in allowed]
            wanted = [(t, ps) for t, ps in wanted if t in allowed]
        top, parts = await broker.group_coordinator.delete_offsets(req.group_id, wanted)
        parts = list(parts) + denied
    except KafkaError as exc:
        top, parts = exc.code, []
    return OffsetDeleteResponse(error_code=int(top), throttle_time_ms=0, topics=[
        OffsetDeleteResponse.OffsetDeleteResponseTopic(name=topic, partitions=[
            OffsetDeleteResponse.OffsetDeleteResponsePartition(partition_index=p, error_code=code)
            for p, code in plist]) for topic, plist in parts])
