"""DeleteRecords on a real 3-node cluster with a 3-replica topic (Kafka's DelayedDeleteRecords),
through confluent-kafka's, kafka-python's and aiokafka's admin clients.

The answer comes once the partition's low watermark, the smallest log start offset among the
leader and the followers on live (unfenced) brokers, reached the requested offset: so when a
client hears low_watermark == N, every replica's log start offset is already N (each node's
kafka_log_log_logstartoffset gauge says so, read at once, without waiting). A follower stopped
with SIGSTOP but not yet fenced holds the answer until the request's timeout (REQUEST_TIMED_OUT),
while it is still in the ISR and after the leader has shrunk the ISR without it alike (Kafka
counts live replicas, not in-sync ones); once the controller fences it (broker.session.timeout.ms)
it no longer counts, and when it comes back it follows the leader's log start offset.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from pybroker.client.connection import BrokerConnection
from pybroker.protocol.messages import MetadataRequest
from tests.clients import adapters
from tests.clients.helpers import Rec
from tests.metrics.scrape import metrics_url_from_log, scrape

from .harness import Cluster, wait_until

LAG_MS = 3000  # replica.lag.time.max.ms: a stopped follower behind the leader leaves the ISR after this
SESSION_MS = 15000  # broker.session.timeout.ms: ... and is fenced only after this
TIMEOUT_S = 1.0  # the DeleteRecords timeout_ms while a follower is stopped


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Cluster:
    c = Cluster(tmp_path, overrides={"replica.lag.time.max.ms": str(LAG_MS), "broker.session.timeout.ms":
                                     str(SESSION_MS), "replica.fetch.wait.max.ms": "200",
                                     "metrics.listener": "http://127.0.0.1:0"})
    request.addfinalizer(c.close)
    c.start()
    return c


def partition_state(c: Cluster, node: int, topic: str) -> tuple[int, list[int], list[int]]:
    """(leader, ISR, live brokers) as node `node` answers Metadata."""
    host, port = c.address(node).split(":")
    with BrokerConnection(host, int(port), request_timeout_s=5) as conn:
        md = conn.send(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                       allow_auto_topic_creation=False), version=12)
    p = md.topics[0].partitions[0]
    return p.leader_id, sorted(p.isr_nodes), sorted(b.node_id for b in md.brokers)


def log_start(c: Cluster, node: int, topic: str) -> int:
    """Node `node`'s own log start offset of topic-0 (Kafka's LogStartOffset gauge)."""
    url = metrics_url_from_log(c.nodes[node].output_path)
    return int(scrape(url).value("kafka_log_log_logstartoffset", topic=topic, partition="0"))


def confluent_delete(c: Cluster, topic: str, offset: int, operation_timeout: float = 30.0) -> object:
    """The DeletedRecords of confluent-kafka's delete_records, or the KafkaError it raised."""
    from confluent_kafka import KafkaException, TopicPartition

    admin = adapters.confluent_admin(c.bootstrap)
    fs = admin.delete_records([TopicPartition(topic, 0, offset)], request_timeout=30,
                              operation_timeout=operation_timeout)
    try:
        return list(fs.values())[0].result(timeout=40)
    except KafkaException as exc:
        return exc.args[0]


