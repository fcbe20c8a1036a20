"""The admin calls of Kafka's cluster tools, on top of AdminClient's connections and retries.

What kafka-topics.sh --describe/--alter, kafka-metadata-quorum.sh, kafka-get-offsets.sh,
kafka-delete-records.sh, kafka-leader-election.sh, kafka-transactions.sh and kafka-log-dirs.sh
ask a cluster, each routed as Kafka's Admin routes it:
- DescribeTopicPartitions (KIP-966, for the ELR fields), CreatePartitions, ElectLeaders,
  DescribeQuorum, DescribeCluster: any broker (a broker forwards what the controller answers);
- DeleteRecords, DescribeProducers and WriteTxnMarkers (Admin.abortTransaction): each
  partition's leader;
- ListTransactions and DescribeLogDirs: every broker (or the ones named);
- DescribeTransactions: the transaction coordinator (FindCoordinator, key type TRANSACTION).

Each call runs under AdminClient's retry policy. Whole-call failures raise KafkaError; per-item
outcomes come back as `Errors` values, as in AdminClient.
Concurrency: not thread-safe; one caller at a time (the AdminClient's rule).
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pybroker.client.admin import AdminClient, Node, TopicPartition, UnknownTopicError
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors, KafkaError
from pybroker.protocol.messages import (
    CreatePartitionsRequest,
    DeleteRecordsRequest,
    DescribeClusterRequest,
    DescribeLogDirsRequest,
    DescribeProducersRequest,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    DescribeTopicPartitionsRequest,
    DescribeTransactionsRequest,
    ElectLeadersRequest,
    FindCoordinatorRequest,
    ListTransactionsRequest,
    WriteTxnMarkersRequest,
)

__all__ = [
    "ELECTION_PREFERRED", "ELECTION_UNCLEAN", "LogDirInfo", "PartitionState", "ProducerState", "QuorumInfo",
    "ReplicaState", "TopicState", "TransactionDescription", "abort_transaction", "create_partitions",
    "delete_records", "describe_cluster", "describe_log_dirs", "describe_producers", "describe_quorum",
    "describe_topic_partitions", "describe_transactions", "elect_leaders", "list_transactions",
]

ELECTION_PREFERRED = 0
ELECTION_UNCLEAN = 1
METADATA_TOPIC = "__cluster_metadata"
COORDINATOR_KEY_TRANSACTION = 1


def format_uuid(raw: bytes) -> str:
    """Kafka's Uuid.toString: url-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


# -- topics -----------------------------------------------------------------------------


@dataclass
class PartitionState:
    partition: int
    leader: int  # -1: none
    replicas: list[int]
    isr: list[int]
    elr: list[int] | None  # None: the broker did not say (Metadata, no KIP-966)
    last_known_elr: list[int] | None
    offline_replicas: list[int]


@dataclass
class TopicState:
    name: str
    topic_id: bytes
    is_internal: bool
    partitions: list[PartitionState]
    error: Errors = Errors.NONE


def describe_topic_partitions(admin: AdminClient, names: list[str] | None) -> dict[str, TopicState]:
    """Topic -> partitions with their ELR (DescribeTopicPartitions, paged by its cursor), as
    Kafka's Admin.describeTopics does on a broker that has the API; Metadata otherwise (ELR
    None). `names` None: every topic (listed through Metadata first)."""
    def call() -> dict[str, TopicState]:
        conn = admin._any()
        wanted = names
        if wanted is None:
            wanted = sorted(admin._metadata(None).topics)
        if not wanted:  # an empty topic list would ask DescribeTopicPartitions for every topic
            return {}
        if not conn.supports(ApiKey.DESCRIBE_TOPIC_PARTITIONS):
            md = admin._metadata(wanted)
            return {n: TopicState(n, t.topic_id, t.is_internal, [
                PartitionState(p.partition, p.leader, p.replicas, p.isr, None, None, p.offline_replicas)
                for p in t.partitions], t.error) for n, t in md.topics.items()}
        out: dict[str, TopicState] = {}
        R = DescribeTopicPartitionsRequest
        cursor: DescribeTopicPartitionsRequest.Cursor | None = None
        while True:
            resp = conn.send(R(topics=[R.TopicRequest(name=n) for n in wanted], response_partition_limit=2000,
                               cursor=cursor))
            for t in resp.topics:
                state = out.setdefault(t.name, TopicState(t.name, bytes(t.topic_id), t.is_internal, [],
                                                          Errors.for_code(t.error_code)))
                state.partitions.extend(
                    PartitionState(p.partition_index, p.leader_id, list(p.replica_nodes), list(p.isr_nodes),
                                   None if p.eligible_leader_replicas is None else list(p.eligible_leader_replicas),
                                   None if p.last_known_elr is None else list(p.last_known_elr),
                                   list(p.offline_replicas)) for p in t.partitions)
            if resp.next_cursor is None:
                break
            cursor = R.Cursor(topic_name=resp.next_cursor.topic_name,
                              partition_index=resp.next_cursor.partition_index)
        for n in wanted:  # a name the broker left out (KIP-966 drops unknown ones on some versions)
            out.setdefault(n, TopicState(n, bytes(16), False, [], Errors.UNKNOWN_TOPIC_OR_PARTITION))
        for state in out.values():
            state.partitions.sort(key=lambda p: p.partition)
        return out
    result: dict[str, TopicState] = admin._run(call)
    return result


