"""What this node knows of each partition's remote segments: Kafka's RemoteLogMetadataCache,
RemoteLogLeaderEpochState and RemotePartitionMetadataStore, fed with the events of
`__remote_log_metadata` (the topic-based RLMM's consumer applies them, in topic order).

Per partition (RemoteLogMetadataCache):
- `id_to_segment`: every segment not yet DELETE_SEGMENT_FINISHED, by segment id;
- per leader epoch with records in a segment (RemoteLogLeaderEpochState): `offset -> id` of the
  COPY_SEGMENT_FINISHED segments by the epoch's first offset in them (what reads use), the
  "unreferenced" ids (copy in progress, being deleted, or replaced by a later leader's superset
  upload; listed so that retention can clean them up), and the highest finished offset.

Which state each lookup sees (Kafka's table):
    remote_log_segment_metadata(epoch, offset)   COPY_SEGMENT_FINISHED only
    list_remote_log_segments(epoch) / list_all   STARTED, FINISHED, DELETE_STARTED
    DELETE_SEGMENT_FINISHED                      forgotten

Transitions are checked with RemoteLogSegmentState.isValidTransition (a self-transition is valid,
so a replayed event is harmless); an invalid one is logged and dropped, as Kafka drops it. An
update for a segment this cache never saw raises RemoteResourceNotFoundError once the cache is
initialized (before that, Kafka drops it: the add was before the consumed snapshot).

Concurrency: every method is safe from any thread. Each partition's cache has its own lock
(held only for the in-memory change); the store's partition map has one more. Lookups return
immutable values or lists, never live views.
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Iterable

from pybroker.log.remote.remote_log_segment_metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
    is_valid_transition,
)
from pybroker.log.remote.remote_storage_manager import (
    RemoteResourceNotFoundError,
    RemoteStorageError,
)

log = logging.getLogger(__name__)

_S = RemoteLogSegmentState


class RemoteLogMetadataNotReadyError(RemoteStorageError):
    """Kafka's ReplicaNotAvailableException from RemotePartitionMetadataStore: the partition's
    metadata is still being consumed; retriable."""


def is_valid_partition_delete_transition(src: RemotePartitionDeleteState | None,
                                         dst: RemotePartitionDeleteState) -> bool:
    """Kafka's RemotePartitionDeleteState.isValidTransition."""
    if src is None:
        return dst == RemotePartitionDeleteState.DELETE_PARTITION_MARKED
    return src == dst or dst == src + 1


class RemoteLogLeaderEpochState:
    """The segments of one leader epoch of one partition (not locked: its cache's lock guards it)."""

    __slots__ = ("_offsets", "_ids", "unreferenced", "highest_log_offset")

    def __init__(self) -> None:
        self._offsets: list[int] = []  # ascending start offsets of the referenced segments
        self._ids: dict[int, RemoteLogSegmentId] = {}
        self.unreferenced: set[RemoteLogSegmentId] = set()
        self.highest_log_offset: int | None = None

    def referenced(self) -> list[RemoteLogSegmentId]:
        return [self._ids[o] for o in self._offsets]

    def list_all(self, id_to_segment: dict[RemoteLogSegmentId, RemoteLogSegmentMetadata]) -> list[RemoteLogSegmentMetadata]:
        out = []
        for sid in [*self.referenced(), *self.unreferenced]:
            md = id_to_segment.get(sid)
            if md is None:
                raise RemoteResourceNotFoundError(f"No remote log segment metadata found for :{sid}")
            out.append(md)
        out.sort(key=lambda md: md.start_offset)
        return out

    def copy_started(self, sid: RemoteLogSegmentId) -> None:
        self.unreferenced.add(sid)

    def copy_finished(self, start_offset: int, sid: RemoteLogSegmentId, epoch_end_offset: int) -> None:
        # A new leader may upload a superset of what a lagging old leader uploaded for this epoch
        # (duplicate: S0 0-100 then S1 0-200; overlapping: S0 10-90 then S1 5-100): the later
        # entries it covers stop being referenced, so a read of offset 95 finds S1, not S0.
        while (self._offsets and self._offsets[-1] >= start_offset and self.highest_log_offset is not None
               and self.highest_log_offset <= epoch_end_offset):
            last = self._offsets.pop()
            self.unreferenced.add(self._ids.pop(last))
        if start_offset not in self._ids:
            bisect.insort(self._offsets, start_offset)
        self._ids[start_offset] = sid
        self.unreferenced.discard(sid)
        if self.highest_log_offset is None or epoch_end_offset > self.highest_log_offset:
            self.highest_log_offset = epoch_end_offset

    def delete_started(self, start_offset: int, sid: RemoteLogSegmentId) -> None:
        if self._ids.get(start_offset) == sid:
            del self._ids[start_offset]
            self._offsets.remove(start_offset)
        self.unreferenced.add(sid)

    def delete_finished(self, sid: RemoteLogSegmentId) -> None:
        self.unreferenced.discard(sid)

    def floor_entry(self, offset: int) -> RemoteLogSegmentId | None:
        i = bisect.bisect_right(self._offsets, offset)
        return self._ids[self._offsets[i - 1]] if i else None


