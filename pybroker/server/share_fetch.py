"""ShareFetch (api 78, v1-2) and ShareAcknowledge (api 79, v1-2): KIP-932's data path, as Kafka's
KafkaApis.handleShareFetchRequest / handleShareAcknowledgeRequest decide it.

Order (Kafka's): READ on the group (else GROUP_AUTHORIZATION_FAILED for the whole request); a
member id empty or longer than 36 characters is INVALID_REQUEST; a v2 ShareFetch flagged
IsRenewAck (KIP-1222) must have MaxWaitMs, MinBytes, MaxBytes and MaxRecords 0 (else
INVALID_REQUEST) and only acknowledges; the share session (share/share_session.py: epoch 0 opens, n
continues, -1 closes; SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH,
SHARE_SESSION_LIMIT_REACHED, INVALID_REQUEST for acknowledgements in an opening fetch) answered as
the request's error; then per partition: a topic id this node does not know is UNKNOWN_TOPIC_ID,
no READ on the topic TOPIC_AUTHORIZATION_FAILED, a partition not led here NOT_LEADER_OR_FOLLOWER
with CurrentLeader and the NodeEndpoints of the leaders (KIP-951), a persister that cannot be
reached COORDINATOR_NOT_AVAILABLE. Acknowledgement batches are checked first (Kafka's
validateAcknowledgementBatches: first <= last, ascending and disjoint, one type or one per
offset, types 0-3, and Renew 4 in a v2 request flagged IsRenewAck): a bad one is the partition's
AcknowledgeErrorCode INVALID_REQUEST.

ShareFetch applies its acknowledgements, then acquires (share/share_partition_manager.py): the
response has, per partition, the log's batches covering the acquired ranges and those ranges
with their delivery counts; AcquisitionLockTimeoutMs is the group's share.record.lock.duration.ms.
MaxRecords (v1+) bounds the records acquired, BatchSize sizes the new in-flight batches,
ShareAcquireMode (v2; KIP-1206) chooses batch_optimized or record_limit. An opening (full) fetch
answers every partition it named; an incremental one only those with records, an error or an
acknowledgement result. A final fetch (-1) only acknowledges, then closes the session, releasing
the member's acquired records. ShareAcknowledge likewise acknowledges, and closes at -1.

Concurrency: trio; a fetch that acquired nothing parks on its connection (MaxWaitMs) in the
replica manager's fetch purgatory. A partition whose next fetch offset is only in remote storage
(tiered storage) is read on a reader thread, awaited here (`SharePartitionManager.acquire_remote`,
bounded by remote.fetch.max.wait.ms), and acquired from once the read is back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    ShareAcknowledgeRequest,
    ShareAcknowledgeResponse,
    ShareFetchRequest,
    ShareFetchResponse,
)
from pybroker.security.authorizer import Op, Res
from pybroker.server.leader_hints import LeaderHints
from pybroker.share.share_partition import BATCH_OPTIMIZED, RECORD_LIMIT, RENEW
from pybroker.share.share_partition_manager import (
    PartitionFetch,
    RemoteShareFetch,
    SharePartitionManager,
)
from pybroker.share.share_session import next_epoch

if TYPE_CHECKING:
    from pybroker.server.broker import Broker
    from pybroker.server.request_context import RequestContext

AckBatches = list[tuple[int, int, list[int]]]
_LEADER_ERRORS = (Errors.NOT_LEADER_OR_FOLLOWER, Errors.FENCED_LEADER_EPOCH)
_MEMBER_ID_MAX = 36  # Kafka checks a share member id's length (a UUID string at most)


def _valid_acks(batches: list[Any], renew: bool) -> AckBatches | None:
    """The acknowledgement batches as (first, last, types), or None if Kafka refuses them
    (validateAcknowledgementBatches; Renew only in a request flagged IsRenewAck, v2)."""
    out: AckBatches = []
    prev_last = -1
    top = RENEW if renew else 3
    for b in batches:
        first, last, types = b.first_offset, b.last_offset, list(b.acknowledge_types)
        if first < 0 or last < first or first <= prev_last or not types:
            return None
        if len(types) != 1 and len(types) != last - first + 1:
            return None
        if any(t < 0 or t > top for t in types):
            return None
        out.append((first, last, types))
        prev_last = last
    return out


def _manager(broker: Broker) -> SharePartitionManager | None:
    return getattr(broker, "share_partition_manager", None)


def _watch_connection(mgr: SharePartitionManager, ctx: RequestContext) -> None:
    """A share session ends with its connection: hook the connection once."""
    conn = ctx.conn
    hooks = getattr(conn, "close_hooks", None)
    if hooks is None:
        return
    if not any(getattr(h, "share_manager", None) is mgr for h in hooks):
        def closed() -> None:
            mgr.connection_closed(conn)
        closed.share_manager = mgr  # type: ignore[attr-defined]
        hooks.append(closed)


def _partitions(broker: Broker, ctx: RequestContext, keys: list[tuple[bytes, int]]) -> dict[tuple[bytes, int], PartitionFetch]:
    """PartitionFetch per key, with the refusals before any read (unknown topic id, no READ)."""
    out: dict[tuple[bytes, int], PartitionFetch] = {}
    auth = broker.authorizer
    allowed: dict[str, bool] = {}
    for tid, part in keys:
        if (tid, part) in out:
            continue
        t = broker.image.topics_by_id.get(tid)
        pf = PartitionFetch(tid, part, t.name if t is not None else None)
        if t is None:
            pf.error = Errors.UNKNOWN_TOPIC_ID
        elif auth is not None:
            ok = allowed.get(t.name)
            if ok is None:
                ok = allowed[t.name] = auth.authorize(ctx, Op.READ, Res.TOPIC, t.name)
            if not ok:
                pf.error = Errors.TOPIC_AUTHORIZATION_FAILED
        out[(tid, part)] = pf
    return out


async def _acknowledge_all(mgr: SharePartitionManager, group: str, member: str,
                           parts: dict[tuple[bytes, int], PartitionFetch],
                           acks: dict[tuple[bytes, int], AckBatches | None]) -> None:
    for key, batches in acks.items():
        pf = parts[key]
        pf.has_ack = True
        if pf.error:
            pf.acknowledge_error = pf.error
        elif batches is None:
            pf.acknowledge_error = Errors.INVALID_REQUEST
        elif batches:
            pf.acknowledge_error = await mgr.acknowledge(group, member, pf, batches)
    # BrokerTopicMetrics' Total/FailedShareAcknowledgementRequestsPerSec (share/share_group_metrics.py)
    acked = [parts[key] for key in acks]
    mgr.metrics.share_acknowledgement(len({pf.topic for pf in acked if pf.topic is not None}),
                                      sum(1 for pf in acked if pf.acknowledge_error))


def _group_refused(broker: Broker, ctx: RequestContext, group: str) -> bool:
    auth = broker.authorizer
    return auth is not None and not auth.authorize(ctx, Op.READ, Res.GROUP, group)


async def handle_share_fetch(broker: Broker, ctx: RequestContext, req: ShareFetchRequest) -> ShareFetchResponse:
    v = ctx.api_version
    group = req.group_id or ""
    member = req.member_id or ""
    mgr = _manager(broker)

    def error(code: int, message: str | None = None) -> ShareFetchResponse:
        return ShareFetchResponse(throttle_time_ms=0, error_code=code, error_message=message,
                                  acquisition_lock_timeout_ms=0, responses=[], node_endpoints=[])

    if _group_refused(broker, ctx, group):
        return error(Errors.GROUP_AUTHORIZATION_FAILED)
    if mgr is None:
        return error(Errors.UNSUPPORTED_VERSION)
    if not member or len(member) > _MEMBER_ID_MAX:
        return error(Errors.INVALID_REQUEST, "Invalid member id")
    renew = v >= 2 and req.is_renew_ack
    if renew and (req.max_bytes or req.min_bytes or req.max_records or req.max_wait_ms):
        # KIP-1222: a renewing fetch only acknowledges (fetching could outlast the renewed lock)
        return error(Errors.INVALID_REQUEST, "Fetch parameters must be 0 in a renew acknowledgement request")
    fetch_keys: list[tuple[bytes, int]] = []
    acks: dict[tuple[bytes, int], AckBatches | None] = {}
    for t in req.topics:
        for p in t.partitions:
            key = (t.topic_id, p.partition_index)
            fetch_keys.append(key)
            if p.acknowledgement_batches:
                acks[key] = _valid_acks(p.acknowledgement_batches, renew)
    forgotten = [(f.topic_id, p) for f in req.forgotten_topics_data for p in f.partitions]
    context = mgr.sessions.fetch_context(group, member, req.share_session_epoch, fetch_keys, forgotten,
                                         bool(acks), ctx.conn, broker.clock.wall_ms())
    if context.released is not None:
        mgr.release_session(context.released)
    if context.error:
        return error(context.error)
    _watch_connection(mgr, ctx)
    settings = mgr.settings(group)
    parts = _partitions(broker, ctx, list(dict.fromkeys(context.partitions + list(acks))))
    await _acknowledge_all(mgr, group, member, parts, acks)
    if context.final:
        assert context.session is not None
        mgr.sessions.remove(context.session.key)
        mgr.release_session(context.session)
        answered = [parts[k] for k in acks]
    else:
        fetching = [parts[k] for k in context.partitions]
        targets = await mgr.prepare(group, fetching)
        mode = RECORD_LIMIT if v >= 2 and req.share_acquire_mode == RECORD_LIMIT else BATCH_OPTIMIZED
        max_bytes = max(1, min(req.max_bytes, broker.config["fetch.max.bytes"]))
        # MaxRecords <= 0 acquires nothing (Kafka's acquire): the fetch only acknowledges
        if req.max_records > 0 and not renew:
            # the last attempt's records, and the partition it found only in remote storage (tiered)
            last = [0]
            remote: list[RemoteShareFetch] = []

            def attempt() -> int:
                remote.clear()
                last[0] = mgr.acquire(member, targets, max_bytes, req.max_records, req.batch_size, mode, remote)
                return last[0]

            if not attempt() and not remote:
                op = mgr.delayed(targets, req.max_wait_ms, attempt, lambda: bool(remote))
                if op is not None:
                    await ctx.conn.park(op)
                    session = context.session
                    if not context.full and (session is None or mgr.sessions.get(session.key) is not session
                                             or session.epoch != next_epoch(req.share_session_epoch)):
                        # another request of the session overtook this parked one (Kafka's check)
                        return error(Errors.INVALID_SHARE_SESSION_EPOCH)
                    if op.expired:
                        attempt()
            if remote:  # read and acquired with the others' records (Kafka's DelayedShareFetch)
                await mgr.acquire_remote(member, remote[0], req.max_records - last[0], req.batch_size, mode)
        if context.full:
            answered = list(parts.values())
        else:
            session = context.session
            assert session is not None
            answered = [pf for pf in parts.values()
                        if session.must_respond((pf.topic_id, pf.partition), bool(pf.acquired), bool(pf.error))
                        or pf.has_ack]
    return _fetch_response(broker, ctx, answered, settings.record_lock_duration_ms)


def _fetch_response(broker: Broker, ctx: RequestContext, answered: list[PartitionFetch],
                    lock_ms: int) -> ShareFetchResponse:
    R = ShareFetchResponse
    hints = LeaderHints(broker.image, ctx.conn.listener_name, R)
    topics: list[Any] = []
    by_topic: dict[bytes, Any] = {}
    for pf in answered:
        t = by_topic.get(pf.topic_id)
        if t is None:
            t = by_topic[pf.topic_id] = R.ShareFetchableTopicResponse(topic_id=pf.topic_id, partitions=[])
            topics.append(t)
        leader = (hints.current_leader(pf.topic, pf.partition) if pf.error in _LEADER_ERRORS
                  else R.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1))
        t.partitions.append(R.PartitionData(
            partition_index=pf.partition, error_code=pf.error, acknowledge_error_code=pf.acknowledge_error,
            current_leader=leader, records=pf.records if pf.acquired and not pf.error else b"",
            acquired_records=[R.AcquiredRecords(first_offset=a.first_offset, last_offset=a.last_offset,
                                                delivery_count=a.delivery_count) for a in pf.acquired]
            if not pf.error else []))
    return R(throttle_time_ms=0, error_code=0, error_message=None, acquisition_lock_timeout_ms=lock_ms,
             responses=topics, node_endpoints=hints.node_endpoints())


async def handle_share_acknowledge(broker: Broker, ctx: RequestContext,
                                   req: ShareAcknowledgeRequest) -> ShareAcknowledgeResponse:
    v = ctx.api_version
    group = req.group_id or ""
    member = req.member_id or ""
    mgr = _manager(broker)
    R = ShareAcknowledgeResponse

    def error(code: int, message: str | None = None) -> ShareAcknowledgeResponse:
        return R(throttle_time_ms=0, error_code=code, error_message=message, acquisition_lock_timeout_ms=0,
                 responses=[], node_endpoints=[])

    if _group_refused(broker, ctx, group):
        return error(Errors.GROUP_AUTHORIZATION_FAILED)
    if mgr is None:
        return error(Errors.UNSUPPORTED_VERSION)
    if not member or len(member) > _MEMBER_ID_MAX:
        return error(Errors.INVALID_REQUEST, "Invalid member id")
    context = mgr.sessions.acknowledge_context(group, member, req.share_session_epoch, broker.clock.wall_ms())
    if context.error:
        return error(context.error)
    acks: dict[tuple[bytes, int], AckBatches | None] = {}
    for t in req.topics:
        for p in t.partitions:
            acks[(t.topic_id, p.partition_index)] = _valid_acks(p.acknowledgement_batches,
                                                                v >= 2 and req.is_renew_ack)
    parts = _partitions(broker, ctx, list(acks))
    await _acknowledge_all(mgr, group, member, parts, acks)
    if context.final and context.session is not None:
        mgr.sessions.remove(context.session.key)
        mgr.release_session(context.session)
    hints = LeaderHints(broker.image, ctx.conn.listener_name, R)
    topics: list[Any] = []
    by_topic: dict[bytes, Any] = {}
    for pf in parts.values():
        tr = by_topic.get(pf.topic_id)
        if tr is None:
            tr = by_topic[pf.topic_id] = R.ShareAcknowledgeTopicResponse(topic_id=pf.topic_id, partitions=[])
            topics.append(tr)
        leader = (hints.current_leader(pf.topic, pf.partition) if pf.acknowledge_error in _LEADER_ERRORS
                  else R.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1))
        tr.partitions.append(R.PartitionData(partition_index=pf.partition, error_code=pf.acknowledge_error,
                                            current_leader=leader))
    return R(throttle_time_ms=0, error_code=0, error_message=None,
             acquisition_lock_timeout_ms=mgr.settings(group).record_lock_duration_ms,
             responses=topics, node_endpoints=hints.node_endpoints())
