"""Administering groups through the clients' admin APIs, as Kafka answers them:

- confluent-kafka AdminClient: list_consumer_groups, describe_consumer_groups,
  list_consumer_group_offsets, alter_consumer_group_offsets, delete_consumer_groups
  (2.16 has no delete_consumer_group_offsets);
- kafka-python KafkaAdminClient: list_groups, describe_groups, list_group_offsets,
  alter_group_offsets, reset_group_offsets, delete_group_offsets (OffsetDelete), delete_groups;
- aiokafka AIOKafkaAdminClient: list_consumer_groups, describe_consumer_groups,
  list_consumer_group_offsets.

Kafka's rules pinned here: an active group is Stable with its members, their client ids,
hosts and assignments; a commit-only group is Empty with protocol type "" (a "simple"
group); an unknown group is described as Dead with no error (DescribeGroups v0-v5); offsets
of a group with members cannot be altered by an admin (UNKNOWN_MEMBER_ID), nor deleted while
it is subscribed to the topic (GROUP_SUBSCRIBED_TO_TOPIC), nor the group deleted
(NON_EMPTY_GROUP); once Empty, all three work.
"""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)

from .adapters import (
    DEADLINE_S,
    aiokafka_common,
    confluent_admin,
    confluent_consumer,
    kafka_python_admin,
)
from .group_helpers import (
    CLASSIC_GROUP_APIS,
    CONFLUENT_GROUP_CONF,
    GROUP_ADMIN_APIS,
    GROUP_BROKER_OVERRIDES,
    Members,
    all_tps,
    confluent_committed_offsets,
    confluent_describe_group,
    create_topic,
    kafka_python_committed,
    produce_to_partitions,
    require_apis,
    wait_all_consumed,
    wait_for_assignments,
    wait_until,
)

BROKER_OVERRIDES = GROUP_BROKER_OVERRIDES
REQ = {"request_timeout": 15}


@pytest.fixture(autouse=True)
def _group_apis(broker):
    require_apis(broker.bootstrap, CLASSIC_GROUP_APIS | GROUP_ADMIN_APIS | {47: "OffsetDelete"})


@pytest.fixture
def members():
    started = Members()
    yield started
    started.kill_all()


@pytest.fixture
def active_group(broker, topic, members):
    """Two confluent members (range) of a Stable group over a 4-partition topic."""
    create_topic(broker.bootstrap, topic, 4)
    group = "active-" + topic
    produced = produce_to_partitions(broker.bootstrap, topic, range(4), 3, "a")
    conf = CONFLUENT_GROUP_CONF | {"client.id": "member-client"}
    a = members.start("confluent", broker.bootstrap, group, [topic], conf, name="A")
    b = members.start("confluent", broker.bootstrap, group, [topic], conf, name="B")
    split = wait_for_assignments([a, b], all_tps(topic, 4))
    wait_all_consumed([a, b], topic, produced)
    return group, split, (a, b)


def commit_only_group(broker, topic: str, offsets: dict[int, int], metadata: str = "") -> str:
    group = "simple-" + topic
    c = confluent_consumer(broker.bootstrap, **{"group.id": group})
    try:
        c.commit(
            offsets=[TopicPartition(topic, p, o, metadata=metadata) for p, o in offsets.items()],
            asynchronous=False,
        )
    finally:
        c.close()
    return group


# --------------------------------------------------------------------------------------------
# confluent-kafka


