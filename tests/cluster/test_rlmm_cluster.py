"""The topic-based RLMM on a real 3-node cluster: `__remote_log_metadata` gets Kafka's replication
factor 3, every node's manager (on its own listener) sees the events another node wrote, the
metadata partition's leader can be SIGKILLed and writes go on once a new leader is elected
(the remote log manager retries a RemoteStorageError on its next run; this test retries the
same way), and the killed node, restarted with a fresh manager, reads everything back."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import pytest

from pybroker.client.admin import AdminClient
from pybroker.log.remote.remote_log_segment_metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from pybroker.log.remote.remote_storage_manager import RemoteStorageError
from pybroker.tiered.rlmm_config import REMOTE_LOG_METADATA_TOPIC_NAME
from pybroker.tiered.topic_based_rlmm import TopicBasedRemoteLogMetadataManager

from .harness import Cluster, wait_until

PARTITIONS = 3


def rlmm_on(cluster: Cluster, node: int) -> TopicBasedRemoteLogMetadataManager:
    rlmm = TopicBasedRemoteLogMetadataManager(
        bootstrap_servers=cluster.address(node), node_id=node,
        configs={"remote.log.metadata.topic.num.partitions": str(PARTITIONS),
                 "remote.log.metadata.consume.wait.ms": "20000",
                 "remote.log.metadata.common.client.request.timeout.ms": "5000"})
    rlmm.start()
    assert rlmm.wait_initialized(60), rlmm.initialization_failed
    return rlmm


def seg(tp: TopicIdPartition, start: int) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(RemoteLogSegmentId(tp, os.urandom(16)), start, start + 99, 0, 1, 0, 1000,
                                    ((0, start),))


def sees(m: TopicBasedRemoteLogMetadataManager, tp: TopicIdPartition, offset: int) -> Callable[[], bool]:
    return lambda: m.remote_log_segment_metadata(tp, 0, offset) is not None


def write_retrying(fn: object, *args: object, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            fn(*args)  # type: ignore[operator]
            return
        except RemoteStorageError:
            assert time.monotonic() < deadline, "writes did not resume"
            time.sleep(0.5)


@pytest.mark.slow
def test_metadata_survives_its_partition_leader_being_killed(fresh_cluster: Cluster) -> None:
    c = fresh_cluster
    tp = TopicIdPartition(os.urandom(16), "orders", 0)
    managers = {n: rlmm_on(c, n) for n in (1, 2, 3)}
    try:
        with AdminClient(c.bootstrap) as admin:
            topic = admin.describe_topics([REMOTE_LOG_METADATA_TOPIC_NAME])[REMOTE_LOG_METADATA_TOPIC_NAME]
            assert len(topic.partitions) == PARTITIONS
            assert {len(p.replicas) for p in topic.partitions} == {3}  # Kafka's default, 3 brokers here
        for n, m in managers.items():
            m.on_partition_leadership_changes([tp] if n == 1 else [], [tp] if n != 1 else [])
        wait_until(lambda: all(m.is_ready(tp) for m in managers.values()), what="every node ready")

        first = seg(tp, 0)
        managers[1].add_remote_log_segment_metadata(first)
        managers[1].update_remote_log_segment_metadata(
            RemoteLogSegmentMetadataUpdate(first.remote_log_segment_id, 1, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 1))
        for m in managers.values():
            wait_until(sees(m, tp, 50), what="every node sees it")

        # kill the leader of tp's metadata partition; a surviving node takes over writing
        mp = managers[1].metadata_partition(tp)
        with AdminClient(c.bootstrap) as admin:
            leader = admin.describe_topics([REMOTE_LOG_METADATA_TOPIC_NAME])[REMOTE_LOG_METADATA_TOPIC_NAME] \
                .partitions[mp].leader
        managers.pop(leader).close()
        c.kill(leader)
        writer_node = min(managers)
        writer = managers[writer_node]
        second = seg(tp, 100)
        write_retrying(writer.add_remote_log_segment_metadata, second)
        write_retrying(writer.update_remote_log_segment_metadata, RemoteLogSegmentMetadataUpdate(
            second.remote_log_segment_id, 2, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, writer_node))
        for m in managers.values():
            wait_until(sees(m, tp, 150), what="the survivors see it")

        # the killed node comes back with a fresh manager: it reads both segments from the topic
        c.restart(leader)
        managers[leader] = rlmm_on(c, leader)
        managers[leader].on_partition_leadership_changes([], [tp])
        wait_until(lambda: managers[leader].is_ready(tp), what="the restarted node ready")
        assert [(s.start_offset, s.state) for s in managers[leader].list_remote_log_segments(tp)] == [
            (0, RemoteLogSegmentState.COPY_SEGMENT_FINISHED), (100, RemoteLogSegmentState.COPY_SEGMENT_FINISHED)]
    finally:
        for m in managers.values():
            m.close()
