"""Losing a node loses nothing and stops nothing, for metadata (issue 8): a real 3-node cluster
whose active controller is SIGKILLed or SIGSTOPped, whose brokers die and come back, and which
is restarted node by node. After every fault a new controller is elected, metadata changes keep
committing from every surviving node, a returning node catches up, and at the end every node's
__cluster_metadata log holds the same records up to the high watermark, those committed before
the faults included, unchanged."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from pybroker.controller.metadata_log import MetadataLog, encode_record
from tests.clients import adapters
from tests.clients.helpers import Rec

from .harness import Cluster, wait_until


def new_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(cluster: Cluster, via: int, name: str, partitions: int = 3, rf: int = 1,
                 timeout: float = 60) -> None:
    """Create through node `via`, retrying while the quorum elects (the admin client's retries)."""
    from confluent_kafka.admin import NewTopic

    admin = adapters.confluent_admin(cluster.address(via))

    def created() -> bool:
        futures = admin.create_topics([NewTopic(name, partitions, rf)], operation_timeout=10, request_timeout=15)
        try:
            futures[name].result(timeout=30)
        except Exception as exc:
            if "TOPIC_ALREADY_EXISTS" in str(exc) or "already exists" in str(exc):
                return True  # an earlier attempt committed before its answer was lost
            raise
        return True

    wait_until(created, timeout, f"topic {name} created via node {via}", interval=0.5)


def sees_topic(cluster: Cluster, node_id: int, name: str, partitions: int) -> bool:
    from pybroker.client.connection import BrokerConnection
    from pybroker.protocol.messages import MetadataRequest

    host, port = cluster.address(node_id).split(":")
    with BrokerConnection(host, int(port), request_timeout_s=5, connect_timeout_s=5) as conn:
        md = conn.send(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=name)],
                                       allow_auto_topic_creation=False))
    return md.topics[0].error_code == 0 and len(md.topics[0].partitions) == partitions


def quorum_settled(cluster: Cluster) -> int:
    """Every voter's log end offset at the high watermark; returns the high watermark."""
    def settled() -> int | None:
        p = cluster.describe_quorum().topics[0].partitions[0]
        ends = {v.replica_id: v.log_end_offset for v in p.current_voters}
        return p.high_watermark if sorted(ends) == [1, 2, 3] and set(ends.values()) == {p.high_watermark} else None

    return wait_until(settled, 60, "every voter at the high watermark")


def committed_records(node_dir: Path, upto: int) -> list[tuple[int, bytes]]:
    log = MetadataLog(node_dir)
    try:
        return [(offset, encode_record(rec)) for offset, rec in log.read_all() if offset < upto]
    finally:
        log.close()


def assert_logs_agree(cluster: Cluster, hw: int) -> list[tuple[int, bytes]]:
    """Stop the cluster and compare every node's metadata log up to `hw`; returns the records."""
    for node_id in cluster.running():
        cluster.stop(node_id)
    logs = {n: committed_records(cluster.nodes[n].log_dir, hw) for n in cluster.nodes}
    # a node may have cleaned its log behind a snapshot: compare where all of them have records
    start = max(records[0][0] if records else hw for records in logs.values())
    common = {n: [r for r in records if r[0] >= start] for n, records in logs.items()}
    assert common[1] == common[2] == common[3], "the nodes' committed metadata records differ"
    assert logs[1], "no committed metadata record"
    return logs[1]


def topic_record_offset(records: list[tuple[int, bytes]], name: str) -> int:
    from pybroker.protocol.messages import TopicRecord

    encoded = [(o, raw) for o, raw in records if raw[1] == TopicRecord.API_KEY]
    for offset, raw in encoded:
        from pybroker.controller.metadata_log import decode_record

        if decode_record(raw).name == name:
            return offset
    raise AssertionError(f"no TopicRecord for {name}")


