"""Produce (api 0): decode, authorize, hand the data to the replica manager, answer per acks.

The handler keeps what Kafka's KafkaApis.handleProduceRequest decides; everything about the log
is the replica manager's (replication/replica_manager.py). Per partition, in
Kafka's order:
- transactional batches need WRITE on the transactional id, else the whole request is
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED. Idempotent producers need nothing here since Kafka 3.0
  (KIP-679: IDEMPOTENT_WRITE is checked at InitProducerId);
- v13 names topics by id (KIP-516): an id the cluster lacks is UNKNOWN_TOPIC_ID (before
  authorization, as Kafka), and the answer carries the request's ids; v12 has v11's shape;
- WRITE on the topic (TOPIC_AUTHORIZATION_FAILED); a partition the metadata lacks is
  UNKNOWN_TOPIC_OR_PARTITION;
- request-level rules (Kafka's ProduceRequest.validateRecords): v0-2 (old message formats) get
  UNSUPPORTED_VERSION, a missing batch INVALID_RECORD, zstd before v7 UNSUPPORTED_COMPRESSION_TYPE;
- acks other than 0, 1, -1 is INVALID_REQUIRED_ACKS (Kafka's appendRecords);
- the rest goes to the replica manager in one call, ReplicaManager.handle_produce_append with a
  transactional id, else append_records (no coordinator to await): the KIP-890 transaction
  verification (v12+ adds the partition to the transaction), transactional batches of two producers
  (INVALID_PRODUCER_ID_MAPPING for the whole request), leadership (NOT_LEADER_OR_FOLLOWER, with
  KIP-951's leader hints from v10), min.insync.replicas for acks=all, the log's validator
  (log/log_validator.py: the batch rules, recompression; per-record errors from v8) and the
  producer-id/epoch/sequence checks and duplicate detection of the log's append.

acks=0 gets no response at all, and any error closes the connection instead (Kafka's way
of telling a fire-and-forget producer to refresh metadata). acks=-1 parks the request on its
connection until the replica manager's DelayedProduce completes (the high watermark covers
every batch, or timeout_ms passes). Time: the replica manager's injected clock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pybroker.errors import KafkaError
from pybroker.net.connection import CloseConnection
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import ProduceRequest, ProduceResponse
from pybroker.records.batch import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER_SIZE,
    CODEC_MASK,
    TRANSACTIONAL_FLAG,
)
from pybroker.records.compression import ZSTD
from pybroker.replication.delayed_produce import ProducePartitionStatus
from pybroker.replication.transaction_verification import (
    ProduceEntry,
    TransactionSupportedOperation,
)
from pybroker.security.authorizer import Op, Res
from pybroker.server.leader_hints import LeaderHints
from pybroker.server.quota import record_produce

if TYPE_CHECKING:
    from pybroker.metadata.image import TopicImage
    from pybroker.security.authorizer import StandardAuthorizer
    from pybroker.server.broker import Broker
    from pybroker.server.request_context import RequestContext

PartResp = ProduceResponse.PartitionProduceResponse
TopicResp = ProduceResponse.TopicProduceResponse
BatchError = ProduceResponse.BatchIndexAndErrorMessage
_UNKNOWN_MESSAGE = "This server does not host this topic-partition."
_VALID: tuple[int, str | None] = (0, None)


def _fail(resp: PartResp, code: int, message: str | None = None) -> None:
    resp.error_code = int(code)
    resp.error_message = message
    resp.base_offset = -1


def _request_error(version: int, records: bytes | bytearray | memoryview | None) -> tuple[int, str | None]:
    """Kafka's ProduceRequest.validateRecords: (error code, message), (0, None) when valid."""
    if version < 3:
        return Errors.UNSUPPORTED_VERSION, "Produce v0-2 (message formats v0/v1) are not supported"
    if records is None or len(records) == 0:
        return Errors.INVALID_RECORD, "Produce requests must contain exactly one record batch"
    if version < 7 and len(records) >= BATCH_HEADER_SIZE and records[ATTRIBUTES_OFFSET + 1] & CODEC_MASK == ZSTD:
        return Errors.UNSUPPORTED_COMPRESSION_TYPE, "zstd needs Produce v7 or later"
    return 0, None


