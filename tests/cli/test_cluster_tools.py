"""The cluster tools on a real 3-node cluster (tests/cluster/harness.py), where one node's
answer is not the whole story: `metadata-quorum` lists three voters (a Leader and two
Followers), `topics describe` shows a 3-replica partition's Isr shrink when a follower dies
and its filters pick it, and `leader-election --election-type preferred` moves leadership back
to the preferred replica once it is in sync again (auto.leader.rebalance.enable off, so only
the tool moves it). Slow: a cluster start and a node's fencing take seconds."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.harness import Cluster, wait_until

from .conftest import run_cli

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("cli-cluster"), overrides={
        "replica.lag.time.max.ms": "2000", "auto.leader.rebalance.enable": "false"})
    try:
        c.start()
        yield c
    finally:
        c.close()


def cli(c: Cluster, *args: str) -> tuple[int, str, str]:
    running = ",".join(c.address(n) for n in c.running())
    return run_cli([*args, "--bootstrap-server", running])


def partition_line(c: Cluster, topic: str) -> dict[str, str]:
    rc, out, err = cli(c, "topics", "describe", "--topic", topic)
    assert rc == 0, err
    line = out.splitlines()[1]
    assert line.startswith(f"\tTopic: {topic}\tPartition: 0\t")
    return dict(field.split(": ", 1) if ": " in field else (field.rstrip(":"), "")
                for field in line.strip("\t").split("\t"))


def test_metadata_quorum_lists_three_voters(cluster: Cluster):
    leader = cluster.active_controller()
    rc, out, _ = cli(cluster, "metadata-quorum", "describe", "--status")
    values = {line.split(":", 1)[0]: line[24:] for line in out.splitlines()}
    assert rc == 0 and values["LeaderId"] == str(leader)
    assert [f'"id": {n}' in values["CurrentVoters"] for n in (1, 2, 3)] == [True] * 3
    rc, out, _ = cli(cluster, "metadata-quorum", "describe", "--replication")
    rows = [[c.strip() for c in line.split("\t")[:-1]] for line in out.splitlines()]
    assert [r[6] for r in rows[1:]] == ["Leader", "Follower", "Follower"] and rows[1][0] == str(leader)
    assert sorted(r[0] for r in rows[1:]) == ["1", "2", "3"]


def test_isr_filters_and_preferred_election(cluster: Cluster, tmp_path: Path):
    topic = "isr-" + uuid.uuid4().hex[:8]
    rc, _, err = cli(cluster, "topics", "create", "--topic", topic, "--partitions", "1", "--replication-factor", "3",
                     "--config", "min.insync.replicas=2")
    assert rc == 0, err
    fields = wait_until(lambda: (f := partition_line(cluster, topic)) and len(f["Isr"].split(",")) == 3 and f,
                        what="a full ISR")
    preferred = int(fields["Replicas"].split(",")[0])
    assert fields["Leader"] == str(preferred) and sorted(fields["Isr"].split(",")) == ["1", "2", "3"]
    assert fields["Elr"] == "" and fields["LastKnownElr"] == ""
    for flag in ("--under-replicated-partitions", "--under-min-isr-partitions", "--unavailable-partitions",
                 "--at-min-isr-partitions"):
        assert cli(cluster, "topics", "describe", "--topic", topic, flag)[:2] == (0, "")

    cluster.kill(preferred)
    try:
        fields = wait_until(lambda: (f := partition_line(cluster, topic)) and str(preferred) not in f["Isr"].split(",")
                            and f, what="the ISR without the killed node")
        assert fields["Leader"] != str(preferred) and len(fields["Isr"].split(",")) == 2
        for flag, shown in (("--under-replicated-partitions", True), ("--at-min-isr-partitions", True),
                            ("--under-min-isr-partitions", False), ("--unavailable-partitions", False)):
            rc, out, _ = cli(cluster, "topics", "describe", "--topic", topic, flag)
            assert rc == 0 and (out.startswith(f"\tTopic: {topic}\tPartition: 0\t") if shown else out == ""), flag
    finally:
        cluster.restart(preferred)
    wait_until(lambda: (f := partition_line(cluster, topic)) and len(f["Isr"].split(",")) == 3,
               what="the restarted node back in the ISR")
    assert partition_line(cluster, topic)["Leader"] != str(preferred)

    rc, out, err = cli(cluster, "leader-election", "--election-type", "preferred", "--topic", topic,
                       "--partition", "0")
    assert (rc, out) == (0, f"Successfully completed leader election (PREFERRED) for partitions {topic}-0\n"), err
    assert partition_line(cluster, topic)["Leader"] == str(preferred)
    rc, out, _ = cli(cluster, "leader-election", "--election-type", "preferred", "--topic", topic, "--partition", "0")
    assert (rc, out) == (0, f"Valid replica already elected for partitions {topic}-0\n")


def test_a_dead_nodes_partitions_are_unavailable_and_skipped_by_get_offsets(cluster: Cluster):
    topic = "rf1-" + uuid.uuid4().hex[:8]
    rc, _, err = cli(cluster, "topics", "create", "--topic", topic, "--partitions", "3", "--replication-factor", "1")
    assert rc == 0, err
    rc, out, _ = cli(cluster, "topics", "describe", "--topic", topic)
    leaders = {int(f.split("\t")[2].removeprefix("Partition: ")): int(f.split("\t")[3].removeprefix("Leader: "))
               for f in out.splitlines()[1:]}
    victim = leaders[0]
    lost = sorted(p for p, n in leaders.items() if n == victim)
    cluster.kill(victim)
    try:
        def unavailable() -> list[int] | None:
            rc, out, _ = cli(cluster, "topics", "describe", "--topic", topic, "--unavailable-partitions")
            got = sorted(int(line.split("\t")[2].removeprefix("Partition: ")) for line in out.splitlines())
            return got if rc == 0 and got == lost else None
        wait_until(unavailable, what="the dead node's partitions reported unavailable")
        rc, out, err = cli(cluster, "get-offsets", "--topic", topic, "--timeout-ms", "2000")
        assert rc == 0
        assert out.splitlines() == [f"{topic}:{p}:0" for p in range(3) if p not in lost]
        assert [line.split(" due to error: ")[0] for line in err.splitlines()] == [
            f"Skip getting offsets for topic-partition {topic}-{p}" for p in lost]
    finally:
        cluster.restart(victim)
    wait_until(lambda: cli(cluster, "topics", "describe", "--topic", topic, "--unavailable-partitions")[1] == "",
               what="the restarted node leading its partitions again")
