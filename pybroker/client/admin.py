"""A small blocking Kafka admin client: the calls `pybroker topics` / `pybroker groups` need.

Mirrors the parts of Kafka's Admin API the command-line tools use: metadata, create/delete
topics, topic config overrides, list offsets (earliest / latest / by timestamp), find
coordinator, list/describe/delete groups, fetch/commit/delete group offsets. Requests are
built for whatever version the broker negotiates (BrokerConnection.version_for), so the
same code talks to pybroker and to Apache Kafka.

Routing: metadata, topic and config calls go to any broker (the bootstrap connection);
ListOffsets goes to each partition's leader; group calls go to the group's coordinator
(FindCoordinator, cached per group and dropped on NOT_COORDINATOR /
COORDINATOR_NOT_AVAILABLE). Each public call runs under `retry_call`: connection failures
and retriable Kafka errors are repeated with backoff up to `retries` times.

Errors: a failure of the whole call raises KafkaError (pybroker.protocol.errors) or
BrokerConnectionError; per-item outcomes of batch calls (one topic of several, one
partition of a commit) come back as `Errors` values in the result.
Concurrency: not thread-safe; one caller at a time.
"""

from __future__ import annotations

import hashlib
import secrets
import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from pybroker.acl import AclOperation, AclPermissionType, PatternType, ResourceType
from pybroker.client.acls import AccessControlEntry, AclBinding, AclBindingFilter, ResourcePattern
from pybroker.client.connection import (
    BrokerConnection,
    BrokerConnectionError,
    parse_bootstrap_servers,
    retry_call,
)
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.client_security import PLAINTEXT, ClientSecurity
from pybroker.protocol.errors import Errors, KafkaError
from pybroker.protocol.messages import (
    AlterClientQuotasRequest,
    AlterPartitionReassignmentsRequest,
    AlterShareGroupOffsetsRequest,
    AlterUserScramCredentialsRequest,
    ApiVersionsRequest,
    ConsumerProtocolAssignment,
    CreateAclsRequest,
    CreateDelegationTokenRequest,
    CreateTopicsRequest,
    DeleteAclsRequest,
    DeleteGroupsRequest,
    DeleteShareGroupOffsetsRequest,
    DeleteTopicsRequest,
    DescribeAclsRequest,
    DescribeClientQuotasRequest,
    DescribeConfigsRequest,
    DescribeDelegationTokenRequest,
    DescribeGroupsRequest,
    DescribeShareGroupOffsetsRequest,
    DescribeUserScramCredentialsRequest,
    ExpireDelegationTokenRequest,
    FindCoordinatorRequest,
    IncrementalAlterConfigsRequest,
    ListGroupsRequest,
    ListOffsetsRequest,
    ListPartitionReassignmentsRequest,
    MetadataRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    RenewDelegationTokenRequest,
    ShareGroupDescribeRequest,
    UpdateFeaturesRequest,
)

__all__ = [
    "AdminClient",
    "Node",
    "PartitionInfo",
    "TopicDescription",
    "ClusterMetadata",
    "TopicPartition",
    "UnknownTopicError",
    "ListedOffset",
    "OffsetAndMetadata",
    "GroupListing",
    "MemberDescription",
    "GroupDescription",
    "ConfigEntry",
    "ConfigSynonym",
    "ClientQuotaEntry",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "decode_consumer_assignment",
]

# ListOffsets special timestamps (Kafka's ListOffsetsRequest constants).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3

# ConfigResource.Type wire codes (DescribeConfigs / IncrementalAlterConfigs).
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8
RESOURCE_CLIENT_METRICS = 16
RESOURCE_GROUP = 32
# ConfigEntry.ConfigSource wire codes -> Kafka's enum names.
CONFIG_SOURCE_DYNAMIC_TOPIC = 1
CONFIG_SOURCES = {
    0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG",
    7: "DYNAMIC_CLIENT_METRICS_CONFIG", 8: "DYNAMIC_GROUP_CONFIG",
}
# IncrementalAlterConfigs operations (AlterConfigOp.OpType).
CONFIG_OP_SET = 0
CONFIG_OP_DELETE = 1
CONFIG_OP_APPEND = 2
CONFIG_OP_SUBTRACT = 3
# ScramMechanism wire codes.
SCRAM_MECHANISMS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
_SCRAM_HASH = {1: "sha256", 2: "sha512"}
# DescribeClientQuotas match types (ClientQuotaFilterComponent).
QUOTA_MATCH_EXACT = 0
QUOTA_MATCH_DEFAULT = 1
QUOTA_MATCH_ANY = 2
COORDINATOR_KEY_GROUP = 0

# Errors after which the cached coordinator is wrong (Kafka's AdminClient re-finds it).
_COORDINATOR_ERRORS = frozenset({Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE})


class UnknownTopicError(KafkaError):
    """A topic or partition missing from fresh metadata: reported at once, not retried
    (Kafka's AdminClient also fails these from metadata without waiting)."""

    retriable = False

    def __init__(self, message: str) -> None:
        super().__init__(Errors.UNKNOWN_TOPIC_OR_PARTITION, message)


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True)
class Node:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass
class PartitionInfo:
    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline_replicas: list[int]
    error: Errors = Errors.NONE


@dataclass
class TopicDescription:
    name: str
    topic_id: bytes
    is_internal: bool
    partitions: list[PartitionInfo]
    error: Errors = Errors.NONE


@dataclass
class ClusterMetadata:
    cluster_id: str | None
    controller_id: int
    brokers: dict[int, Node]
    topics: dict[str, TopicDescription]


@dataclass(frozen=True)
class ConfigSynonym:
    name: str
    value: str | None
    source: int


@dataclass
class ConfigEntry:
    name: str
    value: str | None
    source: int
    is_default: bool
    read_only: bool
    is_sensitive: bool
    synonyms: list[ConfigSynonym] = field(default_factory=list)


@dataclass(frozen=True)
class ClientQuotaEntry:
    """One quota entity and its values; an entity name of None is the default entity."""

    entity: dict[str, str | None]
    values: dict[str, float]


@dataclass(frozen=True)
class ListedOffset:
    offset: int
    timestamp: int
    leader_epoch: int


