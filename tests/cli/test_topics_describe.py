"""`pybroker topics describe` and `topics alter --partitions` against a live node: the lines
kafka-topics.sh --describe prints (scripts grep them), checked field by field against what
confluent-kafka's AdminClient reports, its partition filters, and CreatePartitions with
Kafka's errors. The 3-node cases (Isr, under-replicated) are in test_cluster_tools.py."""

from __future__ import annotations

import base64

from confluent_kafka.admin import AdminClient as RdAdmin
from confluent_kafka.admin import ConfigResource, ResourceType

from .conftest import one_error_line


def rd_describe(bootstrap: str, topic: str):  # type: ignore[no-untyped-def]
    admin = RdAdmin({"bootstrap.servers": bootstrap})
    from confluent_kafka import TopicCollection
    return admin.describe_topics(TopicCollection([topic]))[topic].result(30)


def rd_non_default_configs(bootstrap: str, topic: str) -> str:
    admin = RdAdmin({"bootstrap.servers": bootstrap})
    res = ConfigResource(ResourceType.TOPIC, topic)
    cfg = admin.describe_configs([res])[res].result(30)
    return ",".join(f"{k}={e.value}" for k, e in sorted(cfg.items()) if not e.is_default)


def test_describe_prints_kafkas_topic_and_partition_lines(cli, broker, topic):
    assert cli("configs", "alter", "--topic", topic, "--add-config", "retention.ms=123456")[0] == 0
    rc, out, err = cli("topics", "describe", "--topic", topic)
    assert (rc, err) == (0, "")
    lines = out.splitlines()
    rd = rd_describe(broker.bootstrap_servers, topic)
    raw = b"".join(v.to_bytes(8, "big", signed=True) for v in (
        rd.topic_id.get_most_significant_bits(), rd.topic_id.get_least_significant_bits()))
    topic_id = base64.urlsafe_b64encode(raw).rstrip(b"=").decode()  # Kafka's Uuid.toString (url-safe)
    configs = rd_non_default_configs(broker.bootstrap_servers, topic)
    assert "retention.ms=123456" in configs.split(",")
    assert lines[0] == (f"Topic: {topic}\tTopicId: {topic_id}\tPartitionCount: 3\tReplicationFactor: 1"
                        f"\tConfigs: {configs}")
    expected = [f"\tTopic: {topic}\tPartition: {p.id}\tLeader: {p.leader.id}"
                f"\tReplicas: {','.join(str(r.id) for r in p.replicas)}\tIsr: {','.join(str(r.id) for r in p.isr)}"
                "\tElr: \tLastKnownElr: " for p in sorted(rd.partitions, key=lambda p: p.id)]
    assert lines[1:] == expected


def test_partition_filters_pick_partitions_as_kafka_does(cli, topic):
    # one node, replication factor 1, min.insync.replicas 1: every partition is at min ISR,
    # none is under-replicated, under min ISR or unavailable; filters drop the topic line
    rc, out, _ = cli("topics", "describe", "--topic", topic, "--at-min-isr-partitions")
    assert rc == 0 and [line.split("\t")[2] for line in out.splitlines()] == [
        "Partition: 0", "Partition: 1", "Partition: 2"]
    assert all(line.startswith(f"\tTopic: {topic}\t") for line in out.splitlines())
    for flag in ("--under-replicated-partitions", "--under-min-isr-partitions", "--unavailable-partitions"):
        assert cli("topics", "describe", "--topic", topic, flag) == (0, "", "")
    assert cli("configs", "alter", "--topic", topic, "--add-config", "min.insync.replicas=2")[0] == 0
    rc, out, _ = cli("topics", "describe", "--topic", topic, "--under-min-isr-partitions")
    assert rc == 0 and len(out.splitlines()) == 3
    assert cli("topics", "describe", "--topic", topic, "--at-min-isr-partitions") == (0, "", "")


def test_topics_with_overrides_prints_only_overriding_topics(cli, topic):
    rc, out, _ = cli("topics", "describe", "--topic", topic, "--topics-with-overrides")
    plain = out
    assert cli("configs", "alter", "--topic", topic, "--add-config", "retention.ms=5000")[0] == 0
    rc, out, _ = cli("topics", "describe", "--topic", topic, "--topics-with-overrides")
    assert rc == 0 and len(out.splitlines()) == 1 and out.startswith(f"Topic: {topic}\t")
    assert "retention.ms=5000" in out and "retention.ms=5000" not in plain


def test_alter_adds_partitions_and_refuses_fewer_or_equal_with_kafkas_message(cli, broker, topic):
    assert cli("topics", "alter", "--topic", topic, "--partitions", "5") == (0, "", "")
    assert len(rd_describe(broker.bootstrap_servers, topic).partitions) == 5
    rc, _, err = cli("topics", "alter", "--topic", topic, "--partitions", "5")
    assert rc == 2 and one_error_line(err) == "pybroker: Topic already has 5 partitions. (INVALID_PARTITIONS)"
    rc, _, err = cli("topics", "alter", "--topic", topic, "--partitions", "2")
    assert rc == 2 and one_error_line(err) == (
        "pybroker: Topic currently has 5 partitions, which is higher than the requested 2. (INVALID_PARTITIONS)")
    rc, out, _ = cli("topics", "describe", "--topic", topic)
    assert "PartitionCount: 5\t" in out.splitlines()[0]


def test_alter_of_a_missing_topic(cli):
    rc, _, err = cli("topics", "alter", "--topic", "no-such-topic-x", "--partitions", "3")
    assert rc == 2 and "does not exist" in one_error_line(err)
    assert cli("topics", "alter", "--topic", "no-such-topic-x", "--partitions", "3", "--if-exists") == (0, "", "")


def test_topic_may_be_a_regular_expression_as_in_kafka(cli, topic):
    prefix = topic[:-3]
    rc, out, _ = cli("topics", "describe", "--topic", prefix + ".*")
    heads = [line.split("\t")[0] for line in out.splitlines() if line.startswith("Topic: ")]
    assert rc == 0 and f"Topic: {topic}" in heads and all(h.startswith(f"Topic: {prefix}") for h in heads)
    rc, out, _ = cli("topics", "describe", "--topic", f"{topic}|no-such-topic", "--at-min-isr-partitions")
    assert rc == 0 and len(out.splitlines()) == 3
    rc, _, err = cli("topics", "describe", "--topic", "no-such-.*-here")
    assert rc == 2 and "does not exist" in one_error_line(err)
