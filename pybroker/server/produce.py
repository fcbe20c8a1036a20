"""Produce (api 0): validate each partition's batch, append it as leader, answer per acks.

Per partition (Kafka's KafkaApis.handleProduceRequest + ReplicaManager.appendRecords):
- v13 names topics by id (KIP-516): an id the cluster lacks is UNKNOWN_TOPIC_ID, the answer
  carries the request's ids; v12 has v11's shape (see the transactional rule below);
- request-level rules (Kafka's ProduceRequest.validateRecords): v0-2 (old message formats) get
  UNSUPPORTED_VERSION, a missing batch INVALID_RECORD, zstd before v7 UNSUPPORTED_COMPRESSION_TYPE;
- the batch's own rules and recompression are the log's: pybroker/log/log_validator.py (Kafka's
  LogValidator), whose errors this handler maps to the partition's response, with the per-record
  errors of v8+;
- a transactional batch must belong to an ongoing transaction that added the partition (KIP-890
  part 1 verification, the transaction coordinator's check; skipped without a transactional id,
  or when the producer already has a transaction open on the partition at that epoch). From v12
  (a transaction version 2 client, Kafka's ADD_PARTITION operation) the coordinator *adds* the
  partition instead, retrying CONCURRENT_TRANSACTIONS every 20 ms for up to 100 ms (Kafka's
  add.partitions.to.txn.retry.backoff defaults). Coordinator answers become the client's as in
  Kafka's ReplicaManager: PRODUCER_FENCED -> INVALID_PRODUCER_EPOCH; TRANSACTION_ABORTABLE ->
  INVALID_TXN_STATE ("Partition was not added to the transaction") before v11; the coordinator
  being unreachable or loading, and before v12 CONCURRENT_TRANSACTIONS, -> NOT_ENOUGH_REPLICAS
  ("Unable to verify the partition has been added to the transaction. Underlying error: X").
  Transactional batches of two producers in one request fail it all with
  INVALID_PRODUCER_ID_MAPPING. Verifying (v3-11, AddPartitionsToTxn VerifyOnly) and adding (v12+)
  ask the transactional id's coordinator wherever it is (coordinators/txn/add_partitions_manager.py:
  this node's directly, another node's over AddPartitionsToTxn v5);
- acks=-1 needs min.insync.replicas;
- producer-id/epoch/sequence checks and duplicate detection happen in the log's append.

acks=0 gets no response at all, and any error closes the connection instead (Kafka's way
of telling a fire-and-forget producer to refresh metadata). acks=-1 waits as a
DelayedProduce until the high watermark covers the batch or timeout_ms passes.
"""

from __future__ import annotations

import time
from typing import Any

import trio

from pybroker._native import records as native_records
from pybroker._native.errors import RecordError
from pybroker.log.errors import LogError, RecordValidationError
from pybroker.log.log_validator import validate_records
from pybroker.net.connection import CloseConnection
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import ProduceRequest, ProduceResponse
from pybroker.purgatory.purgatory import DelayedOperation
from pybroker.records.batch import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER_SIZE,
    CODEC_MASK,
    H_PRODUCER_EPOCH,
    H_PRODUCER_ID,
    TRANSACTIONAL_FLAG,
)
from pybroker.records.compression import ZSTD
from pybroker.security.authorizer import Op, Res
from pybroker.server.leader_hints import LeaderHints
from pybroker.server.quota import record_produce

PartResp = ProduceResponse.PartitionProduceResponse
TopicResp = ProduceResponse.TopicProduceResponse
BatchError = ProduceResponse.BatchIndexAndErrorMessage


class DelayedProduce(DelayedOperation):
    """Waits until every appended partition's high watermark reaches its required offset, i.e.
    the whole ISR has the batch (Kafka's DelayedProduce + Partition.checkEnoughReplicasReachOffset).
    A partition whose leadership moved answers NOT_LEADER_OR_FOLLOWER; one whose ISR shrank below
    min.insync.replicas while it waited answers NOT_ENOUGH_REPLICAS_AFTER_APPEND (the batch is in
    the log but not as durable as asked)."""

    def __init__(self, delay_ms: int, waits: list[tuple[Any, int, PartResp]]) -> None:
        super().__init__(delay_ms)
        self.waits = waits  # (partition, required offset, response entry)

    def try_complete(self) -> bool:
        if all(p.high_watermark >= required or not p.is_leader for p, required, _ in self.waits):
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        for p, required, resp in self.waits:
            if resp.error_code:
                continue
            if not p.is_leader:
                resp.error_code = Errors.NOT_LEADER_OR_FOLLOWER
                resp.base_offset = -1
            elif p.high_watermark < required:  # expired, or forced at shutdown: not acknowledged
                resp.error_code = Errors.REQUEST_TIMED_OUT
                resp.base_offset = -1
                resp.error_message = "Timed out waiting for the in-sync replicas"
            elif len(p.isr) < p.effective_min_isr:
                resp.error_code = Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND
                resp.error_message = (f"The size of the current ISR {len(p.isr)} is insufficient to satisfy the "
                                      f"min.isr requirement of {p.effective_min_isr}")


