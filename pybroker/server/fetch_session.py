"""Incremental fetch sessions (KIP-227): Kafka's FetchSession, FetchSessionCache and FetchContext.

A client that sends Fetch v7+ with session id 0 and epoch 0 asks for a session. The broker
answers the full fetch, remembers the partitions it named (a `FetchSession` of
`CachedPartition`s) and returns a session id; the client then sends (id, epoch 1, 2, ...)
naming only the partitions whose fetch parameters changed, plus the ones to forget, and the
broker answers only the partitions with something new: records, a moved high watermark or log
start offset, an error. A consumer of 1,000 idle partitions then exchanges a few dozen bytes
per fetch instead of 1,000 partition entries each way.

Request metadata (FetchMetadata), as in Kafka:

| session id | epoch | meaning                                   | context                   |
|------------|-------|-------------------------------------------|---------------------------|
| 0          | -1    | no session (also every Fetch v0-6)        | SessionlessFetchContext   |
| 0          | 0     | full fetch, create a session              | FullFetchContext          |
| id         | 0     | close session id, full fetch, create anew | FullFetchContext          |
| id         | -1    | close session id, full fetch, no session  | SessionlessFetchContext   |
| id         | n > 0 | incremental fetch in session id           | IncrementalFetchContext, or a SessionErrorContext: FETCH_SESSION_ID_NOT_FOUND (no such id, incl. id 0), INVALID_FETCH_SESSION_EPOCH (n is not the session's epoch), FETCH_SESSION_TOPIC_ID_ERROR (a v13+ request in a v<13 session or the reverse) |

Epochs count 1, 2, ..., 2^31-1, then wrap to 1 (`next_epoch`). An incremental fetch moves
the session to the next epoch when its context is made; the response is checked again when it
is built (a parked fetch overtaken by another fetch of the same session answers
INVALID_FETCH_SESSION_EPOCH). A session whose last partition is forgotten is closed and the
request answered sessionless.

Response pruning (Kafka's CachedPartition.maybeUpdateResponseData): an incremental response
carries a partition only if it has records, an error, a preferred read replica, or a high
watermark or log start offset different from the last one sent; the rest are implied. A
partition that returned records moves to the end of the session's order, so the partitions
read first (which get the request's max_bytes first) take turns.

Partitions are keyed by (topic id, partition) in a v13+ session and by (topic name, partition)
below; a v13+ partition whose topic id is unknown stays in the session under its id with no
name (answered UNKNOWN_TOPIC_ID) and is resolved again on each later fetch. A resolved name is
kept: when that topic is deleted and made again, the new topic's partition has another id and
the fetch answers it INCONSISTENT_TOPIC_ID (handle_fetch, as Kafka's readFromLog).

The cache (Kafka's FetchSessionCache) has 8 shards; each holds
`max.incremental.fetch.session.cache.slots // 8` sessions and owns an eighth of the positive
session ids, and new sessions go to the shards in turn. A full shard makes room by evicting
(Kafka's tryEvict): first the least recently used session if it went unused for more than
120 s (MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS); otherwise the least valuable evictable
session, ordered by (privileged, partition count, id), if the new session is worth at least as
much, i.e. (privileged, partition count, 0) >= its key. Sessions of followers (replica id >= 0)
are privileged: a consumer session can evict one only once it is older than 120 s, and only
sessions older than 120 s can be evicted by an unprivileged new session at all; membership in
those two evictable sets is decided when a session is last touched, as in Kafka.
When no session can be evicted the full fetch is answered with session id 0 (no session).

Concurrency: trio thread only (Kafka's per-shard and per-session locks have no counterpart).
Sizes: each shard holds at most a few hundred sessions, so eviction scans a shard's sessions
(O(shard size), only when the shard is full) instead of keeping Kafka's sorted maps.
"""

from __future__ import annotations

import itertools
import logging
import random
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

from pybroker.protocol.errors import Errors

log = logging.getLogger("pybroker.server.fetch_session")

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
NUM_FETCH_SESSION_CACHE_SHARDS = 8  # Kafka's KafkaBroker.NumFetchSessionCacheShards
MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS = 120_000  # Kafka's KafkaServer constant
_INT32_MAX = 2**31 - 1
ZERO_ID = bytes(16)

PartitionKey = tuple[object, int]  # (topic id bytes, or the topic name below v13; partition)
TopicResolver = Callable[[bytes], "str | None"]  # topic id -> name (None: unknown)


