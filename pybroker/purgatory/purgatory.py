"""Delayed operations keyed by what can complete them (Kafka's DelayedOperationPurgatory).

A request that cannot be answered yet (a Fetch below fetch.min.bytes, an acks=all
Produce waiting for the ISR) becomes a `DelayedOperation`. It is watched under keys
(e.g. a TopicPartition): whoever changes a key's state calls `check_and_complete(key)`,
which tries the waiting operations at once; the timer expires the rest. The request's
task awaits `op.wait()`. Completion happens exactly once, by `try_complete`,
`force_complete` or expiry, whichever comes first.

Concurrency: trio gives one thread, so the lock dance of Kafka's purgatory is not needed;
`try_complete` must not await.
"""

from __future__ import annotations

import abc
from collections.abc import Hashable, Iterable

import trio

from pybroker.purgatory.timer import SystemTimer


class DelayedOperation(abc.ABC):
    """Subclasses implement `try_complete()` (call `force_complete()` when satisfied)."""

    def __init__(self, delay_ms: int) -> None:
        self.delay_ms = delay_ms
        self.completed = False
        self.expired = False
        self._done = trio.Event()
        self._timer_id: int | None = None
        self._timer: SystemTimer | None = None
        # a cancel scope to wake when the operation completes (a waiter also watching a socket)
        self.waker: trio.CancelScope | None = None

    @abc.abstractmethod
    def try_complete(self) -> bool:
        """Complete (via force_complete) if the condition now holds; True if completed."""

    def on_complete(self) -> None:  # noqa: B027 - an optional hook, empty on purpose
        """Hook run once when completed (by condition or expiry)."""

    def force_complete(self) -> bool:
        if self.completed:
            return False
        self.completed = True
        if self._timer is not None and self._timer_id is not None:
            self._timer.cancel(self._timer_id)
        self.on_complete()
        self._done.set()
        if self.waker is not None:
            self.waker.cancel()
        return True

    def _expire(self) -> None:
        self._timer_id = None
        if not self.completed:
            self.expired = True
            self.force_complete()

    async def wait(self) -> None:
        await self._done.wait()


class DelayedOperationPurgatory:
    def __init__(self, name: str, timer: SystemTimer) -> None:
        self.name = name
        self.timer = timer
        self._watchers: dict[Hashable, list[DelayedOperation]] = {}
        self._adds_since_purge = 0
        self.purge_interval = 1000

    def try_complete_else_watch(self, op: DelayedOperation, keys: Iterable[Hashable]) -> bool:
        """Complete `op` now if possible, else watch it under `keys` and start its timer."""
        if op.try_complete():
            return True
        keys = list(keys)
        self._adds_since_purge += 1
        if self._adds_since_purge >= self.purge_interval:
            # expired ops stay in watch lists of keys that never changed: sweep them now and then
            self._adds_since_purge = 0
            self.purge_completed()
        for key in keys:
            self._watchers.setdefault(key, []).append(op)
        op._timer = self.timer
        op._timer_id = self.timer.add(op.delay_ms, op._expire)
        return False

    def check_and_complete(self, key: Hashable) -> int:
        """Try the operations watching `key`; drop completed ones. Returns how many completed.

        Completing an operation runs callbacks that may watch new operations (even under
        this key) or trigger a purge, so the watch list is re-read afterwards, never
        assumed to be the one we iterated.
        """
        ops = self._watchers.get(key)
        if not ops:
            return 0
        done = 0
        for op in list(ops):
            if not op.completed and op.try_complete():
                done += 1
        current = self._watchers.get(key)
        if current is not None:
            remaining = [op for op in current if not op.completed]
            if remaining:
                self._watchers[key] = remaining
            else:
                del self._watchers[key]
        return done

    def watching(self, key: Hashable) -> bool:
        """Whether some operation (perhaps already completed) watches `key`: a cheap test before
        work whose only use is `check_and_complete(key)`."""
        return key in self._watchers

    def watched(self) -> int:
        """Operations still watched (completed ones are purged lazily)."""
        self.purge_completed()
        return sum(len(v) for v in self._watchers.values())

    def pending_counts(self) -> tuple[int, int]:
        """(watch entries, distinct operations) not yet completed: Kafka's PurgatorySize and
        NumDelayedOperations gauges. Reads only (a scrape must not purge); O(watched)."""
        watched = 0
        ops: set[int] = set()
        for watchers in list(self._watchers.values()):
            for op in watchers:
                if not op.completed:
                    watched += 1
                    ops.add(id(op))
        return watched, len(ops)

    def purge_completed(self) -> None:
        for key in list(self._watchers):
            ops = [op for op in self._watchers[key] if not op.completed]
            if ops:
                self._watchers[key] = ops
            else:
                del self._watchers[key]
