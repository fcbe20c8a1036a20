"""Fetch (api 1): read batches as file regions; wait in the purgatory for fetch.min.bytes.

Records go out as `FileRegion`s (sendfile from the page cache). A fetch offset inside a
batch returns the whole containing batch; the client skips the records before its offset
(CLIENTS.md pitfall 6). Reads stop at the high watermark (read_uncommitted) or the last
stable offset (read_committed). The first partition with data may exceed the byte limits
by one batch, so a consumer always progresses (Kafka's minOneMessage).

When fewer than min_bytes are available, the request waits as a DelayedFetch watched on
its partitions: an append to any of them re-checks it at once; max_wait_ms expires it.
Partitions refused before reading (unknown topic id or partition, not authorized) do not cut
the wait short and are answered after the ones read, as in Kafka's KafkaApis.

Fetch sessions (KIP-227, fetch_session.py): the request's session id and epoch choose a
FetchContext, which says which partitions to read (all of an incremental session's, in its
order) and which results to send (an incremental response leaves out the partitions with
nothing new). `max_bytes` is capped by the broker's fetch.max.bytes, as in Kafka.

A fetch from a follower (replica_state.replica_id, v15+, or replica_id >= 0; Kafka's
isFromFollower) reads up to the log end offset, not the high watermark, and first records the
follower's fetch offset as its log end offset (ReplicaManager.update_follower_fetch_state: last
caught-up time, ISR expansion, high watermark, acks=all produces and consumer fetches waiting
for it). It needs CLUSTER_ACTION when an authorizer is on, as in Kafka. A fetch with a
`last_fetched_epoch` (v12+; followers send one) whose log parts from this one (KIP-320,
ReplicaManager.diverging_epoch) is answered at once with a `diverging_epoch`, the offsets and no
records, and does not count as the follower's log end. It is exempt from the client
fetch quota (Kafka's sendResponseExemptThrottle); the replication throttles (KIP-73) apply
instead: a throttled partition's records are left out for a follower outside the ISR while the
leader quota is exceeded (ReplicaManager.read_from_log, also in a parked fetch's byte count),
and what the response carries for throttled partitions is recorded against that quota.

Fetch from the closest replica (KIP-392). A consumer's Fetch v11+ (Kafka's FetchParams with
client metadata, so not fetchOnlyLeader) may read from a follower: up to the follower's HW (the
LSO for read_committed), with the leader epoch check as on a leader; a fetch offset past the
follower's log end answers OFFSET_OUT_OF_RANGE, and the client goes back to the leader. A parked
one wakes when the follower's HW moves (the fetcher completes it). On the leader, with
`replica.selector.class` set, a consumer's Fetch v11+ gets a `preferred_read_replica`
(ReplicaManager.preferred_read_replica, the request's rack_id) and, when that is not the leader,
no records and no wait. ListOffsets stays leader-only.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, cast

from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import FetchRequest, FetchResponse
from pybroker.purgatory.purgatory import DelayedOperation
from pybroker.replication.replica_manager import (
    FETCH_LOG_END,
    READ_COMMITTED,
    LogRead,
    check_leader_epoch,
)
from pybroker.security.authorizer import Op, Res
from pybroker.server.fetch_session import ZERO_ID, CachedPartition, Update
from pybroker.server.leader_hints import LeaderHints
from pybroker.server.quota import fetch_max_bytes, record_fetch

if TYPE_CHECKING:
    from pybroker.replication.replica_manager import ReplicaManager
    from pybroker.server.broker import Broker
    from pybroker.server.request_context import RequestContext

PData = FetchResponse.PartitionData
TResp = FetchResponse.FetchableTopicResponse
AbortedTxn = FetchResponse.AbortedTransaction
EpochEnd = FetchResponse.EpochEndOffset
log = logging.getLogger("pybroker.server")


class DelayedFetch(DelayedOperation):
    """A fetch waiting for min_bytes (Kafka's DelayedFetch): re-checked whenever one of its
    partitions gets data, answered when enough is there, a partition changed, or max_wait_ms."""

    def __init__(self, delay_ms: int, reads: list[LogRead], min_bytes: int, isolation: int,
                 replica_manager: ReplicaManager, leader_only: bool = True,
                 leader_epochs: list[int] | None = None, replica_id: int = -1) -> None:
        super().__init__(delay_ms)
        self.reads = reads
        self.min_bytes = min_bytes
        self.isolation = isolation
        self.rm = replica_manager
        self.leader_only = leader_only
        # a fetch that may read from a follower: each read's current_leader_epoch, so a leader
        # epoch change answers it at once (Kafka's DelayedFetch: fetchOffsetSnapshot throws)
        self.leader_epochs = leader_epochs
        self.replica_id = replica_id  # a follower's: its throttled partitions do not count (KIP-73)

    def try_complete(self) -> bool:
        epochs = self.leader_epochs
        if epochs is not None and any(r.partition is not None and check_leader_epoch(r.partition, e)
                                      for r, e in zip(self.reads, epochs, strict=True)):
            return self.force_complete()
        if self.rm.bytes_available(self.reads, self.isolation, self.min_bytes, self.leader_only, self.replica_id):
            return self.force_complete()
        return False


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
    # Kafka's FetchParams.fetchOnlyLeader: a follower, or a consumer without client metadata (v < 11)
    leader_only = from_follower or v < 11
    selector = rm.replica_selector if not leader_only else None
    client_rack = req.rack_id
    context = broker.fetch_manager.new_context(v, req.session_id, req.session_epoch, replica_id >= 0, fetch_data,
                                               to_forget, resolve if by_id else None, broker.clock.wall_ms())

    # Kafka's KafkaApis order: the partitions read, in the context's order, then the ones refused
    # before reading (unknown topic id or partition, not authorized), which never make a fetch wait
    reads: list[LogRead] = []
    read_parts: list[CachedPartition] = []
    refused: list[tuple[CachedPartition, int]] = []
    auth = broker.authorizer
    allowed: dict[str, bool] = {}
    bad_size_logged = False
    for cp in context.partitions():
        name = cp.topic
        if name is None:
            refused.append((cp, Errors.UNKNOWN_TOPIC_ID))
            continue
        if auth is not None:
            ok = allowed.get(name)
            if ok is None:  # KafkaApis: a consumer needs READ on the topic, a follower CLUSTER_ACTION
                ok = allowed[name] = (auth.authorize_cluster(ctx, Op.CLUSTER_ACTION) if from_follower
                                      else auth.authorize(ctx, Op.READ, Res.TOPIC, name))
            if not ok:
                refused.append((cp, Errors.TOPIC_AUTHORIZATION_FAILED))
                continue
        found = (rm.leader_partition(name, cp.partition, cp.leader_epoch) if leader_only
                 else rm.readable_partition(name, cp.partition, cp.leader_epoch, leader_only=False))
        # the type first: comparing a Partition with an IntEnum member is slow
        if isinstance(found, int) and found == Errors.UNKNOWN_TOPIC_OR_PARTITION:
            refused.append((cp, Errors.UNKNOWN_TOPIC_OR_PARTITION))
            continue
        if cp.topic_id != ZERO_ID:
            # Kafka's readFromLog: a session keeps the name its topic id had; a topic deleted and
            # made again under that name has another id
            hosted = found if not isinstance(found, int) else rm.get_partition(name, cp.partition)
            if hosted is not None and hosted.topic_id != cp.topic_id:
                found = Errors.INCONSISTENT_TOPIC_ID
        if not isinstance(found, int) and cp.max_bytes < 0:
            # Kafka's LogSegment.read refuses a negative size; ReplicaManager answers the
            # partition with UNKNOWN_SERVER_ERROR
            found = Errors.UNKNOWN_SERVER_ERROR
            if not bad_size_logged:  # one line per request, however many partitions
                bad_size_logged = True
                log.info("fetch from %s: invalid partition_max_bytes %d for %s-%d", ctx.conn.peer,
                         cp.max_bytes, name, cp.partition)
        if from_follower and not isinstance(found, int) and (replica_id not in found.replicas
                                                            or replica_id == found.local_id):
            # Kafka's Partition.followerReplicaOrThrow: a broker that is not (yet) a replica gets
            # no data; with a leader epoch in the request, UNKNOWN_LEADER_EPOCH (a replica added
            # by a reassignment retries until this leader has seen the change)
            found = (Errors.UNKNOWN_LEADER_EPOCH if cp.leader_epoch >= 0 else Errors.NOT_LEADER_OR_FOLLOWER)
        if not isinstance(found, int) and cp.last_fetched_epoch >= 0 and v >= 12:
            # KIP-320 (Kafka's Partition.readRecords): a log that parted from this one is told
            # where, with no records, and its fetch offset is not taken as its log end
            code, diverging = rm.diverging_epoch(found, cp.last_fetched_epoch, cp.fetch_offset)
            if code:
                found = code
        else:
            diverging = None
        if isinstance(found, int):
            reads.append(LogRead(None, cp.fetch_offset, cp.max_bytes, found))
        else:
            read = LogRead(found, cp.fetch_offset, cp.max_bytes)
            reads.append(read)
            if diverging is not None:
                read.diverging_epoch = diverging
            elif from_follower:
                rm.update_follower_fetch_state(found, replica_id, cp.fetch_offset, replica_epoch,
                                               cp.fetcher_log_start_offset)
            elif selector is not None and found.is_leader:
                read.preferred_read_replica = rm.preferred_read_replica(found, client_rack, cp.fetch_offset,
                                                                        ctx.conn.listener_name)
        read_parts.append(cp)

    max_bytes = min(req.max_bytes, broker.config["fetch.max.bytes"]) if v >= 3 else 2**31 - 1
    min_bytes = min(req.min_bytes, max_bytes)
    # Kafka's KafkaApis: a follower's fetch is exempt from the client quotas; the replication
    # throttles (KIP-73) apply to it instead, in read_from_log and record_leader_replication
    quota = broker.quotas.fetch
    client_quota = quota.enabled and not from_follower
    if client_quota:
        # Kafka: no more than the quota window can take, or the consumer could never progress
        max_bytes = fetch_max_bytes(quota, ctx, max_bytes)
        min_bytes = min(min_bytes, max_bytes)
    follower_id = replica_id if from_follower else -1
    total = rm.read_from_log(reads, max_bytes, isolation, v <= 2, follower_id) if reads else 0
    # Kafka answers at once when a partition failed, has a preferred read replica or diverges
    has_error = any(r.error_code or r.preferred_read_replica >= 0 or r.diverging_epoch is not None for r in reads)
    if total < min_bytes and req.max_wait_ms > 0 and not has_error and reads:
        op = DelayedFetch(req.max_wait_ms, reads, min_bytes, isolation, rm, leader_only,
                          None if leader_only else [cp.leader_epoch for cp in read_parts], follower_id)
        keys = [(r.partition.topic, r.partition.partition) for r in reads if r.partition is not None]
        if not rm.fetch_purgatory.try_complete_else_watch(op, keys):
            await ctx.conn.park(op)
        for r, cp in zip(reads, read_parts, strict=True):
            p = r.partition
            if p is None:
                continue
            if rm.get_partition(p.topic, p.partition) is not p or (leader_only and not p.is_leader):
                r.error_code = Errors.NOT_LEADER_OR_FOLLOWER
            elif not leader_only:  # the leader epoch may have moved meanwhile (Kafka's DelayedFetch)
                r.error_code = check_leader_epoch(p, cp.leader_epoch)
        total = rm.read_from_log(reads, max_bytes, isolation, v <= 2, follower_id)

    updates: list[Update] = [(cp, r, r.size if r.regions and not r.error_code else 0)
                             for cp, r in zip(read_parts, reads, strict=True)]
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
        if not r.error_code:
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