def _fail(resp: PartResp, code: int, message: str | None = None, record_errors: list[Any] | None = None) -> None:
    resp.error_code = int(code)
    resp.error_message = message
    resp.base_offset = -1
    if record_errors:
        resp.record_errors = record_errors


ADD_PARTITIONS_RETRY_BACKOFF_S = 0.02  # add.partitions.to.txn.retry.backoff.ms
ADD_PARTITIONS_RETRY_MAX_S = 0.1  # add.partitions.to.txn.retry.backoff.max.ms
_UNVERIFIED = frozenset(int(e) for e in (Errors.NETWORK_EXCEPTION, Errors.COORDINATOR_LOAD_IN_PROGRESS,
                                         Errors.COORDINATOR_NOT_AVAILABLE, Errors.NOT_COORDINATOR))


def transaction_error(code: int, version: int) -> tuple[int, str | None]:
    """A coordinator's verify/add answer (already mapped by client_code) as ReplicaManager reports
    it for Produce `version`: (error code, error message)."""
    if code == Errors.INVALID_TXN_STATE:
        return code, "Partition was not added to the transaction"
    if code in _UNVERIFIED or (code == Errors.CONCURRENT_TRANSACTIONS and version < 12):
        return (int(Errors.NOT_ENOUGH_REPLICAS),
                f"Unable to verify the partition has been added to the transaction. Underlying error: {Errors(code).name}")
    return code, None