def test_confluent_list_and_describe_active_group(broker, topic, active_group):
    group, split, _ = active_group
    admin = confluent_admin(broker.bootstrap)
    listed = admin.list_consumer_groups(**REQ).result(timeout=20)
    assert not listed.errors, listed.errors
    mine = [g for g in listed.valid if g.group_id == group]
    assert len(mine) == 1
    assert mine[0].state == ConsumerGroupState.STABLE
    assert mine[0].is_simple_consumer_group is False

    only_stable = admin.list_consumer_groups(states={ConsumerGroupState.STABLE}, **REQ).result(
        timeout=20
    )
    assert group in {g.group_id for g in only_stable.valid}
    only_empty = admin.list_consumer_groups(states={ConsumerGroupState.EMPTY}, **REQ).result(
        timeout=20
    )
    assert group not in {g.group_id for g in only_empty.valid}

    desc = admin.describe_consumer_groups([group], **REQ)[group].result(timeout=20)
    assert desc.group_id == group
    assert desc.state == ConsumerGroupState.STABLE
    assert desc.partition_assignor == "range"
    assert desc.is_simple_consumer_group is False
    assert desc.coordinator.id == broker.node_id
    assert len(desc.members) == 2
    described = {}
    for m in desc.members:
        assert m.client_id == "member-client"
        assert m.host.lstrip("/") == "127.0.0.1", m.host
        assert m.member_id.startswith("member-client-"), m.member_id  # Kafka: client id + uuid
        described[m.member_id] = frozenset(
            (tp.topic, tp.partition) for tp in m.assignment.topic_partitions
        )
    assert sorted(described.values(), key=sorted) == sorted(split.values(), key=sorted)


def test_confluent_describe_unknown_group_is_dead(broker):
    desc = confluent_describe_group(broker.bootstrap, "no-such-group-here")
    assert desc.state == ConsumerGroupState.DEAD
    assert desc.members == []


def test_confluent_offsets_list_alter_delete(broker, topic):
    create_topic(broker.bootstrap, topic, 3)
    produce_to_partitions(broker.bootstrap, topic, range(3), 10, "o")
    group = commit_only_group(broker, topic, {0: 2, 1: 4}, metadata="m")
    admin = confluent_admin(broker.bootstrap)

    listed = confluent_committed_offsets(broker.bootstrap, group)
    assert {k: v.offset for k, v in listed.items()} == {(topic, 0): 2, (topic, 1): 4}
    # Asking for named partitions includes the uncommitted one, at OFFSET_INVALID.
    named = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(3)])], **REQ
    )[group].result(timeout=20)
    assert [(tp.partition, tp.offset) for tp in named.topic_partitions] == [
        (0, 2),
        (1, 4),
        (2, -1001),
    ]

    altered = admin.alter_consumer_group_offsets(
        [
            ConsumerGroupTopicPartitions(
                group, [TopicPartition(topic, 0, 9), TopicPartition(topic, 2, 1)]
            )
        ],
        **REQ,
    )[group].result(timeout=20)
    assert sorted((tp.partition, tp.offset, tp.error) for tp in altered.topic_partitions) == [
        (0, 9, None),
        (2, 1, None),
    ]
    listed = confluent_committed_offsets(broker.bootstrap, group)
    assert {k: v.offset for k, v in listed.items()} == {(topic, 0): 9, (topic, 1): 4, (topic, 2): 1}
    # The group's next member starts from the altered offset.
    c = confluent_consumer(broker.bootstrap, **{"group.id": group})
    try:
        c.assign([TopicPartition(topic, 0)])
        msg = wait_until(
            lambda: (m := c.poll(0.2)) is not None and m.error() is None and m,
            15,
            what="a record at the altered offset",
        )
        assert (msg.offset(), msg.value()) == (9, b"o-0-9")
    finally:
        c.close()

    result = admin.delete_consumer_groups([group], **REQ)[group].result(timeout=20)
    assert result is None
    assert confluent_committed_offsets(broker.bootstrap, group) == {}
    assert confluent_describe_group(broker.bootstrap, group).state == ConsumerGroupState.DEAD
    listed = admin.list_consumer_groups(**REQ).result(timeout=20)
    assert group not in {g.group_id for g in listed.valid}
    # Deleting it again: GROUP_ID_NOT_FOUND.
    with pytest.raises(KafkaException) as info:
        admin.delete_consumer_groups([group], **REQ)[group].result(timeout=20)
    assert info.value.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND


