"""`pybroker topics reassign` / `reassignments` against one node (a cluster's reassignment that
actually moves replicas: tests/cluster/test_elections.py)."""

from __future__ import annotations


def test_reassign_and_reassignments_on_one_node(cli, topic):
    rc, out, err = cli("topics", "reassign", "--topic", topic, "--partition", "0", "--replicas", "1")
    assert (rc, out, err) == (0, f"Started the reassignment of {topic}-0 to replicas 1.\n", "")  # already so
    rc, out, err = cli("topics", "reassignments")
    assert (rc, out.split()) == (0, ["TOPIC", "PARTITION", "REPLICAS", "ADDING", "REMOVING"])
    rc, _, err = cli("topics", "reassign", "--topic", topic, "--partition", "0", "--cancel")
    assert rc == 1 and "NO_REASSIGNMENT_IN_PROGRESS" in err and "No partition reassignment is in progress" in err
    rc, _, err = cli("topics", "reassign", "--topic", topic, "--partition", "0", "--replicas", "1,7")
    assert rc == 2 and "broker 7, but no such broker is registered" in err
    rc, _, err = cli("topics", "reassign", "--topic", topic, "--partition", "9", "--replicas", "1")
    assert rc == 2 and f"Unable to find partition {topic}:9" in err
    rc, _, err = cli("topics", "reassign", "--topic", topic, "--partition", "0", "--replicas", "a,b")
    assert rc == 2 and "bad --replicas 'a,b'" in err
    rc, _, err = cli("topics", "reassignments", "--topic", topic + "-missing")
    assert rc == 2 and "does not exist" in err


def _throttles(broker, topic: str) -> tuple[dict[str, str | None], dict[str, str | None]]:
    """(broker 1's throttle rates, the topic's throttled-replicas lists) as DescribeConfigs shows them."""
    from pybroker.client.admin import RESOURCE_BROKER, RESOURCE_TOPIC, AdminClient

    with AdminClient(broker.bootstrap_servers) as admin:
        got = admin.describe_configs([(RESOURCE_BROKER, "1"), (RESOURCE_TOPIC, topic)])
    rates = {e.name: e.value for e in got[(RESOURCE_BROKER, "1")] if e.name.endswith(".replication.throttled.rate")}
    lists = {e.name: e.value for e in got[(RESOURCE_TOPIC, topic)] if e.name.endswith(".throttled.replicas")}
    return rates, lists


def test_throttle_sets_kafkas_configs_and_verify_clears_them(cli, topic, broker):
    rc, out, err = cli("topics", "reassign", "--topic", topic, "--partition", "1", "--replicas", "1",
                       "--throttle", "1048576")
    assert (rc, err) == (0, "")
    assert out == ("Warning: You must run --verify periodically, until the reassignment completes, to ensure the "
                   "throttle is removed.\n"
                   "The inter-broker throttle limit was set to 1048576 B/s\n"
                   f"Started the reassignment of {topic}-1 to replicas 1.\n")
    # the partition's current replica leads-throttled; it gains no replica, so no follower item
    assert _throttles(broker, topic) == (
        {"follower.replication.throttled.rate": "1048576", "leader.replication.throttled.rate": "1048576"},
        {"follower.replication.throttled.replicas": "", "leader.replication.throttled.replicas": "1:1"})
    rc, out, err = cli("topics", "reassign", "--topic", topic, "--partition", "1", "--replicas", "1,2", "--verify",
                       "--preserve-throttles")
    assert (rc, out) == (0, "Status of partition reassignment:\n"
                            f"There is no active reassignment of partition {topic}-1, but replica set is 1 rather "
                            "than 1,2.\n")
    assert _throttles(broker, topic)[0]["leader.replication.throttled.rate"] == "1048576"  # preserved
    rc, out, err = cli("topics", "reassign", "--topic", topic, "--partition", "1", "--replicas", "1", "--verify")
    assert (rc, out) == (0, "Status of partition reassignment:\n"
                            f"Reassignment of partition {topic}-1 is completed.\n"
                            "Clearing broker-level throttles on broker 1\n"
                            f"Clearing topic-level throttles on topic {topic}\n")
    assert _throttles(broker, topic) == ({}, {"follower.replication.throttled.replicas": "",
                                              "leader.replication.throttled.replicas": ""})


def test_throttle_arguments_are_checked(cli, topic):
    rc, _, err = cli("topics", "reassign", "--topic", topic, "--partition", "0", "--replicas", "1", "--throttle", "-5")
    assert rc == 2 and "bad --throttle '-5'" in err
    rc, _, err = cli("topics", "reassign", "--topic", topic, "--partition", "0", "--cancel", "--throttle", "5")
    assert rc == 2 and "--throttle starts a throttled reassignment" in err
    rc, _, err = cli("topics", "reassign", "--topic", topic, "--partition", "0", "--replicas", "1", "--throttle", "5",
                     "--verify")
    assert rc == 2 and "--throttle starts a throttled reassignment" in err
    rc, _, err = cli("topics", "reassign", "--topic", topic, "--partition", "0", "--replicas", "1",
                     "--preserve-throttles")
    assert rc == 2 and "--preserve-throttles goes with --verify or --cancel" in err
    rc, _, err = cli("topics", "reassign", "--topic", topic, "--partition", "0", "--replicas", "1,7", "--throttle", "5")
    assert rc == 2 and "Unknown broker id 7" in err
    rc, _, err = cli("topics", "reassign", "--topic", topic, "--partition", "9", "--replicas", "1", "--throttle", "5")
    assert rc == 2 and f"Unable to find partition: {topic}-9" in err
    rc, _, err = cli("topics", "reassign", "--topic", topic, "--partition", "9", "--replicas", "1", "--verify")
    assert rc == 2 and f"Unable to find partition: {topic}-9" in err
