"""Fetch sessions (KIP-227) without sockets: Kafka's FetchManager contexts, response pruning and
FetchSessionCache eviction, with time passed in."""

from __future__ import annotations

import random

import pytest

from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import FetchResponse
from pybroker.server.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    ZERO_ID,
    CachedPartition,
    FetchManager,
    FetchSessionCache,
    FetchSessionCacheShard,
    FullFetchContext,
    IncrementalFetchContext,
    SessionErrorContext,
    SessionlessFetchContext,
    next_epoch,
)
from pybroker.server.fetch_session import (
    MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS as EVICTION_MS,
)

PData = FetchResponse.PartitionData


def part(p, offset=0, topic="t", topic_id=ZERO_ID, max_bytes=1 << 20):
    return CachedPartition(topic, topic_id, p, max_bytes, offset)


def answer(ctx, results):
    """Run a context's response step: results maps partition -> (hw, log start, records bytes, error)."""
    updates = []
    for cp in list(ctx.partitions()):
        hw, start, size, err = results.get(cp.partition, (10, 0, 0, 0))
        updates.append((cp, PData(partition_index=cp.partition, error_code=err, high_watermark=hw,
                                  log_start_offset=start), size))
    err, sid, kept = ctx.update_and_generate_response_data(updates)
    return err, sid, [cp.partition for cp, _, _ in kept]


def manager(slots=1000, seed=1):
    return FetchManager(FetchSessionCache.create(slots, rng=random.Random(seed)))


def open_session(fm, parts, version=12, now=0, follower=False):
    ctx = fm.new_context(version, 0, INITIAL_EPOCH, follower, parts, [], None, now)
    assert isinstance(ctx, FullFetchContext)
    err, sid, kept = answer(ctx, {})
    assert err == 0 and sid != INVALID_SESSION_ID and kept == [p.partition for p in parts]
    return sid


def test_epochs_count_up_wrap_to_one_and_final_stays_final():
    assert next_epoch(0) == 1 and next_epoch(41) == 42
    assert next_epoch(2**31 - 1) == 1
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH


def test_metadata_picks_kafkas_context():
    fm = manager()
    assert isinstance(fm.new_context(12, 0, FINAL_EPOCH, False, [part(0)], [], None, 0), SessionlessFetchContext)
    sid = open_session(fm, [part(0), part(1)])
    ctx = fm.new_context(12, sid, 1, False, [], [], None, 0)
    assert isinstance(ctx, IncrementalFetchContext)
    for session_id, epoch, version, error in [(sid, 5, 12, Errors.INVALID_FETCH_SESSION_EPOCH),
                                              (sid + 1, 2, 12, Errors.FETCH_SESSION_ID_NOT_FOUND),
                                              (0, 2, 12, Errors.FETCH_SESSION_ID_NOT_FOUND),
                                              (sid, 2, 13, Errors.FETCH_SESSION_TOPIC_ID_ERROR)]:
        bad = fm.new_context(version, session_id, epoch, False, [part(0)], [], None, 0)
        assert isinstance(bad, SessionErrorContext) and bad.error == error
        assert answer(bad, {}) == (error, INVALID_SESSION_ID, [])
    # a session error does not move the session's epoch: epoch 2 is still the next one
    assert isinstance(fm.new_context(12, sid, 2, False, [], [], None, 0), IncrementalFetchContext)


def test_a_full_fetch_naming_a_session_closes_it():
    fm = manager()
    sid = open_session(fm, [part(0)])
    ctx = fm.new_context(12, sid, FINAL_EPOCH, False, [part(0)], [], None, 0)
    assert isinstance(ctx, SessionlessFetchContext)
    assert fm.cache.get(sid) is None and fm.cache.num_sessions == 0
    sid2 = open_session(fm, [part(0)])
    new = fm.new_context(12, sid2, INITIAL_EPOCH, False, [part(0)], [], None, 0)
    assert fm.cache.get(sid2) is None
    err, sid3, _ = answer(new, {})
    assert err == 0 and sid3 not in (sid2, INVALID_SESSION_ID) and fm.cache.num_sessions == 1


