"""RemoteLogMetadataCache / RemotePartitionMetadataStore: Kafka's state table (which lookup sees
which state), transitions checked and invalid ones dropped, replays harmless, a later leader's
superset upload replacing an earlier one, the store's not-found / not-ready errors, and a
hypothesis comparison with a plain model of a single leader's uploads."""

from __future__ import annotations

import dataclasses
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pybroker.log.remote.remote_log_metadata_cache import (
    RemoteLogMetadataCache,
    RemoteLogMetadataNotReadyError,
    RemotePartitionMetadataStore,
    is_valid_partition_delete_transition,
)
from pybroker.log.remote.remote_log_segment_metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)
from pybroker.log.remote.remote_storage_manager import RemoteResourceNotFoundError

S = RemoteLogSegmentState
TP = TopicIdPartition(b"\x01" * 16, "t", 0)


def seg(n: int, start: int, end: int, epochs: tuple[tuple[int, int], ...] = ((0, 0),), size: int = 100,
        tp: TopicIdPartition = TP) -> RemoteLogSegmentMetadata:
    epochs = epochs if epochs != ((0, 0),) else ((0, start),)
    return RemoteLogSegmentMetadata(RemoteLogSegmentId(tp, n.to_bytes(16, "big")), start, end, 0, 1, 0, size, epochs)


def upd(md: RemoteLogSegmentMetadata, state: S) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(md.remote_log_segment_id, 5, state, 2)


def new_cache() -> RemoteLogMetadataCache:
    c = RemoteLogMetadataCache()
    c.mark_initialized()
    return c


def test_each_state_is_seen_by_the_lookups_kafka_names() -> None:
    c = new_cache()
    s = seg(1, 0, 99)
    c.add_copy_in_progress_segment(s)
    assert c.remote_log_segment_metadata(0, 50) is None  # STARTED: not readable
    assert c.highest_offset_for_epoch(0) is None
    assert [m.state for m in c.list_remote_log_segments(0)] == [S.COPY_SEGMENT_STARTED]

    c.update_remote_log_segment_metadata(upd(s, S.COPY_SEGMENT_FINISHED))
    found = c.remote_log_segment_metadata(0, 50)
    assert found is not None and found.state == S.COPY_SEGMENT_FINISHED and found.broker_id == 2
    assert c.remote_log_segment_metadata(0, 100) is None  # past the segment's end
    assert c.highest_offset_for_epoch(0) == 99

    c.update_remote_log_segment_metadata(upd(s, S.DELETE_SEGMENT_STARTED))
    assert c.remote_log_segment_metadata(0, 50) is None  # being deleted: not readable, still listed
    assert [m.state for m in c.list_all_remote_log_segments()] == [S.DELETE_SEGMENT_STARTED]
    assert c.highest_offset_for_epoch(0) == 99  # Kafka keeps the epoch's highest offset

    c.update_remote_log_segment_metadata(upd(s, S.DELETE_SEGMENT_FINISHED))
    assert c.list_all_remote_log_segments() == [] and c.list_remote_log_segments(0) == []
    assert c.segment_count() == 0


def test_invalid_transitions_are_dropped_and_replays_change_nothing() -> None:
    c = new_cache()
    s = seg(1, 0, 99)
    with pytest.raises(ValueError, match="COPY_SEGMENT_STARTED"):
        c.add_copy_in_progress_segment(dataclasses.replace(s, state=S.COPY_SEGMENT_FINISHED))
    c.add_copy_in_progress_segment(s)
    c.add_copy_in_progress_segment(s)  # replayed add
    c.update_remote_log_segment_metadata(upd(s, S.DELETE_SEGMENT_FINISHED))  # STARTED -> DELETE_FINISHED: dropped
    assert c.list_all_remote_log_segments() == [s]
    c.update_remote_log_segment_metadata(upd(s, S.COPY_SEGMENT_FINISHED))
    before = (c.list_all_remote_log_segments(), c.remote_log_segment_metadata(0, 10), c.highest_offset_for_epoch(0))
    c.update_remote_log_segment_metadata(upd(s, S.COPY_SEGMENT_FINISHED))  # replayed update
    c.add_copy_in_progress_segment(s)  # FINISHED -> STARTED: dropped
    assert (c.list_all_remote_log_segments(), c.remote_log_segment_metadata(0, 10), c.highest_offset_for_epoch(0)) == before


def test_update_of_an_unknown_segment() -> None:
    c = RemoteLogMetadataCache()
    c.update_remote_log_segment_metadata(upd(seg(1, 0, 9), S.COPY_SEGMENT_FINISHED))  # before init: dropped
    c.mark_initialized()
    with pytest.raises(RemoteResourceNotFoundError):
        c.update_remote_log_segment_metadata(upd(seg(1, 0, 9), S.COPY_SEGMENT_FINISHED))


