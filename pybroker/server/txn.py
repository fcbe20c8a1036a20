"""Transaction APIs: InitProducerId (22) with a transactional id, AddPartitionsToTxn (24) v0-5,
AddOffsetsToTxn (25) v0-4, EndTxn (26) v0-5, TxnOffsetCommit (28) v0-5.

The state machine lives in pybroker/coordinators/txn/. Errors as Kafka's KafkaApis: a
transaction timeout above transaction.max.timeout.ms is INVALID_TRANSACTION_TIMEOUT;
PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH for versions older than the clients that know
it (InitProducerId < 4, the others < 2); coordinator errors (NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS, ...) go where each API puts its error. AddPartitionsToTxn
answers UNKNOWN_TOPIC_OR_PARTITION for partitions the cluster lacks and
OPERATION_NOT_ATTEMPTED for the rest of that request.

KIP-890 versions, answered as Kafka 4.2 answers them. Kafka picks the transaction version of
these paths from the request version, not from the finalized transaction.version
(TransactionVersion.transactionVersionForEndTxn / ForAddPartitionsToTxn, KafkaApis'
TxnOffsetCommit). The cluster keeps transaction.version 0 finalized and Kafka's clients pick
these versions only when 2 is, but a request at these versions gets transaction version 2's
behaviour:
- AddPartitionsToTxn v4-5: the batched broker-to-coordinator form (needs the inter-broker
  listener, and CLUSTER_ACTION on the cluster with an authorizer, server/broker_only.py, else
  CLUSTER_AUTHORIZATION_FAILED for the whole request); each
  transaction either VerifyOnly (Kafka's handleVerifyPartitionsInTransaction) or is added with
  transaction version 2; v5 is answered as v4 (it tells that its sender knows
  TRANSACTION_ABORTABLE);
- EndTxn v5: each commit/abort bumps the producer epoch, and the answer carries the id and epoch
  to go on with (a new producer id at epoch 0 once the epoch is exhausted); v0-4 answer -1/-1;
- TxnOffsetCommit v5: the coordinator adds the group's offsets partition itself (no
  AddOffsetsToTxn); v0-4 only verify it;
- AddOffsetsToTxn/EndTxn/TxnOffsetCommit v4 may answer TRANSACTION_ABORTABLE (older versions
  get INVALID_TXN_STATE for it).
The verify/add requests of partition leaders reach the coordinator wherever it is
(pybroker/coordinators/txn/add_partitions_manager.py, `local_add_or_verify` on this node).

TxnOffsetCommit writes the offsets to __consumer_offsets as the producer's transactional batch
(pending until the transaction's marker, pybroker/coordinators/group/offset_metadata_manager.py),
once the offsets partition is verified in (or added to) the producer's ongoing transaction.

A transaction may hold partitions led by any node and offsets of a group coordinated on any
node: its markers reach their leaders with WriteTxnMarkers
(pybroker/coordinators/txn/marker_channel.py, server/write_txn_markers.py).

Concurrency: trio thread; each handler awaits its coordinator write.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pybroker.coordinators import record_serde as group_serde
from pybroker.coordinators.group.coordinator import GROUP_METADATA_TOPIC_NAME
from pybroker.coordinators.shard import CoordinatorResult
from pybroker.protocol.errors import Errors, KafkaError
from pybroker.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from pybroker.security.authorizer import Op, Res
from pybroker.server.broker_only import cluster_action_allowed

if TYPE_CHECKING:
    from pybroker.server.broker import Broker
    from pybroker.server.request_context import RequestContext

def _fenced(code: int, version: int, first_version: int) -> int:
    if code == Errors.PRODUCER_FENCED and version < first_version:
        return int(Errors.INVALID_PRODUCER_EPOCH)
    return int(code)


async def init_transactional_producer(broker: Broker, ctx: RequestContext, req: InitProducerIdRequest) -> InitProducerIdResponse:
    v = ctx.api_version
    if not req.transactional_id:
        return InitProducerIdResponse(throttle_time_ms=0, error_code=Errors.INVALID_REQUEST, producer_id=-1,
                                      producer_epoch=-1)
    if req.transaction_timeout_ms <= 0 or req.transaction_timeout_ms > broker.config["transaction.max.timeout.ms"]:
        return InitProducerIdResponse(throttle_time_ms=0, error_code=Errors.INVALID_TRANSACTION_TIMEOUT,
                                      producer_id=-1, producer_epoch=-1)
    expected_pid, expected_epoch = (req.producer_id, req.producer_epoch) if v >= 3 else (-1, -1)
    try:
        err, pid, epoch = await broker.txn_coordinator.init_producer_id(
            req.transactional_id, req.transaction_timeout_ms, expected_pid, expected_epoch)
    except KafkaError as exc:
        err, pid, epoch = exc.code, -1, -1
    return InitProducerIdResponse(throttle_time_ms=0, error_code=_fenced(err, v, 4), producer_id=pid,
                                  producer_epoch=epoch)


def _check_txn(broker: Broker, ctx: RequestContext, transactional_id: str, group_id: str | None = None) -> None:
    """KafkaApis: WRITE on the transactional id (then READ on the group for AddOffsetsToTxn /
    TxnOffsetCommit); raises the *_AUTHORIZATION_FAILED code as a KafkaError."""
    auth = broker.authorizer
    if auth is None:
        return
    if not auth.authorize(ctx, Op.WRITE, Res.TRANSACTIONAL_ID, transactional_id):
        raise KafkaError(Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if group_id is not None and not auth.authorize(ctx, Op.READ, Res.GROUP, group_id):
        raise KafkaError(Errors.GROUP_AUTHORIZATION_FAILED)


def _unwritable(broker: Broker, ctx: RequestContext, op: int, names: list[str]) -> set[str]:
    auth = broker.authorizer
    return set() if auth is None else set(names) - auth.filter_authorized(ctx, op, Res.TOPIC, names)


def _result(transactional_id: str, codes: dict[tuple[str, int], int]) -> AddPartitionsToTxnResponse.AddPartitionsToTxnResult:
    """AddPartitionsToTxnResponse.resultForTransaction: the codes grouped by topic."""
    R = AddPartitionsToTxnResponse
    by_topic: dict[str, list[tuple[int, int]]] = {}
    for (t, p), code in codes.items():
        by_topic.setdefault(t, []).append((p, code))
    return R.AddPartitionsToTxnResult(transactional_id=transactional_id, topic_results=[
        R.AddPartitionsToTxnTopicResult(name=t, results_by_partition=[
            R.AddPartitionsToTxnPartitionResult(partition_index=p, partition_error_code=c) for p, c in parts])
        for t, parts in by_topic.items()])


async def _add_or_verify(broker: Broker, txn: AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction
                         ) -> AddPartitionsToTxnResponse.AddPartitionsToTxnResult:
    """One transaction of a v4+ request (KafkaApis.handleAddPartitionsToTxnRequest, from another
    broker: no WRITE checks). A partition the cluster lacks fails the transaction
    (UNKNOWN_TOPIC_OR_PARTITION, the others OPERATION_NOT_ATTEMPTED); else VerifyOnly checks that
    the partitions are in the ongoing transaction, and otherwise they are added with transaction
    version 2 (Kafka's transactionVersionForAddPartitionsToTxn for v4+)."""
    wanted = list(dict.fromkeys((t.name, p) for t in txn.topics for p in t.partitions))
    unknown = set()
    for name, p in wanted:
        topic = broker.image.topic(name)
        if topic is None or p not in topic.partitions:
            unknown.add((name, p))
    if unknown:
        return _result(txn.transactional_id, {
            tp: int(Errors.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else Errors.OPERATION_NOT_ATTEMPTED)
            for tp in wanted})
    coordinator = broker.txn_coordinator
    if txn.verify_only:
        return _result(txn.transactional_id, await coordinator.verify_partitions(
            txn.transactional_id, txn.producer_id, txn.producer_epoch, wanted))
    try:
        code = await coordinator.add_partitions(txn.transactional_id, txn.producer_id, txn.producer_epoch, wanted,
                                                client_tv=2) if txn.transactional_id else int(Errors.INVALID_REQUEST)
    except KafkaError as exc:
        code = exc.code
    return _result(txn.transactional_id, dict.fromkeys(wanted, int(code)))


async def local_add_or_verify(broker: Broker, transactional_id: str, producer_id: int, producer_epoch: int,
                              partitions: list[tuple[str, int]], add: bool) -> dict[tuple[str, int], int]:
    """The AddPartitionsToTxnManager's call to this node's own coordinator: what an AddPartitionsToTxn
    v5 for the one transaction would answer, per partition."""
    by_topic: dict[str, list[int]] = {}
    for t, p in partitions:
        by_topic.setdefault(t, []).append(p)
    Q = AddPartitionsToTxnRequest
    result = await _add_or_verify(broker, Q.AddPartitionsToTxnTransaction(
        transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch, verify_only=not add,
        topics=[Q.AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in by_topic.items()]))
    return {(t.name, p.partition_index): int(p.partition_error_code)
            for t in result.topic_results for p in t.results_by_partition}


async def handle_add_partitions_to_txn(broker: Broker, ctx: RequestContext, req: AddPartitionsToTxnRequest
                                       ) -> AddPartitionsToTxnResponse:
    v = ctx.api_version
    R = AddPartitionsToTxnResponse
    if v >= 4:
        # the batched form brokers send to a transaction coordinator (KIP-890 part 1): CLUSTER_ACTION,
        # else the whole request fails with CLUSTER_AUTHORIZATION_FAILED at the top level; pybroker
        # also wants the inter-broker listener (server/broker_only.py)
        if not cluster_action_allowed(broker, ctx):
            return R(throttle_time_ms=0, error_code=Errors.CLUSTER_AUTHORIZATION_FAILED, results_by_transaction=[],
                     results_by_topic_v3_and_below=[])
        return R(throttle_time_ms=0, error_code=0, results_by_topic_v3_and_below=[],
                 results_by_transaction=[await _add_or_verify(broker, txn) for txn in req.transactions])
    wanted = [(t.name, list(t.partitions)) for t in req.v3_and_below_topics]
    code: int
    try:
        _check_txn(broker, ctx, req.v3_and_below_transactional_id)
    except KafkaError as exc:
        code = exc.code
        return R(throttle_time_ms=0, error_code=0, results_by_transaction=[], results_by_topic_v3_and_below=[
            R.AddPartitionsToTxnTopicResult(name=n, results_by_partition=[
                R.AddPartitionsToTxnPartitionResult(partition_index=p, partition_error_code=code)
                for p in parts]) for n, parts in wanted])
    # KafkaApis: WRITE on each (non-internal) topic; the rest of the request is then not attempted
    denied = _unwritable(broker, ctx, Op.WRITE, [n for n, _ in wanted if not n.startswith("__")])
    unknown = set()
    for name, parts in wanted:
        topic = broker.image.topic(name)
        for p in parts:
            if topic is None or p not in topic.partitions:
                unknown.add((name, p))
    if denied:
        codes = {(n, p): int(Errors.TOPIC_AUTHORIZATION_FAILED if n in denied else Errors.OPERATION_NOT_ATTEMPTED)
                 for n, parts in wanted for p in parts}
    elif unknown:
        codes = {(n, p): int(Errors.UNKNOWN_TOPIC_OR_PARTITION if (n, p) in unknown else Errors.OPERATION_NOT_ATTEMPTED)
                 for n, parts in wanted for p in parts}
    else:
        try:
            code = await broker.txn_coordinator.add_partitions(
                req.v3_and_below_transactional_id, req.v3_and_below_producer_id, req.v3_and_below_producer_epoch,
                [(n, p) for n, parts in wanted for p in parts])
        except KafkaError as exc:
            code = exc.code
        code = _fenced(code, v, 2)
        codes = {(n, p): code for n, parts in wanted for p in parts}
    return R(throttle_time_ms=0, error_code=0, results_by_transaction=[], results_by_topic_v3_and_below=[
        R.AddPartitionsToTxnTopicResult(name=n, results_by_partition=[
            R.AddPartitionsToTxnPartitionResult(partition_index=p, partition_error_code=codes[(n, p)])
            for p in parts]) for n, parts in wanted])


async def handle_add_offsets_to_txn(broker: Broker, ctx: RequestContext, req: AddOffsetsToTxnRequest) -> AddOffsetsToTxnResponse:
    try:
        _check_txn(broker, ctx, req.transactional_id, req.group_id)
        code = await broker.txn_coordinator.add_offsets(req.transactional_id, req.producer_id, req.producer_epoch,
                                                        req.group_id)
    except KafkaError as exc:
        code = exc.code
    return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=_fenced(code, ctx.api_version, 2))


