"""kcat -G (balanced consumer; Debian kcat 1.7.1 with librdkafka 2.0.2, which sends JoinGroup
v5, SyncGroup v3, OffsetCommit v7, OffsetFetch v7 and needs the old versions *advertised*,
see CLIENTS.md). Two kcat processes share a topic, hand partitions over on SIGTERM (kcat
closes its consumer: commit + LeaveGroup) and on SIGKILL (session timeout); their commits
are what the admin API and the next member of the group see."""

from __future__ import annotations

import pytest

from .adapters import KCAT
from .group_helpers import (
    CLASSIC_GROUP_APIS,
    CONFLUENT_GROUP_CONF,
    GROUP_BROKER_OVERRIDES,
    Members,
    all_tps,
    assert_none_skipped,
    assert_none_twice,
    confluent_committed_offsets,
    confluent_describe_group,
    create_topic,
    merge,
    produce_to_partitions,
    require_apis,
    wait_all_consumed,
    wait_committed,
    wait_for_assignments,
)

pytestmark = pytest.mark.skipif(
    KCAT is None, reason="kcat is not installed (apt-get install kcat; .ci/run installs it)"
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


def test_two_kcat_members_share_and_hand_over(broker, topic, members):
    partitions = 4
    create_topic(broker.bootstrap, topic, partitions)
    group = "g-" + topic
    tps = all_tps(topic, partitions)
    a = members.start_kcat(broker.bootstrap, group, [topic], name="kcat-A")
    wait_for_assignments([a], tps)
    produced = produce_to_partitions(broker.bootstrap, topic, range(partitions), 4, "one")
    wait_all_consumed([a], topic, produced)

    b = members.start_kcat(broker.bootstrap, group, [topic], name="kcat-B")
    split = wait_for_assignments([a, b], tps)
    assert sorted(len(s) for s in split.values()) == [2, 2], split
    desc = confluent_describe_group(broker.bootstrap, group)
    assert len(desc.members) == 2 and desc.partition_assignor == "range"
    produced = merge(
        produced, produce_to_partitions(broker.bootstrap, topic, range(partitions), 4, "two")
    )
    wait_all_consumed([a, b], topic, produced)

    a.close()  # SIGTERM: kcat commits and leaves
    wait_for_assignments([b], tps)
    produced = merge(
        produced, produce_to_partitions(broker.bootstrap, topic, range(partitions), 4, "three")
    )
    wait_all_consumed([a, b], topic, produced)
    assert_none_skipped([a, b], topic, produced)
    assert_none_twice([a, b], topic)
    b.close()
    # Both closed members committed what they consumed: the group's offsets are the ends.
    wait_committed(broker.bootstrap, group, topic, {p: 12 for p in range(partitions)})


def test_kcat_member_killed_confluent_member_takes_over(broker, topic, members):
    """A kcat member dies (SIGKILL); a confluent-kafka member of the same group gets its
    partitions after the session timeout and resumes from kcat's commits."""
    partitions = 2
    create_topic(broker.bootstrap, topic, partitions)
    group = "g-" + topic
    tps = all_tps(topic, partitions)
    k = members.start_kcat(broker.bootstrap, group, [topic], conf={"session.timeout.ms": 3000})
    wait_for_assignments([k], tps)
    c = members.start(
        "confluent",
        broker.bootstrap,
        group,
        [topic],
        CONFLUENT_GROUP_CONF | {"session.timeout.ms": 3000},
        name="confluent",
    )
    wait_for_assignments([k, c], tps)
    produced = produce_to_partitions(broker.bootstrap, topic, range(partitions), 5, "one")
    wait_all_consumed([k, c], topic, produced)
    k.kill()
    produced = merge(
        produced, produce_to_partitions(broker.bootstrap, topic, range(partitions), 5, "two")
    )
    wait_for_assignments([c], tps, timeout=30)
    wait_all_consumed([k, c], topic, produced)
    assert_none_skipped([k, c], topic, produced)
    c.close()


def test_kcat_count_limited_run_commits_and_next_run_resumes(broker, topic, members):
    """``kcat -G -c N`` exits after N records with its offsets committed; a second run of the
    group reads only what was produced since."""
    create_topic(broker.bootstrap, topic, 2)
    group = "g-" + topic
    first = produce_to_partitions(broker.bootstrap, topic, range(2), 5, "first")
    one = members.start_kcat(broker.bootstrap, group, [topic], extra_args=["-c", "10"], name="run1")
    wait_all_consumed([one], topic, first)
    one.proc.wait(30)
    assert one.proc.returncode == 0, one.describe()
    got = confluent_committed_offsets(broker.bootstrap, group)
    assert {k: v.offset for k, v in got.items()} == {(topic, 0): 5, (topic, 1): 5}

    second = produce_to_partitions(broker.bootstrap, topic, range(2), 3, "second")
    two = members.start_kcat(broker.bootstrap, group, [topic], extra_args=["-c", "6"], name="run2")
    wait_all_consumed([two], topic, second)
    two.proc.wait(30)
    assert sorted((p, o) for _, p, o in two.records()) == sorted(
        (p, o) for p, offs in second.items() for o in offs
    )
