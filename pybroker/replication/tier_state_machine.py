"""A follower's start from remote storage (Kafka's TierStateMachine, KIP-405).

When the leader answers a follower's fetch with OFFSET_MOVED_TO_TIERED_STORAGE (the follower
asked for an offset the leader has only in remote storage), the follower does not copy what is
remote. Its fetcher (replica_fetcher.py) asks the leader's earliest local offset and its epoch
(ListOffsets -4, EARLIEST_LOCAL_TIMESTAMP, as a replica) and, when that epoch is not 0, the end
of the epoch before it (OffsetForLeaderEpoch), to find the epoch of (earliest local - 1) (the
leader's epochs may have gaps: Kafka's worked example, epochs 0@20 1@85 3@90, local start 90:
epoch 2 ends at 90, so 89 is epoch 1). Then, here:

1. `fetch_aux_state` (blocking, a worker thread): the remote segment holding (earliest local -
   1) in that epoch from the RemoteLogMetadataManager (none: RemoteStorageError, retried), its
   LEADER_EPOCH index (the leader-epoch checkpoint as of the segment's end, Kafka's checkpoint
   text "0\\n<count>\\n<epoch> <start offset>\\n...") and its PRODUCER_SNAPSHOT index (Kafka's
   producer snapshot file as of the segment's end), written to `<offset>.snapshot.tmp` in the
   log dir and parsed;
2. `apply_aux_state` (the event loop): the log truncated fully and restarted at the segment's
   end + 1 (the next offset to fetch: the leader's earliest local offset), its log start offset
   the leader's (the records between are the remote tier's), the epoch cache the checkpoint's,
   the producer state the snapshot's; the snapshot file then renamed into place
   (`install_snapshot`, a worker thread).

Concurrency: `fetch_aux_state` and `install_snapshot` block (network, files) and touch no live
state; `apply_aux_state` runs on the event loop, where the log lives.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pybroker.log.log import DeferredTruncation, UnifiedLog
from pybroker.log.producer_state import ProducerStateEntry, read_snapshot, snapshot_file
from pybroker.log.remote.remote_log_metadata_manager import RemoteLogMetadataManager
from pybroker.log.remote.remote_log_segment_metadata import (
    RemoteLogSegmentMetadata,
    TopicIdPartition,
)
from pybroker.log.remote.remote_storage_manager import (
    IndexType,
    RemoteStorageError,
    RemoteStorageManager,
)


@dataclass(slots=True)
class RemoteLogAuxState:
    """What a follower rebuilds its state from: the remote segment, the epochs up to its end,
    and the producers as of its end (`snapshot_tmp`: the file to rename into place)."""

    segment: RemoteLogSegmentMetadata
    epochs: list[tuple[int, int]]
    producers: list[ProducerStateEntry]
    snapshot_tmp: Path

    @property
    def next_offset(self) -> int:
        return self.segment.end_offset + 1


def parse_leader_epoch_checkpoint(data: bytes) -> list[tuple[int, int]]:
    """Kafka's LeaderEpochCheckpointFile text: version 0, a count, then "<epoch> <start offset>"
    lines. Raises RemoteStorageError when malformed."""
    lines = data.decode("utf-8", "replace").split("\n")
    try:
        if int(lines[0]) != 0:
            raise ValueError(f"unknown version {lines[0]!r}")
        count = int(lines[1])
        out = []
        for line in lines[2:2 + count]:
            epoch, start = line.split()
            out.append((int(epoch), int(start)))
    except (ValueError, IndexError) as exc:
        raise RemoteStorageError(f"malformed leader epoch checkpoint from remote storage: {exc}") from None
    if len(out) != count:
        raise RemoteStorageError(f"leader epoch checkpoint from remote storage has {len(out)} of {count} entries")
    return out


def target_epoch(epoch_for_local_start: int, earlier_epoch: int, earlier_end_offset: int,
                 local_start: int) -> int:
    """The epoch of (earliest local offset - 1): Kafka's buildRemoteLogAuxState. The earlier
    epoch (the leader's answer for `epoch - 1`, end offset exclusive) when it reaches past it,
    else the local start's own."""
    if epoch_for_local_start == 0:
        return 0
    return earlier_epoch if earlier_end_offset > local_start - 1 else epoch_for_local_start


def fetch_aux_state(rsm: RemoteStorageManager, rlmm: RemoteLogMetadataManager, tp: TopicIdPartition,
                    epoch: int, local_start: int, log_dir: Path) -> RemoteLogAuxState:
    """Step 1 of the module docstring (blocking). Raises RemoteStorageError."""
    previous = local_start - 1
    segment = rlmm.remote_log_segment_metadata(tp, epoch, previous)
    if segment is None:
        raise RemoteStorageError(f"Couldn't build the state from remote store for partition {tp}: no remote "
                                 f"segment holds offset {previous} (epoch {epoch})")
    epochs = parse_leader_epoch_checkpoint(rsm.fetch_index(segment, IndexType.LEADER_EPOCH))
    snapshot = rsm.fetch_index(segment, IndexType.PRODUCER_SNAPSHOT)
    final = snapshot_file(log_dir, segment.end_offset + 1)
    tmp = final.with_name(final.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(snapshot)
    try:
        producers = read_snapshot(tmp) if snapshot else []
    except Exception as exc:
        tmp.unlink(missing_ok=True)
        raise RemoteStorageError(f"the producer snapshot of {tp} in remote storage is unreadable: {exc}") from None
    return RemoteLogAuxState(segment, epochs, producers, tmp)


def apply_aux_state(plog: UnifiedLog, aux: RemoteLogAuxState, leader_log_start_offset: int,
                    now_ms: int) -> DeferredTruncation:
    """Step 2 of the module docstring (event loop); returns the truncation's file work."""
    next_offset = aux.next_offset
    work = plog.truncate_fully_and_start_at_deferred(next_offset, now_ms)
    # the leader's log start: the offsets between are readable, from remote storage (the log's
    # local log start offset stays the first segment's base)
    plog.log_start_offset = min(max(0, leader_log_start_offset), next_offset)
    cache = plog.leader_epoch_cache
    for epoch, start in aux.epochs:
        if start < next_offset:
            cache.assign(epoch, start)
    psm = plog.producer_state
    psm.producers.clear()
    psm.ongoing_txns.clear()
    for entry in aux.producers:
        psm.producers[entry.producer_id] = entry
        if entry.current_txn_first_offset is not None:
            psm.ongoing_txns[entry.producer_id] = entry.current_txn_first_offset
    psm.map_end_offset = psm.last_snapshot_offset = next_offset
    return work


def install_snapshot(aux: RemoteLogAuxState) -> None:
    """Rename the fetched producer snapshot into place (blocking): a restart then loads it."""
    if aux.snapshot_tmp.exists():
        os.replace(aux.snapshot_tmp, aux.snapshot_tmp.with_name(aux.snapshot_tmp.name[:-len(".tmp")]))


__all__ = ["RemoteLogAuxState", "apply_aux_state", "fetch_aux_state", "install_snapshot",
           "parse_leader_epoch_checkpoint", "target_epoch"]