async def handle_end_txn(broker: Broker, ctx: RequestContext, req: EndTxnRequest) -> EndTxnResponse:
    # v5 is the client of transaction version 2 (Kafka's transactionVersionForEndTxn), whatever
    # transaction.version the cluster finalized: the coordinator bumps the epoch and answers it
    client_tv = 2 if ctx.api_version >= 5 else 0
    try:
        _check_txn(broker, ctx, req.transactional_id)
        code, pid, epoch = await broker.txn_coordinator.end_txn(req.transactional_id, req.producer_id,
                                                                req.producer_epoch, req.committed, client_tv)
    except KafkaError as exc:
        code, pid, epoch = exc.code, -1, -1
    return EndTxnResponse(throttle_time_ms=0, error_code=_fenced(code, ctx.api_version, 2),
                          producer_id=pid, producer_epoch=epoch)


def _validate_member(shard: Any, req: TxnOffsetCommitRequest, version: int) -> int:
    """Kafka's TxnOffsetCommit member check (v3+ carries member id / generation)."""
    if shard.share.group(req.group_id) is not None:
        return int(Errors.GROUP_ID_NOT_FOUND)  # a share group takes no offsets (ShareGroup.validateOffsetCommit)
    if version < 3 or req.generation_id < 0 or not req.member_id:
        return 0
    if shard.consumer.group(req.group_id) is not None:
        return 0  # KIP-848 members: their epoch is checked by OffsetCommit, not here
    group = shard.groups.group(req.group_id)
    if group is None:
        return int(Errors.ILLEGAL_GENERATION)
    if req.member_id not in group.members:
        return int(Errors.UNKNOWN_MEMBER_ID)
    if req.generation_id != group.generation_id:
        return int(Errors.ILLEGAL_GENERATION)
    return 0