def _has_transactional_records(req: ProduceRequest) -> bool:
    """RequestUtils.hasTransactionalRecords: some partition's first batch has the transactional bit."""
    for td in req.topic_data:
        for pd in td.partition_data:
            r = pd.records
            if r is not None and len(r) > ATTRIBUTES_OFFSET + 1 and r[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_FLAG:
                return True
    return False


def _authorize(auth: StandardAuthorizer, ctx: RequestContext, req: ProduceRequest,
               names: list[str]) -> tuple[int, set[str] | None]:
    """KafkaApis.handleProduceRequest: (TRANSACTIONAL_ID_AUTHORIZATION_FAILED for the whole request, or
    0 and the topics the caller may WRITE)."""
    if _has_transactional_records(req) and (
            req.transactional_id is None
            or not auth.authorize(ctx, Op.WRITE, Res.TRANSACTIONAL_ID, req.transactional_id)):
        return Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None
    return 0, auth.filter_authorized(ctx, Op.WRITE, Res.TOPIC, (n for n in names if n))


def _topics(broker: Broker, req: ProduceRequest, version: int) -> list[tuple[str, TopicImage | None]]:
    """Each topic's name and image; v13 names topics by id (KIP-516): an id the image lacks gives
    "" (Kafka's getTopicName(id).orElse(name), the name being empty at v13), answered
    UNKNOWN_TOPIC_ID."""
    if version < 13:
        by_name = broker.image.topics_by_name
        return [(td.name, by_name.get(td.name)) for td in req.topic_data]
    by_id = broker.image.topics_by_id
    out: list[tuple[str, TopicImage | None]] = []
    for td in req.topic_data:
        t = by_id.get(td.topic_id)
        out.append((t.name if t is not None else "", t))
    return out


async def handle_produce(broker: Broker, ctx: RequestContext, req: ProduceRequest) -> ProduceResponse | None:
    version = ctx.api_version
    acks = req.acks
    rm = broker.replica_manager
    topics = _topics(broker, req, version)
    names = [name for name, _ in topics]
    denied_all, writable = (0, None) if broker.authorizer is None else _authorize(broker.authorizer, ctx, req, names)
    topics_out: list[TopicResp] = []
    refused: list[tuple[str, PartResp]] = []  # failed here (each has an error), counted in the metrics at the end
    entries: list[ProduceEntry] = []
    targets: list[PartResp] = []  # the response entry of each entry
    for td, (name, t) in zip(req.topic_data, topics, strict=True):
        parts_out = []
        for pd in td.partition_data:
            resp = PartResp(index=pd.index, error_code=0, base_offset=-1, log_append_time_ms=-1,
                            log_start_offset=-1, record_errors=[], error_message=None)
            parts_out.append(resp)
            if denied_all:
                _fail(resp, denied_all)
            elif not name:  # v13: an unknown topic id (before authorization, as Kafka)
                _fail(resp, Errors.UNKNOWN_TOPIC_ID)
            elif writable is not None and name not in writable:
                _fail(resp, Errors.TOPIC_AUTHORIZATION_FAILED)
            elif t is None or pd.index not in t.partitions:
                _fail(resp, Errors.UNKNOWN_TOPIC_OR_PARTITION, _UNKNOWN_MESSAGE)
            else:
                records = pd.records
                code, message = _VALID if version >= 7 and records else _request_error(version, records)
                if code:
                    _fail(resp, code, message)
                elif acks not in (0, 1, -1):
                    _fail(resp, Errors.INVALID_REQUIRED_ACKS)
                else:
                    entries.append((name, pd.index, records))
                    targets.append(resp)
                    continue
            refused.append((name, resp))
        topics_out.append(TopicResp(name=name, topic_id=td.topic_id, partition_responses=parts_out))
    delayed = None
    statuses: list[ProducePartitionStatus] = []
    if entries:
        try:
            if req.transactional_id is None:  # nothing to verify: no coroutine on the common path
                statuses, delayed = rm.append_records(req.timeout_ms, acks, entries)
            else:
                statuses, delayed = await rm.handle_produce_append(
                    req.timeout_ms, acks, entries, req.transactional_id,
                    TransactionSupportedOperation.for_produce_version(version))
        except KafkaError as exc:  # INVALID_PRODUCER_ID_MAPPING: Kafka fails the whole request
            refused = []
            for tr, (name, _) in zip(topics_out, topics, strict=True):
                for resp in tr.partition_responses:
                    _fail(resp, exc.error_code)
                    refused.append((name, resp))
            targets = []
    stats = rm.topic_stats
    for name, resp in refused:
        if name:  # metrics; the replica manager counts its own
            stats.record_produce(name, resp.error_code)
    if acks == 0:
        if refused or any(s.error_code for s in statuses):
            raise CloseConnection("acks=0 produce failed: closing so the client refreshes metadata")
        if broker.quotas.produce.enabled:
            record_produce(broker.quotas.produce, ctx)  # mutes the connection, no response to carry it
        return None
    if delayed is not None:
        await ctx.conn.park(delayed)
    any_error = bool(refused)  # every partition answered here failed
    for resp, s in zip(targets, statuses, strict=True):
        resp.base_offset = s.base_offset  # -1 unless appended (NOT_ENOUGH_REPLICAS_AFTER_APPEND keeps it)
        resp.log_append_time_ms = s.log_append_time_ms
        resp.log_start_offset = s.log_start_offset
        if s.error_code:
            any_error = True
            resp.error_code = s.error_code
            resp.error_message = s.error_message
            if s.record_errors and version >= 8:
                resp.record_errors = [BatchError(batch_index=i, batch_index_error_message=m)
                                      for i, m in s.record_errors]
    # KIP-13 byte-rate quota, recorded when answering as Kafka does (one bool test without quotas)
    throttle_ms = record_produce(broker.quotas.produce, ctx) if broker.quotas.produce.enabled else 0
    node_endpoints = _leader_hints(broker, ctx, topics_out) if any_error and version >= 10 else []
    return ProduceResponse(responses=topics_out, throttle_time_ms=throttle_ms, node_endpoints=node_endpoints)


def _leader_hints(broker: Broker, ctx: RequestContext, topics_out: list[TopicResp]
                  ) -> list[ProduceResponse.NodeEndpoint]:
    """KIP-951: CurrentLeader on NOT_LEADER_OR_FOLLOWER partitions, their leaders' endpoints."""
    hints = LeaderHints(broker.image, ctx.conn.listener_name, ProduceResponse)
    for t in topics_out:
        for p in t.partition_responses:
            if p.error_code == Errors.NOT_LEADER_OR_FOLLOWER:
                p.current_leader = hints.current_leader(t.name, p.index)
    return hints.node_endpoints()


__all__ = ["handle_produce"]
