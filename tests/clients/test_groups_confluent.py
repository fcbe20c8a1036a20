"""Consumer groups with confluent-kafka 2.16 (librdkafka 2.16), classic protocol.

Several member processes subscribe() to one topic: partitions are spread across them and
move when a member joins, leaves cleanly (close(): commit on revoke + LeaveGroup) or dies
(SIGKILL: the coordinator expires it after session.timeout.ms). The group as a whole never
skips a record; in clean handovers it never consumes one twice. Eager (range, roundrobin) and
cooperative-sticky (incremental assign) rebalancing; static membership; committed offsets
with metadata; a commit-only group is "Empty", not unknown.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import (
    OFFSET_INVALID,
    ConsumerGroupState,
    KafkaError,
    TopicPartition,
)

from .adapters import confluent_admin, confluent_consumer
from .conftest import unique_topic
from .group_helpers import (
    CLASSIC_GROUP_APIS,
    CONFLUENT_GROUP_CONF,
    GROUP_BROKER_OVERRIDES,
    Members,
    Trickle,
    all_tps,
    assert_never_emptied,
    assert_none_skipped,
    assert_none_twice,
    confluent_committed_offsets,
    confluent_describe_group,
    create_topic,
    merge,
    produce_to_partitions,
    require_apis,
    wait_all_consumed,
    wait_for_assignments,
    wait_until,
)

BROKER_OVERRIDES = GROUP_BROKER_OVERRIDES


@pytest.fixture(autouse=True)
def _classic_group_apis(broker):
    require_apis(broker.bootstrap, CLASSIC_GROUP_APIS)


@pytest.fixture
def members():
    started = Members()
    yield started
    started.kill_all()


def group_name(topic: str) -> str:
    return "g-" + topic


def conf(strategy: str = "range", **extra) -> dict:
    return CONFLUENT_GROUP_CONF | {"partition.assignment.strategy": strategy} | extra


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_partitions_move_on_join_and_clean_leave(broker, topic, members, strategy):
    partitions = 6
    create_topic(broker.bootstrap, topic, partitions)
    group = group_name(topic)
    tps = all_tps(topic, partitions)
    everything = {}

    a = members.start("confluent", broker.bootstrap, group, [topic], conf(strategy), name="A")
    wait_for_assignments([a], tps)
    everything = merge(
        everything, produce_to_partitions(broker.bootstrap, topic, range(partitions), 4, "one")
    )
    wait_all_consumed([a], topic, everything)

    b = members.start("confluent", broker.bootstrap, group, [topic], conf(strategy), name="B")
    wait_for_assignments([a, b], tps)
    everything = merge(
        everything, produce_to_partitions(broker.bootstrap, topic, range(partitions), 4, "two")
    )
    wait_all_consumed([a, b], topic, everything)

    c = members.start("confluent", broker.bootstrap, group, [topic], conf(strategy), name="C")
    split = wait_for_assignments([a, b, c], tps)
    if strategy != "cooperative-sticky":  # the sticky assignor may balance later, not at once
        assert sorted(len(s) for s in split.values()) == [2, 2, 2], split
    everything = merge(
        everything, produce_to_partitions(broker.bootstrap, topic, range(partitions), 4, "three")
    )
    wait_all_consumed([a, b, c], topic, everything)

    c.close()
    wait_for_assignments([a, b], tps)
    everything = merge(
        everything, produce_to_partitions(broker.bootstrap, topic, range(partitions), 4, "four")
    )
    wait_all_consumed([a, b, c], topic, everything)

    b.close()
    wait_for_assignments([a], tps)
    everything = merge(
        everything, produce_to_partitions(broker.bootstrap, topic, range(partitions), 4, "five")
    )
    wait_all_consumed([a, b, c], topic, everything)

    assert_none_skipped([a, b, c], topic, everything)
    assert_none_twice([a, b, c], topic)
    assert not (a.errors() or b.errors() or c.errors()), members.describe()
    if strategy == "cooperative-sticky":
        for m in (a, b, c):
            assert_never_emptied(m)
    a.close()


def test_records_produced_during_handover(broker, topic, members):
    """Records keep arriving while members join and leave: none is skipped, none doubled."""
    partitions = 4
    create_topic(broker.bootstrap, topic, partitions)
    group = group_name(topic)
    tps = all_tps(topic, partitions)
    produced: dict = {}
    a = members.start("confluent", broker.bootstrap, group, [topic], conf(), name="A")
    wait_for_assignments([a], tps)
    b = members.start("confluent", broker.bootstrap, group, [topic], conf(), name="B")
    for i in range(6):  # trickle while B joins
        produced = merge(
            produced, produce_to_partitions(broker.bootstrap, topic, range(partitions), 1, f"j{i}")
        )
        time.sleep(0.1)
    wait_for_assignments([a, b], tps)
    b_closed = False
    for i in range(6):  # trickle while B leaves
        produced = merge(
            produced, produce_to_partitions(broker.bootstrap, topic, range(partitions), 1, f"l{i}")
        )
        if i == 1:
            b.close()
            b_closed = True
    assert b_closed
    wait_for_assignments([a], tps)
    wait_all_consumed([a, b], topic, produced)
    assert_none_skipped([a, b], topic, produced)
    assert_none_twice([a, b], topic)


def test_member_killed_mid_stream_partitions_move_after_session_timeout(broker, topic, members):
    """B is SIGKILLed while records flow: no commit, no LeaveGroup. After session.timeout.ms
    the coordinator expires it, A gets its partitions and resumes from B's last commits:
    every record is consumed at least once (B's uncommitted tail may be read again)."""
    partitions = 4
    create_topic(broker.bootstrap, topic, partitions)
    group = group_name(topic)
    tps = all_tps(topic, partitions)
    short = conf(**{"session.timeout.ms": 3000})
    a = members.start("confluent", broker.bootstrap, group, [topic], short, name="A")
    wait_for_assignments([a], tps)
    b = members.start("confluent", broker.bootstrap, group, [topic], short, name="B")
    split = wait_for_assignments([a, b], tps)
    trickle = Trickle(broker.bootstrap, topic, partitions)
    for i in range(30):
        trickle.round()
        if i == 10:
            # B has consumed and auto-committed part of its partitions when it dies.
            committed = wait_until(
                lambda: (
                    (got := confluent_committed_offsets(broker.bootstrap, group))
                    and all(got.get(tp) is not None and got[tp].offset > 0 for tp in split["B"])
                    and {tp[1]: got[tp].offset for tp in split["B"]}
                ),
                15,
                what="B to commit before it dies",
            )
            b.kill()
        time.sleep(0.03)
    wait_for_assignments([a], tps, timeout=30)
    wait_all_consumed([a, b], topic, trickle.produced)
    assert_none_skipped([a, b], topic, trickle.produced)
    # A read B's partitions from where B had committed, not from the start.
    b_done = {p: max(o for _, q, o in b.records() if q == p) for _, p in split["B"]}
    a_first = {p: min(o for _, q, o in a.records() if q == p) for _, p in split["B"]}
    assert all(committed[p] <= a_first[p] <= b_done[p] + 1 for p in b_done), (
        committed,
        a_first,
        b_done,
    )
    # The group now has A alone.
    desc = wait_until(
        lambda: (
            (d := confluent_describe_group(broker.bootstrap, group)) and len(d.members) == 1 and d
        ),
        15,
        what="the dead member to leave the description",
    )
    assert desc.state == ConsumerGroupState.STABLE
    a.close()


@pytest.mark.parametrize("how", ["kill", "close"])
def test_static_member_restart_keeps_assignment_without_rebalance(broker, topic, members, how):
    """KIP-345: B restarts with the same group.instance.id within session.timeout.ms; it gets
    its partitions back and A sees no rebalance (no revoke, no assign). A static member's
    close() sends no LeaveGroup, so "close" is as silent as "kill" to the group."""
    partitions = 4
    create_topic(broker.bootstrap, topic, partitions)
    group = group_name(topic)
    tps = all_tps(topic, partitions)
    static = conf(**{"session.timeout.ms": 10_000})
    a = members.start(
        "confluent",
        broker.bootstrap,
        group,
        [topic],
        static | {"group.instance.id": "static-a"},
        name="A",
    )
    wait_for_assignments([a], tps)
    b = members.start(
        "confluent",
        broker.bootstrap,
        group,
        [topic],
        static | {"group.instance.id": "static-b"},
        name="B",
    )
    split = wait_for_assignments([a, b], tps)
    produced = produce_to_partitions(broker.bootstrap, topic, range(partitions), 3, "one")
    wait_all_consumed([a, b], topic, produced)
    before = confluent_describe_group(broker.bootstrap, group)
    ids_before = {m.group_instance_id: m.member_id for m in before.members}
    assert set(ids_before) == {"static-a", "static-b"}, before.members
    a_events = len(a.rebalance_events())

    if how == "kill":
        b.kill()
    else:
        b.close()
    b2 = members.start(
        "confluent",
        broker.bootstrap,
        group,
        [topic],
        static | {"group.instance.id": "static-b"},
        name="B2",
    )
    wait_until(lambda: b2.assignment() == split["B"], 20, what="B2 to get B's partitions back")
    produced2 = produce_to_partitions(broker.bootstrap, topic, range(partitions), 3, "two")
    wait_all_consumed([a, b2], topic, produced2)
    # Every new record on B's partitions went to B2 and on A's to A.
    assert all((t, p) in split["B"] for t, p, _ in b2.records())
    assert all((t, p) in split["A"] for t, p, _ in a.records())
    # Absence of a rebalance can only be observed over a window: several heartbeat intervals.
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        assert len(a.rebalance_events()) == a_events, f"A saw a rebalance: {a.rebalance_events()}"
        time.sleep(0.1)
    after = confluent_describe_group(broker.bootstrap, group)
    assert after.state == ConsumerGroupState.STABLE
    ids_after = {m.group_instance_id: m.member_id for m in after.members}
    assert set(ids_after) == {"static-a", "static-b"}, after.members
    assert ids_after["static-a"] == ids_before["static-a"]
    assert ids_after["static-b"] != ids_before["static-b"], (
        "a rejoining static member gets a new member id"
    )
    for m in after.members:
        want = split["A"] if m.group_instance_id == "static-a" else split["B"]
        assert {(tp.topic, tp.partition) for tp in m.assignment.topic_partitions} == want
    a.close()
    b2.close()


def test_static_member_replaced_after_session_timeout(broker, topic, members):
    """A static member gone longer than its session timeout is removed; its partitions move."""
    partitions = 2
    create_topic(broker.bootstrap, topic, partitions)
    group = group_name(topic)
    tps = all_tps(topic, partitions)
    static = conf(**{"session.timeout.ms": 3000})
    a = members.start(
        "confluent",
        broker.bootstrap,
        group,
        [topic],
        static | {"group.instance.id": "sa"},
        name="A",
    )
    wait_for_assignments([a], tps)
    b = members.start(
        "confluent",
        broker.bootstrap,
        group,
        [topic],
        static | {"group.instance.id": "sb"},
        name="B",
    )
    wait_for_assignments([a, b], tps)
    b.close()  # static: no LeaveGroup, so only the session timeout frees B's partition
    wait_for_assignments([a], tps, timeout=30)
    desc = confluent_describe_group(broker.bootstrap, group)
    assert [m.group_instance_id for m in desc.members] == ["sa"]
    a.close()


def test_commit_sync_async_with_metadata_and_fetch_back(broker, topic):
    """assign() + commit(): offsets and metadata strings round-trip through OffsetFetch; the
    group that only commits is listed and described as Empty, not unknown."""
    create_topic(broker.bootstrap, topic, 3)
    produce_to_partitions(broker.bootstrap, topic, range(3), 10, "c")
    group = group_name(topic)
    commits: list = []
    consumer = confluent_consumer(
        broker.bootstrap,
        **{"group.id": group, "on_commit": lambda err, parts: commits.append((err, parts))},
    )
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(3)])
        fresh = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        assert fresh[0].offset == OFFSET_INVALID and fresh[0].error is None

        meta0 = "sync metadata \u00e9\u00e8 {json: 1}"
        result = consumer.commit(
            offsets=[TopicPartition(topic, 0, 3, metadata=meta0)], asynchronous=False
        )
        assert [(tp.partition, tp.offset, tp.error) for tp in result] == [(0, 3, None)]

        consumer.commit(
            offsets=[
                TopicPartition(topic, 1, 7, metadata="async"),
                TopicPartition(topic, 2, 10, metadata=""),
            ],
            asynchronous=True,
        )
        wait_until(lambda: consumer.poll(0.1) is None and commits, 15, what="async commit callback")
        err, parts = commits[-1]
        assert err is None, err
        assert sorted((tp.partition, tp.offset, tp.error) for tp in parts) == [
            (1, 7, None),
            (2, 10, None),
        ]

        got = consumer.committed([TopicPartition(topic, p) for p in range(3)], timeout=10)
        assert [(tp.partition, tp.offset, tp.metadata, tp.error) for tp in got] == [
            (0, 3, meta0, None),
            (1, 7, "async", None),
            (2, 10, "", None),
        ]
        # A later commit overwrites the earlier one, metadata included.
        consumer.commit(offsets=[TopicPartition(topic, 0, 5)], asynchronous=False)
        again = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        assert (again[0].offset, again[0].metadata or "") == (5, "")
    finally:
        consumer.close()

    # Another consumer of the group sees the same offsets and starts from them.
    other = confluent_consumer(broker.bootstrap, **{"group.id": group})
    try:
        got = other.committed([TopicPartition(topic, p) for p in range(3)], timeout=10)
        assert [(tp.offset, tp.metadata or "") for tp in got] == [(5, ""), (7, "async"), (10, "")]
        other.assign([TopicPartition(topic, 1)])  # no explicit offset: the committed one
        msg = wait_until(
            lambda: (m := other.poll(0.2)) is not None and m.error() is None and m,
            15,
            what="a record from the committed offset",
        )
        assert (msg.partition(), msg.offset(), msg.value()) == (1, 7, b"c-1-7")
    finally:
        other.close()

    desc = confluent_describe_group(broker.bootstrap, group)
    assert desc.state == ConsumerGroupState.EMPTY, desc.state
    assert desc.members == []
    assert desc.is_simple_consumer_group
    admin = confluent_admin(broker.bootstrap)  # keep a reference: the future dies with it
    listed = admin.list_consumer_groups(request_timeout=15).result(timeout=20)
    states = {g.group_id: g.state for g in listed.valid}
    assert states.get(group) == ConsumerGroupState.EMPTY, (states, listed.errors)


