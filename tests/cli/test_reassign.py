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