def test_confluent_active_group_cannot_be_altered_or_deleted(broker, topic, active_group):
    group, _, (a, b) = active_group
    admin = confluent_admin(broker.bootstrap)
    with pytest.raises(KafkaException) as info:
        admin.delete_consumer_groups([group], **REQ)[group].result(timeout=20)
    assert info.value.args[0].code() == KafkaError.NON_EMPTY_GROUP

    try:
        res = admin.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 0)])], **REQ
        )[group].result(timeout=20)
        codes = [tp.error.code() if tp.error else None for tp in res.topic_partitions]
    except KafkaException as exc:
        codes = [exc.args[0].code()]
    assert codes == [KafkaError.UNKNOWN_MEMBER_ID], codes

    # Once the members leave, the group is Empty and can be deleted.
    a.close()
    b.close()
    wait_until(
        lambda: confluent_describe_group(broker.bootstrap, group).state == ConsumerGroupState.EMPTY,
        15,
        what="the group to become Empty",
    )
    assert admin.delete_consumer_groups([group], **REQ)[group].result(timeout=20) is None
    assert confluent_describe_group(broker.bootstrap, group).state == ConsumerGroupState.DEAD


# --------------------------------------------------------------------------------------------
# kafka-python


def test_kafka_python_list_and_describe(broker, topic, active_group):
    group, split, _ = active_group
    simple = commit_only_group(broker, topic, {0: 1})
    admin = kafka_python_admin(broker.bootstrap)
    try:
        listed = {g["group_id"]: g for g in admin.list_groups()}
        assert listed[group]["protocol_type"] == "consumer"
        assert listed[group]["group_state"] == "Stable"
        assert listed[simple]["protocol_type"] == ""
        assert listed[simple]["group_state"] == "Empty"
        filtered = {g["group_id"] for g in admin.list_groups(states_filter=["Empty"])}
        assert simple in filtered and group not in filtered

        desc = admin.describe_groups([group, simple, "kp-unknown-group"])
        active = desc[group]
        assert active["group_state"] == "Stable"
        assert active["protocol_type"] == "consumer"
        assert active["protocol_data"] == "range"
        assert len(active["members"]) == 2
        seen = set()
        for m in active["members"]:
            assert m["client_id"] == "member-client"
            assert m["member_metadata"]["topics"] == [topic], m["member_metadata"]
            assigned = m["member_assignment"]["assigned_partitions"]
            seen.add(frozenset((t["topic"], p) for t in assigned for p in t["partitions"]))
        assert seen == set(split.values())
        assert desc[simple]["group_state"] == "Empty"
        assert desc[simple]["protocol_type"] == "" and desc[simple]["members"] == []
        assert desc["kp-unknown-group"]["group_state"] == "Dead"
    finally:
        admin.close()


def test_kafka_python_offsets_alter_reset_delete(broker, topic):
    from kafka import TopicPartition as KTP
    from kafka.admin import OffsetSpec
    from kafka.errors import NoError
    from kafka.structs import OffsetAndMetadata

    create_topic(broker.bootstrap, topic, 2)
    produce_to_partitions(broker.bootstrap, topic, range(2), 8, "k")
    group = "kp-" + topic
    admin = kafka_python_admin(broker.bootstrap)
    tp0, tp1 = KTP(topic, 0), KTP(topic, 1)
    try:
        res = admin.alter_group_offsets(
            group, {tp0: OffsetAndMetadata(3, "alter-meta", -1), tp1: OffsetAndMetadata(5, "", -1)}
        )
        assert res == {tp0: NoError, tp1: NoError}, res
        assert kafka_python_committed(broker.bootstrap, group) == {
            (topic, 0): (3, "alter-meta"),
            (topic, 1): (5, ""),
        }
        reset = admin.reset_group_offsets(group, {tp0: OffsetSpec.EARLIEST, tp1: OffsetSpec.LATEST})
        assert {tp: (r["error"], r["offset"]) for tp, r in reset.items()} == {
            tp0: (NoError, 0),
            tp1: (NoError, 8),
        }
        assert {k: v[0] for k, v in kafka_python_committed(broker.bootstrap, group).items()} == {
            (topic, 0): 0,
            (topic, 1): 8,
        }
        deleted = admin.delete_group_offsets(group, [tp1])
        assert deleted == {tp1: NoError}, deleted
        assert {k: v[0] for k, v in kafka_python_committed(broker.bootstrap, group).items()} == {
            (topic, 0): 0
        }
        # kafka-python reports each group's outcome by name: "OK" or the error class's name.
        assert dict(admin.delete_groups([group])) == {group: "OK"}
        assert kafka_python_committed(broker.bootstrap, group) == {}
        assert {g["group_id"] for g in admin.list_groups()}.isdisjoint({group})
    finally:
        admin.close()