async def handle_txn_offset_commit(broker: Broker, ctx: RequestContext, req: TxnOffsetCommitRequest) -> TxnOffsetCommitResponse:
    """The offsets go to the group's __consumer_offsets partition at once, as the producer's
    transactional batch (pending until its COMMIT/ABORT marker there); answered once written."""
    v = ctx.api_version
    R = TxnOffsetCommitResponse
    gc = broker.group_coordinator
    max_meta = broker.config["offset.metadata.max.bytes"]

    def respond(code_for: Any) -> TxnOffsetCommitResponse:
        return R(throttle_time_ms=0, topics=[R.TxnOffsetCommitResponseTopic(name=t.name, partitions=[
            R.TxnOffsetCommitResponsePartition(partition_index=p.partition_index, error_code=int(code_for(t, p)))
            for p in t.partitions]) for t in req.topics])

    unreadable = _unwritable(broker, ctx, Op.READ, [t.name for t in req.topics])

    def partition_code(code: int, t: Any, p: Any) -> int:
        if code:
            return code
        if t.name in unreadable:  # KafkaApis: READ on each topic
            return int(Errors.TOPIC_AUTHORIZATION_FAILED)
        image_topic = broker.image.topic(t.name)
        if image_topic is None or p.partition_index not in image_topic.partitions:
            return int(Errors.UNKNOWN_TOPIC_OR_PARTITION)
        if len((p.committed_metadata or "").encode()) > max_meta:
            return int(Errors.OFFSET_METADATA_TOO_LARGE)
        return 0

    def op(shard: Any, now: int) -> CoordinatorResult:
        code = _validate_member(shard, req, v)
        records = []
        for t in req.topics:
            for p in t.partitions:
                if not partition_code(code, t, p):
                    epoch = p.committed_leader_epoch if v >= 2 else -1
                    records.append(group_serde.offset_commit_record(
                        req.group_id, t.name, p.partition_index, p.committed_offset, epoch,
                        p.committed_metadata or "", now))
        return CoordinatorResult(records=records, response=respond(lambda t, p: partition_code(code, t, p)))

    try:
        _check_txn(broker, ctx, req.transactional_id, req.group_id)
        if not await gc.ensure_topic():
            raise KafkaError(Errors.COORDINATOR_NOT_AVAILABLE)
        code = await _offsets_partition_in_transaction(broker, req, v, gc.partition_for(req.group_id))
        if code:
            raise KafkaError(code)
        return await gc.write(req.group_id, op, req.producer_id, req.producer_epoch)
    except KafkaError as exc:
        code = exc.code
    if v < 2 and code == Errors.COORDINATOR_LOAD_IN_PROGRESS:
        code = int(Errors.COORDINATOR_NOT_AVAILABLE)  # KafkaApis: clients before 2.0 would crash on it
    return respond(lambda _t, _p: code)


