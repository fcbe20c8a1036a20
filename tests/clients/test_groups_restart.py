"""Groups and committed offsets across broker restarts (SIGTERM: clean shutdown; SIGKILL: no
chance to flush). Kafka keeps both in __consumer_offsets: after either restart the committed
offsets and their metadata are there for every client, commit-only groups are still listed
as Empty, and a group that was consuming when the broker went away carries on where it had
committed, skipping nothing and (its commits having completed) reading nothing twice."""

from __future__ import annotations

import signal

import pytest
from confluent_kafka import ConsumerGroupState, TopicPartition

from .adapters import confluent_admin, confluent_consumer, kafka_python_common
from .group_helpers import (
    CLASSIC_GROUP_APIS,
    CONFLUENT_GROUP_CONF,
    GROUP_BROKER_OVERRIDES,
    Members,
    all_tps,
    assert_none_skipped,
    assert_none_twice,
    confluent_describe_group,
    create_topic,
    kafka_python_committed,
    merge,
    produce_to_partitions,
    require_apis,
    wait_all_consumed,
    wait_committed,
    wait_for_assignments,
    wait_until,
)

SIGNALS = pytest.mark.parametrize(
    "sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"]
)


@pytest.fixture
def members():
    started = Members()
    yield started
    started.kill_all()


def start_node(broker_factory):
    node = broker_factory(**GROUP_BROKER_OVERRIDES)
    require_apis(node.bootstrap, CLASSIC_GROUP_APIS)
    return node


def restart(node, sig) -> None:
    code = node.stop(sig)
    assert code == (0 if sig == signal.SIGTERM else -signal.SIGKILL), node.output_tail()
    node.start()


@SIGNALS
def test_committed_offsets_and_groups_survive_restart(broker_factory, topic, members, sig):
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP
    from kafka.structs import OffsetAndMetadata

    node = start_node(broker_factory)
    create_topic(node.bootstrap, topic, 2)
    produced = produce_to_partitions(node.bootstrap, topic, range(2), 10, "r")
    g_conf, g_kp, g_sub = "conf-" + topic, "kp-" + topic, "sub-" + topic

    c = confluent_consumer(node.bootstrap, **{"group.id": g_conf})
    try:
        c.commit(
            offsets=[
                TopicPartition(topic, 0, 3, metadata="from confluent"),
                TopicPartition(topic, 1, 7),
            ],
            asynchronous=False,
        )
    finally:
        c.close()
    k = KafkaConsumer(
        **kafka_python_common(node.bootstrap), group_id=g_kp, enable_auto_commit=False
    )
    try:
        k.assign([KTP(topic, 0)])
        k.commit({KTP(topic, 0): OffsetAndMetadata(5, "from kafka-python", -1)})
    finally:
        k.close(autocommit=False)
    # A group that had a member (protocol "consumer"), which consumed and left.
    m = members.start("confluent", node.bootstrap, g_sub, [topic], CONFLUENT_GROUP_CONF, name="sub")
    wait_for_assignments([m], all_tps(topic, 2))
    wait_all_consumed([m], topic, produced)
    m.close()
    wait_committed(node.bootstrap, g_sub, topic, {0: 10, 1: 10})

    restart(node, sig)

    c = confluent_consumer(node.bootstrap, **{"group.id": g_conf})
    try:
        got = c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=15)
        assert [(tp.offset, tp.metadata or "", tp.error) for tp in got] == [
            (3, "from confluent", None),
            (7, "", None),
        ]
    finally:
        c.close()
    assert kafka_python_committed(node.bootstrap, g_kp) == {(topic, 0): (5, "from kafka-python")}
    wait_committed(node.bootstrap, g_sub, topic, {0: 10, 1: 10})

    for group, simple in ((g_conf, True), (g_kp, True), (g_sub, False)):
        desc = confluent_describe_group(node.bootstrap, group)
        assert desc.state == ConsumerGroupState.EMPTY, (group, desc.state)
        assert desc.is_simple_consumer_group == simple, group
    admin = confluent_admin(node.bootstrap)
    listed = admin.list_consumer_groups(request_timeout=15).result(timeout=20)
    states = {g.group_id: g.state for g in listed.valid}
    for group in (g_conf, g_kp, g_sub):
        assert states.get(group) == ConsumerGroupState.EMPTY, (group, states, listed.errors)

    # A new member of the commit-only group starts exactly at the committed offsets.
    more = produce_to_partitions(node.bootstrap, topic, range(2), 2, "after")
    n = members.start(
        "confluent", node.bootstrap, g_conf, [topic], CONFLUENT_GROUP_CONF, name="new"
    )
    wait_for_assignments([n], all_tps(topic, 2))
    want = {0: list(range(3, 12)), 1: list(range(7, 12))}
    wait_all_consumed([n], topic, want)
    assert sorted((p, o) for _, p, o in n.records()) == sorted(
        (p, o) for p, offs in want.items() for o in offs
    )
    assert more == {0: [10, 11], 1: [10, 11]}
    n.close()


@SIGNALS
def test_group_carries_on_across_broker_restart(broker_factory, topic, members, sig):
    """Two members consuming when the broker restarts under them: they reconnect, the group
    is Stable again with both, and every record produced before and after is consumed once."""
    node = start_node(broker_factory)
    partitions = 4
    create_topic(node.bootstrap, topic, partitions)
    group = "g-" + topic
    tps = all_tps(topic, partitions)
    a = members.start("confluent", node.bootstrap, group, [topic], CONFLUENT_GROUP_CONF, name="A")
    wait_for_assignments([a], tps)
    b = members.start("confluent", node.bootstrap, group, [topic], CONFLUENT_GROUP_CONF, name="B")
    wait_for_assignments([a, b], tps)
    produced = produce_to_partitions(node.bootstrap, topic, range(partitions), 5, "before")
    wait_all_consumed([a, b], topic, produced)
    wait_committed(node.bootstrap, group, topic, {p: 5 for p in range(partitions)})

    restart(node, sig)

    produced = merge(
        produced, produce_to_partitions(node.bootstrap, topic, range(partitions), 5, "after")
    )
    wait_all_consumed([a, b], topic, produced, timeout=60)
    assert_none_skipped([a, b], topic, produced)
    assert_none_twice([a, b], topic)
    wait_for_assignments([a, b], tps, timeout=30)
    desc = wait_until(
        lambda: (
            (d := confluent_describe_group(node.bootstrap, group)).state
            == ConsumerGroupState.STABLE
            and len(d.members) == 2
            and d
        ),
        30,
        what="the group to be Stable with both members after the restart",
    )
    assigned = set()
    for mem in desc.members:
        assigned |= {(tp.topic, tp.partition) for tp in mem.assignment.topic_partitions}
    assert assigned == tps
    wait_committed(node.bootstrap, group, topic, {p: 10 for p in range(partitions)})
    a.close()
    b.close()