def next_epoch(prev: int) -> int:
    """The epoch after `prev`: FINAL_EPOCH stays final, 2^31-1 wraps to 1."""
    if prev < 0:
        return FINAL_EPOCH
    if prev == _INT32_MAX:
        return 1
    return prev + 1


def is_full(epoch: int) -> bool:
    """A request with epoch 0 or -1 names all its partitions."""
    return epoch == INITIAL_EPOCH or epoch == FINAL_EPOCH


class CachedPartition:
    """One partition of a fetch: the request's parameters and, in a session, what the last
    response told the client (`high_watermark`, `local_log_start_offset`; -1: nothing yet or an
    error, so the next response carries it). `topic` is None while a v13+ topic id is unknown."""

    __slots__ = ("topic", "topic_id", "partition", "max_bytes", "fetch_offset", "high_watermark",
                 "leader_epoch", "fetcher_log_start_offset", "local_log_start_offset", "last_fetched_epoch")

    def __init__(self, topic: str | None, topic_id: bytes, partition: int, max_bytes: int = -1,
                 fetch_offset: int = -1, leader_epoch: int = -1, fetcher_log_start_offset: int = -1,
                 last_fetched_epoch: int = -1) -> None:
        self.topic = topic
        self.topic_id = topic_id
        self.partition = partition
        self.max_bytes = max_bytes
        self.fetch_offset = fetch_offset
        self.high_watermark = -1
        self.leader_epoch = leader_epoch
        self.fetcher_log_start_offset = fetcher_log_start_offset
        self.local_log_start_offset = -1
        self.last_fetched_epoch = last_fetched_epoch

    @property
    def key(self) -> PartitionKey:
        """Kafka's CachedPartition equality: by topic id when it is set, else by name."""
        return (self.topic_id if self.topic_id != ZERO_ID else self.topic, self.partition)

    def update_request_params(self, req: CachedPartition) -> None:
        self.max_bytes = req.max_bytes
        self.fetch_offset = req.fetch_offset
        self.fetcher_log_start_offset = req.fetcher_log_start_offset
        self.leader_epoch = req.leader_epoch
        self.last_fetched_epoch = req.last_fetched_epoch

    def maybe_update_response_data(self, resp: PartitionResult, records_size: int, update: bool) -> bool:
        """Whether an incremental response must carry this partition (and, when `update`, remember
        what it tells the client): records, a new high watermark or log start offset, an error,
        a preferred read replica (KIP-392) or a diverging epoch (KIP-320), as in Kafka."""
        must = records_size > 0 or resp.preferred_read_replica >= 0 or resp.diverging_epoch is not None
        if self.high_watermark != resp.high_watermark:
            must = True
            if update:
                self.high_watermark = resp.high_watermark
        if self.local_log_start_offset != resp.log_start_offset:
            must = True
            if update:
                self.local_log_start_offset = resp.log_start_offset
        if resp.error_code:
            # remember an invalid high watermark, so the partition is sent again once the error
            # has gone
            if update:
                self.high_watermark = -1
            must = True
        return must

    def __repr__(self) -> str:
        return (f"CachedPartition({self.topic}-{self.partition}, offset={self.fetch_offset}, "
                f"max_bytes={self.max_bytes}, hw={self.high_watermark})")


class FetchSession:
    """A client's (or follower's) set of partitions between fetches. `partitions` keeps Kafka's
    order: insertion, with partitions that returned records moved to the end."""

    __slots__ = ("id", "privileged", "partitions", "uses_topic_ids", "creation_ms", "last_used_ms",
                 "epoch", "cached_size", "evictable_by_all", "evictable_by_privileged")

    def __init__(self, session_id: int, privileged: bool, partitions: dict[PartitionKey, CachedPartition],
                 uses_topic_ids: bool, creation_ms: int, last_used_ms: int, epoch: int) -> None:
        self.id = session_id
        self.privileged = privileged
        self.partitions = partitions
        self.uses_topic_ids = uses_topic_ids
        self.creation_ms = creation_ms
        self.last_used_ms = last_used_ms
        self.epoch = epoch
        self.cached_size = -1  # the size the cache last counted; -1: not in the cache
        self.evictable_by_all = False
        self.evictable_by_privileged = False

    def __len__(self) -> int:
        return len(self.partitions)

    def evictable_key(self) -> tuple[bool, int, int]:
        return (self.privileged, self.cached_size, self.id)

    def update(self, fetch_data: list[CachedPartition], to_forget: list[CachedPartition]
               ) -> tuple[list[CachedPartition], list[CachedPartition], list[CachedPartition]]:
        """Apply an incremental request: add or update the partitions it names, then drop the
        forgotten ones. Returns (added, updated, removed)."""
        added, updated, removed = [], [], []
        parts = self.partitions
        for req in fetch_data:
            key = req.key
            cached = parts.get(key)
            if cached is None:
                parts[key] = req
                added.append(req)
            else:
                cached.update_request_params(req)
                updated.append(cached)
        for p in to_forget:
            gone = parts.pop(p.key, None)
            if gone is not None:
                removed.append(gone)
        return added, updated, removed

    def __repr__(self) -> str:
        return (f"FetchSession(id={self.id}, privileged={self.privileged}, partitions={len(self.partitions)}, "
                f"uses_topic_ids={self.uses_topic_ids}, epoch={self.epoch})")