# GroupCoordinatorService.handleOperationException: what a failed verification becomes
_OFFSETS_VERIFY_ERRORS = {
    int(Errors.NETWORK_EXCEPTION): int(Errors.COORDINATOR_LOAD_IN_PROGRESS),
    int(Errors.NOT_ENOUGH_REPLICAS): int(Errors.COORDINATOR_NOT_AVAILABLE),
    int(Errors.UNKNOWN_TOPIC_OR_PARTITION): int(Errors.COORDINATOR_NOT_AVAILABLE),
    int(Errors.REQUEST_TIMED_OUT): int(Errors.COORDINATOR_NOT_AVAILABLE),
    int(Errors.NOT_LEADER_OR_FOLLOWER): int(Errors.NOT_COORDINATOR),
    int(Errors.KAFKA_STORAGE_ERROR): int(Errors.NOT_COORDINATOR),
}


async def _offsets_partition_in_transaction(broker: Broker, req: TxnOffsetCommitRequest, version: int,
                                            partition: int) -> int:
    """Kafka's verification before a TxnOffsetCommit writes (so no pending offset is left without
    a marker): the group's __consumer_offsets partition must be in the producer's ongoing
    transaction. v5 (a transaction version 2 client) has the coordinator add it instead of
    AddOffsetsToTxn; v0-4 verify (VerifyOnly), both with the coordinator wherever it is. A
    partition this node does not lead fails first (ReplicaManager's getPartitionOrException and
    Partition.maybeStartTransactionVerification: NOT_LEADER_OR_FOLLOWER, which the group
    coordinator answers as NOT_COORDINATOR). Skipped when the producer already has a transaction
    open on that partition at that epoch."""
    tp = (GROUP_METADATA_TOPIC_NAME, partition)
    plog = broker.replica_manager.leader_partition(*tp)
    if isinstance(plog, int):
        return _OFFSETS_VERIFY_ERRORS.get(int(plog), int(plog))
    if plog.log.producer_state.has_ongoing_transaction(req.producer_id, req.producer_epoch):
        return 0
    codes = await broker.add_partitions_manager.add_or_verify(
        req.transactional_id, req.producer_id, req.producer_epoch, [tp], version >= 5, version >= 4)
    code = codes[tp]
    return _OFFSETS_VERIFY_ERRORS.get(code, code)
