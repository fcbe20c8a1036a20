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
from typing import TYPE_CHECKING, Any

from pybroker.log.errors import LogError
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import FetchRequest, FetchResponse
from pybroker.purgatory.purgatory import DelayedOperation
from pybroker.security.authorizer import Op, Res
from pybroker.server.quota import fetch_max_bytes, record_fetch

if TYPE_CHECKING:
    from pybroker.server.broker import Broker
    from pybroker.server.request_context import RequestContext

PData = FetchResponse.PartitionData
TResp = FetchResponse.FetchableTopicResponse
AbortedTxn = FetchResponse.AbortedTransaction
ZERO_ID = bytes(16)
READ_COMMITTED = 1
log = logging.getLogger("pybroker.server")


class _Slot:
    """One requested partition: where to read and the response entry to fill."""

    __slots__ = ("partition", "fetch_offset", "max_bytes", "data")

    def __init__(self, partition: Any, fetch_offset: int, max_bytes: int, data: PData) -> None:
        self.partition = partition
        self.fetch_offset = fetch_offset
        self.max_bytes = max_bytes
        self.data = data


def _upper_bound(p: Any, isolation: int) -> int:
    return p.last_stable_offset if isolation == READ_COMMITTED else p.high_watermark


def _read_all(slots: list[_Slot], max_bytes: int, isolation: int) -> int:
    """Fill every slot's records; returns total bytes."""
    total = 0
    min_one = True
    for s in slots:
        p = s.partition
        if p is None or s.data.error_code:
            continue
        d = s.data
        d.high_watermark = p.high_watermark
        d.last_stable_offset = p.last_stable_offset
        d.log_start_offset = p.log.log_start_offset
        limit = min(s.max_bytes, max(0, max_bytes - total))
        try:
            info = p.log.read(s.fetch_offset, limit, _upper_bound(p, isolation), min_one)
        except LogError as exc:
            d.error_code = exc.error_code
            d.records = b""
            continue
        if info.size:
            d.records = list(info.regions)
            total += info.size
            if isolation == READ_COMMITTED:
                d.aborted_transactions = [
                    AbortedTxn(producer_id=a.producer_id, first_offset=a.first_offset)
                    for a in p.log.txn_index.collect(s.fetch_offset, d.last_stable_offset)]
            min_one = False
        else:
            d.records = b""
    return total


def _available(slots: list[_Slot], isolation: int, need: int) -> bool:
    have = 0
    for s in slots:
        p = s.partition
        if p is None:
            continue
        upper = _upper_bound(p, isolation)
        if upper > s.fetch_offset:
            if need <= 1:
                return True
            try:
                have += p.log.read(s.fetch_offset, max(need, s.max_bytes), upper, True).size
            except LogError:
                return True  # the offset became invalid: answer now with the error
            if have >= need:
                return True
    return False


class DelayedFetch(DelayedOperation):
    def __init__(self, delay_ms: int, slots: list[_Slot], min_bytes: int, isolation: int,
                 replica_manager: Any) -> None:
        super().__init__(delay_ms)
        self.slots = slots
        self.min_bytes = min_bytes
        self.isolation = isolation
        self.rm = replica_manager

    def try_complete(self) -> bool:
        for s in self.slots:
            p = s.partition
            if p is not None and self.rm.get_partition(p.topic, p.partition) is not p:
                return self.force_complete()  # deleted or replaced meanwhile
        if _available(self.slots, self.isolation, self.min_bytes):
            return self.force_complete()
        return False


def _check_epoch(p: Any, current_leader_epoch: int) -> int:
    if current_leader_epoch < 0:
        return 0
    if current_leader_epoch < p.leader_epoch:
        return Errors.FENCED_LEADER_EPOCH
    if current_leader_epoch > p.leader_epoch:
        return Errors.UNKNOWN_LEADER_EPOCH
    return 0


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
    slots: list[_Slot] = []
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
            d = PData(partition_index=fp.partition, error_code=0, high_watermark=-1, last_stable_offset=-1,
                      log_start_offset=-1, aborted_transactions=[] if isolation == READ_COMMITTED else None,
                      preferred_read_replica=-1, records=b"")
            p = rm.get_partition(name, fp.partition) if name is not None and not denied else None
            if denied:
                d.error_code = Errors.TOPIC_AUTHORIZATION_FAILED
            elif p is None:
                d.error_code = unknown_error
            elif not p.is_leader:
                d.error_code = Errors.NOT_LEADER_OR_FOLLOWER
            elif fp.partition_max_bytes < 0:
                # Kafka's LogSegment.read refuses a negative size; ReplicaManager answers the
                # partition with UNKNOWN_SERVER_ERROR
                d.error_code = Errors.UNKNOWN_SERVER_ERROR
                if not bad_size_logged:  # one line per request, however many partitions
                    bad_size_logged = True
                    log.info("fetch from %s: invalid partition_max_bytes %d for %s-%d", ctx.conn.peer,
                             fp.partition_max_bytes, name, fp.partition)
            else:
                d.error_code = _check_epoch(p, fp.current_leader_epoch)
            if d.error_code:
                d.records = None if v < 0 else b""
            parts.append(d)
            slots.append(_Slot(p if not d.error_code else None, fp.fetch_offset, fp.partition_max_bytes, d))
        topics_out.append(TResp(topic=ft.topic if not by_id else "", topic_id=ft.topic_id, partitions=parts))

    max_bytes = req.max_bytes if v >= 3 else 2**31 - 1
    min_bytes = req.min_bytes
    quota = broker.quotas.fetch
    if quota.enabled:
        # Kafka: no more than the quota window can take, or the consumer could never progress
        max_bytes = fetch_max_bytes(quota, ctx, max_bytes)
        min_bytes = min(min_bytes, max_bytes)
    total = _read_all(slots, max_bytes, isolation)
    has_error = any(s.data.error_code for s in slots)
    if total < min_bytes and req.max_wait_ms > 0 and not has_error and slots:
        op = DelayedFetch(req.max_wait_ms, slots, min_bytes, isolation, rm)
        keys = [(s.partition.topic, s.partition.partition) for s in slots if s.partition is not None]
        if not rm.fetch_purgatory.try_complete_else_watch(op, keys):
            await ctx.conn.park(op)
        for s in slots:
            if s.partition is not None and rm.get_partition(s.partition.topic, s.partition.partition) is not s.partition:
                s.data.error_code = Errors.NOT_LEADER_OR_FOLLOWER
        total = _read_all(slots, max_bytes, isolation)
    if quota.enabled:
        # KIP-13: a fetch over quota answers no partitions (its bytes are unrecorded) and the
        # connection is muted. Counted: the records' bytes (Kafka counts the whole response).
        throttle_ms = record_fetch(quota, ctx, total)
        if throttle_ms:
            return FetchResponse(throttle_time_ms=throttle_ms, error_code=0, session_id=0, responses=[])
    return FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=topics_out)