# ---------------------------------------------------------------------------------------- contexts


class PartitionResult(Protocol):
    """What a fetch found for one partition (ReplicaManager's LogRead): -1 where unknown."""

    high_watermark: int
    log_start_offset: int
    error_code: int
    preferred_read_replica: int  # -1: none

    @property
    def diverging_epoch(self) -> object:
        """None while the fetcher's log follows this one (KIP-320)."""


Update = tuple[CachedPartition, PartitionResult, int]  # (partition, what was found, records bytes)


class FetchContext:
    """How one fetch request relates to sessions: which partitions to read, and which of the
    results to send under which session id. `partitions` are read in this order."""

    session_id = INVALID_SESSION_ID

    def partitions(self) -> Iterable[CachedPartition]:
        return ()

    def update_and_generate_response_data(self, updates: list[Update]) -> tuple[int, int, list[Update]]:
        """(error code, session id, the partitions to send) for the fetch's results."""
        return 0, INVALID_SESSION_ID, updates

    def throttled_response(self) -> tuple[int, int]:
        """(error code, session id) of the empty answer to a throttled fetch."""
        return 0, INVALID_SESSION_ID


class SessionErrorContext(FetchContext):
    """The session named could not be used: answer only the error, with no partitions."""

    def __init__(self, error: int) -> None:
        self.error = error

    def update_and_generate_response_data(self, updates: list[Update]) -> tuple[int, int, list[Update]]:
        return self.error, INVALID_SESSION_ID, []


class SessionlessFetchContext(FetchContext):
    """A fetch outside any session: every partition named is read and answered."""

    def __init__(self, fetch_data: list[CachedPartition]) -> None:
        self.fetch_data = fetch_data

    def partitions(self) -> Iterable[CachedPartition]:
        return self.fetch_data


class FullFetchContext(FetchContext):
    """A full fetch that asks for a session: answered in full, and the session is created (if
    the cache has or can make room) from the partitions answered."""

    def __init__(self, cache: FetchSessionCache, fetch_data: list[CachedPartition], uses_topic_ids: bool,
                 is_from_follower: bool, now_ms: int) -> None:
        self.cache = cache
        self.fetch_data = fetch_data
        self.uses_topic_ids = uses_topic_ids
        self.is_from_follower = is_from_follower
        self.now_ms = now_ms

    def partitions(self) -> Iterable[CachedPartition]:
        return self.fetch_data

    def update_and_generate_response_data(self, updates: list[Update]) -> tuple[int, int, list[Update]]:
        def create() -> dict[PartitionKey, CachedPartition]:
            parts: dict[PartitionKey, CachedPartition] = {}
            for cached, resp, _ in updates:
                # an error's high watermark and log start offset are -1 (Kafka's partitionResponse)
                cached.high_watermark = resp.high_watermark if not resp.error_code else -1
                cached.local_log_start_offset = resp.log_start_offset if not resp.error_code else -1
                parts[cached.key] = cached
            return parts

        shard = self.cache.next_shard()
        session_id = shard.maybe_create_session(self.now_ms, self.is_from_follower, len(updates),
                                                self.uses_topic_ids, create)
        return 0, session_id, updates


