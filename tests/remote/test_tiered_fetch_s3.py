"""Reading from remote storage on a live pybroker whose store is S3 (a real SeaweedFS, the
`seaweedfs` fixture): kafka-python consumes from offset 0 of a topic whose early segments are
only in the bucket, and with the store stopped a remote read answers UNKNOWN_SERVER_ERROR
(remote.fetch.max.wait.ms raised so the failing read, not the wait, ends the fetch) and the
consumer gets every record once the store is back."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import FetchRequest
from pybroker.testing import EmbeddedBroker
from tests.remote.seaweedfs import SeaweedFS, s3_configs
from tests.server.tiered import wait_until
from tests.server.wire import WireClient

confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka (the test extra) is not installed")
ck_admin = pytest.importorskip("confluent_kafka.admin", reason="confluent-kafka (the test extra) is not installed")
kafka = pytest.importorskip("kafka", reason="kafka-python (the test extra) is not installed")

AIVEN_RSM = "io.aiven.kafka.tieredstorage.RemoteStorageManager"
COUNT = 50


def local_logs(tmp: Path, topic: str) -> list[str]:
    d = tmp / "logs" / f"{topic}-0"
    return sorted(p.name for p in d.glob("*.log")) if d.exists() else []


def fill(b: EmbeddedBroker, tmp: Path, topic: str) -> None:
    a = ck_admin.AdminClient({"bootstrap.servers": b.bootstrap_servers})
    a.create_topics([ck_admin.NewTopic(topic, 1, 1, config={
        "remote.storage.enable": "true", "segment.bytes": "2048", "local.retention.bytes": "1"})])[topic].result(30)
    p = confluent_kafka.Producer({"bootstrap.servers": b.bootstrap_servers, "linger.ms": 0, "acks": "all"})
    for i in range(COUNT):
        p.produce(topic, b"s3-value-%d-" % i * 10, key=b"k%d" % i)
        p.flush(10)
    assert p.flush(30) == 0
    wait_until(lambda: len(local_logs(tmp, topic)) == 1, "the rolled segments copied and removed locally")


def consume(b: EmbeddedBroker, topic: str) -> list[tuple[int, bytes, bytes]]:
    tp = kafka.TopicPartition(topic, 0)
    c = kafka.KafkaConsumer(bootstrap_servers=b.bootstrap_servers, enable_auto_commit=False,
                            max_partition_fetch_bytes=1500)
    out: list[tuple[int, bytes, bytes]] = []
    try:
        c.assign([tp])
        c.seek(tp, 0)
        deadline = time.monotonic() + 90
        while len(out) < COUNT and time.monotonic() < deadline:
            for msgs in c.poll(timeout_ms=500).values():
                out.extend((m.offset, m.key, m.value) for m in msgs)
    finally:
        c.close()
    return out


def expected() -> list[tuple[int, bytes, bytes]]:
    return [(i, b"k%d" % i, b"s3-value-%d-" % i * 10) for i in range(COUNT)]


def fetch_code(b: EmbeddedBroker, topic: str) -> int:
    w = WireClient("127.0.0.1", b.port, timeout_s=60)
    try:
        req = FetchRequest(replica_id=-1, max_wait_ms=1000, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                           session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(
                               topic=topic, partitions=[FetchRequest.FetchPartition(
                                   partition=0, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1,
                                   partition_max_bytes=1 << 20)])], forgotten_topics_data=[], rack_id="")
        return int(w.request(ApiKey.FETCH, 12, req).responses[0].partitions[0].error_code)
    finally:
        w.close()


def test_consume_from_s3_and_survive_the_store_stopping(seaweedfs: SeaweedFS, s3_prefix: str,
                                                       tmp_path: Path) -> None:
    rsm = {f"rsm.config.{k}": v for k, v in s3_configs(seaweedfs, s3_prefix, **{
        "storage.s3.api.call.timeout": "4000", "storage.s3.api.call.attempt.timeout": "2000"}).items()}
    overrides = {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": AIVEN_RSM,
        "rlmm.config.remote.log.metadata.topic.num.partitions": "3",
        "remote.log.manager.task.interval.ms": "200",
        "log.retention.check.interval.ms": "200",
        "remote.fetch.max.wait.ms": "20000",
        **rsm,
    }
    with EmbeddedBroker(log_dir=str(tmp_path / "logs"), overrides=overrides) as b:
        fill(b, tmp_path, "s3-read")
        fill(b, tmp_path, "s3-down")
        assert consume(b, "s3-read") == expected()
        seaweedfs.stop()
        try:
            # never read before: nothing of it is in the chunk cache
            assert fetch_code(b, "s3-down") == Errors.UNKNOWN_SERVER_ERROR
        finally:
            seaweedfs.start()
        assert consume(b, "s3-down") == expected()
