"""Partition replication on a real 3-node cluster (issue 9 items 1-2), judged by confluent-kafka,
kafka-python and aiokafka: followers fetch from leaders, acks=all waits for the whole ISR, every
replica's log is byte for byte the leader's, the ISR shrinks when a follower stops and grows when
it returns (Metadata and DescribeTopicPartitions show it), and min.insync.replicas answers
NOT_ENOUGH_REPLICAS to a client when too few replicas are left."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from pybroker.client.connection import BrokerConnection
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import DescribeTopicPartitionsRequest, MetadataRequest
from tests.clients import adapters
from tests.clients.helpers import Rec
from tests.metrics.scrape import metrics_url_from_log, scrape

from .harness import Cluster, wait_until

LAG_MS = 3000  # replica.lag.time.max.ms of these clusters: a stopped follower leaves the ISR in seconds


def new_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def create(bootstrap: str, name: str, partitions: int, rf: int, config: dict[str, str] | None = None) -> None:
    from confluent_kafka.admin import NewTopic

    admin = adapters.confluent_admin(bootstrap)
    futures = admin.create_topics([NewTopic(name, partitions, rf, config=config or {})], operation_timeout=20)
    futures[name].result(timeout=30)


def metadata(c: Cluster, node_id: int, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    """partition -> (leader, replicas, isr) as node `node_id` answers Metadata."""
    host, port = c.address(node_id).split(":")
    with BrokerConnection(host, int(port)) as conn:
        md = conn.send(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                       allow_auto_topic_creation=False))
    t = md.topics[0]
    assert t.error_code == 0, t
    return {p.partition_index: (p.leader_id, list(p.replica_nodes), list(p.isr_nodes)) for p in t.partitions}


def described_isr(c: Cluster, node_id: int, topic: str) -> list[int]:
    """Partition 0's ISR as node `node_id` answers DescribeTopicPartitions (KIP-966)."""
    req = DescribeTopicPartitionsRequest(topics=[DescribeTopicPartitionsRequest.TopicRequest(name=topic)],
                                         response_partition_limit=10)
    host, port = c.address(node_id).split(":")
    with BrokerConnection(host, int(port)) as conn:
        resp = conn.send(req)
    (t,) = resp.topics
    assert t.error_code == 0, t
    return sorted(t.partitions[0].isr_nodes)


def segment_bytes(c: Cluster, node_id: int, topic: str, partition: int) -> bytes:
    d = c.nodes[node_id].log_dir / f"{topic}-{partition}"
    return b"".join(f.read_bytes() for f in sorted(d.glob("*.log")))


def test_acks_all_replicates_to_every_replica_byte_for_byte(cluster: Cluster):
    topic = new_topic("repl")
    create(cluster.address(1), topic, 3, 3)
    state = wait_until(lambda: (lambda md: md if len(md) == 3 and all(v[0] >= 0 for v in md.values()) else None)(
        metadata(cluster, 1, topic)), 20, "leaders of the new topic")
    for _leader, replicas, isr in state.values():
        assert sorted(replicas) == [1, 2, 3] and sorted(isr) == [1, 2, 3], state  # a new partition: all in sync
    recs = {p: [Rec(f"k{p}-{i}".encode(), (f"v{p}-{i}-" + "x" * 200).encode()) for i in range(50)] for p in range(3)}
    produce = (adapters.confluent_produce, adapters.kafka_python_produce, adapters.aiokafka_produce)
    for p in range(3):
        offsets = produce[p](cluster.bootstrap, topic, recs[p], partition=p, acks=-1)
        assert offsets == list(range(50)), (produce[p], offsets)
    for p in range(3):
        got = adapters.confluent_consume(cluster.bootstrap, topic, partition=p, count=50)
        assert [(r.key, r.value) for r in got] == [(r.key, r.value) for r in recs[p]]
    for p, (leader, _replicas, _isr) in state.items():
        want = segment_bytes(cluster, leader, topic, p)
        assert want  # the leader's log holds the records
        for node in (1, 2, 3):
            # acks=all answered once every ISR member had the batches: the files are the leader's
            wait_until(lambda node=node, p=p, want=want: segment_bytes(cluster, node, topic, p) == want, 20,
                       f"node {node}'s copy of partition {p}")


