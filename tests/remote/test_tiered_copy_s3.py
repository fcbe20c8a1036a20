"""Tiered storage's copy on a real S3 store (SeaweedFS): a live pybroker copies rolled segments to
the bucket with Aiven's S3Storage keys; the store is SIGKILLed mid-run, produce goes on
(confluent-kafka, acks=all), copies fail (RemoteCopyErrorsPerSec on the Prometheus endpoint),
nothing more is copied and nothing local is removed while it is down, and once it is back the copies resume and catch up (kafka-python's ListOffsets -5)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pybroker.testing import EmbeddedBroker
from tests.metrics.scrape import scrape
from tests.remote.seaweedfs import SeaweedFS, s3_configs
from tests.server.tiered import wait_until

confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka (the test extra) is not installed")
ck_admin = pytest.importorskip("confluent_kafka.admin", reason="confluent-kafka (the test extra) is not installed")
pytest.importorskip("kafka", reason="kafka-python (the test extra) is not installed")
from kafka.admin import KafkaAdminClient, OffsetSpec  # noqa: E402
from kafka.structs import TopicPartition  # noqa: E402

TOPIC = "tiered-s3"


def produce(b: EmbeddedBroker, start: int, count: int) -> None:
    p = confluent_kafka.Producer({"bootstrap.servers": b.bootstrap_servers, "acks": "all", "linger.ms": 0})
    for i in range(start, start + count):
        p.produce(TOPIC, b"v" * 200, key=b"%d" % i)
        p.flush(30)
    assert p.flush(30) == 0


def latest_tiered(b: EmbeddedBroker) -> int:
    client = KafkaAdminClient(bootstrap_servers=b.bootstrap_servers)
    try:
        tp = TopicPartition(TOPIC, 0)
        return int(client.list_partition_offsets({tp: OffsetSpec.LATEST_TIERED})[tp].offset)
    finally:
        client.close()


def local_logs(tmp: Path) -> list[str]:
    return sorted(p.name for p in (tmp / "logs" / f"{TOPIC}-0").glob("*.log"))


@pytest.mark.slow  # ~20 s: SeaweedFS restarts, S3 calls time out while it is down
def test_copies_pause_while_the_store_is_down_and_resume(seaweedfs: SeaweedFS, s3_prefix: str,
                                                         tmp_path: Path) -> None:
    overrides = {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": "io.aiven.kafka.tieredstorage.RemoteStorageManager",
        **{f"rsm.config.{k}": v for k, v in s3_configs(seaweedfs, s3_prefix, **{
            "chunk.size": "4096", "storage.s3.api.call.timeout": "3000",
            "storage.s3.api.call.attempt.timeout": "1000"}).items()},
        "rlmm.config.remote.log.metadata.topic.num.partitions": "3",
        "remote.log.manager.task.interval.ms": "200",
        "log.retention.check.interval.ms": "200",
        "metrics.listener": "http://127.0.0.1:0",
    }
    with EmbeddedBroker(log_dir=str(tmp_path / "logs"), overrides=overrides) as b:
        a = ck_admin.AdminClient({"bootstrap.servers": b.bootstrap_servers})
        a.create_topics([ck_admin.NewTopic(TOPIC, 1, 1, config={
            "remote.storage.enable": "true", "segment.bytes": "2048",
            "local.retention.bytes": "1"})])[TOPIC].result(30)
        produce(b, 0, 20)
        wait_until(lambda: latest_tiered(b) > 0, "copies to S3")
        wait_until(lambda: len(local_logs(tmp_path)) == 1, "local retention")

        seaweedfs.stop()  # SIGKILL: the store is gone mid-run
        try:
            produce(b, 20, 30)  # produce does not depend on the store
            copied = latest_tiered(b)
            # copies are tried and fail (RemoteCopyErrorsPerSec) ...
            url = b.metrics_url
            assert url is not None
            errors = "kafka_server_brokertopicmetrics_remotecopyerrors_total"
            wait_until(lambda: scrape(url).get(errors, topic=TOPIC) >= 1, "a copy failing")
            # ... so nothing more is remote and local retention keeps every new segment
            assert latest_tiered(b) == copied
            assert len(local_logs(tmp_path)) >= 3
        finally:
            seaweedfs.start()
        wait_until(lambda: latest_tiered(b) >= 40, "copies resumed after the store came back")
        wait_until(lambda: len(local_logs(tmp_path)) == 1, "local retention after the copies")
