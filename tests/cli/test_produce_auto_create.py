"""`pybroker produce` creates a missing topic as kafka-console-producer.sh does: its Metadata
request allows auto-creation and the broker decides (auto.create.topics.enable), the topic
getting the broker's num.partitions; confluent-kafka reads the records back. A broker with
auto-creation off refuses, and the tool says the topic does not exist."""

from __future__ import annotations

import uuid

from confluent_kafka import Consumer, TopicPartition

from pybroker.testing import EmbeddedBroker

from .conftest import one_error_line, run_cli


def read_all(bootstrap: str, topic: str, partitions: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "r-" + uuid.uuid4().hex, "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got: list[bytes] = []
        for _ in range(100):
            msgs = c.consume(10, timeout=0.2)
            got += [m.value() for m in msgs if not m.error()]
            if len(got) >= 3:
                break
        return got
    finally:
        c.close()


def test_produce_creates_a_missing_topic_with_the_brokers_defaults(cli, broker):
    topic = "auto-" + uuid.uuid4().hex[:8]
    rc, out, err = cli("produce", "--topic", topic, stdin="a\nb\nc\n")
    assert (rc, out, err) == (0, "", "")
    rc, out, _ = cli("topics", "describe", "--topic", topic)
    assert rc == 0 and "\tPartitionCount: 3\t" in out.splitlines()[0]  # the module broker's num.partitions
    assert sorted(read_all(broker.bootstrap_servers, topic, 3)) == [b"a", b"b", b"c"]


def test_no_input_creates_nothing(cli):
    topic = "auto-" + uuid.uuid4().hex[:8]
    assert cli("produce", "--topic", topic, stdin="") == (0, "", "")
    rc, _, err = cli("topics", "describe", "--topic", topic)
    assert rc == 2 and "does not exist" in one_error_line(err)


def test_a_broker_without_auto_creation_refuses():
    with EmbeddedBroker(overrides={"auto.create.topics.enable": "false"}) as b:
        topic = "auto-" + uuid.uuid4().hex[:8]
        rc, out, err = run_cli(["produce", "--topic", topic, "--bootstrap-server", b.bootstrap_servers], "x\n")
        assert (rc, out) == (2, "") and one_error_line(err) == f"pybroker: topic '{topic}' does not exist (UNKNOWN_TOPIC_OR_PARTITION)"
        rc, _, _ = run_cli(["topics", "describe", "--topic", topic, "--bootstrap-server", b.bootstrap_servers])
        assert rc == 2
