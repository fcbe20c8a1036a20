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
  and the records of aborted transactions are ARCHIVED as they would be acquired, never delivered.

The start offset moves over the acknowledged/archived prefix of the window; batches wholly below it
leave the cache. New records are acquired only while the window holds fewer than
group.share.partition.max.record.locks records (2000); records already in the window are
redelivered regardless.

Persistence: every acknowledgement and release is written through the Persister
(`write_state`: the changed offsets and the start offset they lead to) before it is answered, and
rolled back if the write fails, as Kafka's rollbackOrProcessStateUpdates. While a write is in
flight its records are "in transition": another request touching them gets INVALID_RECORD_STATE.
Acquisition is not written (a lock does not survive its leader). A lock that expires releases its
records and writes them in the background (a failure is only logged, as in Kafka).
Initialization (`maybe_initialize`, once, on first use) reads the state with `read_state`; a start
offset the group coordinator left uninitialized (-1) is resolved here with share.auto.offset.reset
(latest, earliest, by_duration:<ISO-8601 duration>), as Kafka's startOffsetDuringInitialization.

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
    """The error a client sees for a persister error (Kafka's SharePartition.fetchPersisterError)."""
    if code in _COORDINATOR_ERRORS:
        return Errors.COORDINATOR_NOT_AVAILABLE
    if code == Errors.FENCED_LEADER_EPOCH:
        return Errors.NOT_LEADER_OR_FOLLOWER
    if code in (Errors.FENCED_STATE_EPOCH, Errors.GROUP_ID_NOT_FOUND, Errors.UNKNOWN_TOPIC_OR_PARTITION):
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
        self.state = ACTIVE if not self.error else (FENCED if self.error == Errors.FENCED_STATE_EPOCH else FAILED)
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

    def _done_prefix_end(self, include_pending: bool) -> int:
        """The start offset the done prefix of the window leads to; `include_pending` counts the
        records whose write is in flight as done (the start offset that write persists)."""
        new_start = self.start_offset
        for b in self._batches:
            if b.last < new_start:
                continue
            if b.first > new_start:  # a gap the log does not have: nothing to deliver there
                new_start = b.first
            for _lo, hi, st in b.all_states():
                if hi < new_start:
                    continue
                if st.state in _DONE and (include_pending or not st.pending):
                    new_start = hi + 1
                else:
                    return new_start
        return max(new_start, self.end_offset + 1)

    def _advance_start_offset(self) -> bool:
        """Move the start offset over the done prefix of the window and drop the batches below
        it (Kafka's maybeUpdateCachedStateAndOffsets); True if it moved."""
        new_start = self._done_prefix_end(False)
        if new_start == self.start_offset:
            return False
        self.start_offset = new_start
        self.end_offset = max(self.end_offset, new_start - 1)
        keep = [b for b in self._batches if b.last >= new_start]
        if len(keep) != len(self._batches):
            self._batches = keep
            self._firsts = [b.first for b in keep]
        return True

    # ------------------------------------------------------------------ acquire

    def acquire(self, member_id: str, fetched: list[FetchedBatch], max_records: int, batch_size: int = 0,
                mode: int = BATCH_OPTIMIZED, aborted: list[tuple[int, int]] | None = None) -> list[AcquiredRecords]:
        """Acquire for `member_id` from the batches a log read returned at next_fetch_offset()
        (Kafka's SharePartition.acquire): the AVAILABLE records of the window first, then new
        records past its end while the window has room for them. At most `max_records`
        (record_limit), or whole batches until `max_records` is reached (batch_optimized, the
        default). `aborted` (read_committed): the (producer id, first offset) of the aborted
        transactions in the read, whose records are archived rather than acquired. Returns the
        AcquiredRecords ranges, in offset order."""
        if self.state != ACTIVE or max_records <= 0:
            return []
        settings = self.settings()
        remaining = max_records
        room = settings.max_record_locks - self.in_flight_records()
        lock = AcquisitionLock(member_id, 0, 0)
        out: list[tuple[int, int, int]] = []
        archived: list[tuple[int, int]] = []
        aborting = sorted(aborted or [], key=lambda a: a[1])
        ai = 0
        aborted_pids: set[int] = set()
        cursor = self.next_fetch_offset()
        for fb in fetched:
            if remaining <= 0:
                break
            # read_committed: a producer's aborted transaction starts at its first offset and ends at
            # its marker (the consumer's abortedProducerIds walk)
            while ai < len(aborting) and aborting[ai][1] <= fb.last_offset:
                aborted_pids.add(aborting[ai][0])
                ai += 1
            is_aborted = fb.transactional and fb.producer_id in aborted_pids
            if fb.control and fb.producer_id in aborted_pids:
                aborted_pids.discard(fb.producer_id)
                is_aborted = True  # the abort marker itself is not delivered either
            if fb.last_offset < cursor:
                continue
            lo = max(fb.base_offset, cursor)
            if cursor <= self.end_offset and lo > cursor:  # offsets of the window the log does not have
                archived.extend(self._archive_available(cursor, min(lo - 1, self.end_offset)))
            hi = fb.last_offset
            if lo <= self.end_offset:  # redelivery of AVAILABLE records of the window
                seg_hi = min(hi, self.end_offset)
                for b in self._overlapping(lo, seg_hi):
                    if remaining <= 0:
                        break
                    if b.batch_state is not None and (b.batch_state.state != AVAILABLE or b.batch_state.pending):
                        continue
                    if b.batch_state is not None and b.first >= lo and b.last <= seg_hi \
                            and (mode == BATCH_OPTIMIZED or b.last - b.first + 1 <= remaining):
                        runs: Iterator[tuple[int, int, InFlightState]] = iter([(b.first, b.last, b.batch_state)])
                    else:  # part of the batch: per-offset states
                        b.split()
                        runs = b.states(lo, min(seg_hi, b.last))
                    for rlo, rhi, st in runs:
                        if remaining <= 0:
                            break
                        if st.state != AVAILABLE or st.pending:
                            continue
                        if is_aborted:
                            st.state, st.member_id, st.lock = ARCHIVED, "", None
                            archived.append((rlo, rhi))
                            continue
                        st.state, st.member_id, st.lock = ACQUIRED, member_id, lock
                        st.delivery_count += 1
                        out.append((rlo, rhi, st.delivery_count))
                        remaining -= rhi - rlo + 1
                lo = seg_hi + 1
            if lo <= hi and remaining > 0:  # new records past the window's end
                n = hi - lo + 1
                if is_aborted:
                    self._append(InFlightBatch(lo, hi, InFlightState(ARCHIVED, 1)))
                    archived.append((lo, hi))
                    self.end_offset = hi
                elif room > 0:
                    if mode == RECORD_LIMIT:
                        n = min(n, remaining, room)
                    last = lo + n - 1
                    step = batch_size if batch_size > 0 and mode == RECORD_LIMIT else n
                    first = lo
                    while first <= last:  # in-flight batches of at most batch_size
                        chunk_last = min(last, first + step - 1)
                        self._append(InFlightBatch(first, chunk_last, InFlightState(ACQUIRED, 1, member_id, lock)))
                        out.append((first, chunk_last, 1))
                        first = chunk_last + 1
                    self.end_offset = last
                    remaining -= n
                    room -= n
                else:
                    break
            cursor = fb.last_offset + 1
        if out:
            lock.first = min(o[0] for o in out)
            lock.last = max(o[1] for o in out)
            duration = settings.record_lock_duration_ms
            lock.timer_id = self.timer.add(duration, lambda: self._on_lock_timeout(lock))
        if archived:
            self._advance_start_offset()
            self._spawn_write(archived, "archiving records not to deliver")
        return _merge_acquired(out)

    def _archive_available(self, lo: int, hi: int) -> list[tuple[int, int]]:
        out = []
        for b in self._overlapping(lo, hi):
            for rlo, rhi, st in b.states(lo, hi):
                if st.state == AVAILABLE and not st.pending:
                    st.state = ARCHIVED
                    out.append((rlo, rhi))
        return out

    # ------------------------------------------------------------------ lock timeout

    def _on_lock_timeout(self, lock: AcquisitionLock) -> None:
        """The timer's callback: release what is still held under `lock` (Kafka's
        releaseAcquisitionLockOnTimeout), in the background write."""
        lock.expired = True
        lock.timer_id = None
        if self.state != ACTIVE:
            return
        limit = self.settings().delivery_count_limit
        changed: list[tuple[int, int]] = []
        for b in self._overlapping(lock.first, lock.last):
            for lo, hi, st in list(b.all_states()):
                if st.lock is lock and st.state == ACQUIRED and not st.pending:
                    st.lock = None
                    st.member_id = ""
                    st.state = ARCHIVED if st.delivery_count >= limit or hi < self.start_offset else AVAILABLE
                    changed.append((lo, hi))
        if not changed:
            return
        self._advance_start_offset()
        self._spawn_write(changed, "acquisition lock timeout")
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
        if code == Errors.FENCED_STATE_EPOCH or code == Errors.FENCED_LEADER_EPOCH:
            self.state = FENCED
            self.error = persister_error(code)
        return persister_error(code) if code else 0

    def _state_batches(self, ranges: list[tuple[int, int]]) -> list[StateBatch]:
        """The persisted form of the records of `ranges` (ACQUIRED is written as AVAILABLE),
        runs of one state and count merged."""
        out: list[StateBatch] = []
        for lo, hi in sorted(ranges):
            for b in self._overlapping(lo, hi):
                if b.offsets is None and b.batch_state is not None and (b.first < lo or b.last > hi):
                    st = b.batch_state
                    runs = [(max(lo, b.first), min(hi, b.last), st)]
                else:
                    runs = [(rlo, rhi, st) for rlo, rhi, st in b.states(lo, hi)]
                for rlo, rhi, st in runs:
                    state = AVAILABLE if st.state == ACQUIRED else st.state
                    if out and out[-1].last_offset + 1 == rlo and out[-1].delivery_state == state \
                            and out[-1].delivery_count == st.delivery_count:
                        prev = out.pop()
                        out.append(StateBatch(prev.first_offset, rhi, state, st.delivery_count))
                    else:
                        out.append(StateBatch(rlo, rhi, state, st.delivery_count))
        return out

    # ------------------------------------------------------------------ acknowledge / release

    async def acknowledge(self, member_id: str, batches: list[tuple[int, int, list[int]]]) -> int:
        """Apply a member's acknowledgement batches (first offset, last offset, types: one for the
        whole range or one per offset) all or nothing, write them, and answer (Kafka's
        SharePartition.acknowledge): 0, INVALID_RECORD_STATE (a record not acquired by this
        member, or in transition), INVALID_REQUEST (offsets outside the window) or the write's
        error (then nothing changed)."""
        if self.state != ACTIVE:
            return self.error or Errors.UNKNOWN_SERVER_ERROR
        limit = self.settings().delivery_count_limit
        snap: Snapshot = []
        changes: list[tuple[int, int, int]] = []
        renewed: list[tuple[int, int, InFlightState]] = []
        error = 0
        for first, last, types in batches:
            if first < self.start_offset or last > self.end_offset:
                error = Errors.INVALID_RECORD_STATE
                break
            single = len(set(types)) == 1
            for b in self._overlapping(first, last):
                if single:
                    runs = self._runs(b, first, last)
                else:  # one type per offset: per-offset states
                    b.split()
                    runs = b.states(first, last)
                for lo, hi, st in runs:
                    if st.state != ACQUIRED or st.member_id != member_id or st.pending:
                        error = Errors.INVALID_RECORD_STATE
                        break
                    ack = types[0] if single else types[lo - first]
                    snap.append((st, st.snapshot()))
                    if ack == RENEW:
                        renewed.append((lo, hi, st))
                        continue
                    if ack == ACCEPT:
                        st.state = ACKNOWLEDGED
                    elif ack == RELEASE:
                        st.state = ARCHIVED if st.delivery_count >= limit else AVAILABLE
                    else:  # REJECT, GAP
                        st.state = ARCHIVED
                    st.member_id = ""
                    st.lock = None
                    st.pending = True
                    changes.append((lo, hi, st.state))
                if error:
                    break
            if error:
                break
        if error:
            self._rollback(snap)
            return error
        if renewed:  # KIP-1222: a new lock from now, records stay with this member
            duration = self.settings().record_lock_duration_ms
            lock = AcquisitionLock(member_id, min(r[0] for r in renewed), max(r[1] for r in renewed))
            for _lo, _hi, st in renewed:
                st.lock = lock
            lock.timer_id = self.timer.add(duration, lambda: self._on_lock_timeout(lock))
        return await self._commit(snap, changes)

    @staticmethod
    def _runs(b: InFlightBatch, lo: int, hi: int) -> Iterator[tuple[int, int, InFlightState]]:
        """Runs for a single-type acknowledgement: the batch state if the range holds the whole batch."""
        if b.batch_state is not None and lo <= b.first and hi >= b.last:
            return iter([(b.first, b.last, b.batch_state)])
        return b.states(lo, hi)

    async def release_acquired_records(self, member_id: str) -> int:
        """The member's share session closed: its ACQUIRED records become AVAILABLE at once, the
        delivery not counted (Kafka's releaseAcquiredRecords, DeliveryCountOps.DECREASE); records
        below the start offset are archived."""
        if self.state != ACTIVE:
            return 0
        snap: Snapshot = []
        changes: list[tuple[int, int, int]] = []
        for b in list(self._batches):
            for lo, hi, st in list(b.all_states()):
                if st.state == ACQUIRED and st.member_id == member_id and not st.pending:
                    snap.append((st, st.snapshot()))
                    st.state = ARCHIVED if hi < self.start_offset else AVAILABLE
                    if st.state == AVAILABLE:
                        st.delivery_count = max(0, st.delivery_count - 1)
                    st.member_id = ""
                    st.lock = None
                    st.pending = True
                    changes.append((lo, hi, st.state))
        if not changes:
            return 0
        return await self._commit(snap, changes)

    async def _commit(self, snap: Snapshot, changes: list[tuple[int, int, int]]) -> int:
        if not changes:
            return 0
        batches = self._state_batches([(lo, hi) for lo, hi, _ in changes])
        start = self._done_prefix_end(True)
        code = await self._write(batches, start)
        for st, _ in snap:
            st.pending = False
        if code:
            self._rollback(snap)
            return code
        self._advance_start_offset()
        if self.on_change is not None:
            self.on_change()
        return 0

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
                if st.lock is not None and st.lock.timer_id is not None:
                    self.timer.cancel(st.lock.timer_id)
                    st.lock.timer_id = None
        if self.state == ACTIVE:
            self.state = FENCED
            self.error = Errors.NOT_LEADER_OR_FOLLOWER


def _merge_acquired(ranges: list[tuple[int, int, int]]) -> list[AcquiredRecords]:
    out: list[AcquiredRecords] = []
    for lo, hi, count in sorted(ranges):
        if out and out[-1].last_offset + 1 == lo and out[-1].delivery_count == count:
            prev = out.pop()
            out.append(AcquiredRecords(prev.first_offset, hi, count))
        else:
            out.append(AcquiredRecords(lo, hi, count))
    return out


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

