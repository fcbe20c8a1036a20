"""Fetch (api 1): decode, authorize, hand the partitions to the replica manager, encode.

The handler keeps what Kafka's KafkaApis.handleFetchRequest decides: the fetch session (KIP-227,
fetch_session.py: the request's session id and epoch choose a FetchContext, which says which
partitions to read, all of an incremental session's in its order, and which results to send:
an incremental response leaves out the partitions with nothing new); the partitions refused
before reading (an unknown topic id, no READ on the topic or, for a follower, no
CLUSTER_ACTION or a listener other than the inter-broker or a controller one, server/broker_only.py:
TOPIC_AUTHORIZATION_FAILED, a partition the metadata lacks), which never make a fetch wait and are answered
after the ones read (a follower's fetch naming a topic this node does not know yet is answered
at once, unlike Kafka's, so a follower that applied a new topic first asks again within
milliseconds rather than after max_wait_ms); the byte limits (`max_bytes` capped by fetch.max.bytes, and by the client
quota, Kafka's fetch quota window); the client fetch quota (KIP-13: a fetch over quota answers
no partitions; a follower's is exempt, Kafka's sendResponseExemptThrottle), the metrics, and
KIP-951's leader hints (v16+).

Everything per partition is ReplicaManager.fetch_messages' (replication/replica_manager.py, with
Partition.fetch_records and read_records): leadership and the current leader epoch, a
follower's membership and its fetch offset as its log end offset (ISR expansion, the high
watermark), a diverging epoch (KIP-320), the preferred read replica (KIP-392, fetch from a
follower for a consumer's Fetch v11+), the replication throttles (KIP-73) and the read itself,
as file regions (sendfile from the page cache) up to the high watermark (read_uncommitted), the
last stable offset (read_committed) or the log end offset (a follower). A fetch offset inside a
batch returns the whole containing batch; the client skips the records before its offset
(CLIENTS.md pitfall 6). The first partition with data may exceed the byte limits by one batch,
so a consumer always progresses (Kafka's minOneMessage). When fewer than min_bytes are there,
the replica manager returns a DelayedFetch watched on the partitions; the handler parks on its
connection until it completes (an append or a change to one of them, max_wait_ms, the peer
gone), and the completion read is what the response carries.

Tiered storage (KIP-405): a consumer's fetch offset below a tiered partition's local log start
is read back from remote storage in a DelayedRemoteFetch (replication/delayed_remote_fetch.py),
which the handler awaits the same way; its records are bytes chunks in the response where a
local read's are file regions, so a consumer cannot tell them apart. A follower's gets
OFFSET_MOVED_TO_TIERED_STORAGE with the leader's offsets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import FetchRequest, FetchResponse
from pybroker.replication.fetch_params import FETCH_LOG_END, READ_COMMITTED, FetchParams, LogRead
from pybroker.security.authorizer import Op, Res
from pybroker.server.broker_only import cluster_action_allowed
from pybroker.server.fetch_session import ZERO_ID, CachedPartition, Update
from pybroker.server.leader_hints import LeaderHints
from pybroker.server.quota import fetch_max_bytes, record_fetch

if TYPE_CHECKING:
    from pybroker.server.broker import Broker
    from pybroker.server.request_context import RequestContext

PData = FetchResponse.PartitionData
TResp = FetchResponse.FetchableTopicResponse
AbortedTxn = FetchResponse.AbortedTransaction
EpochEnd = FetchResponse.EpochEndOffset
# refusals that mean this node's metadata is behind a follower's (a topic created a moment ago)
_UNKNOWN_HERE = frozenset({Errors.UNKNOWN_TOPIC_ID, Errors.UNKNOWN_TOPIC_OR_PARTITION})


async def handle_fetch(broker: Broker, ctx: RequestContext, req: FetchRequest) -> FetchResponse:
    v = ctx.api_version
    rm = broker.replica_manager
    image = broker.image
    isolation = req.isolation_level
    by_id = v >= 13
    topics_by_id = image.topics_by_id

    def resolve(topic_id: bytes) -> str | None:
        t = topics_by_id.get(topic_id)
        return t.name if t is not None else None

    fetch_data: list[CachedPartition] = []
    for ft in req.topics:
        name = resolve(ft.topic_id) if by_id else ft.topic
        tid = ft.topic_id if by_id else ZERO_ID
        for fp in ft.partitions:
            fetch_data.append(CachedPartition(name, tid, fp.partition, fp.partition_max_bytes, fp.fetch_offset,
                                              fp.current_leader_epoch, fp.log_start_offset,
                                              fp.last_fetched_epoch))
    to_forget: list[CachedPartition] = []
    for fg in req.forgotten_topics_data:
        name = resolve(fg.topic_id) if by_id else fg.topic
        tid = fg.topic_id if by_id else ZERO_ID
        to_forget.extend(CachedPartition(name, tid, p) for p in fg.partitions)
    state = req.replica_state
    replica_id = state.replica_id if v >= 15 and state is not None else req.replica_id
    replica_epoch = state.replica_epoch if v >= 15 and state is not None else -1
    from_follower = replica_id >= 0
    if from_follower:
        isolation = FETCH_LOG_END
    context = broker.fetch_manager.new_context(v, req.session_id, req.session_epoch, replica_id >= 0, fetch_data,
                                               to_forget, resolve if by_id else None, broker.clock.wall_ms())

    # Kafka's KafkaApis: the partitions refused before the replica manager (unknown topic id, not
    # authorized, not in the metadata) never make a fetch wait and are answered after the ones read
    read_parts: list[CachedPartition] = []
    refused: list[tuple[CachedPartition, int]] = []
    auth = broker.authorizer
    allowed: dict[str, bool] = {}
    # KafkaApis: a follower needs CLUSTER_ACTION on the cluster; pybroker also wants it on the
    # inter-broker listener (server/broker_only.py), so a client listener never moves a HW
    follower_ok = cluster_action_allowed(broker, ctx) if from_follower else True
    topics_by_name = image.topics_by_name
    for cp in context.partitions():
        name = cp.topic
        if name is None:
            refused.append((cp, Errors.UNKNOWN_TOPIC_ID))
            continue
        if from_follower or auth is not None:
            ok = allowed.get(name)
            if ok is None:  # KafkaApis: a consumer needs READ on the topic
                ok = allowed[name] = (follower_ok if from_follower
                                      else auth is None or auth.authorize(ctx, Op.READ, Res.TOPIC, name))
            if not ok:
                refused.append((cp, Errors.TOPIC_AUTHORIZATION_FAILED))
                continue
        t = topics_by_name.get(name)
        if t is None or cp.partition not in t.partitions:
            refused.append((cp, Errors.UNKNOWN_TOPIC_OR_PARTITION))
            continue
        read_parts.append(cp)

    max_bytes = min(req.max_bytes, broker.config["fetch.max.bytes"]) if v >= 3 else 2**31 - 1
    min_bytes = min(req.min_bytes, max_bytes)
    # Kafka's KafkaApis: a follower's fetch is exempt from the client quotas; the replication
    # throttles (KIP-73) apply to it instead, in the replica manager's read and
    # record_leader_replication
    quota = broker.quotas.fetch
    client_quota = quota.enabled and not from_follower
    if client_quota:
        # Kafka: no more than the quota window can take, or the consumer could never progress
        max_bytes = fetch_max_bytes(quota, ctx, max_bytes)
        min_bytes = min(min_bytes, max_bytes)
    # positional: ten keyword arguments cost a small fetch 4% more instructions (callgrind)
    max_wait_ms = req.max_wait_ms
    if from_follower and any(code in _UNKNOWN_HERE for _, code in refused):
        # the follower acts on a metadata commit this node has not applied yet (a new topic):
        # answered at once, so it asks again within milliseconds (replica_fetcher.py), not after
        # max_wait_ms. **Difference:** Kafka holds such a fetch for its other partitions.
        max_wait_ms = 0
    params = FetchParams(replica_id, replica_epoch, max_wait_ms, min_bytes, max_bytes, isolation,
                         from_follower or v < 11,  # fetch_only_leader: a follower, or no client metadata
                         v <= 2,  # hard_max_bytes_limit
                         req.rack_id, ctx.conn.listener_name)
    reads: list[LogRead] = []
    if read_parts:
        reads, delayed = rm.fetch_messages(params, read_parts)
        if delayed is not None:
            await ctx.conn.park(delayed)  # its completion read the partitions again

    total = 0
    updates: list[Update] = []
    for cp, r in zip(read_parts, reads, strict=True):
        size = r.size if r.regions and not r.error_code else 0
        total += size
        updates.append((cp, r, size))
    for cp, code in refused:
        updates.append((cp, LogRead(None, cp.fetch_offset, cp.max_bytes, code), 0))
    if from_follower:
        rm.record_leader_replication(reads)  # the leader quota counts what this response sends
    elif client_quota:
        # KIP-13: a fetch over quota answers no partitions (its bytes are unrecorded) and the
        # connection is muted. Counted: the records' bytes (Kafka counts the whole response).
        throttle_ms = record_fetch(quota, ctx, total)
        if throttle_ms:
            error, session_id = context.throttled_response()
            return FetchResponse(throttle_time_ms=throttle_ms, error_code=error, session_id=session_id,
                                 responses=[])
    rm.topic_stats.record_fetch(reads, from_follower)  # metrics: Total/FailedFetchRequests, BytesOut
    # an incremental session drops the partitions with nothing new before any is encoded
    error, session_id, kept = context.update_and_generate_response_data(updates)
    topics_out = _by_topic(kept, by_id, isolation == READ_COMMITTED)
    node_endpoints = (_leader_hints(broker, ctx, topics_out)
                      if v >= 16 and any(cast(LogRead, r).error_code for _, r, _ in kept) else [])
    return FetchResponse(throttle_time_ms=0, error_code=error, session_id=session_id,
                         responses=topics_out, node_endpoints=node_endpoints)


def _by_topic(updates: list[Update], by_id: bool, read_committed: bool) -> list[TResp]:
    """The response entries, grouped as Kafka's FetchResponse.toMessage does: consecutive
    partitions of one topic share a topic entry, and the order of the partitions is kept."""
    out: list[TResp] = []
    last_key: object = None
    parts: list[PData] = []
    for cp, result, size in updates:
        r = cast(LogRead, result)  # what handle_fetch gave the context
        key = cp.topic_id if by_id else cp.topic
        if not out or key != last_key:
            parts = []
            out.append(TResp(topic="" if by_id else (cp.topic or ""), topic_id=cp.topic_id, partitions=parts))
            last_key = key
        d = PData(partition_index=cp.partition, error_code=r.error_code, high_watermark=-1, last_stable_offset=-1,
                  log_start_offset=-1, aborted_transactions=[] if read_committed else None,
                  preferred_read_replica=r.preferred_read_replica, records=b"")
        if not r.error_code or r.error_code == Errors.OFFSET_MOVED_TO_TIERED_STORAGE:
            # KIP-405: a follower below the leader's local log start gets the leader's offsets
            # with the error (Kafka's createLogReadResult), its log start offset among them
            d.high_watermark = r.high_watermark
            d.last_stable_offset = r.last_stable_offset
            d.log_start_offset = r.log_start_offset
            if r.diverging_epoch is not None:
                d.diverging_epoch = EpochEnd(epoch=r.diverging_epoch[0], end_offset=r.diverging_epoch[1])
            if size:
                d.records = r.regions
                if r.aborted:
                    d.aborted_transactions = [AbortedTxn(producer_id=pid, first_offset=first)
                                              for pid, first in r.aborted]
        parts.append(d)
    return out


def _leader_hints(broker: Broker, ctx: RequestContext, topics_out: list[TResp]) -> list[FetchResponse.NodeEndpoint]:
    """KIP-951 (server/leader_hints.py): CurrentLeader on partitions this node does not lead."""
    hints = LeaderHints(broker.image, ctx.conn.listener_name, FetchResponse)
    for t in topics_out:
        name = t.topic or getattr(broker.image.topics_by_id.get(t.topic_id), "name", None)
        for d in t.partitions:
            if d.error_code in (Errors.NOT_LEADER_OR_FOLLOWER, Errors.FENCED_LEADER_EPOCH):
                d.current_leader = hints.current_leader(name, d.partition_index)
    return hints.node_endpoints()
