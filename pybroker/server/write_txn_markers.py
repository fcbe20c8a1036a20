"""WriteTxnMarkers (api 27) v1-2: a transaction coordinator asks the leader of each partition of
a finished transaction to append the producer's COMMIT/ABORT control batch (Kafka's
KafkaApis.handleWriteTxnMarkersRequest). v0 is no longer advertised (Kafka 4 removed it).

Format: request = markers of (producer id, producer epoch, result, coordinator epoch, topics,
and from v2 the transaction version, KIP-1228); response = per marker, per partition, an error
code. A transaction version 2 marker carries the epoch its coordinator bumped to end the
transaction, so the leader refuses one whose epoch is not above the producer's
(INVALID_PRODUCER_EPOCH), where a version 0/1 marker only may not be older.

Per partition:
- `__consumer_offsets`: the group coordinator's runtime writes the marker and replays it, so
  the producer's pending TxnOffsetCommit offsets commit or go
  (GroupCoordinator.complete_transaction); a shard that is not here or still loading answers
  NOT_LEADER_OR_FOLLOWER, which the sender retries (Kafka converts the coordinator errors the
  same way).
- any other partition: UNKNOWN_TOPIC_OR_PARTITION if the image lacks it, NOT_LEADER_OR_FOLLOWER
  unless this node leads it, else the control batch is appended as leader (a stale producer
  epoch is INVALID_PRODUCER_EPOCH, a stale coordinator epoch TRANSACTION_COORDINATOR_FENCED,
  other storage errors their codes) and, like an acks=all produce, the answer waits until the
  high watermark covers it (REQUEST_TIMED_OUT after request.timeout.ms).
Authorisation: ALTER or CLUSTER_ACTION on the cluster, as Kafka (only brokers send this request),
and, unlike Kafka, only on the inter-broker listener (server/broker_only.py): on any other
listener every partition answers CLUSTER_AUTHORIZATION_FAILED, with or without an authorizer.
Nodes talk as their inter-broker principal (User:ANONYMOUS over PLAINTEXT, the certificate's
mapped subject over SSL, the SASL user), so with an authorizer on a multi-node cluster that
principal needs CLUSTER_ACTION or super.users, as in a Kafka cluster with ACLs; until then the
sender logs the refusal and retries.

Producer epochs, as Kafka's ProducerAppendInfo.appendEndTxnMarker: a marker older than the
producer's epoch is INVALID_PRODUCER_EPOCH (transaction version 2: not above it); a newer one is
accepted and becomes the producer's epoch, even for a producer with no transaction open (Kafka
writes such a marker too; it only completes a transaction when one is open). That is why only
the nodes may send markers: a marker at epoch 32767 leaves an idempotent producer at an older
epoch refused with INVALID_PRODUCER_EPOCH from then on.

`write_txn_markers` is also what this node's own marker sender calls for the partitions it
leads (no socket).

Concurrency: trio thread; appends are synchronous, the replication waits are awaited.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pybroker.coordinators.group.coordinator import GROUP_METADATA_TOPIC_NAME
from pybroker.coordinators.runtime import DelayedAppend
from pybroker.log.errors import LogError
from pybroker.protocol.errors import Errors, KafkaError
from pybroker.protocol.messages import WriteTxnMarkersRequest, WriteTxnMarkersResponse
from pybroker.records.end_txn_marker import ABORT, COMMIT, build_marker_batch
from pybroker.security.authorizer import Op
from pybroker.server.broker_only import privileged_listener

if TYPE_CHECKING:
    from pybroker.server.broker import Broker
    from pybroker.server.request_context import RequestContext

R = WriteTxnMarkersResponse
_COORDINATOR_ERRORS = frozenset({int(Errors.NOT_COORDINATOR), int(Errors.COORDINATOR_LOAD_IN_PROGRESS),
                                 int(Errors.COORDINATOR_NOT_AVAILABLE)})


def _response(req: WriteTxnMarkersRequest, codes: list[dict[tuple[str, int], int]]) -> WriteTxnMarkersResponse:
    return R(markers=[R.WritableTxnMarkerResult(producer_id=m.producer_id, topics=[
        R.WritableTxnMarkerTopicResult(name=t.name, partitions=[
            R.WritableTxnMarkerPartitionResult(partition_index=p, error_code=c[(t.name, p)])
            for p in t.partition_indexes]) for t in m.topics]) for m, c in zip(req.markers, codes, strict=True)])


async def handle_write_txn_markers(broker: Broker, ctx: RequestContext, req: WriteTxnMarkersRequest
                                   ) -> WriteTxnMarkersResponse:
    auth = broker.authorizer
    # KafkaApis: ALTER on the cluster, else CLUSTER_ACTION; pybroker also wants the inter-broker
    # or a controller listener (server/broker_only.py): a marker fences its producer for good
    if not privileged_listener(broker, ctx.conn.listener_name) or (
            auth is not None and not auth.authorize_cluster(ctx, Op.ALTER)
            and not auth.authorize_cluster(ctx, Op.CLUSTER_ACTION)):
        denied = int(Errors.CLUSTER_AUTHORIZATION_FAILED)
        return _response(req, [{(t.name, p): denied for t in m.topics for p in t.partition_indexes}
                               for m in req.markers])
    return await write_txn_markers(broker, req)


async def write_txn_markers(broker: Broker, req: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
    rm = broker.replica_manager
    timeout_ms = broker.config["request.timeout.ms"]
    all_codes: list[dict[tuple[str, int], int]] = []
    for m in req.markers:
        codes: dict[tuple[str, int], int] = {}
        waits: list[tuple[tuple[str, int], Any, int]] = []
        for t in m.topics:
            for p in t.partition_indexes:
                tp = (t.name, p)
                if t.name == GROUP_METADATA_TOPIC_NAME:
                    codes[tp] = await _complete_group(broker, p, m)
                    continue
                image_topic = broker.image.topic(t.name)
                partition = rm.get_partition(t.name, p)
                if image_topic is None or p not in image_topic.partitions:
                    codes[tp] = int(Errors.UNKNOWN_TOPIC_OR_PARTITION)
                elif partition is None or not partition.is_leader:
                    codes[tp] = int(Errors.NOT_LEADER_OR_FOLLOWER)
                else:
                    batch = build_marker_batch(m.producer_id, m.producer_epoch,
                                               COMMIT if m.transaction_result else ABORT, m.coordinator_epoch,
                                               rm.clock.wall_ms())
                    try:
                        info = rm.append(partition, batch, origin="coordinator",
                                         transaction_version=m.transaction_version)
                    except LogError as exc:
                        codes[tp] = int(exc.code)
                    else:
                        codes[tp] = 0
                        waits.append((tp, partition, info.last_offset + 1))
        for tp, partition, end in waits:
            wait = DelayedAppend(timeout_ms, partition, end)
            if not rm.produce_purgatory.try_complete_else_watch(wait, [tp]):
                await wait.wait()
            if wait.expired:
                codes[tp] = int(Errors.REQUEST_TIMED_OUT)
        all_codes.append(codes)
    return _response(req, all_codes)


async def _complete_group(broker: Broker, partition: int, m: Any) -> int:
    try:
        await broker.group_coordinator.complete_transaction(partition, m.producer_id, m.producer_epoch,
                                                            m.coordinator_epoch, m.transaction_result,
                                                            m.transaction_version)
    except KafkaError as exc:
        code = int(exc.code)
        return int(Errors.NOT_LEADER_OR_FOLLOWER) if code in _COORDINATOR_ERRORS else code
    return 0