def _isr(c: Cluster, node: int, topic: str, partition: int) -> list[int]:
    return sorted(metadata(c, node, topic)[partition][2])


@pytest.fixture
def lag_cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Cluster:
    # the leader's lag rule (a shrink between LAG_MS and 1.5 x LAG_MS) must beat the controller's
    # fencing of a dead follower, or the shrink is the controller's and IsrShrinksPerSec stays 0:
    # a session timeout well above 1.5 x LAG_MS, even on a loaded machine
    c = Cluster(tmp_path, overrides={"replica.lag.time.max.ms": str(LAG_MS), "replica.fetch.wait.max.ms": "200",
                                     "broker.session.timeout.ms": str(4 * LAG_MS),
                                     "metrics.listener": "http://127.0.0.1:0"})
    request.addfinalizer(c.close)
    c.start()
    return c


def _fails_with(c: Cluster, node: int, topic: str, value: bytes, request_timeout_ms: int = 25000) -> int:
    """Produce one record with acks=all and no retries through confluent-kafka; its error code."""
    producer = adapters.confluent_producer(c.address(node), acks=-1, **{"message.timeout.ms": 30000, "retries": 0,
                                                                         "request.timeout.ms": request_timeout_ms})
    errors: list = []
    producer.produce(topic, key=b"k", value=value, partition=0, on_delivery=lambda err, msg: errors.append(err))
    producer.flush(30)
    assert len(errors) == 1 and errors[0] is not None, errors
    return int(errors[0].code())


