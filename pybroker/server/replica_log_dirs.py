"""AlterReplicaLogDirs (34) v1-2: move a partition's log to another of this node's log dirs
(Kafka's KafkaApis.handleAlterReplicaLogDirsRequest + ReplicaManager.alterReplicaLogDirs, KIP-113).
v0 is not advertised: Kafka 4 removed it (KIP-896).

Per partition, in Kafka's order (later entries for the same partition win, as in Kafka's map):
INVALID_TOPIC_EXCEPTION when `<topic>-<partition>.<uuid>-future` would exceed 255 bytes;
LOG_DIR_NOT_FOUND when the path is not the absolute path of a configured log dir (compared as
the string DescribeLogDirs reports); KAFKA_STORAGE_ERROR when that dir is offline (here: not a
writable directory); UNKNOWN_TOPIC_OR_PARTITION for a partition the cluster does not have
(REPLICA_NOT_AVAILABLE if it exists but is not hosted here). A move in progress to another dir
is abandoned first (Kafka's futureReplicaDirChanged). The partition's current dir answers NONE
and moves nothing; another dir answers NONE at once and the move runs in the background.
Without ALTER on CLUSTER every partition answers CLUSTER_AUTHORIZATION_FAILED.

The move (log/future_log.py has the file protocol): roll once, copy sealed segments in worker
threads into a `-future` dir, then on the event loop copy the few bytes appended since and swap
the directories (LogManager.replace_current_with_future); the Partition then points at the new
log. Offsets, batch bytes, indexes, producer state, leader-epoch cache and partition.metadata
are copies of the originals. A crash mid-copy leaves the original in place and the `-future` dir
is removed at the next start. **Difference:** Kafka resumes an interrupted move after a restart
(the future log is reloaded and its ReplicaAlterLogDirsThread restarted); pybroker drops it and
the client must ask again.

Concurrency: the handler runs on the event loop; each move is one task spawned in the broker's
nursery; its copying runs in `trio.to_thread.run_sync`.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from pybroker.log.future_log import FutureLogCopy, future_dir_name
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse
from pybroker.security.authorizer import Op

if TYPE_CHECKING:
    from pybroker.server.broker import Broker
    from pybroker.server.request_context import RequestContext

log = logging.getLogger(__name__)

TopicResult = AlterReplicaLogDirsResponse.AlterReplicaLogDirTopicResult
PartitionResult = AlterReplicaLogDirsResponse.AlterReplicaLogDirPartitionResult

MAX_NAME_BYTES = 255  # file name limit Kafka checks (KAFKA-4893)
MAX_COPY_PASSES = 8
FINISH_BELOW_BYTES = 1 << 20  # sealed bytes left for the event loop to copy at the swap


def _configured_dirs(broker: Broker) -> dict[str, Path]:
    return {os.path.abspath(d): Path(d) for d in broker.log_manager.log_dirs}


def _is_online(path: Path) -> bool:
    return path.is_dir() and os.access(path, os.W_OK | os.X_OK)


def _abandon(broker: Broker, tp: tuple[str, int]) -> None:
    fut = broker.log_manager.future_logs.pop(tp, None)
    if fut is not None:
        fut.discard()


def _alter_one(broker: Broker, topic: str, partition: int, path: str) -> int:
    tp = (topic, partition)
    if len(future_dir_name(topic, partition).encode()) > MAX_NAME_BYTES:
        return Errors.INVALID_TOPIC_EXCEPTION
    dest = _configured_dirs(broker).get(path)
    if dest is None:
        return Errors.LOG_DIR_NOT_FOUND
    if not _is_online(dest):
        return Errors.KAFKA_STORAGE_ERROR
    lm = broker.log_manager
    fut = lm.future_logs.get(tp)
    if fut is not None and os.path.abspath(fut.log_dir) != path:
        _abandon(broker, tp)
        fut = None
    p = broker.replica_manager.get_partition(topic, partition)
    if p is None:
        image_topic = broker.image.topic(topic)
        known = image_topic is not None and partition in image_topic.partitions
        return Errors.REPLICA_NOT_AVAILABLE if known else Errors.UNKNOWN_TOPIC_OR_PARTITION
    current = lm.log_dir_of(topic, partition)
    if current is not None and os.path.abspath(current) == path:
        return Errors.NONE  # Partition.maybeCreateFutureReplica: already there, nothing to do
    if fut is None:
        try:
            fut = FutureLogCopy(p.log, dest)
        except OSError as exc:
            log.warning("cannot create the future log of %s-%s in %s: %s", topic, partition, dest, exc)
            return Errors.KAFKA_STORAGE_ERROR
        lm.future_logs[tp] = fut
        broker.replica_manager.spawn(_run_move, broker, tp, fut)
    return Errors.NONE


async def _run_move(broker: Broker, tp: tuple[str, int], fut: FutureLogCopy) -> None:
    lm = broker.log_manager

    def still_wanted() -> bool:
        return lm.future_logs.get(tp) is fut and lm.get_log(*tp) is fut.log

    try:
        fut.log.roll(broker.clock.wall_ms())  # seal what is there; only the new active segment is copied at the swap
        for _ in range(MAX_COPY_PASSES):
            if not still_wanted():
                break
            await trio.to_thread.run_sync(fut.sync_sealed)
            if fut.pending_bytes() <= FINISH_BELOW_BYTES:
                break
        if not still_wanted():
            fut.discard()
            return
        # From here to the swap there is no await: no append can slip between copy and swap.
        recovery_point = fut.finish()
        old = fut.log
        new = lm.replace_current_with_future(old, fut.dir, recovery_point, now_ms=broker.clock.wall_ms())
        del lm.future_logs[tp]
        p = broker.replica_manager.get_partition(*tp)
        if p is not None and p.log is old:
            p.log = new
        log.info("moved %s-%s to %s", tp[0], tp[1], fut.log_dir)
    except Exception:
        log.exception("moving %s-%s to %s failed; the log stays where it was", tp[0], tp[1], fut.log_dir)
        if lm.future_logs.get(tp) is fut:
            del lm.future_logs[tp]
        fut.discard()
        return
    # the old dir is closed and removed once in-flight reads had time to finish
    await trio.sleep(old.config.file_delete_delay_ms / 1000)
    await trio.to_thread.run_sync(lm.purge_deleted)


def handle_alter_replica_log_dirs(broker: Broker, ctx: RequestContext,
                                  req: AlterReplicaLogDirsRequest) -> AlterReplicaLogDirsResponse:
    wanted: dict[tuple[str, int], str] = {}
    for d in req.dirs:
        for t in d.topics:
            for partition in t.partitions:
                wanted[(t.name, partition)] = d.path
    auth = broker.authorizer
    allowed = auth is None or auth.authorize_cluster(ctx, Op.ALTER)
    by_topic: dict[str, list[PartitionResult]] = {}
    for (topic, partition), path in wanted.items():
        error = _alter_one(broker, topic, partition, path) if allowed else Errors.CLUSTER_AUTHORIZATION_FAILED
        by_topic.setdefault(topic, []).append(PartitionResult(partition_index=partition, error_code=int(error)))
    return AlterReplicaLogDirsResponse(throttle_time_ms=0, results=[
        TopicResult(topic_name=name, partitions=parts) for name, parts in by_topic.items()])
