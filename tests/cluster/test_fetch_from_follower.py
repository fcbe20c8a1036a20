"""Fetch from the closest replica (KIP-392, issue 9 item 6) on a real 3-node cluster, one rack
per node (broker.rack r1, r2, r3) and Kafka's RackAwareReplicaSelector.

Judged by confluent-kafka (client.rack), kafka-python and aiokafka (client_rack): a consumer in
rack rN reads every record from node N, a follower, and the proof that the follower served it
is on the nodes' own counters (BytesOutPerSec of the topic, which counts consumer reads only,
and FetchConsumer requests), not only that the data arrived. Raw Fetch requests pin the
broker's side: the leader's preferred_read_replica (no records with it), a follower's epoch
checks and OFFSET_OUT_OF_RANGE, Fetch < v11 and ListOffsets at a follower refused, and a
follower that left the ISR no longer preferred.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from pybroker.client.connection import BrokerConnection
from pybroker.config import RACK_AWARE_REPLICA_SELECTOR
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import FetchRequest, ListOffsetsRequest, MetadataRequest
from tests.clients import adapters
from tests.clients.helpers import Rec
from tests.metrics.scrape import metrics_url_from_log, scrape

from .harness import Cluster, wait_until

LAG_MS = 3000
RECORDS = 60


@pytest.fixture(scope="module")
def rack_cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    c = Cluster(tmp_path_factory.mktemp("kip392"), overrides={
        "replica.selector.class": RACK_AWARE_REPLICA_SELECTOR, "metrics.listener": "http://127.0.0.1:0",
        "replica.lag.time.max.ms": str(LAG_MS), "replica.fetch.wait.max.ms": "200"})
    for node_id, node in c.nodes.items():
        node.overrides["broker.rack"] = f"r{node_id}"
    try:
        c.start()
        yield c
    finally:
        c.close()


def _topic(c: Cluster, prefix: str, replicas: list[int]) -> str:
    from confluent_kafka.admin import NewTopic

    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    admin = adapters.confluent_admin(c.bootstrap)
    admin.create_topics([NewTopic(name, num_partitions=1, replica_assignment=[replicas])],
                        operation_timeout=20)[name].result(timeout=30)
    for node in c.nodes:
        wait_until(lambda node=node: _partition(c, node, name)[0] == replicas[0], 20, f"node {node} to see {name}")
    return name


def _partition(c: Cluster, node: int, topic: str) -> tuple[int, int, list[int]]:
    """(leader, leader epoch, ISR) of partition 0 as node `node` answers Metadata."""
    host, port = c.address(node).split(":")
    with BrokerConnection(host, int(port)) as conn:
        md = conn.send(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                       allow_auto_topic_creation=False))
    (t,) = md.topics
    assert t.error_code == 0, t
    (p,) = t.partitions
    return p.leader_id, p.leader_epoch, sorted(p.isr_nodes)


def _fetch(c: Cluster, node: int, topic: str, offset: int, *, rack: str = "", epoch: int = -1,
           version: int = 12) -> Any:
    """One consumer Fetch (replica id -1) of partition 0 at `offset`, answered at once."""
    host, port = c.address(node).split(":")
    req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                       session_id=0, session_epoch=-1, rack_id=rack, topics=[FetchRequest.FetchTopic(
                           topic=topic, partitions=[FetchRequest.FetchPartition(
                               partition=0, current_leader_epoch=epoch, fetch_offset=offset,
                               partition_max_bytes=1 << 20)])])
    with BrokerConnection(host, int(port)) as conn:
        resp = conn.send(req, version=version)
    assert resp.error_code == 0, resp
    return resp.responses[0].partitions[0]


def _stats(c: Cluster, node: int, topic: str) -> tuple[float, float]:
    """(BytesOutPerSec count of `topic`, FetchConsumer requests) on node `node`."""
    s = scrape(metrics_url_from_log(c.nodes[node].output_path))
    return (s.get("kafka_server_brokertopicmetrics_bytesout_total", topic=topic),
            s.total("kafka_network_requestmetrics_requests_total", request="FetchConsumer"))


def _log_bytes(c: Cluster, node: int, topic: str) -> int:
    seg = c.nodes[node].log_dir / f"{topic}-0" / "00000000000000000000.log"
    return seg.stat().st_size


def test_consumers_read_every_record_from_the_follower_in_their_rack(rack_cluster: Cluster):
    c = rack_cluster
    topic = _topic(c, "near", [1, 2, 3])
    recs = [Rec(b"k%d" % i, b"v%d" % i) for i in range(RECORDS)]
    offsets = adapters.confluent_produce(c.address(1), topic, recs, partition=0, acks=-1)
    assert offsets == list(range(RECORDS))
    # both followers hold the whole log, so the HW they learn reaches the end
    for node in (2, 3):
        wait_until(lambda node=node: _fetch(c, node, topic, 0).high_watermark == RECORDS, 20,
                   f"node {node}'s HW to reach the end")
    size = _log_bytes(c, 1, topic)
    before = {n: _stats(c, n, topic) for n in c.nodes}

    # confluent-kafka in rack r2: the leader (node 1) points it at node 2, which serves everything
    got = adapters.confluent_consume(c.bootstrap, topic, count=RECORDS, **{"client.rack": "r2"})
    assert [(r.key, r.value) for r in got] == [(r.key, r.value) for r in recs]
    after = {n: _stats(c, n, topic) for n in c.nodes}
    assert after[2][0] - before[2][0] >= size  # the follower in r2 sent the records
    assert after[2][1] > before[2][1]
    assert after[1][0] == before[1][0]  # the leader only answered preferred_read_replica
    assert after[1][1] > before[1][1]  # ... which it did (the client asked it first)
    assert after[3][0] == before[3][0]

    # kafka-python and aiokafka in rack r3 read from node 3
    for consume in (adapters.kafka_python_consume, adapters.aiokafka_consume):
        before3 = _stats(c, 3, topic)
        got = consume(c.bootstrap, topic, count=RECORDS, client_rack="r3")
        assert [(r.key, r.value) for r in got] == [(r.key, r.value) for r in recs], consume.__name__
        assert _stats(c, 3, topic)[0] - before3[0] >= size, consume.__name__

    # a client in the leader's rack, or without a rack, stays on the leader
    before1 = _stats(c, 1, topic)[0]
    got = adapters.confluent_consume(c.bootstrap, topic, count=RECORDS, **{"client.rack": "r1"})
    assert len(got) == RECORDS
    got = adapters.confluent_consume(c.bootstrap, topic, count=RECORDS)
    assert len(got) == RECORDS
    assert _stats(c, 1, topic)[0] - before1 >= 2 * size


def test_follower_reads_and_the_leaders_preferred_replica(rack_cluster: Cluster):
    c = rack_cluster
    topic = _topic(c, "rules", [1, 2, 3])
    recs = [Rec(b"k", b"v%d" % i) for i in range(10)]
    assert adapters.confluent_produce(c.address(1), topic, recs, partition=0, acks=-1) == list(range(10))
    _, epoch, _ = _partition(c, 1, topic)
    wait_until(lambda: _fetch(c, 2, topic, 0).high_watermark == 10, 20, "node 2's HW")

    # the leader: preferred_read_replica for a client of another rack, and no records with it
    for rack, want in (("r2", 2), ("r3", 3)):
        d = _fetch(c, 1, topic, 0, rack=rack, epoch=epoch)
        assert (d.error_code, d.preferred_read_replica, d.high_watermark) == (0, want, 10), d
        assert not d.records
    for rack in ("r1", "", "elsewhere"):  # the leader's own rack, none, a rack with no replica
        d = _fetch(c, 1, topic, 0, rack=rack)
        assert (d.error_code, d.preferred_read_replica) == (0, -1) and d.records, (rack, d)
    d = _fetch(c, 1, topic, 0, rack="r2", version=10)  # no client metadata before v11: the leader
    assert (d.error_code, d.preferred_read_replica) == (0, -1) and d.records

    # a follower serves a consumer up to its HW, under the leader epoch check
    d = _fetch(c, 2, topic, 0, epoch=epoch)
    assert (d.error_code, d.high_watermark) == (0, 10) and d.records, d
    assert _fetch(c, 2, topic, 10).error_code == 0  # at its log end: nothing, no error
    # a client ahead of this follower's epoch (FENCED_LEADER_EPOCH, an older one, is the same
    # check, Partition.checkCurrentLeaderEpoch; a new topic's first epoch is 0, so none is older)
    assert _fetch(c, 2, topic, 0, epoch=epoch + 1).error_code == Errors.UNKNOWN_LEADER_EPOCH
    assert _fetch(c, 2, topic, 11).error_code == Errors.OFFSET_OUT_OF_RANGE  # the client goes to the leader
    assert _fetch(c, 2, topic, 0, version=10).error_code == Errors.NOT_LEADER_OR_FOLLOWER
    # ListOffsets stays with the leader
    host, port = c.address(2).split(":")
    with BrokerConnection(host, int(port)) as conn:
        lo = conn.send(ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsRequest.ListOffsetsTopic(
            name=topic, partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1)])]))
    assert lo.topics[0].partitions[0].error_code == Errors.NOT_LEADER_OR_FOLLOWER

    # a node holding no replica of the partition refuses it
    other = _topic(c, "pair", [1, 2])
    assert _fetch(c, 3, other, 0).error_code == Errors.NOT_LEADER_OR_FOLLOWER


def test_a_consumer_waiting_on_a_follower_wakes_when_its_high_watermark_moves(rack_cluster: Cluster):
    """A long-poll at a follower's HW answers as soon as the follower learns a new HW from its
    leader, well before max_wait_ms."""
    import threading
    import time

    c = rack_cluster
    topic = _topic(c, "wake", [1, 2, 3])
    assert adapters.confluent_produce(c.address(1), topic, [Rec(b"k", b"a")], partition=0, acks=-1) == [0]
    wait_until(lambda: _fetch(c, 2, topic, 0).high_watermark == 1, 20, "node 2's HW")
    host, port = c.address(2).split(":")
    req = FetchRequest(replica_id=-1, max_wait_ms=60_000, min_bytes=1, max_bytes=1 << 20, session_id=0,
                       session_epoch=-1, topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
                           FetchRequest.FetchPartition(partition=0, fetch_offset=1, partition_max_bytes=1 << 20)])])
    answer: list[Any] = []
    with BrokerConnection(host, int(port), request_timeout_s=90) as conn:
        waiter = threading.Thread(target=lambda: answer.append(conn.send(req, version=12)))
        waiter.start()
        # a head start for the fetch to park (its parking is not observable from outside; were it
        # read only after the produce, it would answer at once and this test prove less, not fail)
        time.sleep(0.5)
        assert not answer  # parked: nothing above the HW yet
        assert adapters.confluent_produce(c.address(1), topic, [Rec(b"k", b"b")], partition=0, acks=-1) == [1]
        waiter.join(30)
    assert answer, "the parked fetch at the follower did not answer"
    d = answer[0].responses[0].partitions[0]
    assert (d.error_code, d.high_watermark) == (0, 2) and d.records, d


def test_a_follower_out_of_the_isr_is_no_longer_preferred(rack_cluster: Cluster):
    """Last in the module: node 3 is paused until the ISR shrinks, then resumed."""
    c = rack_cluster
    topic = _topic(c, "isr", [1, 2, 3])
    assert adapters.confluent_produce(c.address(1), topic, [Rec(b"k", b"0")], partition=0, acks=-1) == [0]
    wait_until(lambda: _fetch(c, 1, topic, 0, rack="r3").preferred_read_replica == 3, 20, "node 3 preferred")
    c.pause(3)
    try:
        # a write the paused follower does not fetch: it falls behind and leaves the ISR
        assert adapters.confluent_produce(c.address(1), topic, [Rec(b"k", b"1")], partition=0, acks=1) == [1]
        wait_until(lambda: _partition(c, 1, topic)[2] == [1, 2], 30, "node 3 to leave the ISR")
        d = _fetch(c, 1, topic, 0, rack="r3")
        assert (d.error_code, d.preferred_read_replica) == (0, -1) and d.records, d  # the leader serves
        assert _fetch(c, 1, topic, 0, rack="r2").preferred_read_replica == 2
    finally:
        c.resume(3)
    wait_until(lambda: _partition(c, 1, topic)[2] == [1, 2, 3], 60, "node 3 to rejoin the ISR")
    wait_until(lambda: _fetch(c, 1, topic, 0, rack="r3").preferred_read_replica == 3, 20, "node 3 preferred again")
