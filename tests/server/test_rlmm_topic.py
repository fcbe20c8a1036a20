"""The topic-based RemoteLogMetadataManager against a live pybroker: `__remote_log_metadata` is
created as Kafka creates it (checked with confluent-kafka's admin client), segment events are
durable and read back through a second manager (a new leader knows what is remote), each event
sits in the metadata partition Kafka's partitioner picks (read with a confluent-kafka consumer
and decoded from Kafka's bytes), a record that does not parse is skipped, and a write to a
broker that is down fails with RemoteStorageError within its timeouts."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator

import pytest

from pybroker.log.remote import metadata_serde
from pybroker.log.remote.remote_log_metadata_cache import RemoteLogMetadataNotReadyError
from pybroker.log.remote.remote_log_segment_metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)
from pybroker.log.remote.remote_storage_manager import (
    RemoteResourceNotFoundError,
    RemoteStorageError,
)
from pybroker.testing import EmbeddedBroker
from pybroker.tiered.rlmm_config import REMOTE_LOG_METADATA_TOPIC_NAME
from pybroker.tiered.topic_based_rlmm import TopicBasedRemoteLogMetadataManager

confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka (the test extra) is not installed")
ck_admin = pytest.importorskip("confluent_kafka.admin", reason="confluent-kafka (the test extra) is not installed")

PARTITIONS = 5
S = RemoteLogSegmentState


def wait_until(predicate: Callable[[], bool], timeout: float = 15.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.fixture
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as b:
        yield b


def new_rlmm(broker: EmbeddedBroker, node_id: int, **extra: str) -> TopicBasedRemoteLogMetadataManager:
    rlmm = TopicBasedRemoteLogMetadataManager(
        bootstrap_servers=broker.bootstrap_servers, node_id=node_id,
        configs={"remote.log.metadata.topic.num.partitions": str(PARTITIONS), **extra}, standalone=True)
    rlmm.start()
    assert rlmm.wait_initialized(30), rlmm.initialization_failed
    return rlmm


def segment(tp: TopicIdPartition, start: int, end: int, epochs: tuple[tuple[int, int], ...]) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(RemoteLogSegmentId(tp, os.urandom(16)), start, end, 1_700_000_000_000 + end, 1,
                                    int(time.time() * 1000), (end - start + 1) * 100, epochs,
                                    custom_metadata=b"chunk-index", txn_idx_empty=True)


def finished(md: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(md.remote_log_segment_id, int(time.time() * 1000), S.COPY_SEGMENT_FINISHED, 1)


def raw_records(broker: EmbeddedBroker, partition: int) -> list[bytes]:
    """Every value in one metadata partition, read by confluent-kafka."""
    c = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "rlmm-test",
                                  "enable.auto.commit": False})
    try:
        _, high = c.get_watermark_offsets(confluent_kafka.TopicPartition(REMOTE_LOG_METADATA_TOPIC_NAME, partition),
                                          timeout=10)
        c.assign([confluent_kafka.TopicPartition(REMOTE_LOG_METADATA_TOPIC_NAME, partition, 0)])
        out: list[bytes] = []
        deadline = time.monotonic() + 15
        while len(out) < high:
            assert time.monotonic() < deadline, f"read {len(out)} of {high} records"
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                out.append(m.value())
        return out
    finally:
        c.close()


def test_metadata_topic_is_created_as_kafka_creates_it(broker: EmbeddedBroker) -> None:
    rlmm = new_rlmm(broker, 1)
    try:
        admin = ck_admin.AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        md = admin.list_topics(REMOTE_LOG_METADATA_TOPIC_NAME, timeout=10).topics[REMOTE_LOG_METADATA_TOPIC_NAME]
        assert len(md.partitions) == PARTITIONS
        assert {len(p.replicas) for p in md.partitions.values()} == {1}  # standalone: replication factor 1
        resource = ck_admin.ConfigResource("topic", REMOTE_LOG_METADATA_TOPIC_NAME)
        configs = admin.describe_configs([resource])[resource].result(timeout=10)
        assert configs["retention.ms"].value == "-1"
        assert configs["cleanup.policy"].value == "delete"
        assert configs["remote.storage.enable"].value == "false"
    finally:
        rlmm.close()
    # a second manager with another partition count refuses the existing topic, as Kafka does
    other = TopicBasedRemoteLogMetadataManager(bootstrap_servers=broker.bootstrap_servers, node_id=2,
                                               configs={"remote.log.metadata.topic.num.partitions": "7"})
    other.start()
    try:
        assert not other.wait_initialized(30)
        assert "partition count [5]" in (other.initialization_failed or "")
        with pytest.raises(RemoteStorageError, match="failed to initialize"):
            other.remote_log_segment_metadata(TopicIdPartition(os.urandom(16), "t", 0), 0, 0)
    finally:
        other.close()


def test_events_are_durable_and_a_new_leader_reads_them(broker: EmbeddedBroker) -> None:
    tp = TopicIdPartition(os.urandom(16), "orders", 3)
    other_tp = TopicIdPartition(os.urandom(16), "payments", 0)
    leader = new_rlmm(broker, 1)
    try:
        with pytest.raises(RemoteStorageError, match="not assigned"):  # not hosted here: no consumer reads it back
            leader.add_remote_log_segment_metadata(segment(tp, 0, 9, ((0, 0),)))
        with pytest.raises(RemoteResourceNotFoundError):
            leader.highest_offset_for_epoch(tp, 0)
        leader.on_partition_leadership_changes([tp, other_tp], [])
        wait_until(lambda: leader.is_ready(tp) and leader.is_ready(other_tp), what="the leader's partitions ready")

        s0, s1 = segment(tp, 0, 99, ((0, 0),)), segment(tp, 100, 249, ((0, 100), (2, 180)))
        unfinished = segment(tp, 250, 299, ((2, 250),))
        for s in (s0, s1, unfinished):
            leader.add_remote_log_segment_metadata(s)
        # a write returns once this node's cache has it: no waiting here
        assert [m.state for m in leader.list_remote_log_segments(tp)] == [S.COPY_SEGMENT_STARTED] * 3
        u0, u1 = finished(s0), finished(s1)
        leader.update_remote_log_segment_metadata(u0)
        leader.update_remote_log_segment_metadata(u1)
        leader.add_remote_log_segment_metadata(segment(other_tp, 0, 5, ((4, 0),)))
        found = leader.remote_log_segment_metadata(tp, 2, 200)
        assert found is not None and found.remote_log_segment_id == s1.remote_log_segment_id
        assert leader.highest_offset_for_epoch(tp, 0) == 179 and leader.highest_offset_for_epoch(tp, 2) == 249
        with pytest.raises(ValueError, match="COPY_SEGMENT_STARTED"):
            leader.update_remote_log_segment_metadata(
                RemoteLogSegmentMetadataUpdate(s0.remote_log_segment_id, 0, S.COPY_SEGMENT_STARTED, 1))

        # the records are in Kafka's metadata partition of tp, in Kafka's bytes, readable by any client
        partition = leader.metadata_partition(tp)
        events = [metadata_serde.deserialize(v) for v in raw_records(broker, partition)]
        ours = [e for e in events if getattr(e, "topic_id_partition", None) == tp
                or getattr(getattr(e, "remote_log_segment_id", None), "topic_id_partition", None) == tp]
        assert ours == [s0, s1, unfinished, u0, u1]
        for p in range(PARTITIONS):
            if p not in (partition, leader.metadata_partition(other_tp)):
                assert raw_records(broker, p) == []

        # a new leader on another node: reads the topic from the start and knows what is remote
        follower = new_rlmm(broker, 2)
        try:
            follower.on_partition_leadership_changes([], [tp])
            wait_until(lambda: follower.is_ready(tp), what="the new leader's partition ready")
            assert list(follower.list_remote_log_segments(tp)) == list(leader.list_remote_log_segments(tp))
            found = follower.remote_log_segment_metadata(tp, 0, 150)
            assert found is not None and found.remote_log_segment_id == s1.remote_log_segment_id
            assert found.custom_metadata == b"chunk-index" and found.txn_idx_empty
            assert follower.remote_log_segment_metadata(tp, 2, 260) is None  # copy not finished
            assert follower.remote_log_size(tp, 2) == s1.segment_size_in_bytes + unfinished.segment_size_in_bytes
            with pytest.raises(RemoteResourceNotFoundError):  # hosted by the other node only
                follower.highest_offset_for_epoch(other_tp, 4)

            # the new leader writes; the old one (still hosting tp) sees it too
            follower.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
                unfinished.remote_log_segment_id, 1, S.DELETE_SEGMENT_STARTED, 2))
            wait_until(lambda: [m.state for m in leader.list_remote_log_segments(tp, 2)][-1] == S.DELETE_SEGMENT_STARTED,
                       what="the other node to apply the update")
            follower.put_remote_partition_delete_metadata(
                RemotePartitionDeleteMetadata(tp, RemotePartitionDeleteState.DELETE_PARTITION_FINISHED, 2, 2))
            with pytest.raises(RemoteResourceNotFoundError):  # a deleted partition's metadata is gone
                follower.list_remote_log_segments(tp)

            # a partition this node stops hosting is dropped; hosting it again re-reads its metadata
            leader.on_stop_partitions([other_tp])
            wait_until(lambda: not leader.store.is_loaded(other_tp), what="the stopped partition dropped")
            leader.on_partition_leadership_changes([other_tp], [])
            wait_until(lambda: leader.is_ready(other_tp), what="the partition re-read")
            assert [m.start_offset for m in leader.list_remote_log_segments(other_tp)] == [0]
        finally:
            follower.close()
    finally:
        leader.close()
    assert not leader._consumer_task.thread.is_alive()  # type: ignore[union-attr]
    with pytest.raises(RemoteStorageError):
        leader.add_remote_log_segment_metadata(segment(tp, 300, 310, ((2, 300),)))


def test_a_record_that_does_not_parse_is_skipped(broker: EmbeddedBroker) -> None:
    tp = TopicIdPartition(os.urandom(16), "t", 0)
    rlmm = new_rlmm(broker, 1)
    try:
        rlmm.on_partition_leadership_changes([tp], [])
        wait_until(lambda: rlmm.is_ready(tp), what="ready")
        p = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers})
        p.produce(REMOTE_LOG_METADATA_TOPIC_NAME, value=b"\x01\x07\x00garbage", partition=rlmm.metadata_partition(tp))
        assert p.flush(10) == 0
        s = segment(tp, 0, 9, ((0, 0),))
        rlmm.add_remote_log_segment_metadata(s)
        assert list(rlmm.list_remote_log_segments(tp)) == [s]
        assert rlmm._consumer_task is not None and rlmm._consumer_task.thread.is_alive()
    finally:
        rlmm.close()


def test_lookups_before_the_partition_is_caught_up_are_retriable_errors(broker: EmbeddedBroker) -> None:
    tp = TopicIdPartition(os.urandom(16), "t", 1)
    rlmm = new_rlmm(broker, 1)
    try:
        rlmm.store.maybe_load_partition(tp)  # loaded, as on_partition_leadership_changes does first
        with pytest.raises(RemoteLogMetadataNotReadyError):
            rlmm.list_remote_log_segments(tp)
    finally:
        rlmm.close()


def test_a_write_to_a_broker_that_is_down_fails_within_its_timeouts() -> None:
    broker = EmbeddedBroker()
    broker.start()
    tp = TopicIdPartition(os.urandom(16), "t", 0)
    rlmm = new_rlmm(broker, 1, **{"remote.log.metadata.consume.wait.ms": "3000",
                                  "remote.log.metadata.common.client.request.timeout.ms": "2000",
                                  "remote.log.metadata.producer.retries": "2"})
    try:
        rlmm.on_partition_leadership_changes([tp], [])
        wait_until(lambda: rlmm.is_ready(tp), what="ready")
        rlmm.add_remote_log_segment_metadata(segment(tp, 0, 9, ((0, 0),)))
        broker.stop()
        started = time.monotonic()
        with pytest.raises(RemoteStorageError):
            rlmm.add_remote_log_segment_metadata(segment(tp, 10, 19, ((0, 10),)))
        # bounded by the producer's request timeout and retries plus the consume wait, not hung
        assert time.monotonic() - started < 3 * 2.0 * 2 + 3.0 + 10
    finally:
        rlmm.close()
        broker.close()
    assert not rlmm._consumer_task.thread.is_alive()  # type: ignore[union-attr]


def test_too_few_brokers_for_the_replication_factor_times_the_initialization_out(broker: EmbeddedBroker) -> None:
    # not standalone: Kafka's replication factor 3 on a one-broker cluster; creation is retried
    # until remote.log.metadata.initialization.retry.max.timeout.ms, then initialization fails
    rlmm = TopicBasedRemoteLogMetadataManager(
        bootstrap_servers=broker.bootstrap_servers, node_id=1,
        configs={"remote.log.metadata.initialization.retry.max.timeout.ms": "1500"})
    rlmm.start()
    try:
        assert not rlmm.wait_initialized(30)
        assert "Timed out in initializing the resources" in (rlmm.initialization_failed or "")
        admin = ck_admin.AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        assert REMOTE_LOG_METADATA_TOPIC_NAME not in admin.list_topics(timeout=10).topics
    finally:
        rlmm.close()