def test_incremental_response_carries_only_partitions_with_news():
    fm = manager()
    sid = open_session(fm, [part(p) for p in range(4)])  # all answered hw 10, log start 0
    ctx = fm.new_context(12, sid, 1, False, [], [], None, 0)
    # p1 has records, p2's high watermark moved, p3's log start moved, p0 unchanged
    assert answer(ctx, {1: (10, 0, 500, 0), 2: (11, 0, 0, 0), 3: (10, 4, 0, 0)}) == (0, sid, [1, 2, 3])
    ctx = fm.new_context(12, sid, 2, False, [], [], None, 0)
    assert answer(ctx, {2: (11, 0, 0, 0), 3: (10, 4, 0, 0)}) == (0, sid, [])  # remembered
    # an error is always sent, and the partition is sent again once the error has gone
    ctx = fm.new_context(12, sid, 3, False, [], [], None, 0)
    assert answer(ctx, {0: (-1, -1, 0, Errors.NOT_LEADER_OR_FOLLOWER), 2: (11, 0, 0, 0), 3: (10, 4, 0, 0)}
                  ) == (0, sid, [0])
    ctx = fm.new_context(12, sid, 4, False, [], [], None, 0)
    assert answer(ctx, {2: (11, 0, 0, 0), 3: (10, 4, 0, 0)}) == (0, sid, [0])


def test_a_preferred_read_replica_or_a_diverging_epoch_is_always_sent():
    """Kafka's maybeUpdateResponseData: either is news, whatever the offsets say (a consumer must
    learn where to read, a follower where to truncate)."""
    fm = manager()
    sid = open_session(fm, [part(p) for p in range(3)])
    ctx = fm.new_context(12, sid, 1, False, [], [], None, 0)
    updates = []
    for cp in list(ctx.partitions()):
        d = PData(partition_index=cp.partition, error_code=0, high_watermark=10, log_start_offset=0)
        if cp.partition == 1:
            d.preferred_read_replica = 2
        if cp.partition == 2:
            d.diverging_epoch = FetchResponse.EpochEndOffset(epoch=3, end_offset=7)
        updates.append((cp, d, 0))
    err, got_sid, kept = ctx.update_and_generate_response_data(updates)
    assert (err, got_sid, [cp.partition for cp, _, _ in kept]) == (0, sid, [1, 2])


def test_partitions_that_returned_records_go_to_the_back_of_the_session():
    fm = manager()
    sid = open_session(fm, [part(p) for p in range(4)])
    ctx = fm.new_context(12, sid, 1, False, [], [], None, 0)
    answer(ctx, {0: (10, 0, 100, 0), 2: (10, 0, 100, 0)})
    ctx = fm.new_context(12, sid, 2, False, [], [], None, 0)
    assert [p.partition for p in ctx.partitions()] == [1, 3, 0, 2]


def test_incremental_requests_add_update_and_forget_partitions():
    fm = manager()
    sid = open_session(fm, [part(0, offset=5), part(1)])
    ctx = fm.new_context(12, sid, 1, False, [part(0, offset=9, max_bytes=7), part(2)], [part(1)], None, 0)
    parts = {p.partition: p for p in ctx.partitions()}
    assert sorted(parts) == [0, 2]
    assert (parts[0].fetch_offset, parts[0].max_bytes) == (9, 7)
    # a new partition is sent in the first response even with no news (nothing sent yet)
    assert answer(ctx, {0: (10, 0, 0, 0)}) == (0, sid, [2])
    # forgetting the last partitions closes the session; the request is answered sessionless
    ctx = fm.new_context(12, sid, 2, False, [], [part(0), part(2)], None, 0)
    assert isinstance(ctx, SessionlessFetchContext) and fm.cache.get(sid) is None


def test_a_fetch_overtaken_by_a_later_fetch_of_its_session_answers_invalid_epoch():
    fm = manager()
    sid = open_session(fm, [part(0)])
    parked = fm.new_context(12, sid, 1, False, [], [], None, 0)  # waits in the purgatory
    later = fm.new_context(12, sid, 2, False, [], [], None, 0)
    assert answer(later, {0: (10, 0, 10, 0)}) == (0, sid, [0])
    assert answer(parked, {0: (10, 0, 10, 0)}) == (Errors.INVALID_FETCH_SESSION_EPOCH, sid, [])
    assert parked.throttled_response() == (Errors.INVALID_FETCH_SESSION_EPOCH, sid)
    assert later.throttled_response() == (0, sid)  # KAFKA-6946: throttling keeps the session


def test_topic_id_sessions_key_by_id_and_resolve_unknown_ids_later():
    fm = manager()
    known, unknown = b"\x01" * 16, b"\x02" * 16
    names = {known: "a"}
    ctx = fm.new_context(13, 0, INITIAL_EPOCH, False, [part(0, topic="a", topic_id=known),
                                                      part(0, topic=None, topic_id=unknown)], [], names.get, 0)
    err, sid, kept = answer(ctx, {})
    assert sid != INVALID_SESSION_ID and len(kept) == 2
    names[unknown] = "b"  # the topic appears
    ctx = fm.new_context(13, sid, 1, False, [], [], names.get, 0)
    assert [(p.topic, p.topic_id) for p in ctx.partitions()] == [("a", known), ("b", unknown)]
    # renaming is impossible, but a name-keyed request of the same partition is another partition
    assert isinstance(fm.new_context(12, sid, 2, False, [], [], None, 0), SessionErrorContext)