def test_sigkill_of_the_active_controller_elects_another_and_nothing_committed_is_lost(fresh_cluster: Cluster):
    c = fresh_cluster
    first = new_topic("before")
    create_topic(c, 1, first)
    hw_before = quorum_settled(c)
    leader = c.active_controller()
    started = time.monotonic()
    c.kill(leader)
    new_leader = c.active_controller(exclude=leader, timeout=30)
    elected_s = time.monotonic() - started
    assert new_leader != leader
    # metadata changes keep committing, through every surviving node
    survivors = [n for n in (1, 2, 3) if n != leader]
    during = [new_topic(f"during{n}") for n in survivors]
    for n, name in zip(survivors, during, strict=True):
        create_topic(c, n, name)
    # the killed node restarts from its files and catches up
    c.nodes[leader].start()
    for name in [first, *during]:
        wait_until(lambda name=name: sees_topic(c, leader, name, 3), 30, f"restarted node {leader} to see {name}")
    hw = quorum_settled(c)
    assert hw > hw_before
    print(f"new controller elected {elected_s:.2f}s after the SIGKILL")
    records = assert_logs_agree(c, hw)
    # the topic committed before the fault is still where it was committed
    assert topic_record_offset(records, first) < hw_before


def test_sigstop_of_the_active_controller_elects_another_and_the_paused_node_rejoins(fresh_cluster: Cluster):
    c = fresh_cluster
    leader = c.active_controller()
    c.pause(leader)
    try:
        new_leader = c.active_controller(exclude=leader, timeout=30)
        assert new_leader != leader
        name = new_topic("paused")
        create_topic(c, new_leader, name)
    finally:
        c.resume(leader)
    # the paused node finds a newer epoch, follows the new leader and catches up
    wait_until(lambda: sees_topic(c, leader, name, 3), 30, f"resumed node {leader} to see {name}")
    p = c.describe_quorum(leader).topics[0].partitions[0]
    assert p.leader_id == new_leader
    assert_logs_agree(c, quorum_settled(c))


def test_a_dead_broker_is_fenced_and_a_restarted_one_rejoins(fresh_cluster: Cluster):
    from confluent_kafka.admin import NewTopic

    c = fresh_cluster
    leader = c.active_controller()
    victim = next(n for n in (1, 2, 3) if n != leader)
    c.kill(victim)
    admin = adapters.confluent_admin(c.address(leader))
    # broker.session.timeout.ms (4 s here) after its last heartbeat, the controller fences it
    wait_until(lambda: sorted(admin.list_topics(timeout=5).brokers) == sorted({1, 2, 3} - {victim}), 30,
               f"broker {victim} to be fenced")
    # two unfenced brokers: replication factor 3 is refused, 2 is placed on the live ones
    refused = new_topic("rf3")
    fut = admin.create_topics([NewTopic(refused, 1, 3)], operation_timeout=10)[refused]
    with pytest.raises(Exception, match="INVALID_REPLICATION_FACTOR|replication factor"):
        fut.result(timeout=30)
    placed = new_topic("rf2")
    admin.create_topics([NewTopic(placed, 4, 2)], operation_timeout=10)[placed].result(timeout=30)
    md = admin.list_topics(placed, timeout=10)
    assert all(victim not in pm.replicas for pm in md.topics[placed].partitions.values())
    c.nodes[victim].start()
    wait_until(lambda: sorted(admin.list_topics(timeout=5).brokers) == [1, 2, 3], 30, f"broker {victim} back")
    wait_until(lambda: sees_topic(c, victim, placed, 4), 30, "the restarted broker to catch up")


@pytest.mark.slow
def test_a_rolling_restart_keeps_metadata_and_data_available(fresh_cluster: Cluster):
    c = fresh_cluster
    topic = new_topic("rolling")
    create_topic(c, 1, topic, partitions=3, rf=1)
    recs = [Rec(b"k", f"v{i}".encode()) for i in range(10)]
    for p in range(3):
        adapters.confluent_produce(c.bootstrap, topic, recs, partition=p)
    for node_id in (1, 2, 3):
        c.restart(node_id)  # SIGTERM, then start on the same files and ports
        name = new_topic(f"after{node_id}")
        create_topic(c, node_id % 3 + 1, name)
        wait_until(lambda name=name: all(sees_topic(c, n, name, 3) for n in (1, 2, 3)), 30, f"{name} everywhere")
    for p in range(3):
        got = adapters.confluent_consume(c.bootstrap, topic, partition=p, count=10, deadline_s=30)
        assert [r.value for r in got] == [r.value for r in recs]
    assert_logs_agree(c, quorum_settled(c))


