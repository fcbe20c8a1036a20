"""Tiered storage's copy and retention on a real 3-node cluster sharing one filesystem store:
the leader copies, every follower learns what is remote and trims its own disk to the local
retention, the leader is SIGKILLed (a copy may be cut short), the new leader goes on copying
from what is finished without re-copying it, no half-written or orphaned object is left in the
store, and the killed node comes back as a follower that trims its disk the same way. Clients:
confluent-kafka (produce, admin) and kafka-python (ListOffsets -2/-4/-5)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .harness import Cluster, wait_until

confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka (the test extra) is not installed")
ck_admin = pytest.importorskip("confluent_kafka.admin", reason="confluent-kafka (the test extra) is not installed")
pytest.importorskip("kafka", reason="kafka-python (the test extra) is not installed")
from kafka.admin import KafkaAdminClient, OffsetSpec  # noqa: E402
from kafka.structs import TopicPartition  # noqa: E402

TOPIC = "tiered-cluster"
FS = "io.aiven.kafka.tieredstorage.storage.filesystem.FileSystemStorage"


def tiered(root: Path) -> dict[str, str]:
    return {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": "io.aiven.kafka.tieredstorage.RemoteStorageManager",
        "rsm.config.storage.backend.class": FS,
        "rsm.config.storage.root": str(root / "remote"),  # one store for every node, as a bucket is
        "rsm.config.chunk.size": "4096",
        "rlmm.config.remote.log.metadata.topic.num.partitions": "3",
        "remote.log.manager.task.interval.ms": "200",
        "log.retention.check.interval.ms": "200",
    }


def produce(bootstrap: str, count: int, start: int) -> None:
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(start, start + count):
        p.produce(TOPIC, b"v" * 200, key=b"%d" % i)
        p.flush(30)
    assert p.flush(30) == 0


def offsets(bootstrap: str, *specs: OffsetSpec) -> list[int]:
    client = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        tp = TopicPartition(TOPIC, 0)
        return [client.list_partition_offsets({tp: s})[tp].offset for s in specs]
    finally:
        client.close()


def leader_of(bootstrap: str) -> int:
    a = ck_admin.AdminClient({"bootstrap.servers": bootstrap})
    md = a.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions[0]
    return int(md.leader)


def store(root: Path, suffix: str) -> list[str]:
    return sorted(p.name.rsplit(".", 1)[0] for p in (root / "remote").glob(f"{TOPIC}-*/0/*.{suffix}"))


def local_logs(root: Path, node: int) -> list[str]:
    d = root / f"node-{node}" / "data" / f"{TOPIC}-0"
    return sorted(p.name for p in d.glob("*.log")) if d.exists() else []


@pytest.mark.slow
def test_copy_and_local_retention_across_a_leader_kill(tmp_path: Path) -> None:
    c = Cluster(tmp_path, overrides=tiered(tmp_path))
    try:
        c.start()
        a = ck_admin.AdminClient({"bootstrap.servers": c.bootstrap})
        a.create_topics([ck_admin.NewTopic(TOPIC, 1, 3, config={
            "remote.storage.enable": "true", "segment.bytes": "2048", "local.retention.bytes": "1",
            "min.insync.replicas": "2"})])[TOPIC].result(60)
        produce(c.bootstrap, 40, 0)
        wait_until(lambda: len(store(tmp_path, "rsm-manifest")) >= 4, what="segments copied")
        # every replica's disk keeps only what is not copied (followers learn it from the metadata)
        wait_until(lambda: all(len(local_logs(tmp_path, n)) <= 2 for n in (1, 2, 3)), what="local retention everywhere")
        earliest, earliest_local, tiered_before = offsets(c.bootstrap, OffsetSpec.EARLIEST, OffsetSpec.EARLIEST_LOCAL,
                                                          OffsetSpec.LATEST_TIERED)
        assert earliest == 0 and earliest_local > 0 and tiered_before >= earliest_local - 1
        copied_before = set(store(tmp_path, "rsm-manifest"))

        old = leader_of(c.bootstrap)
        c.kill(old)
        survivors = ",".join(c.address(n) for n in (1, 2, 3) if n != old)
        wait_until(lambda: leader_of(survivors) not in (old, -1), what="a new leader")
        produce(survivors, 40, 40)
        wait_until(lambda: offsets(survivors, OffsetSpec.LATEST_TIERED)[0] > tiered_before + 20,
                   what="the new leader copying")
        # what the old leader finished is not copied again: each start offset is in the store once
        starts = [name.split("-")[0] for name in store(tmp_path, "rsm-manifest")]
        assert len(starts) == len(set(starts))
        assert copied_before <= set(store(tmp_path, "rsm-manifest"))
        # no half-written copy is left behind (a killed upload's objects go with its metadata)
        wait_until(lambda: store(tmp_path, "log") == store(tmp_path, "rsm-manifest") == store(tmp_path, "indexes"),
                   what="no orphaned objects")
        assert offsets(survivors, OffsetSpec.EARLIEST, OffsetSpec.LATEST) == [0, 80]

        c.nodes[old].start()  # back as a follower: it learns what is remote and trims its disk
        wait_until(lambda: len(local_logs(tmp_path, old)) <= 2, what="the restarted follower's local retention")
    finally:
        c.close()