def test_kafka_python_delete_offsets_of_subscribed_group_refused(broker, topic, active_group):
    from kafka import TopicPartition as KTP
    from kafka.errors import GroupSubscribedToTopicError, NonEmptyGroupError

    group, _, _ = active_group
    admin = kafka_python_admin(broker.bootstrap)
    try:
        try:
            res = admin.delete_group_offsets(group, [KTP(topic, 0)])
            errors = list(res.values())
        except GroupSubscribedToTopicError as exc:
            errors = [type(exc)]
        assert errors == [GroupSubscribedToTopicError], errors
        assert dict(admin.delete_groups([group])) == {group: NonEmptyGroupError.__name__}
    finally:
        admin.close()


# --------------------------------------------------------------------------------------------
# aiokafka


def test_aiokafka_admin_lists_describes_and_reads_offsets(broker, topic, active_group):
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.structs import TopicPartition as ATP

    group, split, _ = active_group
    simple = commit_only_group(broker, topic, {0: 2, 3: 1}, metadata="aio-meta")

    async def run():
        admin = AIOKafkaAdminClient(**aiokafka_common(broker.bootstrap))
        await asyncio.wait_for(admin.start(), DEADLINE_S)
        try:
            listed = await asyncio.wait_for(admin.list_consumer_groups(), DEADLINE_S)
            # One group per call: aiokafka 0.14 decodes DescribeGroups v3 with the v2 schema (no
            # authorized_operations), which misreads every group after the first (FINDINGS.md).
            described = [
                resp
                for g in (group, simple)
                for resp in await asyncio.wait_for(admin.describe_consumer_groups([g]), DEADLINE_S)
            ]
            offsets = await asyncio.wait_for(admin.list_consumer_group_offsets(simple), DEADLINE_S)
            return listed, described, offsets
        finally:
            await asyncio.wait_for(admin.close(), DEADLINE_S)

    listed, described, offsets = asyncio.run(run())
    kinds = {g[0]: g[1] for g in listed}
    assert kinds.get(group) == "consumer" and kinds.get(simple) == "", kinds
    groups = {}
    for resp in described:
        for g in resp.groups:
            groups[g[1]] = g  # (error_code, group_id, state, protocol_type, protocol, members, ...)
    assert groups[group][0] == 0 and groups[group][2] == "Stable"
    assert groups[group][3] == "consumer" and groups[group][4] == "range"
    assert len(groups[group][5]) == 2
    assert groups[simple][2] == "Empty" and list(groups[simple][5]) == []
    # librdkafka wrote the metadata with a trailing NUL (FINDINGS.md); the broker keeps bytes.
    assert {
        (tp.topic, tp.partition): (om.offset, om.metadata.rstrip("\x00"))
        for tp, om in offsets.items()
    } == {
        (topic, 0): (2, "aio-meta"),
        (topic, 3): (1, "aio-meta"),
    }
    assert isinstance(next(iter(offsets)), ATP)
