"""AlterReplicaLogDirs with real clients against a node with two log dirs: kafka-python's
upstream `test_alter_replica_log_dirs` (describe_log_dirs, then alter to the current dir ->
NoError), and a real move with kafka-python's `alter_replica_log_dirs`, read back with
confluent-kafka."""

from __future__ import annotations

import time

from .adapters import confluent_admin, confluent_consume, confluent_produce, kafka_python_admin
from .helpers import Rec

NODE_ID = 1


def _create(bootstrap: str, name: str) -> None:
    from confluent_kafka.admin import NewTopic

    admin = confluent_admin(bootstrap)
    admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1,
                                  config={"segment.bytes": "8192"})], request_timeout=15)[name].result(20)


def _dir_of(admin, topic: str) -> dict[str, bool]:
    """{log dir: is_future} holding partition 0 of topic, from kafka-python's describe_log_dirs."""
    out = {}
    for broker in admin.describe_log_dirs():
        for result in broker["log_dirs"]:
            assert result["error_code"] == 0
            for t in result["topics"]:
                if t["name"] == topic:
                    for p in t["partitions"]:
                        if p["partition_index"] == 0:
                            out[result["log_dir"]] = p["is_future_key"]
    return out


def _two_dirs(tmp_path) -> tuple[str, str]:
    a, b = tmp_path / "jbod-a", tmp_path / "jbod-b"
    a.mkdir()
    b.mkdir()
    return str(a.resolve()), str(b.resolve())


def test_kafka_python_alter_replica_log_dirs_to_current_dir_is_no_error(broker_factory, tmp_path, topic):
    from kafka import TopicPartitionReplica
    from kafka.errors import NoError

    node = broker_factory(**{"log.dirs": ",".join(_two_dirs(tmp_path))})
    _create(node.bootstrap, topic)
    admin = kafka_python_admin(node.bootstrap)
    try:
        (current,) = _dir_of(admin, topic)
        tpr = TopicPartitionReplica(topic, 0, NODE_ID)
        assert admin.alter_replica_log_dirs({tpr: current}) == {tpr: NoError}
        assert _dir_of(admin, topic) == {current: False}
    finally:
        admin.close()


def test_kafka_python_moves_a_partition_and_confluent_reads_it_all(broker_factory, tmp_path, topic):
    from kafka import TopicPartitionReplica
    from kafka.errors import LogDirNotFoundError, NoError

    dirs = _two_dirs(tmp_path)
    node = broker_factory(**{"log.dirs": ",".join(dirs)})
    _create(node.bootstrap, topic)
    first = [Rec(key=b"k%d" % i, value=b"v%d" % i * 20) for i in range(300)]
    assert confluent_produce(node.bootstrap, topic, first, **{"batch.size": 2000}) == list(range(300))
    admin = kafka_python_admin(node.bootstrap)
    try:
        (current,) = _dir_of(admin, topic)
        other = next(d for d in dirs if d != current)
        tpr = TopicPartitionReplica(topic, 0, NODE_ID)
        assert admin.alter_replica_log_dirs({tpr: "/not/a/log/dir"}) == {tpr: LogDirNotFoundError}
        assert admin.alter_replica_log_dirs({tpr: other}) == {tpr: NoError}
        deadline = time.monotonic() + 30
        while _dir_of(admin, topic) != {other: False}:
            assert time.monotonic() < deadline, _dir_of(admin, topic)
            time.sleep(0.1)
    finally:
        admin.close()
    second = [Rec(key=b"after%d" % i, value=b"w%d" % i) for i in range(20)]
    assert confluent_produce(node.bootstrap, topic, second) == list(range(300, 320))
    got = confluent_consume(node.bootstrap, topic, count=320)
    assert [(r.key, r.value) for r in got] == [(r.key, r.value) for r in first + second]