def test_subscribed_consumer_resumes_from_committed_offsets(broker, topic, members):
    """A member closes (auto-commit on close); the next member of the group starts where it
    stopped: nothing again, nothing skipped."""
    create_topic(broker.bootstrap, topic, 2)
    group = group_name(topic)
    tps = all_tps(topic, 2)
    first = produce_to_partitions(broker.bootstrap, topic, range(2), 6, "first")
    a = members.start("confluent", broker.bootstrap, group, [topic], conf(), name="A")
    wait_for_assignments([a], tps)
    wait_all_consumed([a], topic, first)
    a.close()
    second = produce_to_partitions(broker.bootstrap, topic, range(2), 6, "second")
    b = members.start("confluent", broker.bootstrap, group, [topic], conf(), name="B")
    wait_for_assignments([b], tps)
    wait_all_consumed([b], topic, second)
    assert_none_twice([a, b], topic)
    assert {(p, o) for _, p, o in b.records()} == {
        (p, o) for p, offs in second.items() for o in offs
    }
    b.close()


def test_commit_for_unknown_topic_is_rejected(broker, topic):
    """OffsetCommit for a topic that does not exist: UNKNOWN_TOPIC_OR_PARTITION for it."""
    from confluent_kafka import KafkaException

    consumer = confluent_consumer(broker.bootstrap, **{"group.id": group_name(topic)})
    try:
        missing = unique_topic("missing")
        try:
            result = consumer.commit(offsets=[TopicPartition(missing, 0, 1)], asynchronous=False)
            codes = [tp.error.code() if tp.error else None for tp in result]
        except KafkaException as exc:
            codes = [exc.args[0].code()]
        assert codes == [KafkaError.UNKNOWN_TOPIC_OR_PART], codes
    finally:
        consumer.close()