def test_a_segment_spanning_epochs_is_found_only_inside_each_epochs_range() -> None:
    c = new_cache()
    s = seg(1, 0, 199, ((1, 0), (2, 100)))
    c.add_copy_in_progress_segment(s)
    c.update_remote_log_segment_metadata(upd(s, S.COPY_SEGMENT_FINISHED))
    assert c.remote_log_segment_metadata(1, 50) is not None
    assert c.remote_log_segment_metadata(1, 150) is None  # offset 150 was written in epoch 2
    assert c.remote_log_segment_metadata(2, 150) is not None
    assert c.remote_log_segment_metadata(2, 50) is None
    assert c.highest_offset_for_epoch(1) == 99 and c.highest_offset_for_epoch(2) == 199
    assert c.remote_log_segment_metadata(3, 150) is None


def _finish(c: RemoteLogMetadataCache, *segs: RemoteLogSegmentMetadata) -> None:
    for s in segs:
        c.add_copy_in_progress_segment(s)
        c.update_remote_log_segment_metadata(upd(s, S.COPY_SEGMENT_FINISHED))


def test_a_new_leaders_superset_upload_replaces_the_old_one() -> None:
    c = new_cache()
    s0, s1 = seg(1, 0, 100), seg(2, 0, 200)
    _finish(c, s0, s1)
    found = c.remote_log_segment_metadata(0, 50)
    assert found is not None and found.remote_log_segment_id == s1.remote_log_segment_id
    # the replaced one is still listed so that retention deletes it
    assert {m.remote_log_segment_id for m in c.list_remote_log_segments(0)} == {s0.remote_log_segment_id,
                                                                                 s1.remote_log_segment_id}


def test_overlapping_uploads_read_the_later_leaders_segment() -> None:
    c = new_cache()
    s0, s1, s2 = seg(1, 10, 90), seg(2, 5, 100), seg(3, 101, 200)
    _finish(c, s0, s1, s2)
    for offset, want in ((95, s1), (50, s1), (150, s2)):
        found = c.remote_log_segment_metadata(0, offset)
        assert found is not None and found.remote_log_segment_id == want.remote_log_segment_id
    assert [m.start_offset for m in c.list_remote_log_segments(0)] == [5, 10, 101]


def test_store_errors_readiness_sizes_and_partition_deletion() -> None:
    store = RemotePartitionMetadataStore()
    with pytest.raises(RemoteResourceNotFoundError):
        store.list_remote_log_segments(TP)
    store.maybe_load_partition(TP)
    assert not store.is_initialized(TP)
    with pytest.raises(RemoteLogMetadataNotReadyError):
        store.highest_log_offset(TP, 0)
    with pytest.raises(LookupError):  # the consumer applies only loaded partitions' events
        store.handle(seg(9, 0, 1, tp=TopicIdPartition(b"\x02" * 16, "u", 0)))
    a, b = seg(1, 0, 99, size=1000), seg(2, 100, 199, size=24)
    for s in (a, b):
        store.handle(s)
    store.handle(upd(a, S.COPY_SEGMENT_FINISHED))
    store.handle(upd(seg(3, 0, 1), S.COPY_SEGMENT_FINISHED))  # unknown segment: logged, not raised
    store.mark_initialized(TP)
    assert store.is_initialized(TP)
    assert store.remote_log_size(TP, 0) == 1024
    assert store.remote_log_segment_metadata(TP, 10, 0) is not None
    assert store.remote_log_segment_metadata(TP, 150, 0) is None  # b not finished
    marked = RemotePartitionDeleteMetadata(TP, RemotePartitionDeleteState.DELETE_PARTITION_MARKED, 1, 1)
    store.handle(marked)
    assert store.partition_delete_metadata(TP) == marked
    store.handle(RemotePartitionDeleteMetadata(TP, RemotePartitionDeleteState.DELETE_PARTITION_FINISHED, 2, 1))
    assert store.partition_delete_metadata(TP) is None and not store.is_loaded(TP)


def test_partition_delete_transitions() -> None:
    D = RemotePartitionDeleteState
    assert is_valid_partition_delete_transition(None, D.DELETE_PARTITION_MARKED)
    assert not is_valid_partition_delete_transition(None, D.DELETE_PARTITION_STARTED)
    assert is_valid_partition_delete_transition(D.DELETE_PARTITION_MARKED, D.DELETE_PARTITION_STARTED)
    assert is_valid_partition_delete_transition(D.DELETE_PARTITION_STARTED, D.DELETE_PARTITION_STARTED)
    assert not is_valid_partition_delete_transition(D.DELETE_PARTITION_MARKED, D.DELETE_PARTITION_FINISHED)
    assert not is_valid_partition_delete_transition(D.DELETE_PARTITION_FINISHED, D.DELETE_PARTITION_MARKED)


