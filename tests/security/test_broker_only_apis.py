"""Broker-only APIs against a live 3-node cluster (server/broker_only.py, server/controller_apis.py).

The cluster is laid out as a Kafka cluster on a private network often is: clients on a CLIENT
listener (PLAINTEXT), the nodes replicating over an INTERNAL listener (PLAINTEXT, the
inter-broker listener), and the controllers on a CONTROLLER listener with SASL/PLAIN
(User:broker, a super user; alice has a login there too). StandardAuthorizer is on with
allow.everyone.if.no.acl.found=true (topics and groups are open to clients) and one ACL:
User:ANONYMOUS may CLUSTER_ACTION the cluster, which the nodes need on INTERNAL. A client on
CLIENT is User:ANONYMOUS as well, so only the listener tells it from a node there.

Each test forges one frame fuzzing found harmful and checks it is refused and does no harm:
1. a follower Fetch on the CLIENT listener, both real followers stopped, used to advance the high
   watermark over a record only the leader had;
2. a BrokerHeartbeat with a guessed broker epoch used to fence a broker;
3. an AlterPartition for another broker's partition used to shrink its ISR;
4. a WriteTxnMarkers at producer epoch 32767 on the CLIENT listener used to fence a plain
   idempotent producer for good.
Then Kafka's non-authorisation defences on the INTERNAL listener (a replica id outside the
replica set, a stale KIP-903 broker epoch), and real clients (confluent-kafka, kafka-python,
and a confluent transactional producer, whose markers and AddPartitionsToTxn go node to node)
working on the same cluster.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from pybroker.client.connection import BrokerConnection
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.frame import decode_response, encode_request
from pybroker.protocol.messages import (
    AlterPartitionRequest,
    BrokerHeartbeatRequest,
    DescribeProducersRequest,
    FetchRequest,
    ListOffsetsRequest,
    MetadataRequest,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
    WriteTxnMarkersRequest,
)
from tests.clients.adapters import (
    confluent_consume,
    confluent_produce,
    kafka_python_consume,
    kafka_python_produce,
)
from tests.clients.helpers import assert_same_records, numbered
from tests.cluster.harness import Cluster, free_ports, wait_until

pytestmark = pytest.mark.slow

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
        'password="broker-secret" user_broker="broker-secret" user_alice="alice-secret";')
STALE = int(Errors.STALE_BROKER_EPOCH)
NOT_CONTROLLER = int(Errors.NOT_CONTROLLER)
# a broker epoch is the offset of its registration record: small on a new cluster
EPOCH_GUESSES = range(0, 3000)


class Raw:
    """A blocking socket speaking Kafka frames, optionally logged in with SASL/PLAIN."""

    def __init__(self, port: int, user: str | None = None, password: str = "") -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=15)
        self.correlation = 0
        if user is not None:
            _, hs = self.request(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
            assert hs.error_code == 0, hs
            _, auth = self.request(ApiKey.SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(
                auth_bytes=f"\0{user}\0{password}".encode()))
            assert auth.error_code == 0, auth

    def request(self, api_key: int, version: int, body: Any) -> tuple[int, Any]:
        self.correlation += 1
        self.sock.sendall(encode_request(api_key, version, self.correlation, "forger", body))
        (size,) = struct.unpack(">i", self._exactly(4))
        corr, resp = decode_response(api_key, version, self._exactly(size))
        assert corr == self.correlation
        return corr, resp

    def _exactly(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            assert chunk, "the broker closed the connection instead of answering"
            buf += chunk
        return buf

    def close(self) -> None:
        self.sock.close()


class Layout:
    def __init__(self, cluster: Cluster, internal_ports: list[int]) -> None:
        self.cluster = cluster
        self.internal_ports = internal_ports

    def client_port(self, node: int) -> int:
        return self.cluster.client_ports[node - 1]

    def internal_port(self, node: int) -> int:
        return self.internal_ports[node - 1]

    def controller_port(self, node: int) -> int:
        return self.cluster.controller_ports[node - 1]


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Layout]:
    overrides = {
        "listener.security.protocol.map": "CLIENT:PLAINTEXT,INTERNAL:PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:broker",
        "allow.everyone.if.no.acl.found": "true",
    }
    cluster = Cluster(tmp_path_factory.mktemp("broker-only"), nodes=3, overrides=overrides)
    internal = free_ports(3)
    for i, node in enumerate(cluster.nodes.values()):
        node.overrides["listeners"] = (f"CLIENT://127.0.0.1:{cluster.client_ports[i]},"
                                       f"INTERNAL://127.0.0.1:{internal[i]},"
                                       f"CONTROLLER://127.0.0.1:{cluster.controller_ports[i]}")
    try:
        cluster.start()
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        # the nodes are User:ANONYMOUS on INTERNAL: they need CLUSTER_ACTION (with no ACL on the
        # cluster, allow.everyone.if.no.acl.found granted it to every client as well)
        binding = AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, "User:ANONYMOUS",
                             "*", AclOperation.CLUSTER_ACTION, AclPermissionType.ALLOW)
        for f in admin.create_acls([binding], request_timeout=15).values():
            f.result()
        yield Layout(cluster, internal)
    finally:
        cluster.close()


def _create_topic(layout: Layout, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": layout.cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
    wait_until(lambda: len(_partition(layout, topic).isr_nodes) == 3, timeout=60, what=f"{topic}'s full ISR")


def _partition(layout: Layout, topic: str) -> Any:
    for node in layout.cluster.running():
        try:
            with BrokerConnection("127.0.0.1", layout.client_port(node), request_timeout_s=5,
                                  connect_timeout_s=5) as conn:
                md = conn.send(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]))
        except OSError:
            continue
        t = md.topics[0]
        if t.error_code == 0 and t.partitions and t.partitions[0].leader_id >= 0:
            p = t.partitions[0]
            return SimpleNamespace(topic_id=t.topic_id, leader_id=p.leader_id, leader_epoch=p.leader_epoch,
                                   replica_nodes=list(p.replica_nodes), isr_nodes=list(p.isr_nodes))
    raise AssertionError(f"no node describes {topic}")


def _high_watermark(port: int, topic: str) -> int:
    with BrokerConnection("127.0.0.1", port, request_timeout_s=5) as conn:
        resp = conn.send(ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
            ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
                ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1)])]))
    p = resp.topics[0].partitions[0]
    assert p.error_code == 0, p
    return int(p.offset)


def _follower_fetch(replica_id: int, topic_id: bytes, offset: int, replica_epoch: int = -1) -> FetchRequest:
    return FetchRequest(replica_state=FetchRequest.ReplicaState(replica_id=replica_id, replica_epoch=replica_epoch),
                        max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0,
                        session_epoch=-1, forgotten_topics_data=[], rack_id="", topics=[
                            FetchRequest.FetchTopic(topic_id=topic_id, partitions=[FetchRequest.FetchPartition(
                                partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)])])


def _controllers_answer(layout: Layout, user: str, password: str, api_key: int, version: int,
                        requests: Any, retry_codes: frozenset[int]) -> int:
    """Send each request to every controller as `user` until one answers with a code outside
    `retry_codes` (a wrong guess, a controller that is not active); that code."""
    conns = [Raw(layout.controller_port(n), user, password) for n in layout.cluster.running()]
    try:
        last = -1
        for body in requests:
            for raw in conns:
                _, resp = raw.request(api_key, version, body)
                last = int(resp.error_code)
                if last not in retry_codes:
                    return last
        return last
    finally:
        for raw in conns:
            raw.close()


# ------------------------------------------------------------------ the four findings


def test_forged_alter_partition_cannot_shrink_another_brokers_isr(layout: Layout) -> None:
    topic = "isr-kept"
    _create_topic(layout, topic)
    p = _partition(layout, topic)
    leader = p.leader_id

    def forged(broker_epoch: int, partition_epoch: int) -> AlterPartitionRequest:
        return AlterPartitionRequest(broker_id=leader, broker_epoch=broker_epoch, topics=[
            AlterPartitionRequest.TopicData(topic_id=p.topic_id, partitions=[AlterPartitionRequest.PartitionData(
                partition_index=0, leader_epoch=p.leader_epoch, partition_epoch=partition_epoch,
                leader_recovery_state=0,
                new_isr_with_epochs=[AlterPartitionRequest.BrokerState(broker_id=leader, broker_epoch=-1)])])])

    # alice may log in on the controller listener, but is no node: refused before anything is read
    code = _controllers_answer(layout, "alice", "alice-secret", ApiKey.ALTER_PARTITION, 3,
                               (forged(e, pe) for e in EPOCH_GUESSES for pe in range(0, 8)),
                               frozenset({STALE, NOT_CONTROLLER}))
    assert code == Errors.CLUSTER_AUTHORIZATION_FAILED
    assert sorted(_partition(layout, topic).isr_nodes) == sorted(p.isr_nodes)


def test_forged_write_txn_markers_on_the_client_listener_cannot_fence_an_idempotent_producer(
        layout: Layout) -> None:
    topic = "markers-refused"
    _create_topic(layout, topic)
    leader = _partition(layout, topic).leader_id
    errors: list[Any] = []
    producer = Producer({"bootstrap.servers": layout.cluster.bootstrap, "enable.idempotence": True,
                         "linger.ms": 0})

    def produce(n: int) -> None:
        for i in range(n):
            producer.produce(topic, value=b"v%d" % i, on_delivery=lambda err, _m: err and errors.append(err))
        assert producer.flush(30) == 0
        assert errors == []

    produce(5)
    with BrokerConnection("127.0.0.1", layout.client_port(leader), request_timeout_s=5) as conn:
        described = conn.send(DescribeProducersRequest(topics=[
            DescribeProducersRequest.TopicRequest(name=topic, partition_indexes=[0])]))
    states = described.topics[0].partitions[0].active_producers
    assert len(states) == 1
    pid, epoch = states[0].producer_id, states[0].producer_epoch

    raw = Raw(layout.client_port(leader))  # User:ANONYMOUS, which holds CLUSTER_ACTION: nodes are it too
    try:
        _, resp = raw.request(ApiKey.WRITE_TXN_MARKERS, 1, WriteTxnMarkersRequest(markers=[
            WriteTxnMarkersRequest.WritableTxnMarker(producer_id=pid, producer_epoch=32767, transaction_result=False,
                                                     coordinator_epoch=0, topics=[
                WriteTxnMarkersRequest.WritableTxnMarkerTopic(name=topic, partition_indexes=[0])])]))
    finally:
        raw.close()
    assert resp.markers[0].topics[0].partitions[0].error_code == Errors.CLUSTER_AUTHORIZATION_FAILED
    produce(5)  # the producer goes on at its own epoch
    with BrokerConnection("127.0.0.1", layout.client_port(leader), request_timeout_s=5) as conn:
        described = conn.send(DescribeProducersRequest(topics=[
            DescribeProducersRequest.TopicRequest(name=topic, partition_indexes=[0])]))
    assert [(s.producer_id, s.producer_epoch) for s in described.topics[0].partitions[0].active_producers] == \
        [(pid, epoch)]
    assert _high_watermark(layout.client_port(leader), topic) == 10


def test_forged_follower_fetch_on_the_client_listener_cannot_advance_the_high_watermark(layout: Layout) -> None:
    topic = "hw-held"
    _create_topic(layout, topic)
    p = _partition(layout, topic)
    leader = p.leader_id
    followers = [r for r in p.replica_nodes if r != leader]
    port = layout.client_port(leader)
    assert confluent_produce(layout.cluster.address(leader), topic, numbered(3)) == [0, 1, 2]
    wait_until(lambda: _high_watermark(port, topic) == 3, what="the high watermark over the first records")
    for f in followers:
        layout.cluster.pause(f)
    try:
        # acks=1: only the leader has these; the followers, still in the ISR, are stopped
        assert confluent_produce(layout.cluster.address(leader), topic, numbered(2), acks=1) == [3, 4]
        assert _high_watermark(port, topic) == 3
        with BrokerConnection("127.0.0.1", port, request_timeout_s=5) as conn:
            for f in followers:
                resp = conn.send(_follower_fetch(f, p.topic_id, 5), 15)
                part = resp.responses[0].partitions[0]
                assert part.error_code == Errors.TOPIC_AUTHORIZATION_FAILED, part
                assert not part.records
        assert _high_watermark(port, topic) == 3  # nothing unreplicated became visible
    finally:
        for f in followers:
            layout.cluster.resume(f)
    wait_until(lambda: _high_watermark(port, topic) == 5, what="the followers' own fetches moving the HW")


# ------------------------------------------------------------------ Kafka's other defences


def test_follower_fetch_on_the_inter_broker_listener_from_outside_the_replica_set_or_a_stale_epoch(
        layout: Layout) -> None:
    topic = "replica-checks"
    _create_topic(layout, topic)  # empty: a fetch at offset 0 is at every replica's log end

    def leader() -> tuple[Any, BrokerConnection] | None:
        p = _partition(layout, topic)
        follower = next(r for r in p.replica_nodes if r != p.leader_id)
        conn = BrokerConnection("127.0.0.1", layout.internal_port(p.leader_id), request_timeout_s=5)
        conn.connect()
        # the control: the follower's own fetch (no broker epoch, as before v15) is served
        if conn.send(_follower_fetch(follower, p.topic_id, 0), 15).responses[0].partitions[0].error_code == 0:
            return p, conn
        conn.close()
        return None

    p, conn = wait_until(leader, what="the leader serving a follower's fetch on INTERNAL")
    follower = next(r for r in p.replica_nodes if r != p.leader_id)
    with conn:
        # Partition.followerReplicaOrThrow: not a replica, no leader epoch in the request
        resp = conn.send(_follower_fetch(99, p.topic_id, 0), 15)
        assert resp.responses[0].partitions[0].error_code == Errors.NOT_LEADER_OR_FOLLOWER
        # KIP-903: a broker epoch older than the follower's registered one (registrations are
        # written after the bootstrap records, so a live broker's epoch is above 0)
        resp = conn.send(_follower_fetch(follower, p.topic_id, 0, replica_epoch=0), 15)
        assert resp.responses[0].partitions[0].error_code == Errors.NOT_LEADER_OR_FOLLOWER
    assert sorted(_partition(layout, topic).isr_nodes) == sorted(p.replica_nodes)


def test_controller_listener_refuses_raft_and_membership_rpcs_to_a_client_principal(layout: Layout) -> None:
    from pybroker.protocol.messages import (
        AllocateProducerIdsRequest,
        BrokerRegistrationRequest,
        EnvelopeRequest,
        VoteRequest,
    )

    raw = Raw(layout.controller_port(1), "alice", "alice-secret")
    try:
        _, vote = raw.request(ApiKey.VOTE, 1, VoteRequest(cluster_id=layout.cluster.cluster_id, topics=[]))
        assert vote.error_code == Errors.CLUSTER_AUTHORIZATION_FAILED
        _, fetch = raw.request(ApiKey.FETCH, 16, _follower_fetch(3, bytes(15) + b"\x01", 0))
        assert fetch.error_code == Errors.CLUSTER_AUTHORIZATION_FAILED
        _, reg = raw.request(ApiKey.BROKER_REGISTRATION, 4, BrokerRegistrationRequest(
            broker_id=2, cluster_id=layout.cluster.cluster_id, incarnation_id=bytes(16), listeners=[], features=[],
            rack=None, log_dirs=[]))
        assert reg.error_code == Errors.CLUSTER_AUTHORIZATION_FAILED
        _, ids = raw.request(ApiKey.ALLOCATE_PRODUCER_IDS, 0, AllocateProducerIdsRequest(broker_id=2,
                                                                                          broker_epoch=0))
        assert ids.error_code == Errors.CLUSTER_AUTHORIZATION_FAILED
        _, env = raw.request(ApiKey.ENVELOPE, 0, EnvelopeRequest(request_data=b"", request_principal=b"",
                                                                  client_host_address=bytes(4)))
        assert env.error_code == Errors.CLUSTER_AUTHORIZATION_FAILED
    finally:
        raw.close()
    broker = Raw(layout.controller_port(1), "broker", "broker-secret")  # a node's own login is let through
    try:
        _, ids = broker.request(ApiKey.ALLOCATE_PRODUCER_IDS, 0, AllocateProducerIdsRequest(broker_id=2,
                                                                                             broker_epoch=0))
        assert ids.error_code in (Errors.STALE_BROKER_EPOCH, Errors.NOT_CONTROLLER)
    finally:
        broker.close()


# ------------------------------------------------------------------ real clients keep working


def test_real_clients_and_transactions_work_with_the_checks_on(layout: Layout) -> None:
    topic = "clients-ok"
    _create_topic(layout, topic)
    bootstrap = layout.cluster.bootstrap
    recs = numbered(50)
    assert confluent_produce(bootstrap, topic, recs) == list(range(50))
    assert kafka_python_produce(bootstrap, topic, recs) == list(range(50, 100))
    assert_same_records(recs + recs, confluent_consume(bootstrap, topic, count=100))
    assert_same_records(recs + recs, kafka_python_consume(bootstrap, topic, count=100))

    # a transaction spans partitions led by other nodes: AddPartitionsToTxn verification and the
    # markers travel over INTERNAL, as the nodes' User:ANONYMOUS with its CLUSTER_ACTION ACL
    txn_topic = "txn-ok"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(txn_topic, 3, 3)])[txn_topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "broker-only-txn"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(30):
        producer.produce(txn_topic, value=b"t%d" % i, partition=i % 3)
    producer.commit_transaction(30)
    for part in range(3):
        got = confluent_consume(bootstrap, txn_topic, partition=part, count=10, **{"isolation.level": "read_committed"})
        assert [r.value for r in got] == [b"t%d" % i for i in range(part, 30, 3)]


# ------------------------------------------------------------------ last: on old code it stops a broker


def test_guessed_broker_heartbeat_from_a_client_principal_cannot_fence_a_broker(layout: Layout) -> None:
    victim = 2
    code = _controllers_answer(
        layout, "alice", "alice-secret", ApiKey.BROKER_HEARTBEAT, 1,
        (BrokerHeartbeatRequest(broker_id=victim, broker_epoch=e, current_metadata_offset=1 << 40, want_fence=True,
                                want_shut_down=True, offline_log_dirs=[]) for e in EPOCH_GUESSES),
        frozenset({STALE, NOT_CONTROLLER}))
    assert code == Errors.CLUSTER_AUTHORIZATION_FAILED
    with BrokerConnection("127.0.0.1", layout.client_port(1), request_timeout_s=5) as conn:
        md = conn.send(MetadataRequest(topics=[]))
    assert victim in {b.node_id for b in md.brokers}  # still registered and unfenced
    assert layout.cluster.nodes[victim].is_running()