def describe_cluster(admin: AdminClient) -> tuple[str | None, int, list[Node]]:
    """(cluster id, controller id, live brokers) as DescribeCluster answers; Metadata on an old broker."""
    def call() -> tuple[str | None, int, list[Node]]:
        conn = admin._any()
        if not conn.supports(ApiKey.DESCRIBE_CLUSTER):
            md = admin._metadata([])
            return md.cluster_id, md.controller_id, sorted(md.brokers.values(), key=lambda n: n.node_id)
        resp = conn.send(DescribeClusterRequest(include_cluster_authorized_operations=False))
        if resp.error_code:
            raise KafkaError(Errors.for_code(resp.error_code), resp.error_message or "cannot describe the cluster")
        return resp.cluster_id, resp.controller_id, sorted(
            (Node(b.broker_id, b.host, b.port, b.rack) for b in resp.brokers), key=lambda n: n.node_id)
    result: tuple[str | None, int, list[Node]] = admin._run(call)
    return result


def create_partitions(admin: AdminClient, counts: Mapping[str, int], *, timeout_ms: int = 30000
                      ) -> dict[str, tuple[Errors, str | None]]:
    """{topic: new total partition count} -> {topic: (error, message)} (CreatePartitions)."""
    def call() -> dict[str, tuple[Errors, str | None]]:
        R = CreatePartitionsRequest
        resp = admin._any().send(R(topics=[R.CreatePartitionsTopic(name=t, count=c, assignments=None)
                                           for t, c in counts.items()], timeout_ms=timeout_ms))
        return {r.name: (Errors.for_code(r.error_code), r.error_message) for r in resp.results}
    result: dict[str, tuple[Errors, str | None]] = admin._run(call)
    return result


# -- the metadata quorum ----------------------------------------------------------------


@dataclass
class ReplicaState:
    replica_id: int
    directory_id: bytes
    log_end_offset: int
    last_fetch_timestamp: int  # -1: unknown
    last_caught_up_timestamp: int


@dataclass
class QuorumInfo:
    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: list[ReplicaState]
    observers: list[ReplicaState]
    endpoints: dict[int, list[tuple[str, str, int]]]  # node id -> (listener, host, port) (v2+)


def describe_quorum(admin: AdminClient) -> QuorumInfo:
    """The `__cluster_metadata` quorum (DescribeQuorum; a broker forwards it to the controller)."""
    def call() -> QuorumInfo:
        R = DescribeQuorumRequest
        resp = admin._any().send(R(topics=[R.TopicData(topic_name=METADATA_TOPIC,
                                                       partitions=[R.PartitionData(partition_index=0)])]))
        if resp.error_code:
            raise KafkaError(Errors.for_code(resp.error_code), resp.error_message or "cannot describe the quorum")
        if len(resp.topics) != 1 or len(resp.topics[0].partitions) != 1:
            raise KafkaError(Errors.UNKNOWN_SERVER_ERROR, "DescribeQuorum answered without the metadata partition")
        p = resp.topics[0].partitions[0]
        if p.error_code:
            raise KafkaError(Errors.for_code(p.error_code), p.error_message or "cannot describe the quorum")

        def states(items: Iterable[DescribeQuorumResponse.ReplicaState]) -> list[ReplicaState]:
            return [ReplicaState(r.replica_id, bytes(r.replica_directory_id), r.log_end_offset,
                                 r.last_fetch_timestamp, r.last_caught_up_timestamp) for r in items]
        endpoints = {n.node_id: [(li.name, li.host, li.port) for li in n.listeners] for n in resp.nodes}
        return QuorumInfo(p.leader_id, p.leader_epoch, p.high_watermark, states(p.current_voters),
                          states(p.observers), endpoints)
    result: QuorumInfo = admin._run(call)
    return result


# -- records and leaders ----------------------------------------------------------------


