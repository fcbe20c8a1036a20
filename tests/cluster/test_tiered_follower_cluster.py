"""Tiered storage on a real 3-node cluster (KIP-405's follower side): a new replica is built from
remote storage, not by copying what is remote, and then serves consumers from offset 0 as leader.

A topic with one replica (node 1), remote.storage.enable, tiny segments and local retention of
1 byte: node 1 copies every rolled segment to the shared filesystem store and keeps only its
active segment. kafka-python then reassigns the partition to [1, 2]. Node 2 fetches at offset 0,
node 1 answers OFFSET_MOVED_TO_TIERED_STORAGE, and node 2 (Kafka's TierStateMachine) asks node
1's earliest local offset, takes the leader epochs and producer state of the remote segment
before it, and starts its log there: its directory ends up holding the leader's local segments
only, with the leader's log start offset. Node 1 is then SIGKILLed; node 2 leads, and
confluent-kafka consumes every record from offset 0, the remote part through node 2's own
remote log reader.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from .harness import Cluster, wait_until

confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka (the test extra) is not installed")
ck_admin = pytest.importorskip("confluent_kafka.admin", reason="confluent-kafka (the test extra) is not installed")
kafka = pytest.importorskip("kafka", reason="kafka-python (the test extra) is not installed")
from kafka.admin import KafkaAdminClient, OffsetSpec  # noqa: E402

FS = "io.aiven.kafka.tieredstorage.storage.filesystem.FileSystemStorage"
AIVEN_RSM = "io.aiven.kafka.tieredstorage.RemoteStorageManager"
TOPIC = "tiered-follower"
COUNT = 60


def segment_files(c: Cluster, node: int) -> list[str]:
    d = c.root / f"node-{node}" / "data" / f"{TOPIC}-0"
    return sorted(p.name for p in d.glob("*.log")) if d.exists() else []


@pytest.mark.slow
def test_a_new_replica_is_built_from_remote_storage_and_serves_offset_zero(tmp_path: Path) -> None:
    overrides = {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": AIVEN_RSM,
        "rsm.config.storage.backend.class": FS,
        "rsm.config.storage.root": str(tmp_path / "remote"),  # one store, shared by the nodes
        "rsm.config.chunk.size": "4096",
        "rlmm.config.remote.log.metadata.topic.num.partitions": "3",
        "remote.log.manager.task.interval.ms": "200",
        "log.retention.check.interval.ms": "200",
    }
    with Cluster(tmp_path, nodes=3, overrides=overrides) as c:
        a = ck_admin.AdminClient({"bootstrap.servers": c.bootstrap})
        a.create_topics([ck_admin.NewTopic(TOPIC, num_partitions=1, replica_assignment=[[1]], config={
            "remote.storage.enable": "true", "segment.bytes": "2048", "local.retention.bytes": "1"})])[TOPIC].result(60)
        p = confluent_kafka.Producer({"bootstrap.servers": c.bootstrap, "linger.ms": 0, "acks": "all"})
        for i in range(COUNT):
            p.produce(TOPIC, b"value-%d-" % i * 12, key=b"key-%d" % i)
            p.flush(30)  # one batch per record: many segments
        assert p.flush(30) == 0
        wait_until(lambda: len(segment_files(c, 1)) == 1, what="node 1 keeping only its active segment")
        local_start = int(segment_files(c, 1)[0].split(".")[0])
        assert local_start > 0

        admin = KafkaAdminClient(bootstrap_servers=c.bootstrap)
        try:
            tp = kafka.TopicPartition(TOPIC, 0)
            admin.alter_partition_reassignments({tp: [1, 2]})
            wait_until(lambda: not admin.list_partition_reassignments(), what="the reassignment to complete",
                       timeout=90)
        finally:
            admin.close()
        wait_until(lambda: segment_files(c, 2), what="node 2's replica")
        # node 2 holds the leader's local segments only: nothing below the local start was copied
        files = segment_files(c, 2)
        assert int(files[0].split(".")[0]) == local_start, files

        c.kill(1)
        # node 2 leads (it was in the ISR); the whole partition is readable from offset 0
        out: list[tuple[int, bytes, bytes]] = []
        consumer = confluent_kafka.Consumer({"bootstrap.servers": c.address(2) + "," + c.address(3),
                                             "group.id": "tiered-follower", "enable.auto.commit": False})
        try:
            consumer.assign([confluent_kafka.TopicPartition(TOPIC, 0, 0)])
            deadline = time.monotonic() + 90
            while len(out) < COUNT and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is None or msg.error():
                    continue
                out.append((msg.offset(), msg.key(), msg.value()))
        finally:
            consumer.close()
        assert out == [(i, b"key-%d" % i, b"value-%d-" % i * 12) for i in range(COUNT)]
        # and ListOffsets says the log starts at 0 on the new leader (kafka-python)
        admin = KafkaAdminClient(bootstrap_servers=c.address(2))
        try:
            earliest = admin.list_partition_offsets({tp: OffsetSpec.EARLIEST})[tp].offset
            assert earliest == 0
        finally:
            admin.close()
