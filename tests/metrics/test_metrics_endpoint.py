"""The Prometheus endpoint of a live `python -m pybroker` node, judged by values, not names.

One node for the module (`metrics.listener=http://127.0.0.1:0`, the URL read from its log line),
driven by real clients (confluent-kafka's producer, consumer and admin client, kafka-python,
aiokafka) and by raw wire requests where a test needs to know exactly what was sent. Every
assertion compares a scraped value with what the test did: records produced, bytes the broker
answered, requests sent, partitions created. Tests that count use per-topic series or deltas
between two scrapes, and every client a test opens is closed before it returns, so the tests do
not disturb each other. Waits are bounded re-scrapes until a condition holds.
"""

from __future__ import annotations

import asyncio
import gc
import time
import uuid
from collections.abc import Iterator

import pytest
from clients.broker import BrokerProcess
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from server.wire import WireClient

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.frame import encode_request
from pybroker.protocol.messages import (
    ApiVersionsRequest,
    CreateTopicsRequest,
    FetchRequest,
    ProduceRequest,
)
from pybroker.records.batch import build_batch

from .scrape import Scrape, metrics_url_from_log, scrape, wait_for


class Node:
    def __init__(self, process: BrokerProcess, url: str) -> None:
        self.process = process
        self.url = url
        self.bootstrap = process.bootstrap
        self.port = process.port

    def scrape(self) -> Scrape:
        return scrape(self.url)

    def wire(self) -> WireClient:
        return WireClient("127.0.0.1", self.port)

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap})


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    process = BrokerProcess(tmp_path_factory.mktemp("metrics") / "data", overrides={
        "metrics.listener": "http://127.0.0.1:0",
        "offsets.topic.num.partitions": "4",
        "group.initial.rebalance.delay.ms": "0",
    })
    try:
        process.start()
        yield Node(process, metrics_url_from_log(process.output_path))
    finally:
        process.close()


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    return f"m-{request.node.name[:40]}-{uuid.uuid4().hex[:6]}".replace("[", "-").replace("]", "")


def create(node: Node, name: str, partitions: int, configs: dict[str, str] | None = None) -> None:
    admin = node.admin()  # kept referenced: a collected client fails its futures
    for f in admin.create_topics([NewTopic(name, partitions, 1, config=configs or {})]).values():
        f.result(15)


def batch(values: list[bytes], key: bytes | None = b"k") -> bytes:
    now = int(time.time() * 1000)
    return build_batch([(now, key, v, []) for v in values])


def produce_request(topic: str, records: bytes, partition: int = 0, acks: int = -1) -> ProduceRequest:
    return ProduceRequest(acks=acks, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=partition, records=records)])])


def fetch_request(topic: str, partitions: list[int], max_wait_ms: int = 0, min_bytes: int = 0) -> FetchRequest:
    return FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=64 << 20,
                        isolation_level=0, session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(
                            topic=topic, partitions=[FetchRequest.FetchPartition(
                                partition=p, fetch_offset=0, partition_max_bytes=32 << 20) for p in partitions])])


def delta(before: Scrape, after: Scrape, name: str, **labels: str) -> float:
    return after.get(name, **labels) - before.get(name, **labels)


# ------------------------------------------------------------------------------------- endpoint

def test_endpoint_serves_prometheus_text_on_the_logged_port(node: Node):
    assert not node.url.endswith(":0/metrics")
    s = node.scrape()
    assert s.content_type.startswith("text/plain; version=0.0.4")
    assert s.value("kafka_server_kafkaserver_brokerstate") == 3  # RUNNING
    assert s.value("kafka_controller_kafkacontroller_activecontrollercount") == 1
    # the process collector reads the broker process itself
    assert s.value("process_open_fds") > 0
    for name in ("kafka_server_kafkarequesthandlerpool_requesthandleravgidle_percent",
                 "kafka_network_socketserver_networkprocessoravgidle_percent"):
        assert 0.0 <= s.value(name) <= 1.0


# ------------------------------------------------------------------------------------- produce / fetch