class IncrementalFetchContext(FetchContext):
    """A fetch in an existing session: reads every partition of the session (in session order)
    and sends only those with news."""

    def __init__(self, request_epoch: int, session: FetchSession, resolve: TopicResolver | None) -> None:
        self.request_epoch = request_epoch
        self.session = session
        self.resolve = resolve
        self.session_id = session.id

    def partitions(self) -> Iterator[CachedPartition]:
        resolve = self.resolve if self.session.uses_topic_ids else None
        for p in list(self.session.partitions.values()):
            if p.topic is None and resolve is not None:
                p.topic = resolve(p.topic_id)  # a topic id unknown until now may resolve
            yield p

    def update_and_generate_response_data(self, updates: list[Update]) -> tuple[int, int, list[Update]]:
        session = self.session
        if session.epoch != next_epoch(self.request_epoch):
            log.info("Incremental fetch session %d expected epoch %d, but got %d. Possible duplicate "
                     "request.", session.id, next_epoch(self.request_epoch), session.epoch)
            return Errors.INVALID_FETCH_SESSION_EPOCH, session.id, []
        parts = session.partitions
        kept: list[Update] = []
        for u in updates:
            cached, resp, size = u
            current = parts.get(cached.key)
            if current is None:  # forgotten by a later request of this session meanwhile
                continue
            if current.maybe_update_response_data(resp, size, True):
                kept.append(u)
                if size > 0:  # took its turn: to the back of the line
                    del parts[cached.key]
                    parts[cached.key] = current
        return 0, session.id, kept

    def throttled_response(self) -> tuple[int, int]:
        # KAFKA-6946: a throttled incremental fetch keeps its session
        if self.session.epoch != next_epoch(self.request_epoch):
            return Errors.INVALID_FETCH_SESSION_EPOCH, self.session.id
        return 0, self.session.id


# ------------------------------------------------------------------------------------------- cache