def _leaders(admin: AdminClient, partitions: Iterable[TopicPartition]) -> dict[int, list[TopicPartition]]:
    """Partitions grouped by their leader, from fresh metadata; unknown ones raise UnknownTopicError."""
    parts = list(partitions)
    md = admin._metadata(sorted({tp.topic for tp in parts}))
    out: dict[int, list[TopicPartition]] = {}
    for tp in parts:
        t = md.topics.get(tp.topic)
        if t is None or t.error == Errors.UNKNOWN_TOPIC_OR_PARTITION:
            raise UnknownTopicError(f"topic '{tp.topic}' does not exist")
        if t.error:
            raise KafkaError(t.error, f"topic '{tp.topic}'")
        p = next((p for p in t.partitions if p.partition == tp.partition), None)
        if p is None:
            raise UnknownTopicError(f"partition {tp} does not exist")
        if p.leader < 0:
            raise KafkaError(Errors.LEADER_NOT_AVAILABLE, f"partition {tp} has no leader")
        out.setdefault(p.leader, []).append(tp)
    return out


def delete_records(admin: AdminClient, offsets: Mapping[TopicPartition, int], *, timeout_ms: int = 30000
                   ) -> dict[TopicPartition, tuple[Errors, int]]:
    """{partition: offset (-1: the high watermark)} -> {partition: (error, low watermark)}
    (DeleteRecords to each leader)."""
    def call() -> dict[TopicPartition, tuple[Errors, int]]:
        out: dict[TopicPartition, tuple[Errors, int]] = {}
        for leader, tps in _leaders(admin, offsets).items():
            by_topic: dict[str, list[TopicPartition]] = {}
            for tp in tps:
                by_topic.setdefault(tp.topic, []).append(tp)
            R = DeleteRecordsRequest
            resp = admin._node_conn(leader).send(R(timeout_ms=timeout_ms, topics=[R.DeleteRecordsTopic(
                name=t, partitions=[R.DeleteRecordsPartition(partition_index=tp.partition, offset=offsets[tp])
                                    for tp in ps]) for t, ps in by_topic.items()]))
            for t in resp.topics:
                for p in t.partitions:
                    code = Errors.for_code(p.error_code)
                    if code.retriable:  # the leader moved: ask again from fresh metadata
                        raise KafkaError(code, f"cannot delete records of {t.name}-{p.partition_index}")
                    out[TopicPartition(t.name, p.partition_index)] = (code, p.low_watermark)
        return out
    result: dict[TopicPartition, tuple[Errors, int]] = admin._run(call)
    return result


def elect_leaders(admin: AdminClient, election_type: int, partitions: Iterable[TopicPartition] | None, *,
                  timeout_ms: int = 30000) -> dict[TopicPartition, tuple[Errors, str | None]]:
    """ElectLeaders of `partitions` (None: every partition) -> {partition: (error, message)}."""
    parts = None if partitions is None else list(partitions)

    def call() -> dict[TopicPartition, tuple[Errors, str | None]]:
        R = ElectLeadersRequest
        conn = admin._any()
        version = conn.version_for(ApiKey.ELECT_LEADERS, min_version=1 if election_type else 0)
        topics = None
        if parts is not None:
            by_topic: dict[str, list[int]] = {}
            for tp in parts:
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            topics = [R.TopicPartitions(topic=t, partitions=ps) for t, ps in by_topic.items()]
        resp = conn.send(R(election_type=election_type, topic_partitions=topics, timeout_ms=timeout_ms), version)
        if resp.error_code:
            raise KafkaError(Errors.for_code(resp.error_code), "cannot elect leaders")
        return {TopicPartition(r.topic, p.partition_id): (Errors.for_code(p.error_code), p.error_message)
                for r in resp.replica_election_results for p in r.partition_result}
    result: dict[TopicPartition, tuple[Errors, str | None]] = admin._run(call)
    return result


# -- transactions -----------------------------------------------------------------------


@dataclass
class TransactionDescription:
    coordinator_id: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str
    timeout_ms: int
    start_time_ms: int  # -1: no transaction in progress
    partitions: list[TopicPartition]


@dataclass
class ProducerState:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int  # -1: none


def list_transactions(admin: AdminClient, *, duration_filter_ms: int = -1
                      ) -> dict[int, list[tuple[str, int, str]]]:
    """Broker id -> [(transactional id, producer id, state)] (ListTransactions to every broker)."""
    def call() -> dict[int, list[tuple[str, int, str]]]:
        admin._metadata([])
        out: dict[int, list[tuple[str, int, str]]] = {}
        for node_id in sorted(admin._brokers):
            conn = admin._node_conn(node_id)
            version = conn.version_for(ApiKey.LIST_TRANSACTIONS, min_version=1 if duration_filter_ms >= 0 else 0)
            req = ListTransactionsRequest(state_filters=[], producer_id_filters=[])
            if duration_filter_ms >= 0:
                req.duration_filter = duration_filter_ms
            resp = conn.send(req, version)
            if resp.error_code:
                raise KafkaError(Errors.for_code(resp.error_code), f"cannot list the transactions of broker {node_id}")
            out[node_id] = [(s.transactional_id, s.producer_id, s.transaction_state)
                            for s in resp.transaction_states]
        return out
    result: dict[int, list[tuple[str, int, str]]] = admin._run(call)
    return result