def test_isr_shrinks_and_expands_and_min_insync_replicas_is_enforced(lag_cluster: Cluster):
    """Every node is also a controller quorum voter, so one node at a time stops (two would take
    the quorum, and so every ISR change, with them): min.insync.replicas=3 on a 3-replica topic
    shows both min.insync errors with one follower down."""
    from confluent_kafka.admin import NewTopic

    c = lag_cluster
    strict, relaxed = new_topic("min3"), new_topic("min2")
    admin = adapters.confluent_admin(c.address(1))
    futures = admin.create_topics([
        NewTopic(t, num_partitions=1, replica_assignment=[[1, 2, 3]],
                 config={"min.insync.replicas": m}) for t, m in ((strict, "3"), (relaxed, "2"))],
        operation_timeout=20)
    for f in futures.values():
        f.result(timeout=30)
    for t in (strict, relaxed):
        wait_until(lambda t=t: metadata(c, 1, t)[0][0] == 1, 20, f"node 1 to lead {t}")
        assert adapters.confluent_produce(c.bootstrap, t, [Rec(b"a", b"1")], partition=0, acks=-1) == [0]

    # follower 3 dies (SIGKILL: a SIGTERM's controlled shutdown would take it out of every ISR
    # first, so the next produce would be refused before the append): an acks=all produce waits
    # for it until it leaves the ISR (the leader's replica.lag.time.max.ms, or the controller
    # fencing it after broker.session.timeout.ms); then the batch is in, but the ISR {1, 2} is
    # below min.insync.replicas=3, so the high watermark does not move past it (Kafka 4's
    # isUnderMinIsr, KIP-966) and the produce times out (Kafka answers
    # NOT_ENOUGH_REPLICAS_AFTER_APPEND only when the HW already covered the batch)
    c.kill(3)
    assert _fails_with(c, 1, strict, b"2", request_timeout_ms=10_000) == Errors.REQUEST_TIMED_OUT.value
    # Metadata answers from node 1's image, which applies the committed change a moment later
    wait_until(lambda: _isr(c, 1, strict, 0) == [1, 2], 10, "the shrunk ISR in node 1's Metadata")
    # the next one is refused before the append
    assert _fails_with(c, 1, strict, b"3") == Errors.NOT_ENOUGH_REPLICAS.value
    # two in sync satisfy min.insync.replicas=2: acks=all works once that ISR shrank too
    assert adapters.kafka_python_produce(c.address(1), relaxed, [Rec(b"b", b"2")], partition=0, acks=-1) == [1]
    wait_until(lambda: _isr(c, 1, relaxed, 0) == [1, 2] and _isr(c, 2, relaxed, 0) == [1, 2], 10,
               "the shrunk ISR on nodes 1 and 2")
    assert described_isr(c, 2, strict) == [1, 2]
    # acks=1 does not ask for the ISR
    assert adapters.confluent_produce(c.address(1), strict, [Rec(b"d", b"4")], partition=0, acks=1) == [2]
    # what an operator watches on the leader (Kafka's ReplicaManager metrics, Strimzi names)
    url = metrics_url_from_log(c.nodes[1].output_path)
    s = scrape(url)
    rm = "kafka_server_replicamanager_"
    assert s.value(rm + "underreplicatedpartitions") >= 2  # both topics (and any internal one led here)
    assert s.value(rm + "underminisrpartitioncount") >= 1  # strict: ISR 2 < 3
    # IsrShrinksPerSec counts the leader's own shrinks (Kafka marks it when its AlterPartition
    # succeeds); a partition the controller took 3 out of when fencing it is not one of them
    assert s.value(rm + "isrshrinks_total") >= 1 and s.value(rm + "leadercount") >= 2
    assert s.value(rm + "partitioncount") >= 2
    assert s.value("kafka_cluster_partition_underminisr", topic=strict, partition="0") == 1
    assert s.value("kafka_cluster_partition_underminisr", topic=relaxed, partition="0") == 0

    # follower 3 comes back: it catches up, rejoins both ISRs, and its logs equal the leader's
    c.nodes[3].start()
    for t in (strict, relaxed):
        wait_until(lambda t=t: _isr(c, 1, t, 0) == [1, 2, 3], 60, f"the ISR of {t} to expand")
    wait_until(lambda: described_isr(c, 2, strict) == [1, 2, 3], 10, "the expanded ISR on node 2")
    assert adapters.aiokafka_produce(c.address(1), strict, [Rec(b"e", b"5")], partition=0, acks=-1) == [3]
    for t in (strict, relaxed):
        want = segment_bytes(c, 1, t, 0)
        for node in (2, 3):
            wait_until(lambda node=node, t=t, want=want: segment_bytes(c, node, t, 0) == want, 30, f"node {node}'s copy of {t}")
    s = scrape(url)
    assert s.value(rm + "isrexpands_total") >= 2
    # the leader's answers to followers, and a follower's appends, as Kafka's all-topics
    # ReplicationBytesOut/InPerSec (never in BytesOut/BytesIn)
    btm = "kafka_server_brokertopicmetrics_"
    assert s.value(btm + "replicationbytesout_total") >= len(want)
    follower = scrape(metrics_url_from_log(c.nodes[2].output_path))
    assert follower.value(btm + "replicationbytesin_total") >= len(want)
    assert s.value("kafka_cluster_partition_underreplicated", topic=strict, partition="0") == 0
    got = adapters.confluent_consume(c.bootstrap, strict, partition=0, count=4)
    assert [r.value for r in got] == [b"1", b"2", b"4", b"5"]