@dataclass(frozen=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""


@dataclass(frozen=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str  # "" when the broker's ListGroups is older than v4
    group_type: str  # "" before ListGroups v5


@dataclass
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: list[TopicPartition]  # decoded for protocol type "consumer", else []


@dataclass
class DelegationToken:
    """A delegation token as Create / DescribeDelegationToken answer it (Kafka's DelegationToken:
    TokenInformation + HMAC); principals as "Type:name", timestamps in epoch ms."""

    token_id: str
    hmac: bytes
    owner: str
    requester: str
    renewers: list[str]
    issue_timestamp: int
    expiry_timestamp: int
    max_timestamp: int


@dataclass
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str  # the chosen assignor, e.g. "range"
    members: list[MemberDescription]
    coordinator: Node | None = None


@dataclass
class ShareMemberDescription:
    member_id: str
    client_id: str
    client_host: str
    member_epoch: int
    assignment: list[TopicPartition]


@dataclass
class ShareGroupDescription:
    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: list[ShareMemberDescription]
    coordinator: Node | None = None


def decode_consumer_assignment(data: bytes) -> list[TopicPartition]:
    """Partitions in a consumer-protocol assignment (int16 version + ConsumerProtocolAssignment).

    A version newer than the codec knows is read at the newest known one, as Kafka's
    ConsumerProtocol does (later versions only add fields). Empty bytes mean no assignment.
    """
    if len(data) < 2:
        return []
    (version,) = struct.unpack_from(">h", data, 0)
    hi = ConsumerProtocolAssignment.VALID_VERSIONS[1]
    body = ConsumerProtocolAssignment.decode(memoryview(data)[2:], max(0, min(version, hi)))
    return [TopicPartition(tp.topic, p) for tp in body.assigned_partitions for p in tp.partitions]


def _check(code: int, what: str, message: str | None = None) -> None:
    if code:
        err = Errors.for_code(code)
        raise KafkaError(err, f"{what}: {message}" if message else what)


@dataclass
class FeatureMetadata:
    """Feature flags as a broker reports them: supported (min, max), finalized levels, epoch."""

    supported: dict[str, tuple[int, int]]
    finalized: dict[str, int]
    epoch: int


class AdminClient:
    """Blocking admin client over BrokerConnection; see the module docstring."""

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        client_id: str = "pybroker-admin",
        request_timeout_s: float = 30.0,
        retries: int = 5,
        retry_backoff_s: float = 0.1,
        connection_factory: Callable[..., BrokerConnection] = BrokerConnection,
        security: ClientSecurity = PLAINTEXT,
    ) -> None:
        self.bootstrap = parse_bootstrap_servers(bootstrap_servers)
        self.security = security  # TLS / SASL of every connection (protocol/client_security.py)
        self.client_id = client_id
        self.request_timeout_s = request_timeout_s
        self.retries = retries
        self.retry_backoff_s = retry_backoff_s
        self._connection_factory = connection_factory  # tests pass fakes
        self._bootstrap_conn: BrokerConnection | None = None
        self._conns: dict[tuple[str, int], BrokerConnection] = {}
        self._brokers: dict[int, Node] = {}
        self._coordinators: dict[str, Node] = {}

    # -- connections ------------------------------------------------------------------

    def _connect(self, host: str, port: int) -> BrokerConnection:
        conn = self._conns.get((host, port))
        if conn is None:
            # only a secured client passes `security`, so the tests' fake factories need not take it
            extra = {"security": self.security} if self.security is not PLAINTEXT else {}
            conn = self._connection_factory(host, port, client_id=self.client_id,
                                            request_timeout_s=self.request_timeout_s,
                                            connect_timeout_s=min(10.0, self.request_timeout_s), **extra)
            self._conns[(host, port)] = conn
        conn.connect()
        return conn

    def _any(self) -> BrokerConnection:
        """A connected broker: the last one that worked, else the first bootstrap that answers."""
        if self._bootstrap_conn is not None and self._bootstrap_conn.connected:
            return self._bootstrap_conn
        last: BaseException | None = None
        for host, port in self.bootstrap:
            try:
                self._bootstrap_conn = self._connect(host, port)
                return self._bootstrap_conn
            except BrokerConnectionError as exc:
                last = exc
        assert last is not None
        raise last

    def _node_conn(self, node_id: int) -> BrokerConnection:
        node = self._brokers.get(node_id)
        if node is None:
            self._metadata([])
            node = self._brokers.get(node_id)
            if node is None:
                raise KafkaError(Errors.BROKER_NOT_AVAILABLE, f"broker {node_id} is not in the cluster metadata")
        return self._connect(node.host, node.port)

    def _run(self, fn: Any) -> Any:
        return retry_call(fn, retries=self.retries, backoff_s=self.retry_backoff_s,
                          deadline_s=self.request_timeout_s, on_retry=self._on_retry)

    def _on_retry(self, exc: BaseException) -> None:
        if isinstance(exc, KafkaError) and exc.code in _COORDINATOR_ERRORS:
            self._coordinators.clear()

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()
        self._bootstrap_conn = None

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- metadata and topics ----------------------------------------------------------

    def metadata(self, topics: Iterable[str] | None = None, *,
                 allow_auto_topic_creation: bool = False) -> ClusterMetadata:
        """Cluster metadata; `topics` None lists every topic. Auto-creates named topics only
        when asked (a producer's allow.auto.create.topics) and the broker allows it
        (auto.create.topics.enable): a topic being created answers LEADER_NOT_AVAILABLE."""
        names = None if topics is None else list(topics)
        return self._run(lambda: self._metadata(names, allow_auto_topic_creation))

    def _metadata(self, names: list[str] | None, allow_auto_topic_creation: bool = False) -> ClusterMetadata:
        conn = self._any()
        version = conn.version_for(ApiKey.METADATA, min_version=4 if allow_auto_topic_creation else 1)
        req = MetadataRequest(
            topics=None if names is None else [MetadataRequest.MetadataRequestTopic(name=n) for n in names])
        if version >= 4:
            req.allow_auto_topic_creation = allow_auto_topic_creation
        resp = conn.send(req, version)
        self._brokers = {b.node_id: Node(b.node_id, b.host, b.port, b.rack) for b in resp.brokers}
        topics = {}
        for t in resp.topics:
            parts = [PartitionInfo(p.partition_index, p.leader_id, p.leader_epoch, list(p.replica_nodes),
                                   list(p.isr_nodes), list(p.offline_replicas), Errors.for_code(p.error_code))
                     for p in sorted(t.partitions, key=lambda p: p.partition_index)]
            topics[t.name] = TopicDescription(t.name, bytes(t.topic_id), t.is_internal, parts,
                                              Errors.for_code(t.error_code))
        return ClusterMetadata(resp.cluster_id, resp.controller_id, dict(self._brokers), topics)

    def list_topics(self, include_internal: bool = True) -> list[str]:
        md = self.metadata()
        return sorted(n for n, t in md.topics.items() if include_internal or not t.is_internal)

    def describe_topics(self, topics: Iterable[str] | None = None) -> dict[str, TopicDescription]:
        """Topic -> description; an unknown name comes back with error UNKNOWN_TOPIC_OR_PARTITION."""
        return self.metadata(topics).topics

    def create_topics(
        self,
        topics: Mapping[str, tuple[int, int, Mapping[str, str]]],
        *,
        validate_only: bool = False,
        timeout_ms: int = 30000,
    ) -> dict[str, tuple[Errors, str | None]]:
        """{name: (num_partitions, replication_factor, configs)} -> {name: (error, message)}.

        -1 partitions / replication factor take the broker's defaults (CreateTopics v4+).
        """
        def call() -> dict[str, tuple[Errors, str | None]]:
            conn = self._any()
            needs_defaults = any(p == -1 or r == -1 for p, r, _ in topics.values())
            version = conn.version_for(ApiKey.CREATE_TOPICS, min_version=4 if needs_defaults else 0)
            req = CreateTopicsRequest(
                topics=[CreateTopicsRequest.CreatableTopic(
                    name=name, num_partitions=p, replication_factor=r,
                    configs=[CreateTopicsRequest.CreatableTopicConfig(name=k, value=v) for k, v in cfg.items()])
                    for name, (p, r, cfg) in topics.items()],
                timeout_ms=timeout_ms)
            if validate_only:
                req.validate_only = True
            resp = conn.send(req, version)
            return {t.name: (Errors.for_code(t.error_code), t.error_message) for t in resp.topics}
        return self._run(call)

    def create_topic(self, name: str, num_partitions: int = -1, replication_factor: int = -1,
                     configs: Mapping[str, str] | None = None, *, validate_only: bool = False) -> None:
        """Create one topic; KafkaError (e.g. TOPIC_ALREADY_EXISTS) if the broker refuses."""
        err, msg = self.create_topics({name: (num_partitions, replication_factor, dict(configs or {}))},
                                      validate_only=validate_only)[name]
        _check(err, f"cannot create topic '{name}'", msg)

    def delete_topics(self, names: Iterable[str], *, timeout_ms: int = 30000) -> dict[str, tuple[Errors, str | None]]:
        """{name: (error, message)}; UNKNOWN_TOPIC_OR_PARTITION for a topic that does not exist."""
        names = list(names)

        def call() -> dict[str, tuple[Errors, str | None]]:
            conn = self._any()
            version = conn.version_for(ApiKey.DELETE_TOPICS)
            if version >= 6:
                req = DeleteTopicsRequest(topics=[DeleteTopicsRequest.DeleteTopicState(name=n) for n in names],
                                          timeout_ms=timeout_ms)
            else:
                req = DeleteTopicsRequest(topic_names=names, timeout_ms=timeout_ms)
            resp = conn.send(req, version)
            return {r.name: (Errors.for_code(r.error_code), r.error_message) for r in resp.responses}
        return self._run(call)

    def delete_topic(self, name: str) -> None:
        err, msg = self.delete_topics([name])[name]
        _check(err, f"cannot delete topic '{name}'", msg)

    def alter_partition_reassignments(self, targets: Mapping[TopicPartition, list[int] | None], *,
                                      timeout_ms: int = 60000) -> dict[TopicPartition, tuple[Errors, str | None]]:
        """{partition: target replicas, or None to cancel} -> {partition: (error, message)}
        (AlterPartitionReassignments, answered by the active controller)."""
        by_topic: dict[str, list[tuple[int, list[int] | None]]] = {}
        for tp, replicas in targets.items():
            by_topic.setdefault(tp.topic, []).append((tp.partition, replicas))

        def call() -> dict[TopicPartition, tuple[Errors, str | None]]:
            R = AlterPartitionReassignmentsRequest
            req = R(timeout_ms=timeout_ms, topics=[R.ReassignableTopic(name=t, partitions=[
                R.ReassignablePartition(partition_index=p, replicas=r) for p, r in ps]) for t, ps in by_topic.items()])
            resp = self._any().send(req)
            _check(resp.error_code, "cannot alter partition reassignments", resp.error_message)
            return {TopicPartition(t.name, p.partition_index): (Errors.for_code(p.error_code), p.error_message)
                    for t in resp.responses for p in t.partitions}
        return self._run(call)

    def list_partition_reassignments(self, topics: Mapping[str, list[int]] | None = None
                                     ) -> dict[TopicPartition, tuple[list[int], list[int], list[int]]]:
        """Ongoing reassignments: {partition: (replicas, adding, removing)}; every topic's when
        `topics` is None, else of the named partitions."""
        def call() -> dict[TopicPartition, tuple[list[int], list[int], list[int]]]:
            R = ListPartitionReassignmentsRequest
            req = R(timeout_ms=30000, topics=None if topics is None else [
                R.ListPartitionReassignmentsTopics(name=t, partition_indexes=list(ps)) for t, ps in topics.items()])
            resp = self._any().send(req)
            _check(resp.error_code, "cannot list partition reassignments", resp.error_message)
            return {TopicPartition(t.name, p.partition_index):
                    (list(p.replicas), list(p.adding_replicas), list(p.removing_replicas))
                    for t in resp.topics for p in t.partitions}
        return self._run(call)

    def describe_topic_configs(self, topics: Iterable[str]) -> dict[str, dict[str, ConfigEntry]]:
        """Topic -> {config name: entry} for every config the broker reports (DescribeConfigs)."""
        names = list(topics)

        def call() -> dict[str, dict[str, ConfigEntry]]:
            conn = self._any()
            req = DescribeConfigsRequest(resources=[
                DescribeConfigsRequest.DescribeConfigsResource(resource_type=RESOURCE_TOPIC, resource_name=n,
                                                               configuration_keys=None) for n in names])
            resp = conn.send(req, conn.version_for(ApiKey.DESCRIBE_CONFIGS, min_version=1))
            out = {}
            for r in resp.results:
                _check(r.error_code, f"cannot describe configs of topic '{r.resource_name}'", r.error_message)
                out[r.resource_name] = {
                    c.name: ConfigEntry(c.name, c.value, c.config_source, c.is_default, c.read_only,
                                        c.is_sensitive) for c in r.configs}
            return out
        return self._run(call)

    def topic_config_overrides(self, topics: Iterable[str]) -> dict[str, dict[str, str | None]]:
        """Topic -> the configs set on the topic itself (source DYNAMIC_TOPIC_CONFIG)."""
        return {t: {k: e.value for k, e in sorted(cfgs.items()) if e.source == CONFIG_SOURCE_DYNAMIC_TOPIC}
                for t, cfgs in self.describe_topic_configs(topics).items()}

    # -- offsets ----------------------------------------------------------------------

    def list_offsets(
        self, specs: Mapping[TopicPartition, int], *, isolation_level: int = 0
    ) -> dict[TopicPartition, ListedOffset]:
        """{partition: timestamp or EARLIEST_TIMESTAMP/LATEST_TIMESTAMP/MAX_TIMESTAMP} -> offsets.

        Sent to each partition's leader. For a timestamp with no record at or after it the
        broker answers offset -1 (Kafka's semantics); callers decide what that means.
        Raises KafkaError for a partition-level error.
        """
        specs = dict(specs)

        def call() -> dict[TopicPartition, ListedOffset]:
            md = self._metadata(sorted({tp.topic for tp in specs}))
            by_leader: dict[int, dict[TopicPartition, int]] = {}
            for tp, ts in specs.items():
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
                by_leader.setdefault(p.leader, {})[tp] = ts
            out: dict[TopicPartition, ListedOffset] = {}
            for leader, group in by_leader.items():
                out.update(self._list_offsets_at(self._node_conn(leader), group, isolation_level))
            return out
        return self._run(call)

    def _list_offsets_at(self, conn: BrokerConnection, specs: dict[TopicPartition, int],
                         isolation_level: int) -> dict[TopicPartition, ListedOffset]:
        # MAX_TIMESTAMP needs v7, EARLIEST_LOCAL (-4) v8, LATEST_TIERED (-5) v9 (KIP-734, KIP-1005)
        need = max([2 if isolation_level else 1] + [{-3: 7, -4: 8, -5: 9}.get(ts, 1) for ts in specs.values()])
        version = conn.version_for(ApiKey.LIST_OFFSETS, min_version=need)
        topics: dict[str, list[ListOffsetsRequest.ListOffsetsPartition]] = {}
        for tp, ts in specs.items():
            topics.setdefault(tp.topic, []).append(
                ListOffsetsRequest.ListOffsetsPartition(partition_index=tp.partition, timestamp=ts))
        req = ListOffsetsRequest(replica_id=-1, topics=[
            ListOffsetsRequest.ListOffsetsTopic(name=n, partitions=ps) for n, ps in topics.items()])
        if isolation_level:
            req.isolation_level = isolation_level
        if version >= 10:
            req.timeout_ms = int(self.request_timeout_s * 1000)
        resp = conn.send(req, version)
        out = {}
        for t in resp.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_index)
                _check(p.error_code, f"cannot list offsets of {tp}")
                out[tp] = ListedOffset(p.offset, p.timestamp, p.leader_epoch)
        missing = set(specs) - set(out)
        if missing:
            raise KafkaError(Errors.UNKNOWN_SERVER_ERROR, f"no offsets returned for {sorted(map(str, missing))}")
        return out

    def log_end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: o.offset for tp, o in self.list_offsets({tp: LATEST_TIMESTAMP for tp in partitions}).items()}

    def log_start_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: o.offset for tp, o in self.list_offsets({tp: EARLIEST_TIMESTAMP for tp in partitions}).items()}

    # -- groups -----------------------------------------------------------------------

    def find_coordinator(self, group_id: str) -> Node:
        """The group's coordinator (FindCoordinator, key type GROUP); cached until it moves."""
        return self._run(lambda: self._find_coordinator(group_id))

    def _find_coordinator(self, group_id: str) -> Node:
        node = self._coordinators.get(group_id)
        if node is not None:
            return node
        conn = self._any()
        version = conn.version_for(ApiKey.FIND_COORDINATOR)
        if version >= 4:
            resp = conn.send(FindCoordinatorRequest(key_type=COORDINATOR_KEY_GROUP, coordinator_keys=[group_id]),
                             version)
            if not resp.coordinators:
                raise KafkaError(Errors.COORDINATOR_NOT_AVAILABLE, f"no coordinator returned for group '{group_id}'")
            c = resp.coordinators[0]
            code, msg, node = c.error_code, c.error_message, Node(c.node_id, c.host, c.port)
        else:
            resp = conn.send(FindCoordinatorRequest(key=group_id), version)
            code, msg = resp.error_code, resp.error_message
            node = Node(resp.node_id, resp.host, resp.port)
        _check(code, f"cannot find the coordinator of group '{group_id}'", msg)
        self._coordinators[group_id] = node
        return node

    def _coordinator_conn(self, group_id: str) -> BrokerConnection:
        node = self._find_coordinator(group_id)
        return self._connect(node.host, node.port)

    def _group_error(self, code: int, group_id: str, what: str) -> None:
        if code:
            err = Errors.for_code(code)
            if err in _COORDINATOR_ERRORS:
                self._coordinators.pop(group_id, None)
            raise KafkaError(err, f"{what} of group '{group_id}'")

    def list_groups(self, states: Iterable[str] = (), types: Iterable[str] = ()) -> list[GroupListing]:
        """Groups on every broker, optionally filtered by state / type (case-insensitive).

        Filters go to the broker when its ListGroups version has them (states v4+, types
        v5+) and are applied here as well, so an older broker gives the same answer.
        """
        states_l = [s for s in states]
        types_l = [t for t in types]

        def call() -> list[GroupListing]:
            md = self._metadata([])
            nodes: list[Any] = list(md.brokers.values()) or [None]
            seen: dict[str, GroupListing] = {}
            for node in nodes:
                conn = self._any() if node is None else self._connect(node.host, node.port)
                version = conn.version_for(ApiKey.LIST_GROUPS)
                req = ListGroupsRequest()
                if version >= 4 and states_l:
                    req.states_filter = states_l
                if version >= 5 and types_l:
                    req.types_filter = types_l
                resp = conn.send(req, version)
                _check(resp.error_code, f"cannot list groups on {conn.address}")
                for g in resp.groups:
                    seen[g.group_id] = GroupListing(g.group_id, g.protocol_type, g.group_state, g.group_type)
            out = sorted(seen.values(), key=lambda g: g.group_id)
            if states_l:
                want = {s.lower() for s in states_l}
                out = [g for g in out if g.state.lower() in want]
            if types_l:
                want = {t.lower() for t in types_l}
                out = [g for g in out if g.group_type.lower() in want]
            return out
        return self._run(call)

    def describe_group(self, group_id: str) -> GroupDescription:
        """One group (DescribeGroups at its coordinator); KafkaError for a group-level error.

        A group that does not exist comes back as state "Dead" from classic coordinators
        and as KafkaError(GROUP_ID_NOT_FOUND) from newer ones; callers treat both alike.
        """
        def call() -> GroupDescription:
            node = self._find_coordinator(group_id)
            conn = self._connect(node.host, node.port)
            resp = conn.send(DescribeGroupsRequest(groups=[group_id]), conn.version_for(ApiKey.DESCRIBE_GROUPS))
            g = next((g for g in resp.groups if g.group_id == group_id), None)
            if g is None:
                raise KafkaError(Errors.UNKNOWN_SERVER_ERROR, f"group '{group_id}' missing from DescribeGroups")
            self._group_error(g.error_code, group_id, "cannot describe")
            members = []
            for m in g.members:
                assignment: list[TopicPartition] = []
                if g.protocol_type == "consumer" and m.member_assignment:
                    try:
                        assignment = decode_consumer_assignment(bytes(m.member_assignment))
                    except KafkaError:
                        assignment = []  # not ours to judge: show the member without partitions
                members.append(MemberDescription(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                                 assignment))
            return GroupDescription(g.group_id, g.group_state, g.protocol_type, g.protocol_data, members, node)
        return self._run(call)

    def delete_groups(self, group_ids: Iterable[str]) -> dict[str, Errors]:
        """{group: error}: NON_EMPTY_GROUP if it has members, GROUP_ID_NOT_FOUND if unknown."""
        out: dict[str, Errors] = {}
        for group_id in group_ids:
            def call(group_id: str = group_id) -> Errors:
                conn = self._coordinator_conn(group_id)
                resp = conn.send(DeleteGroupsRequest(groups_names=[group_id]), conn.version_for(ApiKey.DELETE_GROUPS))
                r = next((r for r in resp.results if r.group_id == group_id), None)
                if r is None:
                    raise KafkaError(Errors.UNKNOWN_SERVER_ERROR, f"group '{group_id}' missing from DeleteGroups")
                err = Errors.for_code(r.error_code)
                if err in _COORDINATOR_ERRORS or err == Errors.COORDINATOR_LOAD_IN_PROGRESS:
                    self._group_error(err, group_id, "cannot delete")
                return err
            out[group_id] = self._run(call)
        return out

    def fetch_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets (all of them when `partitions` is None).

        Partitions without a committed offset are left out. KafkaError for a group error.
        """
        wanted = None if partitions is None else list(partitions)

        def call() -> dict[TopicPartition, OffsetAndMetadata]:
            conn = self._coordinator_conn(group_id)
            version = conn.version_for(ApiKey.OFFSET_FETCH, min_version=2 if wanted is None else 1)
            topics: dict[str, list[int]] | None = None
            if wanted is not None:
                topics = {}
                for tp in wanted:
                    topics.setdefault(tp.topic, []).append(tp.partition)
            if version >= 8:
                req = OffsetFetchRequest(groups=[OffsetFetchRequest.OffsetFetchRequestGroup(
                    group_id=group_id,
                    topics=None if topics is None else [
                        OffsetFetchRequest.OffsetFetchRequestTopics(name=n, partition_indexes=ps)
                        for n, ps in topics.items()])])
                resp = conn.send(req, version)
                g = next((g for g in resp.groups if g.group_id == group_id), None)
                if g is None:
                    raise KafkaError(Errors.UNKNOWN_SERVER_ERROR, f"group '{group_id}' missing from OffsetFetch")
                self._group_error(g.error_code, group_id, "cannot fetch offsets")
                resp_topics = g.topics
            else:
                req = OffsetFetchRequest(group_id=group_id, topics=None if topics is None else [
                    OffsetFetchRequest.OffsetFetchRequestTopic(name=n, partition_indexes=ps)
                    for n, ps in topics.items()])
                resp = conn.send(req, version)
                self._group_error(resp.error_code, group_id, "cannot fetch offsets")
                resp_topics = resp.topics
            out = {}
            for t in resp_topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, p.partition_index)
                    if p.error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION or p.committed_offset < 0:
                        continue
                    _check(p.error_code, f"cannot fetch the offset of {tp} for group '{group_id}'")
                    out[tp] = OffsetAndMetadata(p.committed_offset, p.committed_leader_epoch, p.metadata or "")
            return out
        return self._run(call)

    def commit_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, int | OffsetAndMetadata], *,
        generation_id: int = -1, member_id: str = "", group_instance_id: str | None = None,
    ) -> dict[TopicPartition, Errors]:
        """Commit offsets as an admin (generation -1, no member id), as Kafka's
        alterConsumerGroupOffsets does; the coordinator refuses with UNKNOWN_MEMBER_ID or
        REBALANCE_IN_PROGRESS while the group has members. A group member passes its
        generation and member id instead. Returns per-partition errors."""
        items = {tp: (o if isinstance(o, OffsetAndMetadata) else OffsetAndMetadata(int(o)))
                 for tp, o in offsets.items()}

        def call() -> dict[TopicPartition, Errors]:
            conn = self._coordinator_conn(group_id)
            version = conn.version_for(ApiKey.OFFSET_COMMIT, min_version=1)
            topics: dict[str, list[OffsetCommitRequest.OffsetCommitRequestPartition]] = {}
            for tp, om in items.items():
                part = OffsetCommitRequest.OffsetCommitRequestPartition(
                    partition_index=tp.partition, committed_offset=om.offset, committed_metadata=om.metadata)
                if version >= 6:
                    part.committed_leader_epoch = om.leader_epoch
                topics.setdefault(tp.topic, []).append(part)
            req = OffsetCommitRequest(group_id=group_id, generation_id_or_member_epoch=generation_id,
                                      member_id=member_id, topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=n, partitions=ps)
                                              for n, ps in topics.items()])
            if version >= 7 and group_instance_id is not None:
                req.group_instance_id = group_instance_id
            resp = conn.send(req, version)
            out = {}
            for t in resp.topics:
                for p in t.partitions:
                    err = Errors.for_code(p.error_code)
                    if err in _COORDINATOR_ERRORS or err == Errors.COORDINATOR_LOAD_IN_PROGRESS:
                        self._group_error(err, group_id, "cannot commit offsets")
                    out[TopicPartition(t.name, p.partition_index)] = err
            return out
        return self._run(call)

    def delete_offsets(self, group_id: str, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, Errors]:
        """OffsetDelete: drop committed offsets of partitions the group no longer consumes.

        KafkaError for a group-level error (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP...);
        per-partition errors (GROUP_SUBSCRIBED_TO_TOPIC...) in the result.
        """
        wanted = list(partitions)

        def call() -> dict[TopicPartition, Errors]:
            conn = self._coordinator_conn(group_id)
            topics: dict[str, list[int]] = {}
            for tp in wanted:
                topics.setdefault(tp.topic, []).append(tp.partition)
            req = OffsetDeleteRequest(group_id=group_id, topics=[
                OffsetDeleteRequest.OffsetDeleteRequestTopic(
                    name=n, partitions=[OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=p)
                                        for p in ps]) for n, ps in topics.items()])
            resp = conn.send(req, conn.version_for(ApiKey.OFFSET_DELETE))
            self._group_error(resp.error_code, group_id, "cannot delete offsets")
            return {TopicPartition(t.name, p.partition_index): Errors.for_code(p.error_code)
                    for t in resp.topics for p in t.partitions}
        return self._run(call)

    # -- share groups (KIP-932: ShareGroupDescribe, Describe/Alter/DeleteShareGroupOffsets) ----

    def describe_share_group(self, group_id: str) -> ShareGroupDescription:
        """One share group (ShareGroupDescribe at its coordinator); KafkaError for a group error."""
        def call() -> ShareGroupDescription:
            node = self._find_coordinator(group_id)
            conn = self._connect(node.host, node.port)
            resp = conn.send(ShareGroupDescribeRequest(group_ids=[group_id], include_authorized_operations=False),
                             conn.version_for(ApiKey.SHARE_GROUP_DESCRIBE))
            g = next((g for g in resp.groups if g.group_id == group_id), None)
            if g is None:
                raise KafkaError(Errors.UNKNOWN_SERVER_ERROR, f"group '{group_id}' missing from ShareGroupDescribe")
            self._group_error(g.error_code, group_id, "cannot describe")
            members = [ShareMemberDescription(
                m.member_id, m.client_id, m.client_host, m.member_epoch,
                sorted(TopicPartition(tp.topic_name, p) for tp in m.assignment.topic_partitions for p in tp.partitions))
                for m in g.members]
            return ShareGroupDescription(g.group_id, g.group_state, g.group_epoch, g.assignment_epoch,
                                         g.assignor_name, members, node)
        return self._run(call)

    def describe_share_group_offsets(self, group_id: str, partitions: Iterable[TopicPartition] | None = None
                                     ) -> dict[TopicPartition, tuple[int, int]]:
        """{partition: (start offset, leader epoch)} of a share group (every initialized share
        partition when `partitions` is None); -1 where there is no state."""
        wanted = None if partitions is None else list(partitions)

        def call() -> dict[TopicPartition, tuple[int, int]]:
            conn = self._coordinator_conn(group_id)
            R = DescribeShareGroupOffsetsRequest
            topics = None
            if wanted is not None:
                by_topic: dict[str, list[int]] = {}
                for tp in wanted:
                    by_topic.setdefault(tp.topic, []).append(tp.partition)
                topics = [R.DescribeShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps)
                          for t, ps in by_topic.items()]
            resp = conn.send(R(groups=[R.DescribeShareGroupOffsetsRequestGroup(group_id=group_id, topics=topics)]),
                             conn.version_for(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS))
            (g,) = resp.groups
            self._group_error(g.error_code, group_id, "cannot describe the offsets")
            return {TopicPartition(t.topic_name, p.partition_index): (p.start_offset, p.leader_epoch)
                    for t in g.topics for p in t.partitions}
        return self._run(call)

    def alter_share_group_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int]
                                  ) -> dict[TopicPartition, Errors]:
        """AlterShareGroupOffsets: new start offsets for an empty share group; KafkaError for a
        group error (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, ...), per-partition errors in the result."""
        def call() -> dict[TopicPartition, Errors]:
            conn = self._coordinator_conn(group_id)
            R = AlterShareGroupOffsetsRequest
            by_topic: dict[str, list[tuple[int, int]]] = {}
            for tp, off in offsets.items():
                by_topic.setdefault(tp.topic, []).append((tp.partition, off))
            req = R(group_id=group_id, topics=[R.AlterShareGroupOffsetsRequestTopic(topic_name=t, partitions=[
                R.AlterShareGroupOffsetsRequestPartition(partition_index=p, start_offset=o) for p, o in ps])
                for t, ps in by_topic.items()])
            resp = conn.send(req, conn.version_for(ApiKey.ALTER_SHARE_GROUP_OFFSETS))
            self._group_error(resp.error_code, group_id, "cannot alter the offsets")
            return {TopicPartition(t.topic_name, p.partition_index): Errors.for_code(p.error_code)
                    for t in resp.responses for p in t.partitions}
        return self._run(call)

    def delete_share_group_offsets(self, group_id: str, topics: Iterable[str]) -> dict[str, Errors]:
        """DeleteShareGroupOffsets: drop an empty share group's state for whole topics."""
        names = list(dict.fromkeys(topics))

        def call() -> dict[str, Errors]:
            conn = self._coordinator_conn(group_id)
            R = DeleteShareGroupOffsetsRequest
            resp = conn.send(R(group_id=group_id, topics=[R.DeleteShareGroupOffsetsRequestTopic(topic_name=t)
                                                          for t in names]),
                             conn.version_for(ApiKey.DELETE_SHARE_GROUP_OFFSETS))
            self._group_error(resp.error_code, group_id, "cannot delete the offsets")
            return {t.topic_name: Errors.for_code(t.error_code) for t in resp.responses}
        return self._run(call)

    # -- features (ApiVersions v3+, UpdateFeatures; kafka-features.sh) ------------------

    def describe_features(self) -> FeatureMetadata:
        """The supported ranges and finalized levels a broker reports in ApiVersions (KIP-584)."""
        def call() -> FeatureMetadata:
            conn = self._any()
            resp = conn.send(ApiVersionsRequest(client_software_name="pybroker-admin", client_software_version="1"),
                             conn.version_for(ApiKey.API_VERSIONS, min_version=3))
            _check(resp.error_code, "cannot describe features")
            return FeatureMetadata(
                supported={f.name: (f.min_version, f.max_version) for f in resp.supported_features},
                finalized={f.name: f.max_version_level for f in resp.finalized_features},
                epoch=resp.finalized_features_epoch)
        return self._run(call)

    def update_features(self, updates: Mapping[str, tuple[int, int]], *, validate_only: bool = False) -> None:
        """UpdateFeatures: feature -> (level, upgrade type: 1 upgrade, 2 safe, 3 unsafe downgrade);
        all or nothing. A refusal raises KafkaError with the controller's message."""
        def call() -> None:
            conn = self._any()
            R = UpdateFeaturesRequest
            req = R(timeout_ms=int(self.request_timeout_s * 1000), validate_only=validate_only, feature_updates=[
                R.FeatureUpdateKey(feature=name, max_version_level=level, upgrade_type=kind)
                for name, (level, kind) in updates.items()])
            resp = conn.send(req, conn.version_for(ApiKey.UPDATE_FEATURES, min_version=1))
            if resp.error_code:
                raise KafkaError(Errors.for_code(resp.error_code), resp.error_message or "")
            for r in resp.results:
                if r.error_code:
                    raise KafkaError(Errors.for_code(r.error_code), r.error_message or "")
        self._run(call)

    # -- configs (DescribeConfigs / IncrementalAlterConfigs) ----------------------------

    def _resource_conn(self, resource_type: int, name: str) -> BrokerConnection:
        """A broker's own configs and loggers are answered by that broker (Kafka's admin
        routes them there); everything else by any broker."""
        if resource_type in (RESOURCE_BROKER, RESOURCE_BROKER_LOGGER) and name.strip().lstrip("-").isdigit():
            return self._node_conn(int(name))
        return self._any()

    def describe_configs(
        self, resources: Iterable[tuple[int, str]], *, include_synonyms: bool = True
    ) -> dict[tuple[int, str], list[ConfigEntry]]:
        """{(resource type, name): entries in the broker's order}; KafkaError per resource error."""
        wanted = list(resources)

        def call() -> dict[tuple[int, str], list[ConfigEntry]]:
            out: dict[tuple[int, str], list[ConfigEntry]] = {}
            for rtype, name in wanted:
                conn = self._resource_conn(rtype, name)
                version = conn.version_for(ApiKey.DESCRIBE_CONFIGS, min_version=1)
                req = DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
                    resource_type=rtype, resource_name=name, configuration_keys=None)],
                    include_synonyms=include_synonyms)
                resp = conn.send(req, version)
                for r in resp.results:
                    _check(r.error_code, f"cannot describe configs of {_resource_text(rtype, name)}",
                           r.error_message)
                    out[(rtype, name)] = [
                        ConfigEntry(c.name, c.value, c.config_source, c.is_default, c.read_only, c.is_sensitive,
                                    [ConfigSynonym(y.name, y.value, y.source) for y in (c.synonyms or ())])
                        for c in r.configs]
            return out
        return self._run(call)

    def incremental_alter_configs(
        self, alterations: Mapping[tuple[int, str], Iterable[tuple[str, int, str | None]]], *,
        validate_only: bool = False,
    ) -> dict[tuple[int, str], tuple[Errors, str | None]]:
        """{(type, name): [(key, CONFIG_OP_*, value)]} -> {(type, name): (error, message)}."""
        items = {k: list(v) for k, v in alterations.items()}

        def call() -> dict[tuple[int, str], tuple[Errors, str | None]]:
            out: dict[tuple[int, str], tuple[Errors, str | None]] = {}
            for (rtype, name), ops in items.items():
                conn = self._resource_conn(rtype, name)
                req = IncrementalAlterConfigsRequest(resources=[IncrementalAlterConfigsRequest.AlterConfigsResource(
                    resource_type=rtype, resource_name=name,
                    configs=[IncrementalAlterConfigsRequest.AlterableConfig(name=k, config_operation=op, value=v)
                             for k, op, v in ops])], validate_only=validate_only)
                resp = conn.send(req, conn.version_for(ApiKey.INCREMENTAL_ALTER_CONFIGS))
                for r in resp.responses:
                    out[(r.resource_type, r.resource_name)] = (Errors.for_code(r.error_code), r.error_message)
            return out
        return self._run(call)

    # -- client quotas ------------------------------------------------------------------

    def describe_client_quotas(
        self, components: Iterable[tuple[str, int, str | None]], *, strict: bool = False
    ) -> list[ClientQuotaEntry]:
        """[(entity type, QUOTA_MATCH_*, name)] -> matching entities (Kafka's ClientQuotaFilter)."""
        comps = list(components)

        def call() -> list[ClientQuotaEntry]:
            conn = self._any()
            req = DescribeClientQuotasRequest(components=[
                DescribeClientQuotasRequest.ComponentData(entity_type=t, match_type=m, match=n)
                for t, m, n in comps], strict=strict)
            resp = conn.send(req, conn.version_for(ApiKey.DESCRIBE_CLIENT_QUOTAS))
            _check(resp.error_code, "cannot describe client quotas", resp.error_message)
            return [ClientQuotaEntry({e.entity_type: e.entity_name for e in entry.entity},
                                     {v.key: v.value for v in entry.values}) for entry in resp.entries or ()]
        return self._run(call)

    def alter_client_quotas(
        self, alterations: Iterable[tuple[Mapping[str, str | None], Mapping[str, float | None]]], *,
        validate_only: bool = False,
    ) -> list[tuple[dict[str, str | None], Errors, str | None]]:
        """[(entity, {key: value or None to remove})] -> [(entity, error, message)]."""
        items = [(dict(e), dict(ops)) for e, ops in alterations]

        def call() -> list[tuple[dict[str, str | None], Errors, str | None]]:
            conn = self._any()
            req = AlterClientQuotasRequest(entries=[AlterClientQuotasRequest.EntryData(
                entity=[AlterClientQuotasRequest.EntityData(entity_type=t, entity_name=n) for t, n in e.items()],
                ops=[AlterClientQuotasRequest.OpData(key=k, value=0.0 if v is None else float(v), remove=v is None)
                     for k, v in ops.items()]) for e, ops in items], validate_only=validate_only)
            resp = conn.send(req, conn.version_for(ApiKey.ALTER_CLIENT_QUOTAS))
            return [({x.entity_type: x.entity_name for x in r.entity}, Errors.for_code(r.error_code),
                     r.error_message) for r in resp.entries]
        return self._run(call)

    # -- SCRAM credentials --------------------------------------------------------------

    # ------------------------------------------------------------------ delegation tokens (KIP-48)

    def create_delegation_token(self, renewers: Iterable[str] = (), max_lifetime_ms: int = -1,
                                owner: str | None = None) -> DelegationToken:
        """A token for the caller (or `owner`, "Type:name", KIP-373), renewable by `renewers`
        ("User:name"); KafkaError when refused."""
        pairs = [r.partition(":") for r in renewers]

        def call() -> DelegationToken:
            conn = self._any()
            version = conn.version_for(ApiKey.CREATE_DELEGATION_TOKEN, 3 if owner else 0)
            kind, _, name = (owner or "").partition(":")
            req = CreateDelegationTokenRequest(
                owner_principal_type=kind if owner else None, owner_principal_name=name if owner else None,
                renewers=[CreateDelegationTokenRequest.CreatableRenewers(principal_type=k, principal_name=n)
                          for k, _, n in pairs], max_lifetime_ms=max_lifetime_ms)
            resp = conn.send(req, version)
            _check(resp.error_code, "cannot create a delegation token")
            requester = (f"{resp.token_requester_principal_type}:{resp.token_requester_principal_name}"
                         if version >= 3 else f"{resp.principal_type}:{resp.principal_name}")
            return DelegationToken(resp.token_id, bytes(resp.hmac), f"{resp.principal_type}:{resp.principal_name}",
                                   requester, [f"{k}:{n}" for k, _, n in pairs], resp.issue_timestamp_ms,
                                   resp.expiry_timestamp_ms, resp.max_timestamp_ms)
        return self._run(call)

    def renew_delegation_token(self, hmac: bytes, renew_period_ms: int = -1) -> int:
        """The token's new expiry timestamp (ms)."""
        def call() -> int:
            conn = self._any()
            resp = conn.send(RenewDelegationTokenRequest(hmac=hmac, renew_period_ms=renew_period_ms),
                             conn.version_for(ApiKey.RENEW_DELEGATION_TOKEN))
            _check(resp.error_code, "cannot renew the delegation token")
            return int(resp.expiry_timestamp_ms)
        return self._run(call)

    def expire_delegation_token(self, hmac: bytes, expiry_time_period_ms: int = -1) -> int:
        """The token's new expiry timestamp (ms); a negative period expires it at once."""
        def call() -> int:
            conn = self._any()
            resp = conn.send(ExpireDelegationTokenRequest(hmac=hmac, expiry_time_period_ms=expiry_time_period_ms),
                             conn.version_for(ApiKey.EXPIRE_DELEGATION_TOKEN))
            _check(resp.error_code, "cannot expire the delegation token")
            return int(resp.expiry_timestamp_ms)
        return self._run(call)

    def describe_delegation_tokens(self, owners: Iterable[str] | None = None) -> list[DelegationToken]:
        """The tokens the caller may see, of `owners` ("Type:name") or all (None)."""
        names = None if owners is None else [o.partition(":") for o in owners]

        def call() -> list[DelegationToken]:
            conn = self._any()
            req = DescribeDelegationTokenRequest(owners=None if names is None else [
                DescribeDelegationTokenRequest.DescribeDelegationTokenOwner(principal_type=k, principal_name=n)
                for k, _, n in names])
            version = conn.version_for(ApiKey.DESCRIBE_DELEGATION_TOKEN)
            resp = conn.send(req, version)
            _check(resp.error_code, "cannot describe delegation tokens")
            return [DelegationToken(
                t.token_id, bytes(t.hmac), f"{t.principal_type}:{t.principal_name}",
                f"{t.token_requester_principal_type}:{t.token_requester_principal_name}" if version >= 3
                else f"{t.principal_type}:{t.principal_name}",
                [f"{r.principal_type}:{r.principal_name}" for r in t.renewers], t.issue_timestamp,
                t.expiry_timestamp, t.max_timestamp) for t in resp.tokens]
        return self._run(call)

    def describe_user_scram_credentials(
        self, users: Iterable[str] | None = None
    ) -> dict[str, tuple[Errors, list[tuple[str, int]]]]:
        """{user: (error, [(mechanism name, iterations)])}; None describes every user."""
        names = None if users is None else list(users)

        def call() -> dict[str, tuple[Errors, list[tuple[str, int]]]]:
            conn = self._any()
            req = DescribeUserScramCredentialsRequest(
                users=None if names is None else [DescribeUserScramCredentialsRequest.UserName(name=n) for n in names])
            resp = conn.send(req, conn.version_for(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS))
            _check(resp.error_code, "cannot describe SCRAM credentials", resp.error_message)
            by_code = {v: k for k, v in SCRAM_MECHANISMS.items()}
            return {r.user: (Errors.for_code(r.error_code),
                             [(by_code.get(c.mechanism, "UNKNOWN"), c.iterations) for c in r.credential_infos])
                    for r in resp.results}
        return self._run(call)

    def alter_user_scram_credentials(
        self, upsertions: Iterable[tuple[str, str, int, str]] = (), deletions: Iterable[tuple[str, str]] = ()
    ) -> dict[str, tuple[Errors, str | None]]:
        """upsertions [(user, mechanism name, iterations, password)], deletions [(user, mechanism
        name)] -> {user: (error, message)}. The password is salted here (PBKDF2, SCRAM's Hi()),
        as Kafka's admin client does; it never goes on the wire."""
        ups = []
        for user, mech, iterations, password in upsertions:
            code = SCRAM_MECHANISMS[mech]
            salt = secrets.token_bytes(24)
            salted = hashlib.pbkdf2_hmac(_SCRAM_HASH[code], password.encode(), salt, iterations)
            ups.append(AlterUserScramCredentialsRequest.ScramCredentialUpsertion(
                name=user, mechanism=code, iterations=iterations, salt=salt, salted_password=salted))
        dels = [AlterUserScramCredentialsRequest.ScramCredentialDeletion(name=u, mechanism=SCRAM_MECHANISMS[m])
                for u, m in deletions]

        def call() -> dict[str, tuple[Errors, str | None]]:
            conn = self._any()
            resp = conn.send(AlterUserScramCredentialsRequest(deletions=dels, upsertions=ups),
                             conn.version_for(ApiKey.ALTER_USER_SCRAM_CREDENTIALS))
            return {r.user: (Errors.for_code(r.error_code), r.error_message) for r in resp.results}
        return self._run(call)

    # -- ACLs ---------------------------------------------------------------------------

    def describe_acls(self, flt: AclBindingFilter | None = None) -> list[AclBinding]:
        """Bindings matching the filter (None: every ACL); KafkaError (e.g. SECURITY_DISABLED)
        if the broker refuses."""
        flt = flt or AclBindingFilter()

        def call() -> list[AclBinding]:
            conn = self._any()
            version = conn.version_for(ApiKey.DESCRIBE_ACLS, min_version=1)
            req = DescribeAclsRequest(resource_type_filter=flt.resource_type, resource_name_filter=flt.name,
                                      pattern_type_filter=flt.pattern_type, principal_filter=flt.principal,
                                      host_filter=flt.host, operation=flt.operation,
                                      permission_type=flt.permission_type)
            resp = conn.send(req, version)
            _check(resp.error_code, "cannot describe ACLs", resp.error_message)
            return sorted(AclBinding(ResourcePattern(ResourceType(r.resource_type), r.resource_name,
                                                     PatternType(r.pattern_type)),
                                     AccessControlEntry(a.principal, a.host, AclOperation(a.operation),
                                                        AclPermissionType(a.permission_type)))
                          for r in resp.resources for a in r.acls)
        return self._run(call)

    def create_acls(self, bindings: Iterable[AclBinding]) -> list[tuple[Errors, str | None]]:
        """One (error, message) per binding, in order."""
        items = list(bindings)

        def call() -> list[tuple[Errors, str | None]]:
            conn = self._any()
            version = conn.version_for(ApiKey.CREATE_ACLS, min_version=1)
            req = CreateAclsRequest(creations=[CreateAclsRequest.AclCreation(
                resource_type=b.pattern.resource_type, resource_name=b.pattern.name,
                resource_pattern_type=b.pattern.pattern_type, principal=b.entry.principal, host=b.entry.host,
                operation=b.entry.operation, permission_type=b.entry.permission_type) for b in items])
            resp = conn.send(req, version)
            return [(Errors.for_code(r.error_code), r.error_message) for r in resp.results]
        return self._run(call)

    def delete_acls(self, filters: Iterable[AclBindingFilter]) -> list[tuple[Errors, str | None, list[AclBinding]]]:
        """Per filter: (error, message, the bindings it deleted)."""
        items = list(filters)

        def call() -> list[tuple[Errors, str | None, list[AclBinding]]]:
            conn = self._any()
            version = conn.version_for(ApiKey.DELETE_ACLS, min_version=1)
            req = DeleteAclsRequest(filters=[DeleteAclsRequest.DeleteAclsFilter(
                resource_type_filter=f.resource_type, resource_name_filter=f.name, pattern_type_filter=f.pattern_type,
                principal_filter=f.principal, host_filter=f.host, operation=f.operation,
                permission_type=f.permission_type) for f in items])
            resp = conn.send(req, version)
            return [(Errors.for_code(r.error_code), r.error_message, sorted(
                AclBinding(ResourcePattern(ResourceType(m.resource_type), m.resource_name, PatternType(m.pattern_type)),
                           AccessControlEntry(m.principal, m.host, AclOperation(m.operation),
                                              AclPermissionType(m.permission_type)))
                for m in r.matching_acls if not m.error_code)) for r in resp.filter_results]
        return self._run(call)


def _resource_text(resource_type: int, name: str) -> str:
    kind = {RESOURCE_TOPIC: "topic", RESOURCE_BROKER: "broker", RESOURCE_BROKER_LOGGER: "broker logger",
            RESOURCE_GROUP: "group", RESOURCE_CLIENT_METRICS: "client metrics"}.get(resource_type, "resource")
    return f"{kind} '{name}'" if name else f"the default {kind}"
