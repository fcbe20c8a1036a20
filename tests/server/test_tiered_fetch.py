"""Reading from remote storage on a live pybroker (KIP-405), judged by real clients.

One node with remote.log.storage.system.enable (Aiven's RemoteStorageManager on the filesystem
backend, Kafka's topic-based metadata manager). A topic with remote.storage.enable, tiny
segments and local.retention.bytes=1 keeps only its active segment on disk: everything before
it is only in the store. Then:

- confluent-kafka, kafka-python and aiokafka consume from offset 0 and get exactly what was
  produced (keys, values, offsets), across the remote segments into the local one;
- read_committed (confluent-kafka, kafka-python) skips an aborted transaction that lies in a
  remote segment, read_uncommitted returns it;
- the store taken away mid-run: a Fetch there answers UNKNOWN_SERVER_ERROR (Kafka's answer to
  a failed remote read), and once it is back the consumer gets every record;
- ListOffsets by timestamp (kafka-python's offsets_for_times) finds a record only the store
  holds;
- a node SIGKILLed during remote reads comes back with everything readable.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import FetchRequest
from pybroker.testing import EmbeddedBroker
from tests.metrics.scrape import scrape

from .tiered import tiered_overrides as node_overrides
from .tiered import wait_until
from .wire import WireClient

confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka (the test extra) is not installed")
ck_admin = pytest.importorskip("confluent_kafka.admin", reason="confluent-kafka (the test extra) is not installed")
kafka = pytest.importorskip("kafka", reason="kafka-python (the test extra) is not installed")
aiokafka = pytest.importorskip("aiokafka", reason="aiokafka (the test extra) is not installed")

COUNT = 60
BASE_TS = int(time.time() * 1000) - 3_600_000  # an hour ago: well inside retention.ms


def tiered_overrides(tmp: Path) -> dict[str, str]:
    return node_overrides(tmp, **{"metrics.listener": "http://127.0.0.1:0"})


@pytest.fixture(scope="module")
def tiered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EmbeddedBroker, Path]]:
    tmp = tmp_path_factory.mktemp("tiered-fetch")
    with EmbeddedBroker(log_dir=str(tmp / "logs"), overrides=tiered_overrides(tmp)) as b:
        yield b, tmp


def local_logs(tmp: Path, topic: str) -> list[str]:
    d = tmp / "logs" / f"{topic}-0"
    return sorted(p.name for p in d.glob("*.log")) if d.exists() else []


def remote_logs(tmp: Path, topic: str) -> list[Path]:
    return sorted((tmp / "remote").glob(f"{topic}-*/0/*.log"))


def record(i: int) -> tuple[bytes, bytes]:
    return b"key-%d" % i, (b"value-%d-" % i) * (10 + i % 7)


def tiered_topic(b: EmbeddedBroker, tmp: Path, topic: str,
                 fill: Callable[[confluent_kafka.Producer], None] | None = None) -> None:
    """Create `topic` (tiered, 2 KB segments, local retention 1 byte), produce `fill` (default:
    COUNT records, one batch each), and wait until only the active segment is on disk."""
    a = ck_admin.AdminClient({"bootstrap.servers": b.bootstrap_servers})
    cfg = {"remote.storage.enable": "true", "segment.bytes": "2048", "local.retention.bytes": "1"}
    a.create_topics([ck_admin.NewTopic(topic, 1, 1, config=cfg)])[topic].result(30)
    if fill is None:
        p = confluent_kafka.Producer({"bootstrap.servers": b.bootstrap_servers, "linger.ms": 0, "acks": "all"})
        for i in range(COUNT):
            key, value = record(i)
            p.produce(topic, value, key=key, timestamp=BASE_TS + i * 1000)
            p.flush(10)  # one batch per record: many segments
        assert p.flush(30) == 0
    else:
        fill(b)
    wait_until(lambda: len(local_logs(tmp, topic)) == 1 and len(remote_logs(tmp, topic)) >= 3,
               "the rolled segments copied and removed locally")


def expected() -> list[tuple[int, bytes, bytes]]:
    return [(i, *record(i)) for i in range(COUNT)]


def consume_confluent(b: EmbeddedBroker, topic: str, n: int, isolation: str = "read_uncommitted",
                      timeout_s: float = 60.0) -> list[tuple[int, bytes, bytes]]:
    c = confluent_kafka.Consumer({"bootstrap.servers": b.bootstrap_servers, "group.id": f"g-{topic}-{isolation}",
                                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                  "isolation.level": isolation, "fetch.max.bytes": 3000,
                                  "message.max.bytes": 3000, "max.partition.fetch.bytes": 1500})
    out: list[tuple[int, bytes, bytes]] = []
    try:
        c.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + timeout_s
        while len(out) < n and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None or msg.error():
                continue
            out.append((msg.offset(), msg.key(), msg.value()))
    finally:
        c.close()
    return out


def consume_kafka_python(b: EmbeddedBroker, topic: str, n: int,
                         isolation: str = "read_uncommitted") -> list[tuple[int, bytes, bytes]]:
    tp = kafka.TopicPartition(topic, 0)
    c = kafka.KafkaConsumer(bootstrap_servers=b.bootstrap_servers, enable_auto_commit=False,
                            isolation_level=isolation, max_partition_fetch_bytes=1500, fetch_max_bytes=3000)
    out: list[tuple[int, bytes, bytes]] = []
    try:
        c.assign([tp])
        c.seek(tp, 0)
        deadline = time.monotonic() + 60
        while len(out) < n and time.monotonic() < deadline:
            for msgs in c.poll(timeout_ms=500).values():
                out.extend((m.offset, m.key, m.value) for m in msgs)
    finally:
        c.close()
    return out


def consume_aiokafka(b: EmbeddedBroker, topic: str, n: int) -> list[tuple[int, bytes, bytes]]:
    async def run() -> list[tuple[int, bytes, bytes]]:
        tp = aiokafka.TopicPartition(topic, 0)
        c = aiokafka.AIOKafkaConsumer(bootstrap_servers=b.bootstrap_servers, enable_auto_commit=False,
                                      max_partition_fetch_bytes=1500, fetch_max_bytes=3000)
        await c.start()
        out: list[tuple[int, bytes, bytes]] = []
        try:
            c.assign([tp])
            c.seek(tp, 0)
            deadline = time.monotonic() + 60
            while len(out) < n and time.monotonic() < deadline:
                for msgs in (await c.getmany(timeout_ms=500)).values():
                    out.extend((m.offset, m.key, m.value) for m in msgs)
        finally:
            await c.stop()
        return out

    return asyncio.run(run())


def test_clients_consume_from_offset_zero_across_remote_segments(tiered: tuple[EmbeddedBroker, Path]) -> None:
    b, tmp = tiered
    topic = "tiered-read"
    tiered_topic(b, tmp, topic)
    active_base = int(local_logs(tmp, topic)[0].split(".")[0])
    assert 0 < active_base < COUNT  # most records are only in the store
    assert consume_confluent(b, topic, COUNT) == expected()
    assert consume_kafka_python(b, topic, COUNT) == expected()
    assert consume_aiokafka(b, topic, COUNT) == expected()
    # Kafka's RemoteFetch meters on the Prometheus endpoint: every remote byte was read back
    # (three times); nothing failed
    assert b.metrics_url is not None
    metrics = scrape(b.metrics_url)
    prefix = "kafka_server_brokertopicmetrics_"
    remote_bytes = sum(p.stat().st_size for p in remote_logs(tmp, topic))
    assert metrics.value(f"{prefix}remotefetchbytes_total", topic=topic) >= 3 * remote_bytes
    assert metrics.value(f"{prefix}remotefetchrequests_total", topic=topic) >= 3
    assert metrics.value(f"{prefix}remotefetcherrors_total", topic=topic) == 0
    # the remote indexes are cached on local disk under Kafka's names: <start offset>_<segment id>
    cached = sorted(p.name for p in (tmp / "logs" / "remote-log-index-cache").iterdir())
    assert any(n.startswith("0_") and n.endswith(".index") for n in cached), cached
    assert {n.rsplit(".", 1)[1] for n in cached} == {"index", "timeindex", "txnindex"}


def test_offsets_for_times_finds_a_record_only_the_store_holds(tiered: tuple[EmbeddedBroker, Path]) -> None:
    b, tmp = tiered
    topic = "tiered-times"
    tiered_topic(b, tmp, topic)
    c = kafka.KafkaConsumer(bootstrap_servers=b.bootstrap_servers)
    try:
        tp = kafka.TopicPartition(topic, 0)
        found = c.offsets_for_times({tp: BASE_TS + 3 * 1000 + 1})[tp]
        assert found is not None and (found.offset, found.timestamp) == (4, BASE_TS + 4 * 1000)
    finally:
        c.close()


def test_read_committed_skips_an_aborted_transaction_in_a_remote_segment(tiered: tuple[EmbeddedBroker, Path]) -> None:
    b, tmp = tiered
    topic = "tiered-txn"

    def fill(b: EmbeddedBroker) -> None:
        p = confluent_kafka.Producer({"bootstrap.servers": b.bootstrap_servers, "transactional.id": "tiered-txn",
                                      "linger.ms": 0})
        p.init_transactions(30)
        p.begin_transaction()
        for i in range(5):
            p.produce(topic, b"aborted-%d" % i, key=b"a")
            p.flush(10)
        p.abort_transaction(30)
        p.begin_transaction()
        for i in range(5):
            p.produce(topic, b"committed-%d" % i, key=b"c")
            p.flush(10)
        p.commit_transaction(30)
        plain = confluent_kafka.Producer({"bootstrap.servers": b.bootstrap_servers, "linger.ms": 0})
        for i in range(30):  # rolls the transaction's segments away
            plain.produce(topic, b"plain-%d-" % i * 20, key=b"p")
            plain.flush(10)

    tiered_topic(b, tmp, topic, fill)
    committed = consume_confluent(b, topic, 35, "read_committed")
    values = [v for _, _, v in committed]
    assert not any(v.startswith(b"aborted") for v in values)
    assert values[:5] == [b"committed-%d" % i for i in range(5)] and len(values) == 35
    kp = [v for _, _, v in consume_kafka_python(b, topic, 35, "read_committed")]
    assert kp == values
    uncommitted = [v for _, _, v in consume_confluent(b, topic, 40)]
    assert uncommitted[:5] == [b"aborted-%d" % i for i in range(5)]


def fetch_error(b: EmbeddedBroker, topic: str, offset: int) -> tuple[int, int]:
    """(error code, record bytes) of a consumer Fetch v12 of `topic`-0 at `offset`."""
    w = WireClient("127.0.0.1", b.port)
    try:
        req = FetchRequest(replica_id=-1, max_wait_ms=1000, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                           session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(
                               topic=topic, partitions=[FetchRequest.FetchPartition(
                                   partition=0, current_leader_epoch=-1, fetch_offset=offset, log_start_offset=-1,
                                   partition_max_bytes=1 << 20)])], forgotten_topics_data=[], rack_id="")
        d = w.request(ApiKey.FETCH, 12, req).responses[0].partitions[0]
        return d.error_code, len(d.records or b"")
    finally:
        w.close()


def test_store_down_then_back(tiered: tuple[EmbeddedBroker, Path]) -> None:
    b, tmp = tiered
    topic = "tiered-down"
    tiered_topic(b, tmp, topic)
    objects = next((tmp / "remote").glob(f"{topic}-*"))
    away = objects.with_name(objects.name + ".away")
    os.rename(objects, away)  # the store loses the partition's objects: every remote read fails
    try:
        assert fetch_error(b, topic, 0) == (Errors.UNKNOWN_SERVER_ERROR, 0)
        # the local segment is still served
        active_base = int(local_logs(tmp, topic)[0].split(".")[0])
        code, size = fetch_error(b, topic, active_base)
        assert code == 0 and size > 0
    finally:
        os.rename(away, objects)
    assert fetch_error(b, topic, 0)[0] == 0
    assert consume_confluent(b, topic, COUNT) == expected()
    assert b.metrics_url is not None
    assert scrape(b.metrics_url).value("kafka_server_brokertopicmetrics_remotefetcherrors_total", topic=topic) >= 1


def test_kill_9_during_remote_reads_loses_nothing(tmp_path: Path) -> None:
    """A node SIGKILLed while consumers read its remote segments (index files being fetched into
    the cache, reads in flight) comes back with everything readable from offset 0: reads change
    nothing but the index cache, whose half-written files start-up removes."""
    from tests.clients.broker import BrokerProcess

    node = BrokerProcess(tmp_path / "logs", overrides=tiered_overrides(tmp_path), start_timeout=60)
    node.start()
    try:
        b = EmbeddedBrokerView(node.port)
        tiered_topic(b, tmp_path, "tiered-kill")  # type: ignore[arg-type]
        consumer = confluent_kafka.Consumer({"bootstrap.servers": node.bootstrap, "group.id": "kill",
                                             "enable.auto.commit": False, "fetch.max.bytes": 3000,
                                             "message.max.bytes": 3000, "max.partition.fetch.bytes": 1500})
        consumer.assign([confluent_kafka.TopicPartition("tiered-kill", 0, 0)])
        got = 0
        while got < 10:  # mid-way through the remote part
            msg = consumer.poll(0.5)
            got += msg is not None and not msg.error()
        node.kill()
        consumer.close()
        node.start()
        assert consume_confluent(b, "tiered-kill", COUNT) == expected()  # type: ignore[arg-type]
        cache = tmp_path / "logs" / "remote-log-index-cache"
        assert not [p.name for p in cache.iterdir() if p.name.endswith((".tmp", ".deleted"))]
    finally:
        node.close()


class EmbeddedBrokerView:
    """What the helpers above use of an EmbeddedBroker (its address), for a node in a subprocess."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.bootstrap_servers = f"127.0.0.1:{port}"