# ------------------------------------------------------------------------------------ eviction


def shard(slots=2):
    return FetchSessionCacheShard(slots, EVICTION_MS, rng=random.Random(3))


def create(sh, now, size, privileged=False):
    return sh.maybe_create_session(now, privileged, size, False,
                                   lambda: {(("t", i)): part(i) for i in range(size)})


def test_a_full_shard_evicts_a_stale_session_first():
    sh = shard()
    a = create(sh, 0, 5)
    b = create(sh, 1000, 5)
    assert create(sh, 2000, 1) == INVALID_SESSION_ID  # both fresh, nothing evictable
    c = create(sh, 1 + EVICTION_MS, 1)  # a went unused for longer than the eviction time
    assert c != INVALID_SESSION_ID and sh.get(a) is None and sh.get(b) is not None
    assert sh.evictions == 1 and sh.num_partitions == 6


def test_a_larger_session_evicts_a_smaller_one_that_is_no_longer_new():
    sh = shard()
    a = create(sh, 0, 3)
    b = create(sh, 0, 2)
    now = EVICTION_MS + 10
    sh.touch(sh.get(a), now)  # used recently, but created long ago: evictable
    sh.touch(sh.get(b), now)
    assert create(sh, now + 1, 2) == INVALID_SESSION_ID  # equal size: not worth more (id 0 < b's id)
    c = create(sh, now + 1, 3)  # more partitions than b, the smallest evictable
    assert c != INVALID_SESSION_ID and sh.get(b) is None and sh.get(a) is not None


def test_evictability_is_decided_when_a_session_is_touched():
    sh = shard()
    create(sh, 0, 1)
    create(sh, 0, 1)
    # both are old now, but were last touched when new: not in the evictable sets yet
    assert create(sh, EVICTION_MS - 1, 50) == INVALID_SESSION_ID


def test_follower_sessions_are_privileged():
    sh = shard()
    consumer = create(sh, 0, 10)
    follower = create(sh, 0, 10, privileged=True)
    # a new follower session evicts a fresh consumer session, even a larger one
    f2 = create(sh, 5, 1, privileged=True)
    assert f2 != INVALID_SESSION_ID and sh.get(consumer) is None
    # a consumer session never evicts a follower's, however large, until it is old and larger
    assert create(sh, 10, 500) == INVALID_SESSION_ID
    now = EVICTION_MS + 100
    sh.touch(sh.get(follower), now)
    sh.touch(sh.get(f2), now)
    assert create(sh, now, 500) == INVALID_SESSION_ID  # (False, ...) < (True, ...): still not
    assert create(sh, now, 500, privileged=True) != INVALID_SESSION_ID  # another follower may


def test_cache_shards_split_the_slots_and_the_id_space():
    cache = FetchSessionCache.create(16, rng=random.Random(5))
    assert len(cache.shards) == 8 and all(s.max_entries == 2 for s in cache.shards)
    ids = [cache.next_shard().maybe_create_session(0, False, 1, False, lambda: {("t", 0): part(0)})
           for _ in range(16)]
    assert INVALID_SESSION_ID not in ids and len(set(ids)) == 16
    for sid in ids:
        assert cache.get(sid) is not None and cache.shard_for(sid).get(sid) is not None
    assert cache.num_sessions == 16 and cache.num_partitions_cached == 16
    assert cache.next_shard().maybe_create_session(1, False, 1, False, dict) == INVALID_SESSION_ID


def test_no_slots_means_no_sessions():
    fm = manager(slots=0)
    ctx = fm.new_context(12, 0, INITIAL_EPOCH, False, [part(0)], [], None, 0)
    assert answer(ctx, {}) == (0, INVALID_SESSION_ID, [0])


@pytest.mark.parametrize("privileged", [False, True])
def test_a_session_is_counted_once_however_often_it_is_touched(privileged):
    sh = shard(4)
    sid = create(sh, 0, 7, privileged)
    for t in range(5):
        sh.touch(sh.get(sid), t)
    assert sh.num_partitions == 7
    sh.remove(sid)
    assert sh.num_partitions == 0 and len(sh) == 0
