"""Separate roles, as Kafka runs them: one controller-only node (`process.roles=controller`, a
controller listener and nothing else) and two broker-only nodes (observers of the quorum, which
register and heartbeat over the controller listener and forward admin requests to it)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from pybroker.client.connection import BrokerConnection
from pybroker.log.meta_properties import random_uuid_str
from pybroker.protocol.messages import DescribeQuorumRequest
from tests.clients import adapters
from tests.clients.broker import BrokerProcess
from tests.clients.helpers import Rec

from .harness import FAST, free_ports, wait_until


def test_a_controller_only_node_serves_two_broker_only_nodes(tmp_path: Path):
    from confluent_kafka.admin import NewTopic

    controller_port, port2, port3 = free_ports(3)
    common = {
        "cluster.id": random_uuid_str(), "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "offsets.topic.replication.factor": "2", "offsets.topic.num.partitions": "4",
        "group.initial.rebalance.delay.ms": "0", **FAST,
    }
    controller = BrokerProcess(tmp_path / "c1", node_id=1, overrides={
        **common, "process.roles": "controller", "listeners": f"CONTROLLER://127.0.0.1:{controller_port}"})
    brokers = [BrokerProcess(tmp_path / f"b{i}", node_id=i, overrides={
        **common, "process.roles": "broker", "listeners": f"PLAINTEXT://127.0.0.1:{port}"})
        for i, port in ((2, port2), (3, port3))]
    nodes = [controller, *brokers]
    try:
        for n in nodes:
            n.launch()
        for n in nodes:
            n.await_listening()
        bootstrap = f"127.0.0.1:{port2},127.0.0.1:{port3}"
        admin = adapters.confluent_admin(bootstrap)
        # only brokers are brokers: the controller-only node is not in Metadata
        wait_until(lambda: sorted(admin.list_topics(timeout=10).brokers) == [2, 3], 20, "two brokers")
        topic = f"roles-{uuid.uuid4().hex[:8]}"
        admin.create_topics([NewTopic(topic, 4, 2)], operation_timeout=20)[topic].result(timeout=30)
        md = wait_until(lambda: (lambda md: md if len(md.topics[topic].partitions) == 4 and all(
            pm.leader in (2, 3) for pm in md.topics[topic].partitions.values()) else None)(
                admin.list_topics(topic, timeout=10)), 20, "leaders on the brokers")
        assert {pm.leader for pm in md.topics[topic].partitions.values()} == {2, 3}
        recs = [Rec(b"k", f"v{i}".encode()) for i in range(5)]
        for p in range(4):
            adapters.confluent_produce(bootstrap, topic, recs, partition=p)
            got = adapters.kafka_python_consume(bootstrap, topic, partition=p, count=5)
            assert [r.value for r in got] == [r.value for r in recs]
        # DescribeQuorum via a broker: the controller is the one voter, the brokers its observers
        with BrokerConnection("127.0.0.1", port2) as conn:
            resp = conn.send(DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
                topic_name="__cluster_metadata", partitions=[DescribeQuorumRequest.PartitionData(partition_index=0)])]))
        p = resp.topics[0].partitions[0]
        assert p.leader_id == 1 and [v.replica_id for v in p.current_voters] == [1]
        assert sorted(o.replica_id for o in p.observers) == [2, 3]
        assert all(0 <= o.log_end_offset <= p.high_watermark + 100 for o in p.observers)
        # a consumer group: __consumer_offsets is created through the controller
        consumer = adapters.confluent_consumer(bootstrap, **{"group.id": "roles-g", "auto.offset.reset": "earliest"})
        consumer.subscribe([topic])
        got_count, deadline = 0, time.monotonic() + 30
        while got_count < 20 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got_count += 1
        consumer.close()
        assert got_count == 20
    finally:
        for n in nodes:
            n.close()


def test_kafkas_quickstart_a_standalone_formatted_node_with_bootstrap_servers(tmp_path: Path):
    """Kafka 4's config/server.properties: controller.quorum.bootstrap.servers instead of voters,
    formatted with `storage format --standalone` (the voter set in the bootstrap snapshot)."""
    import io

    from pybroker.cli.storage import main as storage

    client, controller_port = free_ports(2)
    props = {
        "process.roles": "broker,controller", "node.id": "1",
        "controller.quorum.bootstrap.servers": f"127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{client},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{client},CONTROLLER://127.0.0.1:{controller_port}",
        "controller.listener.names": "CONTROLLER", "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(tmp_path / "data"),
        "offsets.topic.replication.factor": "1", "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
    }
    config = tmp_path / "server.properties"
    config.write_text("\n".join(f"{k}={v}" for k, v in props.items()) + "\n")
    out, err = io.StringIO(), io.StringIO()
    assert storage(["format", "--standalone", "-t", random_uuid_str(), "-c", str(config)], out, err) == 0, err.getvalue()
    node = BrokerProcess(tmp_path / "data", node_id=1, overrides=props)
    node.port = client
    try:
        node.start()
        with BrokerConnection("127.0.0.1", client) as conn:
            resp = conn.send(DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
                topic_name="__cluster_metadata", partitions=[DescribeQuorumRequest.PartitionData(partition_index=0)])]))
        p = resp.topics[0].partitions[0]
        assert p.leader_id == 1 and [v.replica_id for v in p.current_voters] == [1]
        assert [(n.node_id, [(lst.name, lst.port) for lst in n.listeners]) for n in resp.nodes] == [
            (1, [("CONTROLLER", controller_port)])]
        topic = f"quick-{uuid.uuid4().hex[:6]}"
        adapters.confluent_produce(f"127.0.0.1:{client}", topic, [Rec(b"k", b"v")], partition=0)
        assert [r.value for r in adapters.confluent_consume(f"127.0.0.1:{client}", topic, count=1)] == [b"v"]
    finally:
        node.close()


def test_a_node_formatted_for_another_cluster_refuses_to_join(tmp_path: Path):
    controller_port, client1, client2 = free_ports(3)
    common = {"controller.quorum.voters": f"1@127.0.0.1:{controller_port}", "controller.listener.names": "CONTROLLER",
              "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT", **FAST}
    first = BrokerProcess(tmp_path / "n1", node_id=1, overrides={
        **common, "cluster.id": random_uuid_str(), "offsets.topic.replication.factor": "1",
        "listeners": f"PLAINTEXT://127.0.0.1:{client1},CONTROLLER://127.0.0.1:{controller_port}"})
    stranger = BrokerProcess(tmp_path / "n2", node_id=2, overrides={
        **common, "cluster.id": random_uuid_str(), "process.roles": "broker",
        "listeners": f"PLAINTEXT://127.0.0.1:{client2}"})
    try:
        first.start()
        stranger.launch()
        assert stranger.proc is not None
        assert stranger.proc.wait(timeout=60) == 2
        lines = [ln for ln in stranger.output_tail(200).splitlines() if ln.startswith("pybroker:")]
        assert len(lines) == 1 and "INCONSISTENT_CLUSTER_ID" in lines[0], stranger.output_tail(40)
    finally:
        stranger.close()
        first.close()