def describe_transactions(admin: AdminClient, transactional_id: str) -> TransactionDescription:
    """DescribeTransactions at the transactional id's coordinator."""
    def call() -> TransactionDescription:
        conn = admin._any()
        resp = conn.send(FindCoordinatorRequest(key_type=COORDINATOR_KEY_TRANSACTION,
                                                coordinator_keys=[transactional_id]),
                         conn.version_for(ApiKey.FIND_COORDINATOR, min_version=4))
        c = resp.coordinators[0]
        if c.error_code:
            raise KafkaError(Errors.for_code(c.error_code),
                             f"cannot find the coordinator of transactional id '{transactional_id}'")
        coord = admin._connect(c.host, c.port)
        dresp = coord.send(DescribeTransactionsRequest(transactional_ids=[transactional_id]))
        s = dresp.transaction_states[0]
        if s.error_code:
            raise KafkaError(Errors.for_code(s.error_code), f"transactional id '{transactional_id}'")
        return TransactionDescription(
            c.node_id, s.transactional_id, s.producer_id, s.producer_epoch, s.transaction_state,
            s.transaction_timeout_ms, s.transaction_start_time_ms,
            sorted(TopicPartition(t.topic, p) for t in s.topics for p in t.partitions))
    result: TransactionDescription = admin._run(call)
    return result


def describe_producers(admin: AdminClient, tp: TopicPartition, broker_id: int | None = None
                       ) -> list[ProducerState]:
    """The active producers of a partition (DescribeProducers at its leader, or at `broker_id`)."""
    def call() -> list[ProducerState]:
        node = broker_id if broker_id is not None else next(iter(_leaders(admin, [tp])))
        R = DescribeProducersRequest
        resp = admin._node_conn(node).send(R(topics=[R.TopicRequest(name=tp.topic, partition_indexes=[tp.partition])]))
        p = resp.topics[0].partitions[0]
        if p.error_code:
            raise KafkaError(Errors.for_code(p.error_code), p.error_message or f"cannot describe the producers of {tp}")
        return [ProducerState(s.producer_id, s.producer_epoch, s.last_sequence, s.last_timestamp,
                              s.coordinator_epoch, s.current_txn_start_offset) for s in p.active_producers]
    result: list[ProducerState] = admin._run(call)
    return result


def abort_transaction(admin: AdminClient, tp: TopicPartition, producer_id: int, producer_epoch: int,
                      coordinator_epoch: int) -> None:
    """Write an ABORT marker for the producer's transaction on one partition (Kafka's
    Admin.abortTransaction: WriteTxnMarkers to the partition's leader)."""
    def call() -> None:
        leader = next(iter(_leaders(admin, [tp])))
        R = WriteTxnMarkersRequest
        resp = admin._node_conn(leader).send(R(markers=[R.WritableTxnMarker(
            producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=False,
            coordinator_epoch=coordinator_epoch,
            topics=[R.WritableTxnMarkerTopic(name=tp.topic, partition_indexes=[tp.partition])])]))
        for m in resp.markers:
            for t in m.topics:
                for p in t.partitions:
                    if p.error_code:
                        raise KafkaError(Errors.for_code(p.error_code), f"cannot abort the transaction on {tp}")
    admin._run(call)


# -- log directories ----------------------------------------------------------------------


@dataclass
class LogDirInfo:
    log_dir: str
    error: Errors
    replicas: dict[TopicPartition, tuple[int, int, bool]]  # (size, offset lag, is future)


def describe_log_dirs(admin: AdminClient, brokers: Iterable[int]) -> dict[int, list[LogDirInfo]]:
    """Broker -> its log directories and their replicas (DescribeLogDirs, every topic)."""
    wanted = list(brokers)

    def call() -> dict[int, list[LogDirInfo]]:
        out: dict[int, list[LogDirInfo]] = {}
        for node_id in wanted:
            resp = admin._node_conn(node_id).send(DescribeLogDirsRequest(topics=None))
            if resp.error_code:
                raise KafkaError(Errors.for_code(resp.error_code), f"cannot describe the log dirs of broker {node_id}")
            out[node_id] = [LogDirInfo(r.log_dir, Errors.for_code(r.error_code), {
                TopicPartition(t.name, p.partition_index): (p.partition_size, p.offset_lag, p.is_future_key)
                for t in r.topics for p in t.partitions}) for r in resp.results]
        return out
    result: dict[int, list[LogDirInfo]] = admin._run(call)
    return result