def _epoch_end_offset(md: RemoteLogSegmentMetadata, epoch: int) -> int:
    """The last offset of `epoch` in the segment: the next epoch's first offset - 1, or the end."""
    for e, first in md.segment_leader_epochs:
        if e > epoch:
            return first - 1
    return md.end_offset


class RemoteLogMetadataCache:
    """One partition's remote segments (Kafka's RemoteLogMetadataCache)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._id_to_segment: dict[RemoteLogSegmentId, RemoteLogSegmentMetadata] = {}
        self._epochs: dict[int, RemoteLogLeaderEpochState] = {}
        self._initialized = threading.Event()

    def mark_initialized(self) -> None:
        self._initialized.set()

    def is_initialized(self) -> bool:
        return self._initialized.is_set()

    def wait_initialized(self, timeout: float | None) -> bool:
        return self._initialized.wait(timeout)

    # --- events ---------------------------------------------------------------------

    def add_copy_in_progress_segment(self, md: RemoteLogSegmentMetadata) -> None:
        if md.state != _S.COPY_SEGMENT_STARTED:
            raise ValueError(f"Given remoteLogSegmentMetadata:{md} should have state as "
                             f"COPY_SEGMENT_STARTED but it contains state as: {md.state.name}")
        sid = md.remote_log_segment_id
        with self._lock:
            existing = self._id_to_segment.get(sid)
            if not self._check(existing.state if existing else None, md.state, sid):
                return
            for epoch, _ in md.segment_leader_epochs:
                self._epoch(epoch).copy_started(sid)
            self._id_to_segment[sid] = md

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        sid = update.remote_log_segment_id
        with self._lock:
            existing = self._id_to_segment.get(sid)
            if existing is None:
                if not self.is_initialized():
                    log.debug("dropping %s: the segment's base metadata was already removed", update)
                    return
                raise RemoteResourceNotFoundError(f"No remote log segment metadata found for :{sid}")
            if not self._check(existing.state, update.state, sid):
                return
            if update.state == _S.COPY_SEGMENT_STARTED:  # unreachable: STARTED -> STARTED is a no-op above
                raise ValueError(f"metadataUpdate: {update} with state COPY_SEGMENT_STARTED can not be updated")
            md = existing.with_update(update)
            for epoch, start in md.segment_leader_epochs:
                state = self._epoch(epoch)
                if update.state == _S.COPY_SEGMENT_FINISHED:
                    state.copy_finished(start, sid, _epoch_end_offset(md, epoch))
                elif update.state == _S.DELETE_SEGMENT_STARTED:
                    state.delete_started(start, sid)
                else:
                    state.delete_finished(sid)
            if update.state == _S.DELETE_SEGMENT_FINISHED:
                del self._id_to_segment[sid]
            else:
                self._id_to_segment[sid] = md

    def _epoch(self, epoch: int) -> RemoteLogLeaderEpochState:
        state = self._epochs.get(epoch)
        if state is None:
            state = self._epochs[epoch] = RemoteLogLeaderEpochState()
        return state

    @staticmethod
    def _check(src: RemoteLogSegmentState | None, dst: RemoteLogSegmentState, sid: RemoteLogSegmentId) -> bool:
        if is_valid_transition(src, dst):
            return True
        log.error("Current state: %s can not be transitioned to target state: %s, segmentId: %s. Dropping the event",
                  None if src is None else src.name, dst.name, sid)
        return False

    # --- lookups ---------------------------------------------------------------------

    def remote_log_segment_metadata(self, leader_epoch: int, offset: int) -> RemoteLogSegmentMetadata | None:
        """The COPY_SEGMENT_FINISHED segment holding `offset` of `leader_epoch`, or None."""
        with self._lock:
            state = self._epochs.get(leader_epoch)
            sid = state.floor_entry(offset) if state is not None else None
            if sid is None:
                return None
            md = self._id_to_segment[sid]
        return md if offset <= _epoch_end_offset(md, leader_epoch) else None

    def highest_offset_for_epoch(self, leader_epoch: int) -> int | None:
        with self._lock:
            state = self._epochs.get(leader_epoch)
            return state.highest_log_offset if state is not None else None

    def list_remote_log_segments(self, leader_epoch: int) -> list[RemoteLogSegmentMetadata]:
        """The segments (any state but DELETE_SEGMENT_FINISHED) with records in `leader_epoch`,
        ascending by start offset."""
        with self._lock:
            state = self._epochs.get(leader_epoch)
            return state.list_all(self._id_to_segment) if state is not None else []

    def list_all_remote_log_segments(self) -> list[RemoteLogSegmentMetadata]:
        """Every segment not yet DELETE_SEGMENT_FINISHED, ascending by start offset (Kafka
        returns them unordered; callers here all want this order)."""
        with self._lock:
            return sorted(self._id_to_segment.values(), key=lambda md: (md.start_offset, md.end_offset))

    def segment_count(self) -> int:
        with self._lock:
            return len(self._id_to_segment)


class RemotePartitionMetadataStore:
    """Every hosted partition's cache and its deletion state (Kafka's RemotePartitionMetadataStore,
    the RemotePartitionMetadataEventHandler the consumer feeds)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._caches: dict[TopicIdPartition, RemoteLogMetadataCache] = {}
        self._delete_metadata: dict[TopicIdPartition, RemotePartitionDeleteMetadata] = {}

    # --- events (the consumer) ----------------------------------------------------------

    def handle_remote_log_segment_metadata(self, md: RemoteLogSegmentMetadata) -> None:
        self._cache_for_event(md.topic_id_partition).add_copy_in_progress_segment(md)

    def handle_remote_log_segment_metadata_update(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        cache = self._cache_for_event(update.remote_log_segment_id.topic_id_partition)
        try:
            cache.update_remote_log_segment_metadata(update)
        except RemoteResourceNotFoundError as e:
            log.warning("Error occurred while updating the remote log segment: %s", e)

    def handle_remote_partition_delete_metadata(self, md: RemotePartitionDeleteMetadata) -> None:
        tp = md.topic_id_partition
        with self._lock:
            self._delete_metadata[tp] = md
            if md.state == RemotePartitionDeleteState.DELETE_PARTITION_FINISHED:
                self._caches.pop(tp, None)
                self._delete_metadata.pop(tp, None)

    def handle(self, event: object) -> None:
        """Apply one decoded `__remote_log_metadata` event (RemotePartitionMetadataEventHandler)."""
        if isinstance(event, RemoteLogSegmentMetadata):
            self.handle_remote_log_segment_metadata(event)
        elif isinstance(event, RemoteLogSegmentMetadataUpdate):
            self.handle_remote_log_segment_metadata_update(event)
        elif isinstance(event, RemotePartitionDeleteMetadata):
            self.handle_remote_partition_delete_metadata(event)
        else:
            raise TypeError(f"not a remote log metadata event: {type(event).__name__}")

    def _cache_for_event(self, tp: TopicIdPartition) -> RemoteLogMetadataCache:
        with self._lock:
            cache = self._caches.get(tp)
        if cache is None:  # the consumer only applies events of loaded partitions
            raise LookupError(f"No partition metadata found for : {tp}")
        return cache

    # --- partitions ---------------------------------------------------------------------

    def maybe_load_partition(self, tp: TopicIdPartition) -> None:
        with self._lock:
            self._caches.setdefault(tp, RemoteLogMetadataCache())

    def mark_initialized(self, tp: TopicIdPartition) -> None:
        with self._lock:
            cache = self._caches.get(tp)
        if cache is not None:
            cache.mark_initialized()

    def is_initialized(self, tp: TopicIdPartition) -> bool:
        with self._lock:
            cache = self._caches.get(tp)
        return cache is not None and cache.is_initialized()

    def is_loaded(self, tp: TopicIdPartition) -> bool:
        with self._lock:
            return tp in self._caches

    def clear_topic_partition(self, tp: TopicIdPartition) -> None:
        with self._lock:
            self._caches.pop(tp, None)

    def clear_topic_partitions(self, tps: Iterable[TopicIdPartition]) -> None:
        with self._lock:
            for tp in tps:
                self._caches.pop(tp, None)

    def partitions(self) -> list[TopicIdPartition]:
        with self._lock:
            return list(self._caches)

    def partition_delete_metadata(self, tp: TopicIdPartition) -> RemotePartitionDeleteMetadata | None:
        with self._lock:
            return self._delete_metadata.get(tp)

    # --- lookups ---------------------------------------------------------------------

    def cache(self, tp: TopicIdPartition) -> RemoteLogMetadataCache:
        """The partition's initialized cache (Kafka's getRemoteLogMetadataCache)."""
        with self._lock:
            cache = self._caches.get(tp)
        if cache is None:
            raise RemoteResourceNotFoundError(f"No resource found for partition: {tp}")
        if not cache.is_initialized():
            raise RemoteLogMetadataNotReadyError(f"Remote log metadata cache is not initialized for partition: {tp}")
        return cache

    def remote_log_segment_metadata(self, tp: TopicIdPartition, offset: int,
                                    epoch_for_offset: int) -> RemoteLogSegmentMetadata | None:
        return self.cache(tp).remote_log_segment_metadata(epoch_for_offset, offset)

    def highest_log_offset(self, tp: TopicIdPartition, leader_epoch: int) -> int | None:
        return self.cache(tp).highest_offset_for_epoch(leader_epoch)

    def list_remote_log_segments(self, tp: TopicIdPartition,
                                 leader_epoch: int | None = None) -> list[RemoteLogSegmentMetadata]:
        cache = self.cache(tp)
        if leader_epoch is None:
            return cache.list_all_remote_log_segments()
        return cache.list_remote_log_segments(leader_epoch)

    def remote_log_size(self, tp: TopicIdPartition, leader_epoch: int) -> int:
        """Kafka's remoteLogSize: the sizes of the epoch's listed segments (any listed state)."""
        return sum(md.segment_size_in_bytes for md in self.list_remote_log_segments(tp, leader_epoch))

    def close(self) -> None:
        with self._lock:
            self._caches = {}
            self._delete_metadata = {}


__all__ = ["RemoteLogLeaderEpochState", "RemoteLogMetadataCache", "RemoteLogMetadataNotReadyError",
           "RemotePartitionMetadataStore", "is_valid_partition_delete_transition"]