@pytest.mark.slow
def test_two_followers_down_refuse_acks_all_with_min_insync_two_and_rejoin(tmp_path: Path):
    """Five nodes (five quorum voters), a topic on 1, 2, 3: stopping two followers keeps the
    metadata quorum (3 of 5), so the leader's ISR can shrink to itself."""
    c = Cluster(tmp_path, nodes=5, overrides={"replica.lag.time.max.ms": str(LAG_MS),
                                              "replica.fetch.wait.max.ms": "200"})
    try:
        c.start()
        from confluent_kafka.admin import NewTopic

        topic = new_topic("two-down")
        admin = adapters.confluent_admin(c.address(1))
        admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[1, 2, 3]],
                                      config={"min.insync.replicas": "2"})], operation_timeout=20)[topic].result(30)
        wait_until(lambda: metadata(c, 1, topic)[0][0] == 1, 20, "node 1 to lead")
        assert adapters.confluent_produce(c.bootstrap, topic, [Rec(b"k", b"1")], partition=0, acks=-1) == [0]
        # SIGKILL: a SIGTERM's controlled shutdown would take them out of the ISR before the produce
        c.kill(2)
        c.kill(3)
        # the waiting acks=all produce's batch is in, but once the ISR is {1} (under
        # min.insync.replicas=2) the high watermark does not pass it (Kafka 4's isUnderMinIsr), so
        # the produce times out; its record becomes visible once a follower is back in the ISR
        assert _fails_with(c, 1, topic, b"2", request_timeout_ms=10_000) == Errors.REQUEST_TIMED_OUT.value
        wait_until(lambda: _isr(c, 1, topic, 0) == [1], 30, "the ISR to shrink to the leader")
        assert _fails_with(c, 1, topic, b"3") == Errors.NOT_ENOUGH_REPLICAS.value
        wait_until(lambda: described_isr(c, 4, topic) == [1], 10, "node 4 to describe the ISR {1}")
        c.nodes[2].start()
        wait_until(lambda: _isr(c, 1, topic, 0) == [1, 2], 60, "node 2 to rejoin the ISR")
        assert adapters.kafka_python_produce(c.address(1), topic, [Rec(b"k", b"4")], partition=0, acks=-1) == [2]
        c.nodes[3].start()
        wait_until(lambda: _isr(c, 1, topic, 0) == [1, 2, 3], 60, "node 3 to rejoin the ISR")
        want = segment_bytes(c, 1, topic, 0)
        for node in (2, 3):
            wait_until(lambda node=node: segment_bytes(c, node, topic, 0) == want, 30, f"node {node} to catch up")
        got = adapters.aiokafka_consume(c.bootstrap, topic, partition=0, count=3)
        assert [r.value for r in got] == [b"1", b"2", b"4"]
    finally:
        c.close()


@pytest.mark.slow
def test_followers_killed_under_acks_all_load_lose_nothing_and_end_byte_identical(tmp_path: Path):
    """An idempotent confluent-kafka producer writes unique values with acks=all while each
    follower in turn is SIGKILLed and restarted (recovery, makeFollower truncation, catch-up,
    ISR shrink and expansion): every acknowledged value is read back once, in order, and the
    followers' logs end byte for byte the leader's."""
    import threading

    from confluent_kafka import Producer
    from confluent_kafka.admin import NewTopic

    c = Cluster(tmp_path, overrides={"replica.lag.time.max.ms": str(LAG_MS), "replica.fetch.wait.max.ms": "200"})
    try:
        c.start()
        topic = new_topic("kill")
        admin = adapters.confluent_admin(c.address(1))
        admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[1, 2, 3]],
                                      config={"min.insync.replicas": "2"})], operation_timeout=20)[topic].result(30)
        wait_until(lambda: metadata(c, 1, topic)[0][0] == 1, 20, "node 1 to lead")
        acked: list[bytes] = []
        failed: list[object] = []
        stop = threading.Event()

        def produce() -> None:
            producer = Producer({**adapters.confluent_common(c.address(1)), "acks": "all", "enable.idempotence": True,
                                 "linger.ms": 2, "message.timeout.ms": 60000})

            def report(err: object, msg: object) -> None:
                if err is None:
                    acked.append(msg.value())  # type: ignore[attr-defined]
                else:
                    failed.append(err)

            i = 0
            while not stop.is_set():
                producer.produce(topic, value=b"%08d" % i, partition=0, on_delivery=report)
                producer.poll(0)
                i += 1
                if i % 200 == 0:
                    producer.flush(60)
            producer.flush(60)

        worker = threading.Thread(target=produce)
        worker.start()
        try:
            for victim in (2, 3, 2):
                count = len(acked)
                wait_until(lambda count=count: len(acked) > count + 500, 60, "acknowledged writes")
                c.kill(victim)
                wait_until(lambda count=count: len(acked) > count + 1500, 60, "writes while a follower is down")
                c.nodes[victim].start()
                wait_until(lambda: _isr(c, 1, topic, 0) == [1, 2, 3], 60, f"node {victim} back in the ISR")
        finally:
            stop.set()
            worker.join(120)
        assert not failed, failed[:3]
        got = adapters.confluent_consume(c.bootstrap, topic, partition=0, count=len(acked), deadline_s=60)
        assert [r.value for r in got] == acked  # none lost, none twice, one order
        want = segment_bytes(c, 1, topic, 0)
        for node in (2, 3):
            wait_until(lambda node=node: segment_bytes(c, node, topic, 0) == want, 30, f"node {node}'s copy")
    finally:
        c.close()