def _transactional_producer(req: ProduceRequest) -> tuple[int, int] | None | bool:
    """The (producer id, epoch) of the request's transactional batches; None if there are none,
    False when they are two producers' (Kafka: InvalidPidMappingException for the request)."""
    found: set[tuple[int, int]] = set()
    for td in req.topic_data:
        for pd in td.partition_data:
            r = pd.records
            if r is None or len(r) < BATCH_HEADER_SIZE or not r[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_FLAG:
                continue
            try:
                header = native_records.read_batch_header(r if isinstance(r, memoryview) else memoryview(r), 0)
            except (RecordError, ValueError):
                continue  # a malformed batch is the append path's to answer
            if header[H_PRODUCER_ID] >= 0:
                found.add((header[H_PRODUCER_ID], header[H_PRODUCER_EPOCH]))
    if len(found) > 1:
        return False
    return next(iter(found), None)


async def _add_to_transaction(broker: Any, req: ProduceRequest, names: list[str], producer: tuple[int, int],
                              version: int) -> dict[tuple[str, int], int]:
    """Before appending (ReplicaManager.appendRecordsWithTransactionVerification): the transactional
    partitions this node leads that the producer has no transaction open on yet go to its
    coordinator, wherever it is: v12+ (ADD_PARTITION) to be added, older versions to be verified.
    Per partition the coordinator's answer, mapped for the client (0: go ahead)."""
    pid, epoch = producer
    rm = broker.replica_manager
    wanted = []
    for td, name in zip(req.topic_data, names, strict=True):
        for pd in td.partition_data:
            r = pd.records
            if not name or r is None or len(r) < BATCH_HEADER_SIZE or not r[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_FLAG:
                continue
            partition = rm.get_partition(name, pd.index)
            if partition is None or not partition.is_leader:
                continue  # answered by the append path (NOT_LEADER_OR_FOLLOWER, unknown partition)
            if not partition.log.producer_state.has_ongoing_transaction(pid, epoch):
                wanted.append((name, pd.index))
    if not wanted:
        return {}
    add = version >= 12
    manager = broker.add_partitions_manager
    if not add:  # TRANSACTION_ABORTABLE reaches clients from v11 on
        return await manager.add_or_verify(req.transactional_id, pid, epoch, wanted, False, version >= 11)
    deadline = trio.current_time() + min(ADD_PARTITIONS_RETRY_MAX_S, broker.config["request.timeout.ms"] / 1000)
    while True:
        codes = await manager.add_or_verify(req.transactional_id, pid, epoch, wanted, True)
        if Errors.CONCURRENT_TRANSACTIONS not in codes.values() or trio.current_time() >= deadline:
            return codes
        await trio.sleep(ADD_PARTITIONS_RETRY_BACKOFF_S)


def _append_partition(broker: Any, version: int, topic: str, index: int, records: Any, now_ms: int,
                      resp: PartResp, acks: int, transactional_id: str | None = None,
                      added: dict[tuple[str, int], int] | None = None) -> Any:
    """Validate and append one partition's data; fills `resp`; returns the Partition on success.
    `added`: the coordinator's answers for the transactional partitions it was asked to add or verify
    (None: the request has no transactional id)."""
    rm = broker.replica_manager
    partition = rm.get_partition(topic, index)
    if partition is None or not partition.is_leader:
        # a partition of the cluster that this node does not lead: NOT_LEADER_OR_FOLLOWER
        # (the caller adds where the leader is, KIP-951); one the cluster does not have: unknown
        code = rm.leader_partition(topic, index)
        if code == Errors.UNKNOWN_TOPIC_OR_PARTITION:
            _fail(resp, code, "This server does not host this topic-partition.")
        else:
            _fail(resp, Errors.NOT_LEADER_OR_FOLLOWER)
        return None
    if version < 3:
        _fail(resp, Errors.UNSUPPORTED_VERSION, "Produce v0-2 (message formats v0/v1) are not supported")
        return None
    if records is None or len(records) == 0:
        _fail(resp, Errors.INVALID_RECORD, "Produce requests must contain exactly one record batch")
        return None
    if (version < 7 and len(records) >= BATCH_HEADER_SIZE
            and records[ATTRIBUTES_OFFSET + 1] & CODEC_MASK == ZSTD):
        _fail(resp, Errors.UNSUPPORTED_COMPRESSION_TYPE, "zstd needs Produce v7 or later")
        return None
    view = records if isinstance(records, memoryview) else memoryview(bytearray(records))
    if view.readonly:
        view = memoryview(bytearray(view))
    cfg = partition.log.config
    try:
        validated = validate_records(view, cfg, now_ms, topic, index)
    except RecordValidationError as exc:
        _fail(resp, exc.error_code, str(exc),
              [BatchError(batch_index=i, batch_index_error_message=m) for i, m in exc.record_errors]
              if version >= 8 else None)
        return None
    except RecordError as exc:
        _fail(resp, exc.error_code, str(exc))
        return None
    header = validated.header
    if header.is_transactional and header.producer_id >= 0 and transactional_id is not None:
        code = 0 if added is None else added.get((topic, index), 0)  # absent: already in the transaction
        if code:
            _fail(resp, *transaction_error(code, version))
            return None
    # Kafka 4's effectiveMinIsr: min.insync.replicas capped at the replica count
    if acks == -1 and len(partition.isr) < partition.effective_min_isr:
        _fail(resp, Errors.NOT_ENOUGH_REPLICAS,
              f"The size of the current ISR {len(partition.isr)} is insufficient to satisfy the min.isr "
              f"requirement of {partition.effective_min_isr}")
        return None
    try:
        info = rm.append(partition, validated.batch, header=header)
    except LogError as exc:
        _fail(resp, exc.error_code, str(exc))
        return None
    resp.error_code = 0
    resp.base_offset = info.first_offset
    resp.log_append_time_ms = info.log_append_time
    resp.log_start_offset = info.log_start_offset
    return partition, info.last_offset + 1


def _has_transactional_records(req: ProduceRequest) -> bool:
    """RequestUtils.hasTransactionalRecords: some partition's first batch has the transactional bit."""
    for td in req.topic_data:
        for pd in td.partition_data:
            r = pd.records
            if r is not None and len(r) > ATTRIBUTES_OFFSET + 1 and r[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_FLAG:
                return True
    return False


def _authorize(auth: Any, ctx: Any, req: ProduceRequest, names: list[str]) -> tuple[int, set[str] | None]:
    """KafkaApis.handleProduceRequest: (TRANSACTIONAL_ID_AUTHORIZATION_FAILED for the whole request, or
    0 and the topics the caller may WRITE). Idempotent producers need nothing here since Kafka 3.0
    (KIP-679): IDEMPOTENT_WRITE is checked at InitProducerId."""
    if _has_transactional_records(req) and (
            req.transactional_id is None
            or not auth.authorize(ctx, Op.WRITE, Res.TRANSACTIONAL_ID, req.transactional_id)):
        return Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None
    return 0, auth.filter_authorized(ctx, Op.WRITE, Res.TOPIC, (n for n in names if n))


def _topic_names(broker: Any, req: ProduceRequest, version: int) -> list[str]:
    """Each topic's name; v13 names topics by id (KIP-516): an id the image lacks gives "" (Kafka's
    getTopicName(id).orElse(name), the name being empty at v13), answered UNKNOWN_TOPIC_ID."""
    if version < 13:
        return [td.name for td in req.topic_data]
    by_id = broker.image.topics_by_id
    return [getattr(by_id.get(td.topic_id), "name", "") for td in req.topic_data]


async def handle_produce(broker: Any, ctx: Any, req: ProduceRequest) -> ProduceResponse | None:
    version = ctx.api_version
    acks = req.acks
    now_ms = int(time.time() * 1000)
    topics_out: list[TopicResp] = []
    waits: list[tuple[Any, int, PartResp]] = []
    any_error = False
    names = _topic_names(broker, req, version)
    denied_all, writable = (0, None) if broker.authorizer is None else _authorize(broker.authorizer, ctx, req, names)
    producer = _transactional_producer(req)
    if producer is False and not denied_all:
        denied_all = int(Errors.INVALID_PRODUCER_ID_MAPPING)  # Kafka fails the whole request
    added = None
    if isinstance(producer, tuple) and req.transactional_id is not None and not denied_all and acks in (0, 1, -1):
        added = await _add_to_transaction(broker, req, names, producer, version)
    for td, name in zip(req.topic_data, names, strict=True):
        parts_out = []
        for pd in td.partition_data:
            resp = PartResp(index=pd.index, error_code=0, base_offset=-1, log_append_time_ms=-1,
                            log_start_offset=-1, record_errors=[], error_message=None)
            if denied_all:
                _fail(resp, denied_all)
            elif not name:  # v13: an unknown topic id (before authorization, as Kafka)
                _fail(resp, Errors.UNKNOWN_TOPIC_ID)
            elif writable is not None and name not in writable:
                _fail(resp, Errors.TOPIC_AUTHORIZATION_FAILED)
            elif acks not in (0, 1, -1):
                _fail(resp, Errors.INVALID_REQUIRED_ACKS)
            else:
                done = _append_partition(broker, version, name, pd.index, pd.records, now_ms, resp, acks,
                                         req.transactional_id, added)
                if done is not None:
                    waits.append((done[0], done[1], resp))
            any_error = any_error or resp.error_code != 0
            if name:
                broker.replica_manager.topic_stats.record_produce(name, resp.error_code)  # metrics
            parts_out.append(resp)
        topics_out.append(TopicResp(name=name, topic_id=td.topic_id, partition_responses=parts_out))
    if acks == 0:
        if any_error:
            raise CloseConnection("acks=0 produce failed: closing so the client refreshes metadata")
        if broker.quotas.produce.enabled:
            record_produce(broker.quotas.produce, ctx)  # mutes the connection, no response to carry it
        return None
    if acks == -1 and waits:
        op = DelayedProduce(max(0, req.timeout_ms), waits)
        rm = broker.replica_manager
        keys = [(p.topic, p.partition) for p, _, _ in waits]
        if not rm.produce_purgatory.try_complete_else_watch(op, keys):
            await ctx.conn.park(op)
    # KIP-13 byte-rate quota, recorded when answering as Kafka does (one bool test without quotas)
    throttle_ms = record_produce(broker.quotas.produce, ctx) if broker.quotas.produce.enabled else 0
    if waits:  # a wait may have ended in NOT_LEADER_OR_FOLLOWER (the leadership moved meanwhile)
        any_error = any_error or any(resp.error_code for _, _, resp in waits)
    node_endpoints = _leader_hints(broker, ctx, topics_out) if any_error and version >= 10 else []
    return ProduceResponse(responses=topics_out, throttle_time_ms=throttle_ms, node_endpoints=node_endpoints)


def _leader_hints(broker: Any, ctx: Any, topics_out: list[TopicResp]) -> list[Any]:
    """KIP-951: CurrentLeader on NOT_LEADER_OR_FOLLOWER partitions, their leaders' endpoints."""
    hints = LeaderHints(broker.image, ctx.conn.listener_name, ProduceResponse)
    for t in topics_out:
        for p in t.partition_responses:
            if p.error_code == Errors.NOT_LEADER_OR_FOLLOWER:
                p.current_leader = hints.current_leader(t.name, p.index)
    return hints.node_endpoints()


__all__ = ["DelayedProduce", "handle_produce"]