def test_confluent_producer_counts_messages_and_bytes_in_per_topic(node: Node, topic: str):
    create(node, topic, 3)
    before = node.scrape()
    p = Producer({"bootstrap.servers": node.bootstrap, "linger.ms": 5})
    for i in range(300):
        p.produce(topic, key=str(i).encode(), value=b"v" * (i % 50), partition=i % 3)
    assert p.flush(30) == 0
    after = node.scrape()
    assert after.value("kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == 300
    assert delta(before, after, "kafka_server_brokertopicmetrics_messagesin_total") == 300
    # every appended byte is in the log: bytes in == the partitions' log sizes
    log_bytes = after.total("kafka_log_log_size", topic=topic)
    assert log_bytes > 0
    assert after.value("kafka_server_brokertopicmetrics_bytesin_total", topic=topic) == log_bytes
    assert after.total("kafka_log_log_logendoffset", topic=topic) == 300
    assert after.value("kafka_server_brokertopicmetrics_totalproducerequests_total", topic=topic) >= 3
    assert after.value("kafka_server_brokertopicmetrics_failedproducerequests_total", topic=topic) == 0


def test_wire_fetch_counts_exactly_the_record_bytes_answered(node: Node, topic: str):
    create(node, topic, 2)
    w = node.wire()
    try:
        for part in (0, 1):
            for n in range(3):
                assert w.request(ApiKey.PRODUCE, 9, produce_request(
                    topic, batch([b"x" * 100] * (n + 1)), part)).responses[0].partition_responses[0].error_code == 0
        before = node.scrape()
        resp = w.request(ApiKey.FETCH, 12, fetch_request(topic, [0, 1]))
    finally:
        w.close()
    answered = sum(len(bytes(p.records)) for t in resp.responses for p in t.partitions)
    after = node.scrape()
    assert answered == after.total("kafka_log_log_size", topic=topic)
    assert delta(before, after, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic) == answered
    assert delta(before, after, "kafka_server_brokertopicmetrics_totalfetchrequests_total", topic=topic) == 2
    assert delta(before, after, "kafka_network_requestmetrics_requests_total", request="Fetch", version="12") == 1
    assert delta(before, after, "kafka_network_requestmetrics_requests_total",
                 request="FetchConsumer", version="12") == 1


def test_confluent_consumer_reading_everything_counts_at_least_the_log_out(node: Node, topic: str):
    create(node, topic, 2)
    p = Producer({"bootstrap.servers": node.bootstrap, "linger.ms": 5})
    for i in range(200):
        p.produce(topic, value=b"c" * 64, partition=i % 2)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": f"assign-{topic}", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 0)])
        got, deadline = 0, time.monotonic() + 30
        while got < 200 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got += 1
        assert got == 200
    finally:
        c.close()
    s = node.scrape()
    log_bytes = s.total("kafka_log_log_size", topic=topic)
    out = s.value("kafka_server_brokertopicmetrics_bytesout_total", topic=topic)
    assert log_bytes <= out <= 2 * log_bytes  # all of it, re-fetches at most once more
    assert s.value("kafka_server_brokertopicmetrics_failedfetchrequests_total", topic=topic) == 0


def test_kafka_python_and_aiokafka_traffic_is_counted(node: Node, topic: str):
    from aiokafka import AIOKafkaConsumer
    from kafka import KafkaProducer

    create(node, topic, 1)
    producer = KafkaProducer(bootstrap_servers=node.bootstrap, linger_ms=5)
    try:
        for i in range(50):
            producer.send(topic, value=b"kp-%d" % i)
        producer.flush(30)
    finally:
        producer.close(10)

    async def consume() -> int:
        c = AIOKafkaConsumer(topic, bootstrap_servers=node.bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False)
        await c.start()
        try:
            n, deadline = 0, time.monotonic() + 30
            while n < 50 and time.monotonic() < deadline:
                batches = await asyncio.wait_for(c.getmany(timeout_ms=500), 30)
                n += sum(len(v) for v in batches.values())
            return n
        finally:
            await c.stop()

    assert asyncio.run(consume()) == 50
    s = node.scrape()
    assert s.value("kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == 50
    log_bytes = s.total("kafka_log_log_size", topic=topic)
    assert log_bytes <= s.value("kafka_server_brokertopicmetrics_bytesout_total", topic=topic) <= 2 * log_bytes


def test_failed_produce_counts_validation_errors_but_not_expected_ones(node: Node, topic: str):
    create(node, topic, 1, {"cleanup.policy": "compact"})
    w = node.wire()
    try:
        # a compacted topic refuses a record without a key: INVALID_RECORD, a failed produce in Kafka
        r = w.request(ApiKey.PRODUCE, 9, produce_request(topic, batch([b"no key"], key=None)))
        assert r.responses[0].partition_responses[0].error_code == Errors.INVALID_RECORD
        # an unknown partition is one of the errors Kafka does not count as failed
        r = w.request(ApiKey.PRODUCE, 9, produce_request(topic, batch([b"v"]), partition=7))
        assert r.responses[0].partition_responses[0].error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION
        r = w.request(ApiKey.PRODUCE, 9, produce_request(topic, batch([b"v"])))
        assert r.responses[0].partition_responses[0].error_code == 0
    finally:
        w.close()
    s = node.scrape()
    assert s.value("kafka_server_brokertopicmetrics_totalproducerequests_total", topic=topic) == 3
    assert s.value("kafka_server_brokertopicmetrics_failedproducerequests_total", topic=topic) == 1
    assert s.value("kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == 1


# ------------------------------------------------------------------------------------- requests

def test_requests_total_and_times_count_exactly_the_requests_sent(node: Node, topic: str):
    create(node, topic, 1)
    bodies = [produce_request(topic, batch([b"r" * (10 * i + 1)])) for i in range(5)]
    # the frames' sizes as the broker receives them: header + body, without the 4-byte length
    sizes = [len(encode_request(ApiKey.PRODUCE, 8, i + 1, "wire-test", b)) - 4 for i, b in enumerate(bodies)]
    before = node.scrape()
    w = node.wire()
    try:
        for b in bodies:
            assert w.request(ApiKey.PRODUCE, 8, b).responses[0].partition_responses[0].error_code == 0
        w.request(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    finally:
        w.close()
    after = node.scrape()
    assert delta(before, after, "kafka_network_requestmetrics_requests_total", request="Produce", version="8") == 5
    assert delta(before, after, "kafka_network_requestmetrics_requests_total",
                 request="ApiVersions", version="3") == 1
    for hist in ("totaltimems", "localtimems", "remotetimems", "responsesendtimems", "requestbytes"):
        assert delta(before, after, f"kafka_network_requestmetrics_{hist}_count", request="Produce") == 5, hist
    assert delta(before, after, "kafka_network_requestmetrics_requestbytes_sum", request="Produce") == sum(sizes)
    quantiles = [after.value("kafka_network_requestmetrics_totaltimems", request="Produce", quantile=q)
                 for q in ("0.50", "0.75", "0.95", "0.98", "0.99", "0.999")]
    assert 0 < quantiles[0] and quantiles == sorted(quantiles)
    assert after.value("kafka_network_requestmetrics_totaltimems_sum", request="Produce") >= \
        after.value("kafka_network_requestmetrics_localtimems_sum", request="Produce")


def test_purgatory_size_counts_a_parked_fetch_until_a_produce_answers_it(node: Node, topic: str):
    create(node, topic, 1)
    fetcher, producer = node.wire(), node.wire()
    try:
        # fetches parked by the clients of earlier tests end once the broker sees them close
        before = wait_for(node.url, lambda s: s.value("kafka_server_delayedoperationpurgatory_purgatorysize",
                                                      delayedOperation="Fetch") == 0, what="no parked fetch")
        fetcher.send(ApiKey.FETCH, 12, fetch_request(topic, [0], max_wait_ms=60_000, min_bytes=1))
        parked = wait_for(node.url, lambda s: s.value(
            "kafka_server_delayedoperationpurgatory_purgatorysize", delayedOperation="Fetch") > 0,
            what="a parked fetch")
        assert parked.value("kafka_server_delayedoperationpurgatory_purgatorysize", delayedOperation="Fetch") == 1
        assert parked.value("kafka_server_delayedoperationpurgatory_numdelayedoperations",
                            delayedOperation="Fetch") == 1
        assert parked.value("kafka_server_delayedoperationpurgatory_purgatorysize", delayedOperation="Produce") == 0
        assert producer.request(ApiKey.PRODUCE, 9, produce_request(topic, batch([b"wake"]))) \
            .responses[0].partition_responses[0].error_code == 0
        _, resp = fetcher.receive(ApiKey.FETCH, 12)
        assert len(bytes(resp.responses[0].partitions[0].records)) > 0
    finally:
        fetcher.close()
        producer.close()
    after = node.scrape()
    assert after.value("kafka_server_delayedoperationpurgatory_purgatorysize", delayedOperation="Fetch") == 0
    assert after.value("kafka_server_delayedoperationpurgatory_numdelayedoperations", delayedOperation="Fetch") == 0
    # the parked time is the fetch's remote time
    assert delta(before, after, "kafka_network_requestmetrics_remotetimems_sum", request="Fetch") > 0


def test_connection_count_follows_open_connections(node: Node):
    gc.collect()  # clients of earlier tests close their sockets when collected
    before = 0
    wait_for(node.url, lambda s: s.value("kafka_server_socket_server_metrics_connection_count",
                                         listener="PLAINTEXT", networkProcessor="0") == before,
             what="no client connected")
    clients = [node.wire() for _ in range(3)]
    try:
        for c in clients:  # a request answered means the connection is accepted and counted
            c.request(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(client_software_name="t", client_software_version="1"))
        s = node.scrape()
        assert s.value("kafka_server_socket_server_metrics_connection_count",
                       listener="PLAINTEXT", networkProcessor="0") == before + 3
    finally:
        for c in clients:
            c.close()
    wait_for(node.url, lambda s: s.value("kafka_server_socket_server_metrics_connection_count",
                                         listener="PLAINTEXT", networkProcessor="0") == before,
             what="the connections closed")


# ------------------------------------------------------------------------------------- admin

def test_partition_and_controller_gauges_follow_admin_operations(node: Node, topic: str):
    admin = node.admin()
    before = node.scrape()
    create(node, topic, 4)
    other = topic + "-b"
    create(node, other, 2)
    md = admin.list_topics(timeout=15)
    expected = sum(len(t.partitions) for t in md.topics.values())
    s = node.scrape()
    assert s.value("kafka_server_replicamanager_partitioncount") == expected
    assert s.value("kafka_server_replicamanager_leadercount") == expected
    assert s.value("kafka_controller_kafkacontroller_globalpartitioncount") == expected
    assert s.value("kafka_controller_kafkacontroller_globaltopiccount") == len(md.topics)
    assert s.value("kafka_server_replicamanager_atminisrpartitioncount") == expected  # RF 1, min.isr 1
    for zero in ("kafka_server_replicamanager_underreplicatedpartitions",
                 "kafka_server_replicamanager_underminisrpartitioncount",
                 "kafka_controller_kafkacontroller_offlinepartitionscount",
                 "kafka_controller_kafkacontroller_preferredreplicaimbalancecount",
                 "kafka_server_replicamanager_isrshrinks_total", "kafka_server_replicamanager_isrexpands_total"):
        assert s.value(zero) == 0, zero
    assert len([ls for ls in s.label_sets("kafka_cluster_partition_underreplicated") if ls["topic"] == topic]) == 4
    assert (s.total("kafka_network_requestmetrics_requests_total", request="CreateTopics")
            - before.total("kafka_network_requestmetrics_requests_total", request="CreateTopics")) == 2

    for f in admin.create_partitions([NewPartitions(topic, 6)]).values():
        f.result(15)
    assert node.scrape().value("kafka_server_replicamanager_partitioncount") == expected + 2

    # produce to the topic, delete it: its per-topic series go, the all-topics counter keeps its records
    p = Producer({"bootstrap.servers": node.bootstrap})
    for i in range(12):
        p.produce(topic, value=b"d", partition=i % 6)
    assert p.flush(30) == 0
    with_topic = node.scrape()
    assert with_topic.value("kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == 12
    total = with_topic.value("kafka_server_brokertopicmetrics_messagesin_total")
    for f in admin.delete_topics([topic, other]).values():
        f.result(15)
    gone = wait_for(node.url, lambda s: s.value("kafka_server_replicamanager_partitioncount") == expected - 6,
                    what="the deleted partitions gone")
    assert gone.get("kafka_server_brokertopicmetrics_messagesin_total", default=-1.0, topic=topic) == -1.0
    assert gone.value("kafka_server_brokertopicmetrics_messagesin_total") == total
    assert gone.value("kafka_controller_kafkacontroller_globaltopiccount") == len(md.topics) - 2


def test_raw_create_topics_counts_partitions_created(node: Node, topic: str):
    before = node.scrape().value("kafka_server_replicamanager_partitioncount")
    w = node.wire()
    try:
        r = w.request(ApiKey.CREATE_TOPICS, 7, CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
            name=topic, num_partitions=5, replication_factor=1)], timeout_ms=5000))
        assert r.topics[0].error_code == 0
    finally:
        w.close()
    assert node.scrape().value("kafka_server_replicamanager_partitioncount") == before + 5


# ------------------------------------------------------------------------------------- groups, lag, flush

def test_classic_group_gauges_and_consumer_lag(node: Node, topic: str):
    group = f"g-{topic}"
    create(node, topic, 2)
    p = Producer({"bootstrap.servers": node.bootstrap, "linger.ms": 5})
    for i in range(100):
        p.produce(topic, value=b"g%d" % i, partition=i % 2)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "session.timeout.ms": 6000})
    try:
        c.subscribe([topic])
        got, deadline = 0, time.monotonic() + 30
        while got < 100 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got += 1
        assert got == 100
        c.commit(asynchronous=False)
        s = node.scrape()
        lags = {ls["partition"]: s.value("pybroker_consumergroup_lag", **ls)
                for ls in s.label_sets("pybroker_consumergroup_lag") if ls["consumergroup"] == group}
        assert lags == {"0": 0, "1": 0}
        assert s.value("kafka_server_group_coordinator_metrics_classic_group_count", state="Stable") >= 1
        assert s.value("kafka_coordinator_group_groupmetadatamanager_numgroupsstable") >= 1
        assert s.value("kafka_coordinator_group_groupmetadatamanager_numoffsets") >= 2
        stable = s.value("kafka_server_group_coordinator_metrics_classic_group_count", state="Stable")
        # 30 more records: the committed offsets stay, the lag is what the group has not committed
        for i in range(30):
            p.produce(topic, value=b"late", partition=i % 2)
        assert p.flush(30) == 0
        s = node.scrape()
        assert s.total("pybroker_consumergroup_lag", consumergroup=group) == 30
        assert s.value("pybroker_consumergroup_lag", consumergroup=group, topic=topic, partition="0") == 15
    finally:
        c.close()
    # the last member left: the group is Empty, its committed offsets (and lag) remain
    s = wait_for(node.url, lambda s: s.value("kafka_server_group_coordinator_metrics_classic_group_count",
                                             state="Stable") == stable - 1, what="the group no longer Stable")
    assert s.value("kafka_server_group_coordinator_metrics_classic_group_count", state="Empty") >= 1
    assert s.total("pybroker_consumergroup_lag", consumergroup=group) == 30


