"""A real 3-node KRaft cluster (three pybroker processes, each broker and controller) judged by
confluent-kafka, kafka-python and aiokafka: membership, placement across nodes, produce and
consume on every node, forwarding of admin requests, DescribeQuorum, leader hints."""

from __future__ import annotations

import uuid

import pytest

from pybroker.client.connection import BrokerConnection
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    DescribeClusterRequest,
    FetchRequest,
    MetadataRequest,
    ProduceRequest,
)
from pybroker.records.batch import build_batch
from tests.clients import adapters
from tests.clients.helpers import Rec

from .harness import Cluster, wait_until


def new_topic(prefix: str = "c") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def confluent_create(bootstrap: str, name: str, partitions: int, rf: int) -> None:
    from confluent_kafka.admin import NewTopic

    admin = adapters.confluent_admin(bootstrap)
    futures = admin.create_topics([NewTopic(name, partitions, rf)], operation_timeout=20)
    futures[name].result(timeout=30)


def partition_leaders(bootstrap: str, name: str) -> dict[int, tuple[int, list[int], list[int]]]:
    """partition -> (leader, replicas, isr) as confluent-kafka sees them."""
    admin = adapters.confluent_admin(bootstrap)
    md = admin.list_topics(name, timeout=10)
    return {p: (pm.leader, list(pm.replicas), list(pm.isrs)) for p, pm in md.topics[name].partitions.items()}


def test_every_node_is_a_registered_unfenced_broker_in_metadata_and_describe_cluster(cluster: Cluster):
    admin = adapters.confluent_admin(cluster.bootstrap)
    # each node follows the metadata log: the last node's unfencing reaches the others a moment later
    md = wait_until(lambda: (lambda md: md if sorted(md.brokers) == [1, 2, 3] else None)(admin.list_topics(timeout=10)),
                    20, "three brokers in Metadata")
    assert {(b.host, b.port) for b in md.brokers.values()} == {("127.0.0.1", p) for p in cluster.client_ports}
    # a KRaft broker names a random live broker as the controller (it forwards admin requests)
    assert md.controller_id in (1, 2, 3)
    for node_id in (1, 2, 3):
        host, port = cluster.address(node_id).split(":")
        def describe(host: str = host, port: str = port) -> object:
            with BrokerConnection(host, int(port)) as conn:
                resp = conn.send(DescribeClusterRequest(include_cluster_authorized_operations=False))
            return resp if sorted(b.broker_id for b in resp.brokers) == [1, 2, 3] else None

        resp = wait_until(describe, 20, f"node {node_id} to list three brokers")
        assert resp.error_code == 0 and resp.controller_id in (1, 2, 3)


def test_describe_quorum_reports_the_leader_and_every_voter_from_any_node(cluster: Cluster):
    leaders = set()
    for node_id in (1, 2, 3):
        resp = cluster.describe_quorum(node_id)
        p = resp.topics[0].partitions[0]
        leaders.add(p.leader_id)
        assert p.leader_epoch >= 1 and p.high_watermark > 0
        assert sorted(v.replica_id for v in p.current_voters) == [1, 2, 3]
        leader_state = next(v for v in p.current_voters if v.replica_id == p.leader_id)
        assert leader_state.log_end_offset >= p.high_watermark
        # the followers fetch: their log end offsets are known and not behind by much
        assert all(v.log_end_offset >= 0 for v in p.current_voters)
        assert [n.node_id for n in resp.nodes] == [1, 2, 3]
        assert {(lst.host, lst.port) for n in resp.nodes for lst in n.listeners} == {
            ("127.0.0.1", port) for port in cluster.controller_ports}
    assert len(leaders) == 1  # forwarded to the one leader, whichever node was asked


def test_topics_spread_over_the_nodes_and_every_client_produces_and_consumes_on_each(cluster: Cluster):
    topic = new_topic("spread")
    confluent_create(cluster.address(3), topic, 6, 3)  # through node 3, whoever the controller is
    def all_led() -> dict[int, tuple[int, list[int], list[int]]] | None:
        found = partition_leaders(cluster.bootstrap, topic)
        return found if len(found) == 6 and all(leader >= 0 for leader, _, _ in found.values()) else None

    leaders = wait_until(all_led, what="leaders of the new topic")
    assert {leader for leader, _, _ in leaders.values()} == {1, 2, 3}, leaders
    for leader, replicas, isr in leaders.values():
        assert sorted(replicas) == [1, 2, 3] and replicas[0] == leader
        # a new partition's ISR is all its replicas (issue 9: followers replicate)
        assert sorted(isr) == [1, 2, 3]
    for node in cluster.nodes.values():  # every replica's log exists on its node
        wait_until(lambda node=node: all((node.log_dir / f"{topic}-{p}").is_dir() for p in range(6)), 20,
                   f"node {node.node_id}'s replica logs")
    recs = {p: [Rec(f"k{p}".encode(), f"v{p}-{i}".encode()) for i in range(5)] for p in range(6)}
    for p in range(6):
        client = p % 3
        if client == 0:
            adapters.confluent_produce(cluster.bootstrap, topic, recs[p], partition=p)
        elif client == 1:
            adapters.kafka_python_produce(cluster.bootstrap, topic, recs[p], partition=p)
        else:
            adapters.aiokafka_produce(cluster.bootstrap, topic, recs[p], partition=p)
    for p in range(6):
        for consume in (adapters.confluent_consume, adapters.kafka_python_consume, adapters.aiokafka_consume):
            got = consume(cluster.bootstrap, topic, partition=p, count=5)
            assert [(r.key, r.value) for r in got] == [(r.key, r.value) for r in recs[p]], (consume, p)


