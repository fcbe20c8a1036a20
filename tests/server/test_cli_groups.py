"""`pybroker groups ...` against a live EmbeddedBroker, with a real consumer (confluent-kafka)
as the active member: list, describe (offsets / members / state views), delete,
delete-offsets and reset-offsets, following kafka-consumer-groups.sh.

Needs the broker's group APIs (FindCoordinator, JoinGroup/SyncGroup/Heartbeat/LeaveGroup,
ListGroups, DescribeGroups, OffsetFetch/Commit/Delete, DeleteGroups). Until the broker
advertises them every test here fails at once, naming what is missing.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CTopicPartition

from pybroker.cli.main import main
from pybroker.client import AdminClient, BrokerConnection, TopicPartition
from pybroker.client.admin import OffsetAndMetadata
from pybroker.protocol.api_keys import ApiKey
from pybroker.testing import EmbeddedBroker

from .test_cli_admin import produce

GROUP_APIS = [ApiKey.FIND_COORDINATOR, ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP,
              ApiKey.LIST_GROUPS, ApiKey.DESCRIBE_GROUPS, ApiKey.OFFSET_FETCH, ApiKey.OFFSET_COMMIT,
              ApiKey.OFFSET_DELETE, ApiKey.DELETE_GROUPS]
CLIENT_ID = "cli-test-client"
_n = [0]


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(overrides={"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 1000,
                                   "offsets.topic.num.partitions": 4}) as b:
        yield b


@pytest.fixture(scope="module")
def api_versions(broker) -> dict[int, tuple[int, int]]:
    with BrokerConnection("127.0.0.1", broker.port) as conn:
        return dict(conn.api_versions)


@pytest.fixture(autouse=True)
def group_apis(api_versions) -> None:
    missing = [ApiKey(k).name for k in GROUP_APIS if k not in api_versions]
    if missing:
        pytest.fail(f"the broker does not advertise {', '.join(missing)} yet: the group coordinator has not "
                    "landed (pybroker/server/api_versions.py SUPPORTED); `pybroker groups` needs it", pytrace=False)


@pytest.fixture
def admin(broker) -> Iterator[AdminClient]:
    with AdminClient(broker.bootstrap_servers) as a:
        yield a


@pytest.fixture
def cli(broker, capsys):
    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        rc = main([*args, "--bootstrap-server", broker.bootstrap_servers])
        out, err = capsys.readouterr()
        return rc, out, err
    return run


def rows(out: str) -> list[list[str]]:
    """Table rows split on the two-blank column gap (cells like "h:1 (1)" stay whole)."""
    return [re.split(r"\s{2,}", line.strip()) for line in out.strip().splitlines() if line.strip()]


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pybroker: "), err
    return lines[0]


def fresh(cli, partitions: int = 2, records: int = 0) -> tuple[str, str]:
    """A new topic (with `records` records on each partition) and a new group name."""
    _n[0] += 1
    topic, group = f"gt-{_n[0]}", f"gg-{_n[0]}"
    assert cli("topics", "create", "--topic", topic, "--partitions", str(partitions))[0] == 0
    return topic, group


def fill(broker, topic: str, partitions: int, n: int, base_ts: int | None = None) -> None:
    base_ts = base_ts if base_ts is not None else int(time.time() * 1000) - 3_600_000
    for p in range(partitions):
        produce(broker.bootstrap_servers, topic, p, [base_ts + 1000 * i for i in range(n)])


class ActiveMember:
    """A confluent-kafka consumer that has joined `group` and holds an assignment."""

    def __init__(self, broker, group: str, topic: str) -> None:
        self.consumer = Consumer({
            "bootstrap.servers": broker.bootstrap_servers, "group.id": group, "client.id": CLIENT_ID,
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 500, "enable.auto.commit": False,
            "auto.offset.reset": "earliest"})
        self.consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while not self.consumer.assignment():
            assert time.monotonic() < deadline, "consumer got no assignment within 30 s"
            self.consumer.poll(0.2)

    def commit(self, offsets: dict[tuple[str, int], int]) -> None:
        self.consumer.commit(offsets=[CTopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)

    def close(self) -> None:
        self.consumer.close()


@pytest.fixture
def members() -> Iterator[list[ActiveMember]]:
    started: list[ActiveMember] = []
    yield started
    for m in started:
        m.close()


def wait_state(admin: AdminClient, group: str, state: str) -> None:
    deadline = time.monotonic() + 20
    while admin.describe_group(group).state != state:
        assert time.monotonic() < deadline, f"group {group} never reached {state}"
        time.sleep(0.1)


# -- list / describe ------------------------------------------------------------------------


def test_list_shows_active_and_empty_groups_with_state_and_type(broker, cli, admin, members, api_versions):
    topic, active = fresh(cli)
    _, empty = fresh(cli)
    members.append(ActiveMember(broker, active, topic))
    assert admin.commit_offsets(empty, {TopicPartition(topic, 0): 0}) == {TopicPartition(topic, 0): 0}
    rc, out, err = cli("groups", "list")
    assert rc == 0 and err == ""
    table = rows(out)
    assert table[0] == ["GROUP", "STATE", "TYPE", "PROTOCOL-TYPE"]
    by_group = {r[0]: r for r in table[1:]}
    group_type = "classic" if api_versions[ApiKey.LIST_GROUPS][1] >= 5 else "-"
    assert by_group[active] == [active, "Stable", group_type, "consumer"]
    assert by_group[empty][:2] == [empty, "Empty"]

    rc, out, _ = cli("groups", "list", "--state", "Stable")
    listed = [r[0] for r in rows(out)[1:]]
    assert active in listed and empty not in listed


def test_describe_shows_offsets_lag_and_owner_per_partition(broker, cli, admin, members):
    topic, group = fresh(cli)
    fill(broker, topic, 2, 5)
    m = ActiveMember(broker, group, topic)
    members.append(m)
    m.commit({(topic, 0): 3, (topic, 1): 1})
    desc = admin.describe_group(group)
    (member,) = desc.members
    rc, out, err = cli("groups", "describe", "--group", group)
    assert rc == 0 and err == ""
    table = rows(out)
    assert table[0] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
                        "HOST", "CLIENT-ID"]
    assert table[1:] == [
        [group, topic, "0", "3", "5", "2", member.member_id, member.client_host, CLIENT_ID],
        [group, topic, "1", "1", "5", "4", member.member_id, member.client_host, CLIENT_ID],
    ]

    rc, out, _ = cli("groups", "describe", "--group", group, "--members", "--verbose")
    assert rows(out) == [["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"],
                         [group, member.member_id, member.client_host, CLIENT_ID, "2", f"{topic}(0,1)"]]

    rc, out, _ = cli("groups", "describe", "--group", group, "--state")
    c = desc.coordinator
    assert rows(out) == [["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
                         [group, f"{c.host}:{c.port} ({c.node_id})", desc.protocol, "Stable", "1"]]
    assert desc.protocol  # the assignor librdkafka chose, e.g. "range"


def test_describe_an_empty_group_notes_it_has_no_active_members(broker, cli, admin, members):
    topic, group = fresh(cli)
    fill(broker, topic, 2, 4)
    m = ActiveMember(broker, group, topic)
    m.commit({(topic, 0): 4})
    m.close()
    wait_state(admin, group, "Empty")
    rc, out, err = cli("groups", "describe", "--group", group)
    assert rc == 0
    assert err == f"Consumer group '{group}' has no active members.\n"
    assert rows(out)[1:] == [[group, topic, "0", "4", "4", "0", "-", "-", "-"]]


def test_describe_unknown_group_is_bad_input(cli):
    rc, out, err = cli("groups", "describe", "--group", "no-such-group")
    assert (rc, out) == (2, "")
    assert one_error_line(err) == "pybroker: consumer group 'no-such-group' does not exist"


# -- delete / delete-offsets ------------------------------------------------------------------


def test_delete_refuses_an_active_group_and_deletes_an_empty_one(broker, cli, admin, members):
    topic, group = fresh(cli)
    members.append(ActiveMember(broker, group, topic))
    rc, out, err = cli("groups", "delete", "--group", group)
    assert (rc, out) == (2, "")
    assert one_error_line(err) == f"pybroker: consumer group '{group}' could not be deleted: it is not empty"

    _, empty = fresh(cli)
    admin.commit_offsets(empty, {TopicPartition(topic, 0): 0})
    rc, out, err = cli("groups", "delete", "--group", empty)
    assert (rc, err) == (0, "")
    assert out == f"Deletion of requested consumer groups ('{empty}') was successful.\n"
    assert empty not in [g.group_id for g in admin.list_groups()]
    assert admin.fetch_offsets(empty) == {}

    rc, _, err = cli("groups", "delete", "--group", empty)
    assert rc == 2 and "does not exist" in one_error_line(err)


def test_delete_offsets_of_an_unsubscribed_topic(broker, cli, admin):
    topic, group = fresh(cli)
    other, _ = fresh(cli, partitions=1)
    admin.commit_offsets(group, {TopicPartition(topic, 0): 1, TopicPartition(topic, 1): 2,
                                 TopicPartition(other, 0): 0})
    rc, out, err = cli("groups", "delete-offsets", "--group", group, "--topic", topic)
    assert (rc, err) == (0, "")
    assert rows(out) == [["TOPIC", "PARTITION", "STATUS"], [topic, "0", "Successful"], [topic, "1", "Successful"]]
    assert admin.fetch_offsets(group) == {TopicPartition(other, 0): OffsetAndMetadata(0, -1, "")}


def test_delete_offsets_refuses_a_topic_the_group_consumes(broker, cli, admin, members):
    topic, group = fresh(cli)
    m = ActiveMember(broker, group, topic)
    members.append(m)
    m.commit({(topic, 0): 0})
    rc, out, err = cli("groups", "delete-offsets", "--group", group, "--topic", f"{topic}:0")
    assert rc == 2
    assert rows(out)[1:] == [[topic, "0", "Error: GROUP_SUBSCRIBED_TO_TOPIC"]]
    assert "still subscribed" in one_error_line(err)
    assert TopicPartition(topic, 0) in admin.fetch_offsets(group)


def test_delete_offsets_of_unknown_group_is_bad_input(cli):
    topic, group = fresh(cli)
    rc, _, err = cli("groups", "delete-offsets", "--group", group, "--topic", topic)
    assert rc == 2 and one_error_line(err) == f"pybroker: consumer group '{group}' does not exist"


# -- reset-offsets ------------------------------------------------------------------------------


def committed(admin: AdminClient, group: str) -> dict[tuple[str, int], int]:
    return {(tp.topic, tp.partition): om.offset for tp, om in admin.fetch_offsets(group).items()}


def test_reset_dry_run_prints_the_plan_and_changes_nothing(broker, cli, admin):
    topic, group = fresh(cli)
    fill(broker, topic, 2, 6)
    admin.commit_offsets(group, {TopicPartition(topic, 0): 5, TopicPartition(topic, 1): 6})
    for flag, warned in (("--dry-run", False), (None, True)):
        args = ["groups", "reset-offsets", "--group", group, "--topic", topic, "--to-earliest"]
        rc, out, err = cli(*(args + ([flag] if flag else [])))
        assert rc == 0 and ("WARN" in err) == warned
        assert rows(out) == [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
                             [group, topic, "0", "0"], [group, topic, "1", "0"]]
        assert committed(admin, group) == {(topic, 0): 5, (topic, 1): 6}


@pytest.mark.parametrize("how, expected", [
    (["--to-earliest"], {0: 0, 1: 0}),
    (["--to-latest"], {0: 6, 1: 6}),
    (["--to-offset", "4"], {0: 4, 1: 4}),
    (["--to-offset", "99"], {0: 6, 1: 6}),      # clamped to the log end
    (["--shift-by", "-2"], {0: 3, 1: 0}),       # 5-2 and max(1-2, 0)
    (["--shift-by", "9"], {0: 6, 1: 6}),
])
def test_reset_execute_commits_the_new_offsets(broker, cli, admin, how, expected):
    topic, group = fresh(cli)
    fill(broker, topic, 2, 6)
    admin.commit_offsets(group, {TopicPartition(topic, 0): 5, TopicPartition(topic, 1): 1})
    rc, out, err = cli("groups", "reset-offsets", "--group", group, "--topic", topic, *how, "--execute")
    assert (rc, err) == (0, "")
    assert rows(out)[1:] == [[group, topic, str(p), str(o)] for p, o in sorted(expected.items())]
    assert committed(admin, group) == {(topic, p): o for p, o in expected.items()}


def test_reset_to_datetime_picks_the_first_record_at_or_after_it(broker, cli, admin):
    topic, group = fresh(cli, partitions=1)
    base = 1_700_000_000_000  # 2023-11-14T22:13:20Z
    fill(broker, topic, 1, 5, base_ts=base)  # records at base, +1s, ... +4s
    admin.commit_offsets(group, {TopicPartition(topic, 0): 0})
    rc, out, _ = cli("groups", "reset-offsets", "--group", group, "--topic", topic,
                     "--to-datetime", "2023-11-14T22:13:22.500Z", "--execute")
    assert rc == 0 and committed(admin, group) == {(topic, 0): 3}
    rc, out, _ = cli("groups", "reset-offsets", "--group", group, "--topic", topic,
                     "--to-datetime", "2030-01-01T00:00:00Z", "--execute")
    assert rc == 0 and committed(admin, group) == {(topic, 0): 5}  # nothing later: the log end


def test_reset_selected_partitions_and_all_topics(broker, cli, admin):
    topic, group = fresh(cli, partitions=3)
    fill(broker, topic, 3, 4)
    admin.commit_offsets(group, {TopicPartition(topic, 0): 4, TopicPartition(topic, 1): 4})
    rc, _, _ = cli("groups", "reset-offsets", "--group", group, "--topic", f"{topic}:1,2", "--to-offset", "2",
                   "--execute")
    assert rc == 0 and committed(admin, group) == {(topic, 0): 4, (topic, 1): 2, (topic, 2): 2}
    rc, out, _ = cli("groups", "reset-offsets", "--group", group, "--all-topics", "--to-earliest", "--execute")
    assert rc == 0 and committed(admin, group) == {(topic, 0): 0, (topic, 1): 0, (topic, 2): 0}


def test_reset_refuses_an_active_group(broker, cli, admin, members):
    topic, group = fresh(cli)
    fill(broker, topic, 2, 3)
    m = ActiveMember(broker, group, topic)
    members.append(m)
    m.commit({(topic, 0): 3})
    rc, out, err = cli("groups", "reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute")
    assert (rc, out) == (2, "")
    assert one_error_line(err) == (f"pybroker: assignments can only be reset if the group '{group}' is inactive, "
                                   "but the current state is Stable")
    assert committed(admin, group) == {(topic, 0): 3}


def test_reset_gives_a_new_group_its_first_offsets(broker, cli, admin):
    topic, group = fresh(cli)
    fill(broker, topic, 2, 3)
    rc, _, _ = cli("groups", "reset-offsets", "--group", group, "--topic", topic, "--to-latest", "--execute")
    assert rc == 0 and committed(admin, group) == {(topic, 0): 3, (topic, 1): 3}


@pytest.mark.parametrize("args, fragment", [
    (["--topic", "no-such-topic", "--to-earliest"], "topic 'no-such-topic' does not exist"),
    (["--topic", "{topic}:7", "--to-earliest"], "partition {topic}-7 does not exist"),
    (["--topic", "{topic}", "--to-datetime", "soon"], "bad --to-datetime"),
    (["--topic", "{topic}", "--shift-by", "1"], "no committed offset"),
    (["--topic", "{topic}"], "one of the arguments"),
    (["--topic", "{topic}", "--to-earliest", "--to-latest"], "not allowed with"),
])
def test_reset_bad_input_is_exit_2(broker, cli, admin, args, fragment):
    topic, group = fresh(cli)
    args = [a.format(topic=topic) for a in args]
    rc, out, err = cli("groups", "reset-offsets", "--group", group, *args, "--execute")
    assert (rc, out) == (2, "")
    assert fragment.format(topic=topic) in one_error_line(err)
    assert admin.fetch_offsets(group) == {}


def test_offsets_topic_is_internal(cli, admin):
    topic, group = fresh(cli)
    admin.commit_offsets(group, {TopicPartition(topic, 0): 0})
    rc, out, _ = cli("topics", "list")
    assert "__consumer_offsets" in out.split()
    rc, out, _ = cli("topics", "list", "--exclude-internal")
    assert "__consumer_offsets" not in out.split() and topic in out.split()
    rc, out, err = cli("topics", "describe")
    assert (rc, err) == (0, "")
    offsets_line = [line for line in out.splitlines() if line.startswith("Topic: __consumer_offsets\t")]
    assert offsets_line and "\tPartitionCount: 4\t" in offsets_line[0]  # offsets.topic.num.partitions here
    rc, out, _ = cli("topics", "describe", "--exclude-internal")
    assert rc == 0 and "__consumer_offsets" not in out


def test_describe_all_groups(broker, cli, admin, members):
    topic, active = fresh(cli)
    _, empty = fresh(cli)
    members.append(ActiveMember(broker, active, topic))
    admin.commit_offsets(empty, {TopicPartition(topic, 1): 0})
    rc, out, err = cli("groups", "describe", "--all-groups", "--state")
    assert rc == 0 and err == ""
    states = {r[0]: r[3] for r in rows(out)[1:]}
    assert states[active] == "Stable" and states[empty] == "Empty"
    rc, out, err = cli("groups", "describe", "--all-groups")
    assert rc == 0 and f"Consumer group '{empty}' has no active members." in err
    assert [empty, topic, "1", "0", "0", "0", "-", "-", "-"] in rows(out)
