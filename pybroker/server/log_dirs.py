"""DescribeLogDirs (35) v1-4: the node's log dirs with the partitions each holds (Kafka's
ReplicaManager.describeLogDirs).

One result per configured log dir, absolute path, error 0: for each topic with a partition
in that dir (filtered by the request's topics; null means all), partition size (bytes in
its segments), offset lag max(HW - LEO, 0) (always 0 on one node) and is_future false; a
partition being moved (AlterReplicaLogDirs) is also listed in its destination with is_future
true, the bytes copied so far and lag = current LEO - copied end offset. v4 adds the volume's total and usable bytes from
statvfs (Java's FileStore.getTotalSpace / getUsableSpace). A dir that cannot be read
answers KAFKA_STORAGE_ERROR. Topics with no matching partition are left out, as in Kafka.
v0 is not advertised: Kafka 4 removed it. Without DESCRIBE on the cluster (an authorizer on): no
results and, from v3, the top-level CLUSTER_AUTHORIZATION_FAILED (KafkaApis).

Concurrency: trio thread. statvfs is one quick syscall and sizes are in memory.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import DescribeLogDirsRequest, DescribeLogDirsResponse
from pybroker.security.authorizer import Op
from pybroker.server.auth_helper import cluster_authorized

if TYPE_CHECKING:
    from pybroker.server.broker import Broker
    from pybroker.server.request_context import RequestContext

LONG_MAX = 2**63 - 1

Result = DescribeLogDirsResponse.DescribeLogDirsResult
TopicEntry = DescribeLogDirsResponse.DescribeLogDirsTopic
PartitionEntry = DescribeLogDirsResponse.DescribeLogDirsPartition


def _volume_bytes(path: str) -> tuple[int, int]:
    st = os.statvfs(path)
    # f_bavail: blocks available to unprivileged users, what Java calls usable space
    return min(st.f_blocks * st.f_frsize, LONG_MAX), min(st.f_bavail * st.f_frsize, LONG_MAX)


def handle_describe_log_dirs(broker: Broker, ctx: RequestContext, req: DescribeLogDirsRequest) -> DescribeLogDirsResponse:
    if not cluster_authorized(broker, ctx, Op.DESCRIBE):
        return DescribeLogDirsResponse(throttle_time_ms=0, error_code=Errors.CLUSTER_AUTHORIZATION_FAILED, results=[])
    wanted: set[tuple[str, int]] | None = None
    if req.topics is not None:
        wanted = {(t.topic, p) for t in req.topics for p in t.partitions}
    by_dir: dict[str, dict[str, list[PartitionEntry]]] = {}
    for (topic, partition), plog in list(broker.log_manager.logs.items()):
        if wanted is not None and (topic, partition) not in wanted:
            continue
        p = broker.replica_manager.get_partition(topic, partition)
        hw = p.high_watermark if p is not None else plog.high_watermark
        entry = PartitionEntry(partition_index=partition, partition_size=plog.size_in_bytes(),
                               offset_lag=max(hw - plog.log_end_offset, 0), is_future_key=False)
        by_dir.setdefault(os.path.abspath(Path(plog.dir).parent), {}).setdefault(topic, []).append(entry)
    for (topic, partition), fut in list(broker.log_manager.future_logs.items()):
        if wanted is not None and (topic, partition) not in wanted:
            continue
        entry = PartitionEntry(partition_index=partition, partition_size=fut.copied_bytes,
                               offset_lag=max(fut.log.log_end_offset - fut.copied_end_offset(), 0),
                               is_future_key=True)
        by_dir.setdefault(os.path.abspath(fut.log_dir), {}).setdefault(topic, []).append(entry)
    results = []
    for log_dir in dict.fromkeys(os.path.abspath(d) for d in broker.log_manager.log_dirs):
        try:
            total, usable = _volume_bytes(log_dir)
        except OSError:
            results.append(Result(error_code=Errors.KAFKA_STORAGE_ERROR, log_dir=log_dir, topics=[],
                                  total_bytes=-1, usable_bytes=-1))
            continue
        topics = [TopicEntry(name=name, partitions=sorted(parts, key=lambda e: e.partition_index))
                  for name, parts in sorted(by_dir.get(log_dir, {}).items())]
        results.append(Result(error_code=0, log_dir=log_dir, topics=topics, total_bytes=total,
                              usable_bytes=usable))
    return DescribeLogDirsResponse(throttle_time_ms=0, error_code=0, results=results)
