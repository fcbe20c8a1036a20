"""Fetch (api 1): read batches as file regions; wait in the purgatory for fetch.min.bytes.

Records go out as `FileRegion`s (sendfile from the page cache). A fetch offset inside a
batch returns the whole containing batch; the client skips the records before its offset
(CLIENTS.md pitfall 6). Reads stop at the high watermark (read_uncommitted) or the last
stable offset (read_committed). The first partition with data may exceed the byte limits
by one batch, so a consumer always progresses (Kafka's minOneMessage).

When fewer than min_bytes are available, the request waits as a DelayedFetch watched on
its partitions: an append to any of them re-checks it at once; max_wait_ms expires it.
Fetch sessions (KIP-227) are declined: session id 0, full responses (pitfall 5).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import FetchRequest, FetchResponse
from pybroker.purgatory.purgatory import DelayedOperation
from pybroker.replication.replica_manager import READ_COMMITTED, LogRead
from pybroker.security.authorizer import Op, Res
from pybroker.server.leader_hints import LeaderHints
from pybroker.server.quota import fetch_max_bytes, record_fetch

if TYPE_CHECKING:
    from pybroker.replication.partition import Partition
    from pybroker.replication.replica_manager import ReplicaManager
    from pybroker.server.broker import Broker
    from pybroker.server.request_context import RequestContext

PData = FetchResponse.PartitionData
TResp = FetchResponse.FetchableTopicResponse
AbortedTxn = FetchResponse.AbortedTransaction
ZERO_ID = bytes(16)
log = logging.getLogger("pybroker.server")


class DelayedFetch(DelayedOperation):
    """A fetch waiting for min_bytes (Kafka's DelayedFetch): re-checked whenever one of its
    partitions gets data, answered when enough is there, a partition changed, or max_wait_ms."""

    def __init__(self, delay_ms: int, reads: list[LogRead], min_bytes: int, isolation: int,
                 replica_manager: ReplicaManager) -> None:
        super().__init__(delay_ms)
        self.reads = reads
        self.min_bytes = min_bytes
        self.isolation = isolation
        self.rm = replica_manager

    def try_complete(self) -> bool:
        if self.rm.bytes_available(self.reads, self.isolation, self.min_bytes):
            return self.force_complete()
        return False


async def handle_fetch(broker: Broker, ctx: RequestContext, req: FetchRequest) -> FetchResponse:
    v = ctx.api_version
    rm = broker.replica_manager
    image = broker.image
    isolation = req.isolation_level
    if req.session_id != 0:
        return FetchResponse(throttle_time_ms=0, error_code=Errors.FETCH_SESSION_ID_NOT_FOUND, session_id=0,
                             responses=[])
    if req.session_epoch > 0:
        return FetchResponse(throttle_time_ms=0, error_code=Errors.INVALID_FETCH_SESSION_EPOCH, session_id=0,
                             responses=[])
    by_id = v >= 13
    topics_out: list[TResp] = []
    reads: list[LogRead] = []
    entries: list[PData] = []
    auth = broker.authorizer
    bad_size_logged = False
    for ft in req.topics:
        if by_id:
            t = image.topics_by_id.get(ft.topic_id)
            name = t.name if t is not None else None
            unknown_error = Errors.UNKNOWN_TOPIC_ID
        else:
            name = ft.topic
            unknown_error = Errors.UNKNOWN_TOPIC_OR_PARTITION
        # KafkaApis: a consumer needs READ on the topic (checked after the unknown-id test)
        denied = auth is not None and name is not None and not auth.authorize(ctx, Op.READ, Res.TOPIC, name)
        parts = []
        for fp in ft.partitions:
            if denied:
                found: Partition | int = Errors.TOPIC_AUTHORIZATION_FAILED
            elif name is None:
                found = unknown_error
            else:
                found = rm.leader_partition(name, fp.partition, fp.current_leader_epoch)
                if found == Errors.UNKNOWN_TOPIC_OR_PARTITION:
                    found = unknown_error
                elif not isinstance(found, int) and fp.partition_max_bytes < 0:
                    # Kafka's LogSegment.read refuses a negative size; ReplicaManager answers the
                    # partition with UNKNOWN_SERVER_ERROR
                    found = Errors.UNKNOWN_SERVER_ERROR
                    if not bad_size_logged:  # one line per request, however many partitions
                        bad_size_logged = True
                        log.info("fetch from %s: invalid partition_max_bytes %d for %s-%d", ctx.conn.peer,
                                 fp.partition_max_bytes, name, fp.partition)
            if isinstance(found, int):
                reads.append(LogRead(None, fp.fetch_offset, fp.partition_max_bytes, int(found)))
            else:
                reads.append(LogRead(found, fp.fetch_offset, fp.partition_max_bytes))
            d = PData(partition_index=fp.partition, error_code=0, high_watermark=-1, last_stable_offset=-1,
                      log_start_offset=-1, aborted_transactions=[] if isolation == READ_COMMITTED else None,
                      preferred_read_replica=-1, records=b"")
            parts.append(d)
            entries.append(d)
        topics_out.append(TResp(topic=ft.topic if not by_id else "", topic_id=ft.topic_id, partitions=parts))

    max_bytes = req.max_bytes if v >= 3 else 2**31 - 1
    min_bytes = req.min_bytes
    quota = broker.quotas.fetch
    if quota.enabled:
        # Kafka: no more than the quota window can take, or the consumer could never progress
        max_bytes = fetch_max_bytes(quota, ctx, max_bytes)
        min_bytes = min(min_bytes, max_bytes)
    total = rm.read_from_log(reads, max_bytes, isolation)
    has_error = any(r.error_code for r in reads)
    if total < min_bytes and req.max_wait_ms > 0 and not has_error and reads:
        op = DelayedFetch(req.max_wait_ms, reads, min_bytes, isolation, rm)
        keys = [(r.partition.topic, r.partition.partition) for r in reads if r.partition is not None]
        if not rm.fetch_purgatory.try_complete_else_watch(op, keys):
            await ctx.conn.park(op)
        for r in reads:
            p = r.partition
            if p is not None and rm.get_partition(p.topic, p.partition) is not p:
                r.error_code = Errors.NOT_LEADER_OR_FOLLOWER
        total = rm.read_from_log(reads, max_bytes, isolation)
    for r, d in zip(reads, entries, strict=True):
        if r.error_code:
            d.error_code = r.error_code
            continue
        d.high_watermark = r.high_watermark
        d.last_stable_offset = r.last_stable_offset
        d.log_start_offset = r.log_start_offset
        if r.regions:
            d.records = r.regions
            if r.aborted:
                d.aborted_transactions = [AbortedTxn(producer_id=pid, first_offset=first) for pid, first in r.aborted]
    if quota.enabled:
        # KIP-13: a fetch over quota answers no partitions (its bytes are unrecorded) and the
        # connection is muted. Counted: the records' bytes (Kafka counts the whole response).
        throttle_ms = record_fetch(quota, ctx, total)
        if throttle_ms:
            return FetchResponse(throttle_time_ms=throttle_ms, error_code=0, session_id=0, responses=[])
    rm.topic_stats.record_fetch(reads)  # metrics: Total/FailedFetchRequests, BytesOut (as sent)
    node_endpoints = _leader_hints(broker, ctx, topics_out) if v >= 16 and any(d.error_code for d in entries) else []
    return FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=topics_out,
                         node_endpoints=node_endpoints)


def _leader_hints(broker: Broker, ctx: RequestContext, topics_out: list[TResp]) -> list[FetchResponse.NodeEndpoint]:
    """KIP-951 (server/leader_hints.py): CurrentLeader on partitions this node does not lead."""
    hints = LeaderHints(broker.image, ctx.conn.listener_name, FetchResponse)
    for t in topics_out:
        name = t.topic or getattr(broker.image.topics_by_id.get(t.topic_id), "name", None)
        for d in t.partitions:
            if d.error_code in (Errors.NOT_LEADER_OR_FOLLOWER, Errors.FENCED_LEADER_EPOCH):
                d.current_leader = hints.current_leader(name, d.partition_index)
    return hints.node_endpoints()
