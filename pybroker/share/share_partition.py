"""One share partition of one share group on its leader (Kafka's SharePartition, KIP-932).

Format: the in-flight window is [start offset, end offset] of the topic partition. Offsets below the
start offset are done (acknowledged or archived); offsets above the end offset were never
acquired. Inside the window, the cache holds `InFlightBatch`es, sorted and disjoint (gaps between
them are offsets the log does not have, e.g. compacted away), each with one `InFlightState` for
the whole batch or, once an operation touched part of it, one per offset (Kafka's offsetState map).
A state is Kafka's RecordState: AVAILABLE (deliverable), ACQUIRED (delivered to one member, under
an acquisition lock), ACKNOWLEDGED or ARCHIVED (done), with a delivery count.

Transitions (Kafka's RecordState.validateTransition):
- acquire: AVAILABLE -> ACQUIRED (delivery count + 1, lock share.record.lock.duration.ms);
- acknowledge by the acquiring member: ACCEPT -> ACKNOWLEDGED, RELEASE -> AVAILABLE, REJECT and
  GAP -> ARCHIVED, RENEW (KIP-1222) -> ACQUIRED again under a new lock;
- the lock times out, or the member's share session closes -> AVAILABLE. A record going back to
  AVAILABLE with delivery count >= share.delivery.count.limit is ARCHIVED instead (a poison
  record); a session close does not count as a delivery (Kafka's DeliveryCountOps.DECREASE).
- read_committed (share.isolation.level): only records below the last stable offset are fetched,
  and the data batches of aborted transactions are ARCHIVED as they are acquired, never delivered
  (their markers are delivered like any control record; the client acknowledges them as gaps).

Acquisition (Kafka 4.2's acquire): cached batches whole where possible, else per record; new
records become in-flight batches of at least BatchSize records cut at log batch boundaries;
MaxRecords is a soft limit in batch_optimized mode and a hard one in record_limit (KIP-1206);
new records only while the window holds fewer than share.partition.max.record.locks (2000);
a record on its last delivery attempt goes alone, and records past half the delivery limit in
halving groups (Kafka's delivery throttling). Each acquired in-flight batch or record has its own
lock; the records of a batch split per record share the batch's lock until each leaves it.

The start offset moves over the acknowledged/archived prefix of the window (and jumps to the log
start offset when retention passes it); batches wholly below it leave the cache.

Persistence: every acknowledgement and release is written through the Persister (`write_state`:
the changed records, and the start offset from before them, as Kafka writes it) before it is
answered, and rolled back if the write fails, as Kafka's rollbackOrProcessStateUpdates. While a
write is in flight its records are "in transition": another request touching them gets
INVALID_RECORD_STATE. Acquisition is not written (a lock does not survive its leader: the next
leader redelivers in-flight records as never delivered). A lock that expires releases its records
and writes them in the background (a failure is only logged, as in Kafka).
Initialization (`maybe_initialize`, once, on first use) reads the state with `read_state`; a start
offset the group coordinator left uninitialized (-1) is resolved here with share.auto.offset.reset
(latest, earliest, by_duration:<ISO-8601 duration>), as Kafka's startOffsetDuringInitialization;
offsets between persisted batches were never delivered and are AVAILABLE.

Concurrency: trio thread only. The synchronous methods (acquire, the timer callbacks) never await;
the async ones await only the persister. Locks are timers on the broker's timing wheel
(purgatory/timer.SystemTimer); their callbacks start their writes in `nursery`.
"""

from __future__ import annotations

import bisect
import logging
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import trio

from pybroker.protocol.errors import Errors
from pybroker.purgatory.timer import SystemTimer
from pybroker.share.persister import (
    ACKNOWLEDGED,
    ACQUIRED,
    ARCHIVED,
    AVAILABLE,
    UNINITIALIZED_START_OFFSET,
    Persister,
    StateBatch,
)

log = logging.getLogger(__name__)

# AcknowledgeType ids of ShareFetch / ShareAcknowledge (Kafka's AcknowledgeType; 0 is a gap)
GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4
# ShareAcquireMode of ShareFetch v2 (KIP-1206)
BATCH_OPTIMIZED, RECORD_LIMIT = 0, 1

EMPTY, INITIALIZING, ACTIVE, FAILED, FENCED = "EMPTY", "INITIALIZING", "ACTIVE", "FAILED", "FENCED"

_DONE = (ACKNOWLEDGED, ARCHIVED)
_COORDINATOR_ERRORS = frozenset({Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE,
                                 Errors.COORDINATOR_LOAD_IN_PROGRESS})


def persister_error(code: int) -> int:
    """The error a client sees for a persister error (Kafka's SharePartition.fetchPersisterError):
    the coordinator errors are COORDINATOR_NOT_AVAILABLE, a fenced leader or state epoch
    NOT_LEADER_OR_FOLLOWER (the partition is loaded again), GROUP_ID_NOT_FOUND and
    UNKNOWN_TOPIC_OR_PARTITION as they are, anything else UNKNOWN_SERVER_ERROR."""
    if code in _COORDINATOR_ERRORS:
        return Errors.COORDINATOR_NOT_AVAILABLE
    if code in (Errors.FENCED_LEADER_EPOCH, Errors.FENCED_STATE_EPOCH):
        return Errors.NOT_LEADER_OR_FOLLOWER
    if code in (Errors.GROUP_ID_NOT_FOUND, Errors.UNKNOWN_TOPIC_OR_PARTITION):
        return code
    return Errors.UNKNOWN_SERVER_ERROR