def test_a_replication_factor_above_the_unfenced_brokers_is_refused(cluster: Cluster):
    from confluent_kafka.admin import NewTopic

    admin = adapters.confluent_admin(cluster.address(2))
    topic = new_topic("rf4")
    futures = admin.create_topics([NewTopic(topic, 1, 4)], operation_timeout=20)
    with pytest.raises(Exception) as exc:
        futures[topic].result(timeout=30)
    assert exc.value.args[0].code() == Errors.INVALID_REPLICATION_FACTOR.value
    assert "only 3 broker(s) are registered and unfenced" in exc.value.args[0].str()


def test_admin_requests_from_every_node_reach_the_active_controller(cluster: Cluster):
    from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions, NewTopic

    def seen(node_id: int, names: list[str], partitions: int) -> bool:
        host, port = cluster.address(node_id).split(":")
        with BrokerConnection(host, int(port)) as conn:
            md = conn.send(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in names],
                                           allow_auto_topic_creation=False))
        return all(t.error_code == 0 and len(t.partitions) == partitions for t in md.topics)

    created = []
    for node_id in (1, 2, 3):
        admin = adapters.kafka_python_admin(cluster.address(node_id))
        try:
            name = new_topic(f"from{node_id}")
            admin.create_topics([NewTopic(name, 1, 3)])
            # kafka-python asks any node about the topic before altering it: every node follows
            # the metadata log, a moment behind the controller
            wait_until(lambda name=name: all(seen(n, [name], 1) for n in (1, 2, 3)), 20, f"{name} everywhere")
            admin.create_partitions({name: NewPartitions(3)})
            result = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, name,
                                                         configs={"retention.ms": "12345"})])
            assert result == {"topic": {name: "OK"}}, result
            created.append(name)
        finally:
            admin.close()
    for node_id in (1, 2, 3):  # every node's image has every change (followed from the metadata log)
        wait_until(lambda node_id=node_id: seen(node_id, created, 3), 20, f"node {node_id} to see the new topics")
    from confluent_kafka.admin import ConfigResource as CR

    admin = adapters.confluent_admin(cluster.address(1))
    for name in created:
        def retention(name: str = name) -> bool:
            res = admin.describe_configs([CR("topic", name)])
            return list(res.values())[0].result(timeout=10)["retention.ms"].value == "12345"

        wait_until(retention, 20, f"node 1 to see {name}'s retention.ms")
    deleter = adapters.confluent_admin(cluster.address(2))
    for f in deleter.delete_topics(created, operation_timeout=20).values():
        f.result(timeout=30)


def test_a_produce_to_a_node_that_does_not_lead_gets_not_leader_with_the_current_leader(cluster: Cluster):
    topic = new_topic("hint")
    confluent_create(cluster.bootstrap, topic, 1, 2)
    leader, replicas = wait_until(lambda: (lambda ls: (ls[0][0], ls[0][1]) if ls[0][0] >= 0 else None)(
        partition_leaders(cluster.bootstrap, topic)), what="a leader")
    # the node holding no replica: a follower would serve the consumer Fetch v16 below itself (KIP-392)
    other = next(n for n in (1, 2, 3) if n not in replicas)
    host, port = cluster.address(other).split(":")

    def produce() -> object:
        with BrokerConnection(host, int(port)) as conn:
            batch = build_batch([(0, None, b"x", ())])
            resp = conn.send(ProduceRequest(acks=1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
                name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)])]),
                version=11)
        # until `other` has applied the topic's records it does not know the partition at all
        code = resp.responses[0].partition_responses[0].error_code
        return resp if code != Errors.UNKNOWN_TOPIC_OR_PARTITION else None

    resp = wait_until(produce, 20, f"node {other} to know the topic")
    part = resp.responses[0].partition_responses[0]
    assert part.error_code == Errors.NOT_LEADER_OR_FOLLOWER
    # KIP-951: where the leader is, so the client reroutes without a Metadata round trip
    assert part.current_leader.leader_id == leader and part.current_leader.leader_epoch >= 0
    assert [(n.node_id, n.host, n.port) for n in resp.node_endpoints] == [
        (leader, "127.0.0.1", cluster.client_ports[leader - 1])]
    # the same for a Fetch (v16+)
    with BrokerConnection(host, int(port)) as conn:
        fetched = conn.send(FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                                         isolation_level=0, session_id=0, session_epoch=-1, topics=[
                                             FetchRequest.FetchTopic(topic_id=topic_id(cluster, topic), partitions=[
                                                 FetchRequest.FetchPartition(partition=0, current_leader_epoch=-1,
                                                                             fetch_offset=0, log_start_offset=-1,
                                                                             partition_max_bytes=1 << 20)])],
                                         forgotten_topics_data=[], rack_id=""), version=16)
    fp = fetched.responses[0].partitions[0]
    assert fp.error_code == Errors.NOT_LEADER_OR_FOLLOWER and fp.current_leader.leader_id == leader
    assert [n.node_id for n in fetched.node_endpoints] == [leader]


def topic_id(cluster: Cluster, name: str) -> bytes:
    host, port = cluster.address(1).split(":")
    with BrokerConnection(host, int(port)) as conn:
        md = conn.send(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=name)],
                                       allow_auto_topic_creation=False), version=12)
    return bytes(md.topics[0].topic_id)
