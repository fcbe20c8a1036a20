"""Hierarchical timing wheel, compiled twin of `pybroker._pure.timingwheel`.

The same algorithm step for step (read the pure module's docstring for the design and the
worked example): timers are `_Entry` objects in doubly linked per-bucket lists (O(1)
add/cancel), buckets are keyed in a small C binary heap by the smallest deadline added
since they were last emptied, and `advance` sorts what fires by (deadline, timer id) with
qsort. Not thread-safe: one owner calls every method.
"""

cimport cython
from libc.stdint cimport int32_t, int64_t
from libc.stdlib cimport free, malloc, qsort, realloc
from cpython.ref cimport PyObject

import operator

__all__ = ["TimingWheel"]

DEF MAX_LEVELS = 64
cdef int64_t I64_MAX = 0x7FFFFFFFFFFFFFFF


cdef struct HeapItem:
    int64_t key
    int32_t level
    int32_t slot


cdef inline bint heap_less(HeapItem *a, HeapItem *b) noexcept nogil:
    if a.key != b.key:
        return a.key < b.key
    if a.level != b.level:
        return a.level < b.level
    return a.slot < b.slot


@cython.final
cdef class _Entry:
    cdef int64_t deadline
    cdef int64_t timer_id
    cdef object item
    cdef _Entry prev
    cdef _Entry next
    cdef _Bucket bucket


@cython.final
cdef class _Bucket:
    cdef _Entry head
    cdef _Entry tail
    cdef Py_ssize_t size
    cdef int64_t key
    cdef bint has_key
    cdef int32_t level
    cdef int32_t slot


cdef struct Fired:
    int64_t deadline
    int64_t timer_id
    PyObject *item  # borrowed: `fired` keeps the entries (and their items) alive


cdef int cmp_fired(const void *a, const void *b) noexcept nogil:
    cdef const Fired *x = <const Fired *>a
    cdef const Fired *y = <const Fired *>b
    if x.deadline != y.deadline:
        return -1 if x.deadline < y.deadline else 1
    if x.timer_id != y.timer_id:
        return -1 if x.timer_id < y.timer_id else 1
    return 0


cdef int64_t _int64(object value, str name) except? -1:
    value = operator.index(value)
    if not -(1 << 63) <= value <= (1 << 63) - 1:
        raise OverflowError(f"{name} does not fit in int64")
    return value