@dataclass
class ShareSettings:
    """The group's share.* settings as they are now (dynamic group config over group.share.*)."""

    record_lock_duration_ms: int = 30000
    delivery_count_limit: int = 5
    max_record_locks: int = 2000
    read_committed: bool = False
    auto_offset_reset: str = "latest"
    renew_enabled: bool = True  # share.renew.acknowledge.enable


@dataclass(frozen=True, slots=True)
class FetchedBatch:
    """A record batch the log read returned: its header fields that acquisition needs."""

    base_offset: int
    last_offset: int
    producer_id: int = -1
    transactional: bool = False
    control: bool = False


@dataclass(frozen=True, slots=True)
class AcquiredRecords:
    """One AcquiredRecords entry of a ShareFetch response."""

    first_offset: int
    last_offset: int
    delivery_count: int


class AcquisitionLock:
    """The lock of one acquisition: a timer on the wheel. Records point at the lock they are held
    under; a record renewed or acknowledged points elsewhere, so an expiry releases only what
    still points here."""

    __slots__ = ("member_id", "first", "last", "timer_id", "expired")

    def __init__(self, member_id: str, first: int, last: int) -> None:
        self.member_id = member_id
        self.first = first
        self.last = last
        self.timer_id: int | None = None
        self.expired = False


class InFlightState:
    """One record's (or a whole batch's) state (Kafka's InFlightState)."""

    __slots__ = ("state", "delivery_count", "member_id", "lock", "pending")

    def __init__(self, state: int, delivery_count: int, member_id: str = "",
                 lock: AcquisitionLock | None = None) -> None:
        self.state = state
        self.delivery_count = delivery_count
        self.member_id = member_id
        self.lock = lock
        self.pending = False  # a write of a transition is in flight

    def copy(self) -> InFlightState:
        return InFlightState(self.state, self.delivery_count, self.member_id, self.lock)

    def snapshot(self) -> tuple[int, int, str, AcquisitionLock | None]:
        return self.state, self.delivery_count, self.member_id, self.lock

    def restore(self, snap: tuple[int, int, str, AcquisitionLock | None]) -> None:
        self.state, self.delivery_count, self.member_id, self.lock = snap

    def __repr__(self) -> str:
        return f"({self.state}, count={self.delivery_count}, member={self.member_id!r})"


class InFlightBatch:
    """Offsets first..last, with one state (`batch_state`) or one per offset (`offsets`)."""

    __slots__ = ("first", "last", "batch_state", "offsets")

    def __init__(self, first: int, last: int, state: InFlightState) -> None:
        self.first = first
        self.last = last
        self.batch_state: InFlightState | None = state
        self.offsets: list[InFlightState] | None = None

    def split(self) -> list[InFlightState]:
        """Per-offset states from now on (Kafka's maybeInitializeOffsetStateUpdate)."""
        if self.offsets is None:
            assert self.batch_state is not None
            base = self.batch_state
            self.offsets = [base.copy() for _ in range(self.last - self.first + 1)]
            self.batch_state = None
        return self.offsets

    def states(self, lo: int, hi: int) -> Iterator[tuple[int, int, InFlightState]]:
        """(first, last, state) runs covering lo..hi (within the batch): the batch state when it
        covers the whole batch, else per-offset states (splitting the batch)."""
        lo, hi = max(lo, self.first), min(hi, self.last)
        if lo > hi:
            return
        if self.batch_state is not None and lo == self.first and hi == self.last:
            yield lo, hi, self.batch_state
            return
        offsets = self.split()
        for off in range(lo, hi + 1):
            yield off, off, offsets[off - self.first]

    def all_states(self) -> Iterator[tuple[int, int, InFlightState]]:
        if self.offsets is not None:
            return ((self.first + i, self.first + i, st) for i, st in enumerate(self.offsets))
        assert self.batch_state is not None
        return iter([(self.first, self.last, self.batch_state)])

    def __repr__(self) -> str:
        body = self.batch_state if self.batch_state is not None else self.offsets
        return f"InFlightBatch({self.first}-{self.last}, {body})"


Snapshot = list[tuple[InFlightState, tuple[int, int, str, AcquisitionLock | None]]]