def test_consumer_protocol_group_is_counted_by_state(node: Node, topic: str):
    create(node, topic, 2)
    group = f"kip848-{topic}"
    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": group, "group.protocol": "consumer",
                  "auto.offset.reset": "earliest"})
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 30
        while not c.assignment() and time.monotonic() < deadline:
            c.poll(0.2)
        assert len(c.assignment()) == 2
        s = wait_for(node.url, lambda s: s.value("kafka_server_group_coordinator_metrics_consumer_group_count",
                                                 state="Stable") >= 1, what="a Stable consumer group")
        assert s.value("kafka_server_group_coordinator_metrics_group_count", protocol="consumer") >= 1
    finally:
        c.close()


def test_share_group_is_counted_by_state(node: Node, topic: str):
    """A confluent-kafka ShareConsumer's group: group-count{protocol=share}, share-group-count by
    state and share-group-rebalance-count, Kafka's GroupCoordinatorMetrics names."""
    import confluent_kafka
    if not hasattr(confluent_kafka, "ShareConsumer"):
        pytest.skip(f"confluent-kafka {confluent_kafka.version()[0]} has no ShareConsumer (2.16+)")
    create(node, topic, 1)
    c = confluent_kafka.ShareConsumer({"bootstrap.servers": node.bootstrap, "group.id": f"share-{topic}",
                                       "log_level": 3})
    try:
        c.subscribe([topic])
        s = wait_for(node.url, lambda s: (c.poll(0.2), s.value(
            "kafka_server_group_coordinator_metrics_share_group_count", state="Stable"))[1] >= 1,
            what="a Stable share group")
        assert s.value("kafka_server_group_coordinator_metrics_group_count", protocol="share") >= 1
        assert s.value("kafka_server_group_coordinator_metrics_share_group_rebalance_count") >= 1
    finally:
        c.close()


def test_log_flush_stats_count_flushes(node: Node, topic: str):
    create(node, topic, 1, {"flush.messages": "1"})  # every append asks for a flush
    before = node.scrape().value("kafka_log_logflushstats_logflushrateandtimems_count")
    w = node.wire()
    try:
        for i in range(5):
            assert w.request(ApiKey.PRODUCE, 9, produce_request(topic, batch([b"f%d" % i]))) \
                .responses[0].partition_responses[0].error_code == 0
    finally:
        w.close()
    s = wait_for(node.url, lambda s: s.value("kafka_log_logflushstats_logflushrateandtimems_count") > before,
                 what="a timed log flush")
    # at most one flush per append (flushes of one partition do not overlap, so appends may share one)
    assert s.value("kafka_log_logflushstats_logflushrateandtimems_count") - before <= 5
    assert s.value("kafka_log_logflushstats_logflushrateandtimems_sum") > 0
    assert s.value("kafka_log_logflushstats_logflushrateandtimems", quantile="0.999") >= \
        s.value("kafka_log_logflushstats_logflushrateandtimems", quantile="0.50") > 0