@pytest.mark.slow
def test_repeated_controller_kills_lose_no_committed_metadata(fresh_cluster: Cluster):
    c = fresh_cluster
    names: list[str] = []
    for round_ in range(5):
        leader = c.active_controller()
        name = new_topic(f"round{round_}")
        create_topic(c, leader, name)
        names.append(name)
        if round_ % 2:
            c.kill(leader)
        else:
            c.pause(leader)
        c.active_controller(exclude=leader, timeout=30)
        if round_ % 2:
            c.nodes[leader].start()
        else:
            c.resume(leader)
        for n in (1, 2, 3):
            for name in names:
                wait_until(lambda n=n, name=name: sees_topic(c, n, name, 3), 60, f"node {n} to see {name}")
    assert_logs_agree(c, quorum_settled(c))


@pytest.mark.slow
def test_a_node_far_behind_catches_up_from_a_metadata_snapshot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Small snapshot and retention settings: while node 3 is down the others snapshot their
    image and clean the log behind it, so the restarted node 3 is below the leader's log start
    and must load a snapshot (FetchSnapshot) before following the log again."""
    monkeypatch.setenv("PYBROKER_METADATA_CLEANER_INTERVAL_MS", "200")
    c = Cluster(tmp_path, overrides={
        "metadata.log.max.record.bytes.between.snapshots": "4096",
        "metadata.log.segment.bytes": "8192",
        "metadata.max.retention.bytes": "0",
    })
    try:
        c.start()
        c.kill(3)
        leader = c.active_controller()
        names = [new_topic(f"snap{i}") for i in range(25)]
        for name in names:
            create_topic(c, leader, name, partitions=4)
        part = c.nodes[leader].log_dir / "__cluster_metadata-0"
        # the leader wrote snapshots and moved its log start past what node 3 has
        wait_until(lambda: len(list(part.glob("*.checkpoint"))) >= 1, 30, "a snapshot on the leader")
        wait_until(lambda: int(sorted(part.glob("*.log"))[0].name.split(".")[0]) > 0, 30,
                   "the leader's log to be cleaned behind its snapshot")
        c.nodes[3].start()
        for name in names:
            wait_until(lambda name=name: sees_topic(c, 3, name, 4), 30, f"node 3 to see {name}")
        snapshots = list((c.nodes[3].log_dir / "__cluster_metadata-0").glob("*.checkpoint"))
        assert snapshots, "node 3 caught up without a snapshot"
        assert "loading the metadata snapshot" in c.nodes[3].output_tail(400)
        assert_logs_agree(c, quorum_settled(c))
    finally:
        c.close()


@pytest.mark.slow
def test_active_controller_count_is_one_on_the_quorum_leader_only_and_follows_it(tmp_path: Path):
    from tests.metrics.scrape import metrics_url_from_log, wait_for

    c = Cluster(tmp_path, overrides={"metrics.listener": "http://127.0.0.1:0"})
    try:
        c.start()
        urls = {n: metrics_url_from_log(node.output_path) for n, node in c.nodes.items()}
        metric = "kafka_controller_kafkacontroller_activecontrollercount"

        def counts(nodes: list[int]) -> dict[int, float]:
            from tests.metrics.scrape import scrape

            return {n: scrape(urls[n]).value(metric) for n in nodes}

        leader = c.active_controller()
        assert wait_until(lambda: counts([1, 2, 3]) == {n: float(n == leader) for n in (1, 2, 3)}, 20,
                          "one active controller")
        c.kill(leader)
        new = c.active_controller(exclude=leader, timeout=30)
        survivors = [n for n in (1, 2, 3) if n != leader]
        wait_until(lambda: counts(survivors) == {n: float(n == new) for n in survivors}, 20, "the new one")
        wait_for(urls[new], lambda s: s.value("kafka_controller_kafkacontroller_fencedbrokercount") == 1, 30,
                 "the killed broker fenced")
    finally:
        c.close()