class SharePartition:
    """See the module docstring. `offset_for_reset(strategy)` resolves share.auto.offset.reset
    ("earliest", "latest" or a timestamp in ms) to an offset of the log (the manager reads the
    log); `on_change()` is called when records may have become acquirable (delayed share fetches
    waiting on this partition try again)."""

    def __init__(self, group_id: str, topic_id: uuid.UUID, topic: str, partition: int, leader_epoch: int,
                 persister: Persister, timer: SystemTimer, nursery: trio.Nursery,
                 settings: Callable[[], ShareSettings],
                 offset_for_reset: Callable[[str | int], int] | None = None,
                 on_change: Callable[[], None] | None = None,
                 wall_ms: Callable[[], int] | None = None) -> None:
        self.group_id = group_id
        self.topic_id = topic_id
        self.topic = topic
        self.partition = partition
        self.leader_epoch = leader_epoch
        self.persister = persister
        self.timer = timer
        self.nursery = nursery
        self.settings = settings
        self.offset_for_reset = offset_for_reset
        self.on_change = on_change
        self._wall_ms = wall_ms
        self.state = EMPTY
        self.error = 0
        self.state_epoch = -1
        self.start_offset = 0
        self.end_offset = -1  # the last offset in the window; start - 1 when empty
        self._batches: list[InFlightBatch] = []
        self._firsts: list[int] = []
        self._initialized = trio.Event()

    # ------------------------------------------------------------------ initialization

    async def maybe_initialize(self) -> int:
        """Load the state on first use (Kafka's maybeInitialize); 0 once ACTIVE, else the error
        every request gets until the manager drops this partition."""
        if self.state == ACTIVE:
            return 0
        if self.state in (FAILED, FENCED):
            return self.error
        if self.state == INITIALIZING:
            await self._initialized.wait()
            return self.error
        self.state = INITIALIZING
        try:
            self.error = await self._initialize()
        except Exception:  # a broken persister must not leave waiters hanging
            log.exception("share partition %s %s-%d: initialization failed", self.group_id, self.topic,
                          self.partition)
            self.error = Errors.UNKNOWN_SERVER_ERROR
        self.state = ACTIVE if not self.error else FAILED
        self._initialized.set()
        return self.error

    async def _initialize(self) -> int:
        res = await self.persister.read_state(self.group_id, self.topic_id, self.partition, self.leader_epoch)
        if res.error:
            log.info("share partition %s %s-%d: read state failed: error %d %s", self.group_id, self.topic,
                     self.partition, res.error, res.error_message or "")
            return persister_error(res.error)
        start = res.start_offset
        if start == UNINITIALIZED_START_OFFSET:
            start = self._reset_offset()
        self.state_epoch = res.state_epoch
        self.start_offset = start
        self.end_offset = start - 1
        prev = start - 1
        for b in sorted(res.batches, key=lambda x: x.first_offset):
            if b.first_offset < start:
                log.error("share partition %s %s-%d: persisted batch %s below start offset %d", self.group_id,
                          self.topic, self.partition, b, start)
                return Errors.UNKNOWN_SERVER_ERROR
            if b.first_offset > prev + 1:  # never delivered: available (Kafka's initial read gap)
                self._append(InFlightBatch(prev + 1, b.first_offset - 1, InFlightState(AVAILABLE, 0)))
            state = AVAILABLE if b.delivery_state == ACQUIRED else b.delivery_state
            self._append(InFlightBatch(b.first_offset, b.last_offset, InFlightState(state, b.delivery_count)))
            prev = b.last_offset
        self.end_offset = max(self.end_offset, prev)
        self._advance_start_offset()
        return 0

    def _reset_offset(self) -> int:
        """share.auto.offset.reset for a start offset the group coordinator left uninitialized."""
        strategy = self.settings().auto_offset_reset.strip().lower()
        if self.offset_for_reset is None:
            return 0
        if strategy.startswith("by_duration:"):
            now = self._wall_ms() if self._wall_ms is not None else 0
            return self.offset_for_reset(now - parse_duration_ms(strategy.split(":", 1)[1]))
        return self.offset_for_reset("earliest" if strategy == "earliest" else "latest")

    # ------------------------------------------------------------------ the cache

    def _append(self, batch: InFlightBatch) -> None:
        i = bisect.bisect_left(self._firsts, batch.first)
        self._batches.insert(i, batch)
        self._firsts.insert(i, batch.first)

    def _overlapping(self, lo: int, hi: int) -> list[InFlightBatch]:
        i = bisect.bisect_right(self._firsts, lo) - 1
        i = max(i, 0)
        out = []
        for b in self._batches[i:]:
            if b.first > hi:
                break
            if b.last >= lo:
                out.append(b)
        return out

    def next_fetch_offset(self) -> int:
        """Where the next acquisition reads the log: the first AVAILABLE record of the window,
        else past its end (Kafka's nextFetchOffset)."""
        for b in self._batches:
            if b.last < self.start_offset:
                continue
            for lo, _hi, st in b.all_states():
                if st.state == AVAILABLE and not st.pending and _hi >= self.start_offset:
                    return max(lo, self.start_offset)
        return self.end_offset + 1

    def in_flight_records(self) -> int:
        return max(0, self.end_offset - self.start_offset + 1)

    def in_flight_batch_count(self) -> int:
        """The batches of the in-flight window (Kafka's InFlightBatchCount: cachedState's size)."""
        return len(self._batches)

    def can_acquire_records(self) -> bool:
        """Whether a fetch could acquire something (Kafka's canAcquireRecords): a record
        available for redelivery, or room for new ones."""
        if self.state != ACTIVE:
            return False
        if self.next_fetch_offset() <= self.end_offset:
            return True
        return self.in_flight_records() < self.settings().max_record_locks

    def record_state(self, offset: int) -> InFlightState | None:
        """The state of one offset (None: not in the window); for tests and describing."""
        for b in self._overlapping(offset, offset):
            if b.offsets is not None:
                return b.offsets[offset - b.first]
            return b.batch_state
        return None

    def cached_batches(self) -> list[InFlightBatch]:
        return list(self._batches)

    def _done_prefix_end(self) -> int:
        """The start offset the done prefix of the window leads to (records whose write is in
        flight are not done yet)."""
        new_start = self.start_offset
        for b in self._batches:
            if b.last < new_start:
                continue
            if b.first > new_start:  # a gap the log does not have: nothing to deliver there
                new_start = b.first
            for _lo, hi, st in b.all_states():
                if hi < new_start:
                    continue
                if st.state in _DONE and not st.pending:
                    new_start = hi + 1
                else:
                    return new_start
        return max(new_start, self.end_offset + 1)

    def _advance_start_offset(self) -> bool:
        """Move the start offset over the done prefix of the window and drop the batches below
        it (Kafka's maybeUpdateCachedStateAndOffsets); True if it moved."""
        new_start = self._done_prefix_end()
        if new_start == self.start_offset:
            return False
        self.start_offset = new_start
        self.end_offset = max(self.end_offset, new_start - 1)
        self._prune()
        return True

    def _prune(self) -> None:
        """Drop the batches wholly below the start offset (their records are done)."""
        start = self.start_offset
        if not self._batches or self._batches[0].last >= start:
            return
        keep = []
        for b in self._batches:
            if b.last >= start:
                keep.append(b)
                continue
            for _lo, _hi, st in b.all_states():
                self._cancel_lock(st.lock)
        self._batches = keep
        self._firsts = [b.first for b in keep]

    # ------------------------------------------------------------------ acquire

    def _floor(self, offset: int) -> int:
        """Index of the cached batch with the greatest first offset <= offset (-1: none)."""
        return bisect.bisect_right(self._firsts, offset) - 1

    def acquire(self, member_id: str, fetched: list[FetchedBatch], max_records: int, batch_size: int = 0,
                mode: int = BATCH_OPTIMIZED, aborted: list[tuple[int, int]] | None = None,
                fetch_offset: int | None = None) -> list[AcquiredRecords]:
        """Acquire for `member_id` from the batches a log read at `fetch_offset` (default:
        next_fetch_offset()) returned (Kafka's SharePartition.acquire). Cached batches the read
        covers give their AVAILABLE records (a whole cached batch at once when it lies within the
        read and no per-record state or limit forces otherwise); the read past the window's end
        gives new in-flight batches, of at least `batch_size` records cut at log batch boundaries
        (batch_optimized). `max_records` is a soft limit in batch_optimized (whole batches) and a
        hard one in record_limit (KIP-1206); new records are acquired only while the window holds
        fewer than max_record_locks. A record on its last delivery attempt is delivered alone, and
        records past half the delivery limit in shrinking groups (Kafka's delivery throttling).
        `aborted` (read_committed): the (producer id, first offset) of the read's aborted
        transactions, whose data batches are archived once acquired and left out of the answer.
        Returns the AcquiredRecords, in offset order."""
        if self.state != ACTIVE or max_records <= 0 or not fetched:
            return []
        settings = self.settings()
        if fetch_offset is None:
            fetch_offset = self.next_fetch_offset()
        record_limit = mode == RECORD_LIMIT
        last_offset = fetched[-1].last_offset
        # Kafka's lastOffsetAndMaxRecordsToAcquire: no new records past the in-flight limit
        max_acquire = min(max_records, settings.max_record_locks - self.in_flight_records())
        last_to_acquire = last_offset
        if max_acquire <= 0:
            if fetch_offset > self.end_offset:
                return []
            max_acquire = min(max_records, self.end_offset - fetch_offset + 1)
            last_to_acquire = min(last_offset, self.end_offset)
        first_base = fetched[0].base_offset
        archived = self._archive_stale(fetch_offset, first_base)
        base = first_base
        i = self._floor(base)
        if i < 0:
            base = max(base, self.start_offset)
        elif self._batches[i].last >= base:
            base = self._batches[i].first
        lo_i = bisect.bisect_left(self._firsts, base)
        hi_i = bisect.bisect_right(self._firsts, last_to_acquire)
        sub = self._batches[lo_i:hi_i]
        result: list[AcquiredRecords] = []
        if not sub:
            result = self._acquire_new(member_id, fetched, record_limit, first_base, last_to_acquire, batch_size,
                                       max_acquire, settings)
        else:
            count = 0
            throttle_limit = max(2, -(-settings.delivery_count_limit // 2))
            for b in sub:
                if count >= max_acquire:
                    break
                full = b.first >= first_base and b.last <= last_to_acquire
                remaining = max_acquire - count
                subset_limit = record_limit and b.last - b.first + 1 > remaining
                throttle = self._should_throttle(b, first_base, last_to_acquire, throttle_limit)
                if throttle and count > 0:
                    max_acquire = 0  # delivered in a later fetch, on its own
                    break
                if not full or b.offsets is not None or subset_limit or throttle:
                    if b.offsets is None:
                        st = b.batch_state
                        assert st is not None
                        if st.state != AVAILABLE or st.pending:
                            continue
                        b.split()
                    n = self._acquire_subset(member_id, record_limit, remaining, first_base, last_to_acquire, b,
                                             result, settings, throttle_limit)
                    count += n
                    if throttle and n > 0:
                        max_acquire = 0
                        break
                    continue
                st = b.batch_state
                assert st is not None
                if st.state != AVAILABLE or st.pending:
                    continue
                self._to_acquired(st, member_id, b.first, b.last, settings)
                result.append(AcquiredRecords(b.first, b.last, st.delivery_count))
                count += b.last - b.first + 1
            if count < max_acquire and sub[-1].last < last_to_acquire:
                result.extend(self._acquire_new(member_id, fetched, record_limit, sub[-1].last + 1, last_to_acquire,
                                                batch_size, max_acquire - count, settings))
        if result and aborted:
            result, more = self._filter_aborted(fetched, result, aborted)
            archived.extend(more)
        if archived:
            # **Difference:** Kafka leaves these archivals to the next write; written here at once
            self._spawn_write(archived, "archiving records not to deliver")
            self._advance_start_offset()
        return result

    def _to_acquired(self, st: InFlightState, member_id: str, first: int, last: int, settings: ShareSettings) -> None:
        st.state = ACQUIRED
        st.member_id = member_id
        st.delivery_count += 1
        st.lock = self._schedule_lock(member_id, first, last, settings.record_lock_duration_ms)

    def _schedule_lock(self, member_id: str, first: int, last: int, duration_ms: int) -> AcquisitionLock:
        lock = AcquisitionLock(member_id, first, last)
        lock.timer_id = self.timer.add(duration_ms, lambda: self._lock_expired(lock))
        return lock

    def _lock_expired(self, lock: AcquisitionLock) -> None:
        """The timer's callback, run by the wheel's reaper: a fault is logged, never raised into
        the reaper that serves every timeout of the broker."""
        try:
            self._on_lock_timeout(lock)
        except Exception:
            log.exception("share partition %s %s-%d: releasing records on a lock timeout failed", self.group_id,
                          self.topic, self.partition)

    def _cancel_lock(self, lock: AcquisitionLock | None) -> None:
        if lock is not None and lock.timer_id is not None:
            self.timer.cancel(lock.timer_id)
            lock.timer_id = None

    @staticmethod
    def _should_throttle(b: InFlightBatch, lo: int, hi: int, limit: int) -> bool:
        """Kafka's shouldThrottleRecordsDelivery: the batch's available records within lo..hi
        were delivered `limit` (half the delivery count limit) times or more."""
        if b.offsets is None:
            assert b.batch_state is not None
            return b.batch_state.delivery_count >= limit
        top = 0
        for off in range(max(lo, b.first), min(hi, b.last) + 1):
            st = b.offsets[off - b.first]
            if st.state == AVAILABLE:
                top = max(top, st.delivery_count)
        return top >= limit

    def _acquire_subset(self, member_id: str, record_limit: bool, max_fetch: int, lo: int, hi: int,
                        b: InFlightBatch, result: list[AcquiredRecords], settings: ShareSettings,
                        throttle_limit: int) -> int:
        """The AVAILABLE records of a per-record batch within lo..hi, one AcquiredRecords each
        (Kafka's acquireSubsetBatchRecords)."""
        assert b.offsets is not None
        max_delivery = settings.delivery_count_limit
        acquired = 0
        throttled_max = -1
        for off in range(max(lo, b.first), min(hi, b.last) + 1):
            st = b.offsets[off - b.first]
            if st.state != AVAILABLE or st.pending:
                continue
            count = st.delivery_count
            if max_delivery > 2 and count == max_delivery - 1 and acquired > 0:
                break  # its last attempt goes alone: a poison record does not take others with it
            if count >= throttle_limit and throttled_max < 0:
                throttled_max = max(1, len(b.offsets) >> (count - throttle_limit + 1))
            self._to_acquired(st, member_id, off, off, settings)
            result.append(AcquiredRecords(off, off, st.delivery_count))
            acquired += 1
            if st.delivery_count == max_delivery and max_delivery > 2:
                break
            if record_limit and acquired == max_fetch:
                break
            if throttled_max > 0 and acquired == throttled_max:
                break
        return acquired

    def _acquire_new(self, member_id: str, fetched: list[FetchedBatch], record_limit: bool, first: int, last: int,
                     batch_size: int, max_fetch: int, settings: ShareSettings) -> list[AcquiredRecords]:
        """New in-flight batches for the records first..last of the read (Kafka's
        acquireNewBatchRecords and createBatches)."""
        if not self._batches and self.start_offset > first:
            first = self.start_offset
        if first > last:
            return []
        last_acquired = last
        if max_fetch < last - first + 1:
            # up to the end of the log batch holding the last record allowed: whole batches
            target = first + max_fetch - 1
            last_acquired = target
            for fb in fetched:
                if fb.base_offset <= target <= fb.last_offset:
                    last_acquired = fb.last_offset
                    break
        ranges: list[tuple[int, int]] = []
        current = first
        if not record_limit and batch_size > 0 and last_acquired - first + 1 > batch_size:
            for fb in fetched:
                if fb.base_offset > last_acquired:
                    break
                if fb.base_offset - current >= batch_size:
                    ranges.append((current, fb.base_offset - 1))
                    current = fb.base_offset
        ranges.append((current, last_acquired))
        out: list[AcquiredRecords] = []
        duration = settings.record_lock_duration_ms
        if record_limit and last_acquired - first + 1 > max_fetch:
            # the whole log batch is cached; only max_fetch records of it are acquired
            batch = InFlightBatch(first, last_acquired, InFlightState(AVAILABLE, 0))
            offsets = batch.split()
            acquired_last = first + max_fetch - 1
            lock = self._schedule_lock(member_id, first, acquired_last, duration)
            for st in offsets[:max_fetch]:
                st.state, st.delivery_count, st.member_id, st.lock = ACQUIRED, 1, member_id, lock
            self._append(batch)
            out.append(AcquiredRecords(first, acquired_last, 1))
        else:
            for lo, hi in ranges:
                lock = self._schedule_lock(member_id, lo, hi, duration)
                self._append(InFlightBatch(lo, hi, InFlightState(ACQUIRED, 1, member_id, lock)))
                out.append(AcquiredRecords(lo, hi, 1))
        if self._firsts and self._firsts[0] == first and first > self.start_offset:
            self.start_offset = first
        self.end_offset = max(self.end_offset, last_acquired)
        return out

    def _archive_stale(self, fetch_offset: int, base_offset: int) -> list[tuple[int, int]]:
        """Cached AVAILABLE records between the fetch offset and the first batch the log returned
        are gone from the log (compaction): archived, so the start offset can pass them (Kafka's
        maybeArchiveStaleBatches)."""
        if not self._batches or fetch_offset >= base_offset:
            return []
        return self._archive_range(fetch_offset, base_offset - 1, AVAILABLE)

    def _archive_range(self, lo: int, hi: int, initial: int) -> list[tuple[int, int]]:
        out = []
        for b in self._overlapping(lo, hi):
            if b.offsets is None and b.batch_state is not None and (b.first < lo or b.last > hi):
                if b.batch_state.state != initial:
                    continue
            for rlo, rhi, st in b.states(lo, hi):
                if st.state == initial:
                    old = st.lock
                    st.state, st.member_id, st.lock = ARCHIVED, "", None
                    self._release_lock(old)
                    out.append((rlo, rhi))
        return out

    def _filter_aborted(self, fetched: list[FetchedBatch], result: list[AcquiredRecords],
                        aborted: list[tuple[int, int]]) -> tuple[list[AcquiredRecords], list[tuple[int, int]]]:
        """read_committed: archive the acquired records of aborted transactions' data batches and
        leave them out of the answer (Kafka's filterAbortedTransactionalAcquiredRecords). The
        consumer's walk: a producer's aborted transaction starts at its first offset and ends at
        its marker, which is delivered (the client skips control records)."""
        order = sorted(aborted, key=lambda a: a[1])
        ai = 0
        pids: set[int] = set()
        doomed: list[tuple[int, int]] = []
        for fb in fetched:
            if fb.producer_id < 0:
                continue
            while ai < len(order) and order[ai][1] <= fb.last_offset:
                pids.add(order[ai][0])
                ai += 1
            if fb.control:
                pids.discard(fb.producer_id)  # the producer's next marker after an aborted start is its abort
            elif fb.transactional and fb.producer_id in pids:
                doomed.append((fb.base_offset, fb.last_offset))
        if not doomed:
            return result, []
        archived: list[tuple[int, int]] = []
        for lo, hi in doomed:
            archived.extend(self._archive_range(lo, hi, ACQUIRED))
        kept: list[AcquiredRecords] = []
        for a in result:
            pieces = [(a.first_offset, a.last_offset)]
            for lo, hi in doomed:
                nxt = []
                for plo, phi in pieces:
                    if phi < lo or plo > hi:
                        nxt.append((plo, phi))
                        continue
                    if plo < lo:
                        nxt.append((plo, lo - 1))
                    if phi > hi:
                        nxt.append((hi + 1, phi))
                pieces = nxt
            kept.extend(AcquiredRecords(plo, phi, a.delivery_count) for plo, phi in pieces)
        return kept, archived

    def update_cache_and_offsets(self, log_start_offset: int) -> None:
        """The log start offset moved past the start offset (retention, DeleteRecords): the
        AVAILABLE records below it are archived and the start offset jumps to it (Kafka's
        updateCacheAndOffsets; persisted with the next write)."""
        if log_start_offset <= self.start_offset:
            return
        if not self._batches:
            self.start_offset = log_start_offset
            self.end_offset = log_start_offset - 1
            return
        self._archive_range(self.start_offset, log_start_offset - 1, AVAILABLE)
        self.start_offset = log_start_offset
        if self.end_offset < self.start_offset:
            self.end_offset = self.start_offset - 1
        self._prune()
        self._advance_start_offset()

    # ------------------------------------------------------------------ lock timeout

    def _on_lock_timeout(self, lock: AcquisitionLock) -> None:
        """The timer's callback: release what is still held under `lock` (Kafka's
        releaseAcquisitionLockOnTimeout), written in the background; the transition stands
        whatever the write answers, as in Kafka."""
        lock.expired = True
        lock.timer_id = None
        if self.state != ACTIVE:
            return
        limit = self.settings().delivery_count_limit
        changed: list[tuple[int, int]] = []
        for b in self._overlapping(lock.first, lock.last):
            if b.offsets is None and b.batch_state is not None and b.batch_state.lock is lock \
                    and b.first < self.start_offset <= b.last:
                b.split()  # the records below the start offset are archived, whatever their count
            for lo, hi, st in list(b.all_states()):
                if st.lock is lock and st.state == ACQUIRED and not st.pending:
                    st.lock = None
                    st.member_id = ""
                    st.state = ARCHIVED if st.delivery_count >= limit or hi < self.start_offset else AVAILABLE
                    changed.append((lo, hi))
        if not changed:
            return
        self._spawn_write(changed, "acquisition lock timeout")
        self._advance_start_offset()
        if self.on_change is not None:
            self.on_change()

    def _spawn_write(self, ranges: list[tuple[int, int]], why: str) -> None:
        batches = self._state_batches(ranges)
        start = self.start_offset

        async def write() -> None:
            code = await self._write(batches, start)
            if code:
                log.warning("share partition %s %s-%d: write after %s failed: error %d", self.group_id, self.topic,
                            self.partition, why, code)
        self.nursery.start_soon(write)

    async def _write(self, batches: list[StateBatch], start_offset: int) -> int:
        try:
            code = await self.persister.write_state(self.group_id, self.topic_id, self.partition, self.state_epoch,
                                                    self.leader_epoch, start_offset, batches)
        except Exception:
            log.exception("share partition %s %s-%d: write_state raised", self.group_id, self.topic, self.partition)
            return Errors.UNKNOWN_SERVER_ERROR
        if code in (Errors.FENCED_STATE_EPOCH, Errors.FENCED_LEADER_EPOCH):
            # another leader or a newer state epoch owns the state: the manager drops this one
            self.state = FENCED
            self.error = Errors.NOT_LEADER_OR_FOLLOWER
        return persister_error(code) if code else 0

    def _state_batches(self, ranges: list[tuple[int, int]]) -> list[StateBatch]:
        """The persisted form of the records of `ranges` (ACQUIRED is written as AVAILABLE),
        runs of one state and count merged."""
        out: list[StateBatch] = []
        for lo, hi in sorted(ranges):
            for b in self._overlapping(lo, hi):
                if b.offsets is None and b.batch_state is not None:
                    runs = [(max(lo, b.first), min(hi, b.last), b.batch_state)]
                else:
                    runs = [(rlo, rhi, st) for rlo, rhi, st in b.states(lo, hi)]
                for rlo, rhi, st in runs:
                    state = AVAILABLE if st.state == ACQUIRED else st.state
                    if out and out[-1].last_offset + 1 == rlo and out[-1].delivery_state == state \
                            and out[-1].delivery_count == st.delivery_count:
                        prev = out.pop()
                        out.append(StateBatch(prev.first_offset, rhi, state, st.delivery_count))
                    elif not out or rlo > out[-1].last_offset:
                        out.append(StateBatch(rlo, rhi, state, st.delivery_count))
        return out

    # ------------------------------------------------------------------ acknowledge / release

    def _ack_sub(self, first: int, last: int) -> list[InFlightBatch] | int:
        """The cached batches an acknowledgement batch covers, or its error (Kafka's
        fetchSubMapForAcknowledgementBatch): offsets the window never had are
        INVALID_RECORD_STATE, offsets past the last cached batch INVALID_REQUEST."""
        i = self._floor(first)
        if i < 0:
            if first < self.start_offset <= last:
                i = self._floor(self.start_offset)
            if i < 0:
                return Errors.INVALID_RECORD_STATE
        hi_i = bisect.bisect_right(self._firsts, last)
        sub = self._batches[i:hi_i]
        if not sub or sub[-1].last < first or last > sub[-1].last:
            return Errors.INVALID_REQUEST
        return sub

    async def acknowledge(self, member_id: str, batches: list[tuple[int, int, list[int]]]) -> int:
        """Apply a member's acknowledgement batches (first offset, last offset, types: one for the
        whole range or one per offset), all or nothing, write them, and answer (Kafka's
        SharePartition.acknowledge): 0, INVALID_RECORD_STATE (a record not acquired by this
        member, or in transition), INVALID_REQUEST (offsets past the cached records) or the
        write's error (then nothing changed). Batches below the start offset are done already.
        RENEW moves the records to a new lock at once and writes nothing (KIP-1222)."""
        if self.state != ACTIVE:
            return self.error or Errors.UNKNOWN_SERVER_ERROR
        settings = self.settings()
        if not settings.renew_enabled and any(RENEW in types for _f, _l, types in batches):
            return Errors.INVALID_RECORD_STATE  # the group's share.renew.acknowledge.enable is false
        limit = settings.delivery_count_limit
        snap: Snapshot = []
        changes: list[tuple[int, int]] = []
        error = 0

        def transition(st: InFlightState, ack: int, lo: int, hi: int) -> None:
            if ack == RENEW:
                old = st.lock
                st.lock = self._schedule_lock(member_id, lo, hi, settings.record_lock_duration_ms)
                self._release_lock(old)
                return
            snap.append((st, st.snapshot()))
            if ack == ACCEPT:
                st.state = ACKNOWLEDGED
            elif ack == RELEASE:
                st.state = ARCHIVED if st.delivery_count >= limit else AVAILABLE
            else:  # REJECT, GAP
                st.state = ARCHIVED
            st.member_id = ""
            st.pending = True
            changes.append((lo, hi))

        for first, last, types in batches:
            if last < self.start_offset:
                continue
            sub = self._ack_sub(first, last)
            if isinstance(sub, int):
                error = sub
                break
            per_offset_client = len(types) > 1
            for b in sub:
                if b.last < self.start_offset:
                    continue
                if b.offsets is None:
                    st = b.batch_state
                    assert st is not None
                    if not st.member_id or st.member_id != member_id or st.pending:
                        error = Errors.INVALID_RECORD_STATE
                        break
                full = b.first >= first and b.last <= last
                start_within = b.first < self.start_offset <= b.last
                if not full or b.offsets is not None or per_offset_client or start_within:
                    if b.offsets is None:
                        assert b.batch_state is not None
                        if b.batch_state.state != ACQUIRED:
                            error = Errors.INVALID_RECORD_STATE
                            break
                        b.split()
                    assert b.offsets is not None
                    for off in range(max(first, b.first, self.start_offset), min(last, b.last) + 1):
                        st = b.offsets[off - b.first]
                        if st.state != ACQUIRED or st.pending or st.member_id != member_id:
                            error = Errors.INVALID_RECORD_STATE
                            break
                        transition(st, types[off - first] if per_offset_client else types[0], off, off)
                    if error:
                        break
                    continue
                st = b.batch_state
                assert st is not None
                if st.state != ACQUIRED:
                    error = Errors.INVALID_RECORD_STATE
                    break
                transition(st, types[0], b.first, b.last)
            if error:
                break
        if error:
            self._rollback(snap)
            return error
        return await self._commit(snap, changes)

    async def release_acquired_records(self, member_id: str) -> int:
        """The member's share session closed: its ACQUIRED records become AVAILABLE at once, the
        delivery not counted (Kafka's releaseAcquiredRecords, DeliveryCountOps.DECREASE); records
        below the start offset are archived."""
        if self.state != ACTIVE:
            return 0
        snap: Snapshot = []
        changes: list[tuple[int, int]] = []
        for b in list(self._batches):
            if b.offsets is None and b.batch_state is not None and b.batch_state.state == ACQUIRED \
                    and b.batch_state.member_id == member_id and b.first < self.start_offset <= b.last:
                b.split()
            for lo, hi, st in list(b.all_states()):
                if st.state == ACQUIRED and st.member_id == member_id and not st.pending:
                    snap.append((st, st.snapshot()))
                    st.state = ARCHIVED if hi < self.start_offset else AVAILABLE
                    if st.state == AVAILABLE:
                        st.delivery_count = max(0, st.delivery_count - 1)
                    st.member_id = ""
                    st.pending = True
                    changes.append((lo, hi))
        if not changes:
            return 0
        return await self._commit(snap, changes)

    async def _commit(self, snap: Snapshot, changes: list[tuple[int, int]]) -> int:
        """Write the transitions in flight, then complete them, or roll them back if the write
        failed (Kafka's rollbackOrProcessStateUpdates). The start offset written is the one before
        them, as Kafka writes it."""
        if not changes:
            return 0
        batches = self._state_batches(changes)
        code = await self._write(batches, self.start_offset)
        for st, _ in snap:
            st.pending = False
        if code:
            self._rollback(snap)
            return code
        for st, saved in snap:  # the locks of records that left ACQUIRED
            old = saved[3]
            if old is not None and st.lock is old:
                st.lock = None
            self._release_lock(old)
        self._advance_start_offset()
        if self.on_change is not None:
            self.on_change()
        return 0

    def _release_lock(self, lock: AcquisitionLock | None) -> None:
        """Cancel a lock's timer once no acquired record holds it (the records of a batch split
        per record share their batch's lock until each leaves it)."""
        if lock is not None and lock.timer_id is not None and not self._lock_in_use(lock):
            self._cancel_lock(lock)

    def _lock_in_use(self, lock: AcquisitionLock) -> bool:
        for b in self._overlapping(lock.first, lock.last):
            for _lo, _hi, st in b.all_states():
                if st.lock is lock and st.state == ACQUIRED:
                    return True
        return False

    def _rollback(self, snap: Snapshot) -> None:
        expired: list[AcquisitionLock] = []
        for st, saved in reversed(snap):
            st.restore(saved)
            st.pending = False
            if st.lock is not None and st.lock.expired and st.lock not in expired:
                expired.append(st.lock)
        for lock in expired:  # the lock ran out while the write was in flight
            self._on_lock_timeout(lock)

    def close(self) -> None:
        """The partition leaves this leader: its locks are cancelled (Kafka's markFenced /
        removal; the next leader loads the persisted state)."""
        for b in self._batches:
            for _lo, _hi, st in b.all_states():
                self._cancel_lock(st.lock)
        if self.state == ACTIVE:
            self.state = FENCED
            self.error = Errors.NOT_LEADER_OR_FOLLOWER


def parse_duration_ms(iso: str) -> int:
    """An ISO-8601 duration as Java's Duration.parse takes it (PnDTnHnMn.nS), in milliseconds;
    ValueError for anything else."""
    import re

    m = re.fullmatch(r"([-+]?)P(?:([-+]?\d+)D)?(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+(?:[.,]\d{0,9})?)S)?)?",
                     iso.strip().upper())
    if m is None or iso.strip().upper() in ("P", "PT") or iso.strip().upper().endswith("T"):
        raise ValueError(f"not an ISO-8601 duration: {iso}")
    days, hours, minutes = (int(g) if g else 0 for g in m.group(2, 3, 4))
    seconds = float(m.group(5).replace(",", ".")) if m.group(5) else 0.0
    ms = int(round(((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000))
    return -ms if m.group(1) == "-" else ms