def test_concurrent_writers_and_readers() -> None:
    c = new_cache()
    errors: list[BaseException] = []

    def writer(k: int) -> None:
        try:
            for i in range(200):
                s = seg(k * 1000 + i, (k * 1000 + i) * 10, (k * 1000 + i) * 10 + 9)
                _finish(c, s)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    def reader() -> None:
        try:
            for _ in range(400):
                segs = c.list_remote_log_segments(0)
                assert segs == sorted(segs, key=lambda m: m.start_offset)
                c.remote_log_segment_metadata(0, 5)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)] + [threading.Thread(target=reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert c.segment_count() == 800 and c.highest_offset_for_epoch(0) == 3199 * 10 + 9


# --- a single leader's uploads against a plain model ----------------------------------

NEXT = {None: {S.COPY_SEGMENT_STARTED}, S.COPY_SEGMENT_STARTED: {S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED},
        S.COPY_SEGMENT_FINISHED: {S.DELETE_SEGMENT_STARTED}, S.DELETE_SEGMENT_STARTED: {S.DELETE_SEGMENT_FINISHED},
        S.DELETE_SEGMENT_FINISHED: set()}


@st.composite
def uploads(draw: st.DrawFn) -> tuple[list[RemoteLogSegmentMetadata], list[tuple[int, S]]]:
    """Consecutive, non-overlapping segments (epochs rise along the log), then a random order of
    adds and updates, including invalid ones and replays."""
    n = draw(st.integers(1, 6))
    segs, offset, epoch = [], 0, 0
    for i in range(n):
        length = draw(st.integers(1, 20))
        epochs = [(epoch, offset)]
        if draw(st.booleans()) and length > 1:  # a new epoch starts inside this segment
            epoch += draw(st.integers(1, 2))
            epochs.append((epoch, offset + draw(st.integers(1, length - 1))))
        segs.append(RemoteLogSegmentMetadata(RemoteLogSegmentId(TP, i.to_bytes(16, "big")), offset,
                                             offset + length - 1, 0, 1, 0, length, tuple(epochs)))
        offset += length
        if draw(st.booleans()):
            epoch += 1
    ops = draw(st.lists(st.tuples(st.integers(0, n - 1), st.sampled_from(S)), max_size=40))
    return segs, ops


@settings(max_examples=300, deadline=None)
@given(uploads())
def test_cache_matches_a_model_of_one_leaders_uploads(case: tuple[list[RemoteLogSegmentMetadata], list[tuple[int, S]]]) -> None:
    segs, ops = case
    c = new_cache()
    state: dict[int, S] = {}
    reached_finished: set[int] = set()
    for i, target in ops:
        s = segs[i]
        cur = state.get(i)
        valid = cur == target or target in NEXT[cur]
        if target == S.COPY_SEGMENT_STARTED:
            c.add_copy_in_progress_segment(s)
        elif i not in state:
            with pytest.raises(RemoteResourceNotFoundError):
                c.update_remote_log_segment_metadata(upd(s, target))
            continue
        else:
            c.update_remote_log_segment_metadata(upd(s, target))
        if valid:
            state[i] = target
            if target == S.COPY_SEGMENT_FINISHED:
                reached_finished.add(i)
            if target == S.DELETE_SEGMENT_FINISHED:
                del state[i]  # forgotten: a later add starts it afresh, as Kafka's cache does

    listed = [i for i in range(len(segs)) if i in state]
    assert [m.remote_log_segment_id for m in c.list_all_remote_log_segments()] == \
        [segs[i].remote_log_segment_id for i in listed]
    assert all(m.state == state[i] for i, m in zip(listed, c.list_all_remote_log_segments(), strict=True))
    for epoch in {e for s in segs for e, _ in s.segment_leader_epochs}:
        in_epoch = [i for i in listed if any(e == epoch for e, _ in segs[i].segment_leader_epochs)]
        assert [m.remote_log_segment_id for m in c.list_remote_log_segments(epoch)] == \
            [segs[i].remote_log_segment_id for i in in_epoch]

        def epoch_range(s: RemoteLogSegmentMetadata, epoch: int = epoch) -> range:
            eps = s.segment_leader_epochs
            for k, (e, first) in enumerate(eps):
                if e == epoch:
                    return range(first, eps[k + 1][1] if k + 1 < len(eps) else s.end_offset + 1)
            return range(0)

        ends = [epoch_range(segs[i])[-1] for i in reached_finished if len(epoch_range(segs[i]))]
        assert c.highest_offset_for_epoch(epoch) == (max(ends) if ends else None)
        for offset in range(segs[-1].end_offset + 2):
            want = [i for i in listed if state[i] == S.COPY_SEGMENT_FINISHED and offset in epoch_range(segs[i])]
            found = c.remote_log_segment_metadata(epoch, offset)
            assert (found.remote_log_segment_id if found else None) == \
                (segs[want[0]].remote_log_segment_id if want else None)