class FetchSessionCacheShard:
    """Sessions with ids in [max(1, shard_num * id_range), (shard_num + 1) * id_range)."""

    def __init__(self, max_entries: int, eviction_ms: int, id_range: int = _INT32_MAX, shard_num: int = 0,
                 rng: random.Random | None = None) -> None:
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self.id_range = id_range
        self.shard_num = shard_num
        self.sessions: dict[int, FetchSession] = {}
        self.num_partitions = 0
        self.evictions = 0
        self._rng = rng or random.Random()

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    def __len__(self) -> int:
        return len(self.sessions)

    def new_session_id(self) -> int:
        low = max(1, self.shard_num * self.id_range)
        high = (self.shard_num + 1) * self.id_range
        while True:
            sid = self._rng.randrange(low, high)
            if sid not in self.sessions and sid != INVALID_SESSION_ID:
                return sid

    def maybe_create_session(self, now_ms: int, privileged: bool, size: int, uses_topic_ids: bool,
                             create_partitions: Callable[[], dict[PartitionKey, CachedPartition]]) -> int:
        """The new session's id, or INVALID_SESSION_ID when the shard is full and nothing may go."""
        if len(self.sessions) < self.max_entries or self._try_evict(privileged, (privileged, size, 0), now_ms):
            session = FetchSession(self.new_session_id(), privileged, create_partitions(), uses_topic_ids,
                                   now_ms, now_ms, next_epoch(INITIAL_EPOCH))
            log.debug("Created fetch session %r", session)
            self.sessions[session.id] = session
            self.touch(session, now_ms)
            return session.id
        log.debug("No fetch session created for privileged=%s, size=%d.", privileged, size)
        return INVALID_SESSION_ID

    def _try_evict(self, privileged: bool, key: tuple[bool, int, int], now_ms: int) -> bool:
        """Kafka's tryEvict: a stale session first, else the least valuable evictable one if the new
        session (`key`) is worth at least as much."""
        if not self.sessions:
            return False
        lru = min(self.sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now_ms - lru.last_used_ms > self.eviction_ms:
            log.debug("Evicting stale fetch session %d.", lru.id)
            self.remove(lru)
            self.evictions += 1
            return True
        if privileged:
            candidates = [s for s in self.sessions.values() if s.evictable_by_privileged]
        else:
            candidates = [s for s in self.sessions.values() if s.evictable_by_all]
        if not candidates:
            return False
        victim = min(candidates, key=FetchSession.evictable_key)
        if key < victim.evictable_key():
            return False
        log.debug("Evicting fetch session %r for %s.", victim, key)
        self.remove(victim)
        self.evictions += 1
        return True

    def remove(self, session: FetchSession | int) -> FetchSession | None:
        if isinstance(session, int):
            found = self.sessions.get(session)
            if found is None:
                return None
            session = found
        removed = self.sessions.pop(session.id, None)
        if removed is not None:
            self.num_partitions -= max(0, session.cached_size)
            session.cached_size = -1
        return removed

    def touch(self, session: FetchSession, now_ms: int) -> None:
        """Record a use: last-used time, counted size, and which eviction sets it belongs to."""
        session.last_used_ms = now_ms
        if session.cached_size != -1:
            self.num_partitions -= session.cached_size
        session.cached_size = len(session.partitions)
        old_enough = now_ms - session.creation_ms > self.eviction_ms
        session.evictable_by_privileged = (not session.privileged) or old_enough
        session.evictable_by_all = old_enough
        self.num_partitions += session.cached_size


class FetchSessionCache:
    """The shards; new sessions are placed round-robin."""

    def __init__(self, shards: list[FetchSessionCacheShard]) -> None:
        self.shards = shards
        self._counter = itertools.count()

    @classmethod
    def create(cls, max_slots: int, eviction_ms: int = MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS,
               num_shards: int = NUM_FETCH_SESSION_CACHE_SHARDS, rng: random.Random | None = None
               ) -> FetchSessionCache:
        id_range = _INT32_MAX // num_shards
        return cls([FetchSessionCacheShard(max_slots // num_shards, eviction_ms, id_range, n, rng)
                    for n in range(num_shards)])

    def shard_for(self, session_id: int) -> FetchSessionCacheShard | None:
        n = session_id // self.shards[0].id_range
        return self.shards[n] if 0 <= n < len(self.shards) else None

    def next_shard(self) -> FetchSessionCacheShard:
        return self.shards[next(self._counter) % len(self.shards)]

    def get(self, session_id: int) -> FetchSession | None:
        shard = self.shard_for(session_id)
        return shard.get(session_id) if shard is not None else None

    # Kafka's FetchSessionCache gauges and meter (kafka.server:type=FetchSessionCache)
    @property
    def num_sessions(self) -> int:  # NumIncrementalFetchSessions
        return sum(len(s) for s in self.shards)

    @property
    def num_partitions_cached(self) -> int:  # NumIncrementalFetchPartitionsCached
        return sum(s.num_partitions for s in self.shards)

    @property
    def evictions(self) -> int:  # IncrementalFetchSessionEvictionsPerSec (a count here)
        return sum(s.evictions for s in self.shards)


class FetchManager:
    """Turns a fetch request's session metadata into its FetchContext (Kafka's FetchManager)."""

    def __init__(self, cache: FetchSessionCache) -> None:
        self.cache = cache

    def new_context(self, version: int, session_id: int, epoch: int, is_from_follower: bool,
                    fetch_data: list[CachedPartition], to_forget: list[CachedPartition],
                    resolve: TopicResolver | None, now_ms: int) -> FetchContext:
        """Kafka's FetchManager.newContext (the table in the module docstring). `resolve` names
        v13+ topic ids; `now_ms` is the broker clock's wall time."""
        if is_full(epoch):
            if session_id != INVALID_SESSION_ID:
                shard = self.cache.shard_for(session_id)
                # any session a full fetch names is closed
                if shard is not None and shard.remove(session_id) is not None:
                    log.debug("Removed fetch session %d.", session_id)
            if epoch == FINAL_EPOCH:
                return SessionlessFetchContext(fetch_data)
            return FullFetchContext(self.cache, fetch_data, version >= 13, is_from_follower, now_ms)
        shard = self.cache.shard_for(session_id)
        session = shard.get(session_id) if shard is not None else None
        if session is None or shard is None:
            log.debug("Session error for %d: no such session ID found.", session_id)
            return SessionErrorContext(Errors.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            log.debug("Session error for %d: expected epoch %d, but got %d instead.", session_id,
                      session.epoch, epoch)
            return SessionErrorContext(Errors.INVALID_FETCH_SESSION_EPOCH)
        if session.uses_topic_ids != (version >= 13):
            log.debug("Session error for %d: the session %s topic ids, request version %d.", session_id,
                      "uses" if session.uses_topic_ids else "does not use", version)
            return SessionErrorContext(Errors.FETCH_SESSION_TOPIC_ID_ERROR)
        added, updated, removed = session.update(fetch_data, to_forget)
        if not session.partitions:
            log.debug("Closing fetch session %d: no partitions left after removing %d.", session.id, len(removed))
            shard.remove(session)
            return SessionlessFetchContext(fetch_data)
        shard.touch(session, now_ms)
        session.epoch = next_epoch(session.epoch)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("Incremental fetch context for session %d, epoch %d: added %d, updated %d, removed %d",
                      session.id, session.epoch, len(added), len(updated), len(removed))
        return IncrementalFetchContext(epoch, session, resolve)