def test_delete_records_answers_when_every_live_replica_moved_its_log_start(cluster: Cluster):
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import NewTopic
    from kafka import TopicPartition as KTopicPartition
    from kafka.errors import RequestTimedOutError

    c = cluster
    active = c.active_controller()
    stopped = next(n for n in (1, 2, 3) if n != active)  # pausing a quorum voter that does not lead it
    leader = next(n for n in (1, 2, 3) if n != stopped)
    other = next(n for n in (1, 2, 3) if n not in (stopped, leader))
    topic = f"dr-{uuid.uuid4().hex[:8]}"
    admin = adapters.confluent_admin(c.bootstrap)
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[[leader, stopped, other]],
                                  config={"segment.bytes": "4096"})], operation_timeout=20)[topic].result(30)
    wait_until(lambda: partition_state(c, leader, topic)[:2] == (leader, [1, 2, 3]), 20, "the topic led and in sync")
    values = [Rec(b"k", b"%03d" % i + b"-" * 100) for i in range(120)]
    assert adapters.confluent_produce(c.bootstrap, topic, values, acks=-1,
                                     **{"batch.num.messages": 10}) == list(range(120))

    # every client's admin: the answer's low watermark is the offset, and it is every replica's
    # log start offset already (read at once: the answer waited for the followers)
    deleted = confluent_delete(c, topic, 40)
    assert getattr(deleted, "low_watermark", deleted) == 40
    assert {n: log_start(c, n, topic) for n in (1, 2, 3)} == {1: 40, 2: 40, 3: 40}
    kadmin = adapters.kafka_python_admin(c.bootstrap)
    try:
        got = kadmin.delete_records({KTopicPartition(topic, 0): 60})
        assert got[KTopicPartition(topic, 0)]["low_watermark"] == 60
        assert {n: log_start(c, n, topic) for n in (1, 2, 3)} == {1: 60, 2: 60, 3: 60}

        async def aiokafka_delete() -> dict:
            from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
            from aiokafka.structs import TopicPartition as ATopicPartition

            a = AIOKafkaAdminClient(**adapters.aiokafka_common(c.bootstrap))
            await a.start()
            try:
                return await a.delete_records({ATopicPartition(topic, 0): RecordsToDelete(70)}, timeout_ms=30000)
            finally:
                await a.close()

        assert list(asyncio.run(aiokafka_delete()).values()) == [70]
        assert {n: log_start(c, n, topic) for n in (1, 2, 3)} == {1: 70, 2: 70, 3: 70}

        # a follower stops (not fenced before broker.session.timeout.ms): still in the ISR, it
        # holds the answer until the timeout; the leader's log start has moved all the same
        c.pause(stopped)
        try:
            err = confluent_delete(c, topic, 80, operation_timeout=TIMEOUT_S)
            assert isinstance(err, KafkaError) and err.code() == KafkaError.REQUEST_TIMED_OUT, err
            assert partition_state(c, leader, topic) == (leader, [1, 2, 3], [1, 2, 3])  # in the ISR, unfenced
            assert log_start(c, leader, topic) == 80 and log_start(c, other, topic) == 80
            # behind the leader's log end (an idle partition keeps a stopped follower in sync, as
            # Kafka does), it leaves the ISR after replica.lag.time.max.ms; not fenced, it is
            # still waited for
            assert adapters.confluent_produce(c.address(leader), topic, [Rec(b"k", b"late")], acks=1) == [120]
            wait_until(lambda: partition_state(c, leader, topic)[1] == sorted([leader, other]), 30,
                       "the leader to shrink the ISR without the stopped follower")
            with pytest.raises(RequestTimedOutError):
                kadmin.delete_records({KTopicPartition(topic, 0): 90}, timeout_ms=int(TIMEOUT_S * 1000))
            assert stopped in partition_state(c, leader, topic)[2]  # (the answer came before the fence)
            # fenced (broker.session.timeout.ms): no longer waited for
            wait_until(lambda: stopped not in partition_state(c, leader, topic)[2], 30, "the stopped follower fenced")
            # a new admin that knows only the live nodes: the first one may still route its Metadata
            # request over its open connection to the stopped node, and times out there (kafka-python
            # does not retry it elsewhere); a fenced node is not in Metadata answers, as in Kafka
            live_admin = adapters.kafka_python_admin(c.address(leader))
            try:
                got = live_admin.delete_records({KTopicPartition(topic, 0): 100}, timeout_ms=30000)
            finally:
                live_admin.close()
            assert got[KTopicPartition(topic, 0)]["low_watermark"] == 100
        finally:
            c.resume(stopped)
        # back: it follows the leader's log start (its own gauge), and counts again
        wait_until(lambda: log_start(c, stopped, topic) == 100, 30, "the returned follower's log start")
        wait_until(lambda: partition_state(c, leader, topic)[1] == [1, 2, 3], 30, "the ISR to take it back")
        deleted = confluent_delete(c, topic, 110)
        assert getattr(deleted, "low_watermark", deleted) == 110
        assert {n: log_start(c, n, topic) for n in (1, 2, 3)} == {1: 110, 2: 110, 3: 110}
    finally:
        kadmin.close()
    got = adapters.confluent_consume(c.bootstrap, topic, count=11)
    assert [r.value for r in got] == [v.value for v in values[110:]] + [b"late"] and got[0].offset == 110