@cython.final
cdef class TimingWheel:
    """Timers keyed by integer deadline (ms); see pybroker._pure.timingwheel."""

    cdef Py_ssize_t wheel_size
    cdef int levels
    cdef int64_t ticks[MAX_LEVELS]
    cdef int64_t intervals[MAX_LEVELS]   # -1: the level spans all of int64
    cdef int64_t current[MAX_LEVELS]
    cdef list buckets                    # flat: level * wheel_size + slot
    cdef HeapItem *heap
    cdef Py_ssize_t heap_len
    cdef Py_ssize_t heap_cap
    cdef dict where
    cdef int64_t next_id

    def __cinit__(self):
        self.heap = NULL
        self.heap_len = 0
        self.heap_cap = 0

    def __init__(self, tick_ms=1, wheel_size=20, start_ms=0):
        cdef int64_t tick = _int64(tick_ms, "tick_ms")
        wheel_size = operator.index(wheel_size)
        cdef int64_t start = _int64(start_ms, "start_ms")
        if tick < 1:
            raise ValueError("tick_ms must be >= 1")
        if not 2 <= wheel_size <= 1 << 20:
            raise ValueError("wheel_size must be in [2, 2**20]")
        if start < 0:
            raise ValueError("start_ms must be >= 0")
        self.wheel_size = wheel_size
        self.levels = 0
        self.buckets = []
        self.where = {}
        self.next_id = 1
        self.add_level(tick, start)

    def __dealloc__(self):
        free(self.heap)

    cdef int add_level(self, int64_t tick, int64_t start) except -1:
        cdef int level = self.levels
        cdef _Bucket b
        cdef Py_ssize_t slot
        if level == MAX_LEVELS:
            raise OverflowError("timing wheel has too many levels")
        self.ticks[level] = tick
        self.intervals[level] = tick * self.wheel_size if tick <= I64_MAX // self.wheel_size else -1
        self.current[level] = start - start % tick
        for slot in range(self.wheel_size):
            b = _Bucket.__new__(_Bucket)
            b.level = level
            b.slot = <int32_t>slot
            self.buckets.append(b)
        self.levels = level + 1
        return 0

    def __len__(self):
        return len(self.where)

    # ---- heap of bucket keys ---------------------------------------------------------

    cdef int heap_push(self, int64_t key, int32_t level, int32_t slot) except -1:
        cdef HeapItem *grown
        cdef Py_ssize_t i, parent
        cdef HeapItem item
        if self.heap_len == self.heap_cap:
            self.heap_cap = self.heap_cap * 2 if self.heap_cap else 64
            grown = <HeapItem *>realloc(self.heap, sizeof(HeapItem) * self.heap_cap)
            if grown == NULL:
                raise MemoryError()
            self.heap = grown
        item.key = key
        item.level = level
        item.slot = slot
        i = self.heap_len
        self.heap_len += 1
        while i > 0:
            parent = (i - 1) >> 1
            if not heap_less(&item, &self.heap[parent]):
                break
            self.heap[i] = self.heap[parent]
            i = parent
        self.heap[i] = item
        return 0

    cdef void sift_down(self, Py_ssize_t i) noexcept:
        cdef HeapItem item = self.heap[i]
        cdef Py_ssize_t n = self.heap_len, child
        while True:
            child = 2 * i + 1
            if child >= n:
                break
            if child + 1 < n and heap_less(&self.heap[child + 1], &self.heap[child]):
                child += 1
            if not heap_less(&self.heap[child], &item):
                break
            self.heap[i] = self.heap[child]
            i = child
        self.heap[i] = item

    cdef void heap_pop(self) noexcept:
        self.heap_len -= 1
        if self.heap_len > 0:
            self.heap[0] = self.heap[self.heap_len]
            self.sift_down(0)

    cdef void compact(self) noexcept:
        """Drop stale heap entries (left by cancels) so the heap stays O(buckets)."""
        cdef Py_ssize_t i, n = 0
        cdef _Bucket b
        for i in range(len(self.buckets)):
            b = <_Bucket>self.buckets[i]
            if b.has_key:
                self.heap[n].key = b.key
                self.heap[n].level = b.level
                self.heap[n].slot = b.slot
                n += 1
        self.heap_len = n
        i = n // 2 - 1
        while i >= 0:
            self.sift_down(i)
            i -= 1

    cdef inline bint stale(self, HeapItem *h):
        cdef _Bucket b = <_Bucket>self.buckets[h.level * self.wheel_size + h.slot]
        return not b.has_key or b.key != h.key

    # ---- placement -------------------------------------------------------------------

    cdef int place(self, _Entry e) except -1:
        cdef int64_t deadline = e.deadline
        cdef int64_t cur = self.current[0]
        cdef int64_t tick = self.ticks[0]
        cdef int64_t interval
        cdef int level
        cdef Py_ssize_t slot
        cdef _Bucket b
        if deadline < cur or deadline - cur < tick:
            level = 0
            slot = (cur // tick) % self.wheel_size
        else:
            level = 0
            while True:
                interval = self.intervals[level]
                cur = self.current[level]
                if interval < 0 or deadline - cur < interval:
                    slot = (deadline // self.ticks[level]) % self.wheel_size
                    break
                if level + 1 == self.levels:
                    self.add_level(interval, cur)
                level += 1
        b = <_Bucket>self.buckets[level * self.wheel_size + slot]
        e.bucket = b
        e.next = None
        e.prev = b.tail
        if b.tail is None:
            b.head = e
        else:
            b.tail.next = e
        b.tail = e
        b.size += 1
        if not b.has_key or deadline < b.key:
            b.key = deadline
            b.has_key = True
            self.heap_push(deadline, level, <int32_t>slot)
            if self.heap_len > 4 * self.levels * self.wheel_size + 64:
                self.compact()
        return 0

    def add(self, deadline_ms, item):
        """Schedule `item` for `deadline_ms`; returns the timer id (ids count up from 1)."""
        cdef int64_t deadline = _int64(deadline_ms, "deadline_ms")
        cdef _Entry e = _Entry.__new__(_Entry)
        e.deadline = deadline
        e.timer_id = self.next_id
        e.item = item
        self.next_id += 1
        self.place(e)
        self.where[e.timer_id] = e
        return e.timer_id

    def cancel(self, timer_id):
        """Remove a pending timer; False when it already fired, was cancelled or is unknown."""
        entry = self.where.pop(timer_id, None)
        if entry is None:
            return False
        cdef _Entry e = <_Entry>entry
        cdef _Bucket b = e.bucket
        if e.prev is None:
            b.head = e.next
        else:
            e.prev.next = e.next
        if e.next is None:
            b.tail = e.prev
        else:
            e.next.prev = e.prev
        e.prev = e.next = None
        e.bucket = None
        b.size -= 1
        if b.size == 0:
            b.has_key = False
        return True

    cdef void advance_clock(self, int64_t time_ms) noexcept:
        cdef int level
        cdef int64_t cur, tick
        for level in range(self.levels):
            cur = self.current[level]
            tick = self.ticks[level]
            if time_ms > cur and time_ms - cur >= tick:
                self.current[level] = time_ms - time_ms % tick

    def advance(self, now_ms):
        """Move the clock to `now_ms`; the items with deadline <= now_ms, by (deadline, id)."""
        cdef int64_t now = _int64(now_ms, "now_ms")
        cdef list fired = []
        cdef HeapItem top
        cdef _Bucket b
        cdef _Entry e, nxt
        cdef Fired *order
        cdef Py_ssize_t i, n
        while self.heap_len > 0 and self.heap[0].key <= now:
            top = self.heap[0]
            self.heap_pop()
            b = <_Bucket>self.buckets[top.level * self.wheel_size + top.slot]
            if not b.has_key or b.key != top.key:
                continue  # stale: the bucket was emptied or re-keyed since
            b.has_key = False
            self.advance_clock(top.key)
            e = b.head
            b.head = b.tail = None
            b.size = 0
            while e is not None:
                nxt = e.next
                e.prev = e.next = None
                if e.deadline <= now:
                    e.bucket = None
                    del self.where[e.timer_id]
                    fired.append(e)
                else:
                    self.place(e)
                e = nxt
        self.advance_clock(now)
        n = len(fired)
        if n > 1:
            order = <Fired *>malloc(sizeof(Fired) * n)
            if order == NULL:
                raise MemoryError()
            for i in range(n):
                e = <_Entry>fired[i]
                order[i].deadline = e.deadline
                order[i].timer_id = e.timer_id
                order[i].item = <PyObject *>e.item
            qsort(order, n, sizeof(Fired), cmp_fired)
            result = [<object>order[i].item for i in range(n)]
            free(order)
            return result
        return [(<_Entry>fired[i]).item for i in range(n)]

    def next_deadline(self):
        """A time no later than the earliest pending deadline; None when nothing is pending."""
        if not self.where:
            return None
        while self.stale(&self.heap[0]):
            self.heap_pop()
        return self.heap[0].key
