"""Hierarchical timing wheel -- pure-Python twin of `pybroker._native._timingwheel`.

Kafka's TimingWheel/TimerTaskList (after Varghese & Lauck): level L has `wheel_size`
buckets of `tick_ms * wheel_size**L` ms each; a deadline beyond a level's span goes to the
next (overflow) level, created on demand. Adding and cancelling touch one bucket: O(1).
Advancing pops due buckets from a small heap keyed per bucket (not per timer) and
re-inserts their timers one level down, so a timer moves at most once per level.

Worked example, tick_ms=1, wheel_size=20, clock at 0:

    level  bucket span  level span  add(deadline=7)      add(deadline=130)     add(5000)
    0      1 ms         20 ms       bucket 7             -                     -
    1      20 ms        400 ms      -                    bucket 130//20%20=6   -
    2      400 ms       8 s         -                    -                     bucket 12

advance(130) pops level-1 bucket 6 when its key (130) is due and fires the 130 ms timer;
had the bucket also held a 135 ms timer, that one would drop into level-0 bucket 15.

Differences from Kafka, deliberate:
- exact expiry: `advance(now)` returns exactly the timers with deadline <= now (Kafka fires
  a whole tick early). A bucket's heap key is the smallest deadline added to it since it
  was last emptied (a lower bound once timers are cancelled), not the bucket's start.
- `add` never refuses: a deadline already in the past lands in the current bucket and
  fires on the next `advance`.
- the caller drives time (`advance(now_ms)`); no clock is read here, no thread.
- `advance` orders what it returns by (deadline, timer id), so runs are reproducible.

Not thread-safe: one owner (the purgatory reaper on the trio loop) calls every method.
"""

from __future__ import annotations

import heapq
import operator

__all__ = ["TimingWheel"]

_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1
_NO_KEY = 1 << 64  # above every int64 deadline: the bucket is empty


def _int64(value, name: str) -> int:
    value = operator.index(value)
    if not _I64_MIN <= value <= _I64_MAX:
        raise OverflowError(f"{name} does not fit in int64")
    return value


class TimingWheel:
    """Timers keyed by integer deadline (ms); see the module docstring."""

    __slots__ = ("_wheel_size", "_ticks", "_intervals", "_current", "_buckets", "_keys",
                 "_heap", "_where", "_next_id")

    def __init__(self, tick_ms: int = 1, wheel_size: int = 20, start_ms: int = 0) -> None:
        tick_ms = _int64(tick_ms, "tick_ms")
        wheel_size = operator.index(wheel_size)
        start_ms = _int64(start_ms, "start_ms")
        if tick_ms < 1:
            raise ValueError("tick_ms must be >= 1")
        if not 2 <= wheel_size <= 1 << 20:
            raise ValueError("wheel_size must be in [2, 2**20]")
        if start_ms < 0:
            raise ValueError("start_ms must be >= 0")
        self._wheel_size = wheel_size
        self._ticks: list[int] = []
        self._intervals: list[int | None] = []  # None: this level spans all of int64
        self._current: list[int] = []
        self._buckets: list[list[dict]] = []
        self._keys: list[list[int]] = []
        self._heap: list[tuple[int, int, int]] = []
        self._where: dict[int, tuple[int, int]] = {}
        self._next_id = 1
        self._add_level(tick_ms, start_ms)

    def _add_level(self, tick: int, start: int) -> None:
        ws = self._wheel_size
        self._ticks.append(tick)
        self._intervals.append(tick * ws if tick <= _I64_MAX // ws else None)
        self._current.append(start - start % tick)
        self._buckets.append([{} for _ in range(ws)])
        self._keys.append([_NO_KEY] * ws)

    def __len__(self) -> int:
        return len(self._where)

    def _place(self, timer_id: int, deadline: int, item) -> None:
        cur = self._current[0]
        tick = self._ticks[0]
        if deadline < cur or deadline - cur < tick:
            level, slot = 0, (cur // tick) % self._wheel_size
        else:
            level = 0
            while True:
                interval = self._intervals[level]
                cur = self._current[level]
                if interval is None or deadline - cur < interval:
                    slot = (deadline // self._ticks[level]) % self._wheel_size
                    break
                if level + 1 == len(self._ticks):
                    self._add_level(interval, cur)
                level += 1
        self._buckets[level][slot][timer_id] = (deadline, item)
        self._where[timer_id] = (level, slot)
        keys = self._keys[level]
        if deadline < keys[slot]:
            keys[slot] = deadline
            heapq.heappush(self._heap, (deadline, level, slot))
            if len(self._heap) > 4 * len(self._ticks) * self._wheel_size + 64:
                self._compact()

    def _compact(self) -> None:
        """Drop stale heap entries (left by cancels) so the heap stays O(buckets)."""
        self._heap = [(key, level, slot) for level, keys in enumerate(self._keys)
                      for slot, key in enumerate(keys) if key != _NO_KEY]
        heapq.heapify(self._heap)

    def add(self, deadline_ms: int, item) -> int:
        """Schedule `item` for `deadline_ms`; returns the timer id (ids count up from 1)."""
        deadline_ms = _int64(deadline_ms, "deadline_ms")
        timer_id = self._next_id
        self._next_id += 1
        self._place(timer_id, deadline_ms, item)
        return timer_id

    def cancel(self, timer_id: int) -> bool:
        """Remove a pending timer; False when it already fired, was cancelled or is unknown."""
        where = self._where.pop(timer_id, None)
        if where is None:
            return False
        level, slot = where
        bucket = self._buckets[level][slot]
        del bucket[timer_id]
        if not bucket:
            self._keys[level][slot] = _NO_KEY
        return True

    def _advance_clock(self, time_ms: int) -> None:
        for level, tick in enumerate(self._ticks):
            cur = self._current[level]
            if time_ms > cur and time_ms - cur >= tick:
                self._current[level] = time_ms - time_ms % tick

    def advance(self, now_ms: int) -> list:
        """Move the clock to `now_ms`; the items with deadline <= now_ms, by (deadline, id)."""
        now_ms = _int64(now_ms, "now_ms")
        fired: list[tuple[int, int, object]] = []
        heap = self._heap
        while heap and heap[0][0] <= now_ms:
            key, level, slot = heapq.heappop(heap)
            if self._keys[level][slot] != key:
                continue  # stale: the bucket was emptied or re-keyed since
            self._keys[level][slot] = _NO_KEY
            self._advance_clock(key)
            bucket = self._buckets[level][slot]
            self._buckets[level][slot] = {}
            for timer_id, (deadline, item) in bucket.items():
                if deadline <= now_ms:
                    del self._where[timer_id]
                    fired.append((deadline, timer_id, item))
                else:
                    self._place(timer_id, deadline, item)
            heap = self._heap  # _place may have compacted it
        self._advance_clock(now_ms)
        fired.sort(key=lambda entry: (entry[0], entry[1]))
        return [item for _, _, item in fired]

    def next_deadline(self) -> int | None:
        """A time no later than the earliest pending deadline; None when nothing is pending."""
        if not self._where:
            return None
        heap = self._heap
        while self._keys[heap[0][1]][heap[0][2]] != heap[0][0]:
            heapq.heappop(heap)
        return heap[0][0]
