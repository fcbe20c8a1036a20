"""Coordinator deadlines as delayed operations on the broker's one timing wheel (Kafka's
DelayedJoin / DelayedHeartbeat, and the new coordinator's keyed CoordinatorTimer).

`PurgatoryTimer` implements pybroker.coordinators.shard.CoordinatorTimer for one shard:
`schedule(key, ...)` becomes a DelayedOperation watched under `key` in a purgatory on
replica_manager's SystemTimer; scheduling a key again cancels the previous operation;
`check(key)` is the purgatory's check_and_complete (a DelayedJoin completes early once all
members have rejoined). When an operation completes (early or at expiry) it runs with the
wall-clock time and its CoordinatorResult goes to `on_result` (the runtime's write path).
No task sleeps per member: a group of N members costs N+2 timer entries.

Rescheduling is lazy (the idea of Kafka's heartbeat handling): scheduling a key whose live
operation has no completion condition, is of the same kind and is due no later than the new
deadline only records the new deadline and operation on it (no new DelayedOperation, no
wheel work). When the wheel fires at the old deadline the operation sees its deadline moved
and re-arms itself for the remaining time instead of running. A session rescheduled by every
heartbeat thus costs one wheel entry and one allocation per session timeout, not per
heartbeat. Moving a deadline earlier, or any operation with a condition (a DelayedJoin),
replaces the operation as before.

Concurrency: trio thread only. While the shard loads in a worker thread the timer is
suspended (every call is a no-op); `resume()` re-enables it on the trio thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from pybroker.coordinators.shard import CoordinatorResult, TimerOperation
from pybroker.purgatory.purgatory import DelayedOperation, DelayedOperationPurgatory

log = logging.getLogger("pybroker.coordinator")


class DelayedCoordinatorOperation(DelayedOperation):
    """Runs `operation(now_ms)` once: when `condition()` holds on a check, or at expiry."""

    def __init__(self, key: str, delay_ms: int, operation: TimerOperation,
                 condition: Callable[[], bool] | None, run: Callable[[DelayedCoordinatorOperation], None],
                 deadline_ms: int = 0) -> None:
        super().__init__(delay_ms)
        self.key = key
        self.operation = operation
        self.condition = condition
        self.cancelled = False
        self.deadline_ms = deadline_ms  # on the purgatory's timer clock; may move later (lazy reschedule)
        self._run = run

    def try_complete(self) -> bool:
        if self.condition is not None and not self.cancelled and self.condition():
            return self.force_complete()
        return False

    def cancel(self) -> None:
        self.cancelled = True
        self.force_complete()

    def on_complete(self) -> None:
        if not self.cancelled:
            self._run(self)


class DelayedJoin(DelayedCoordinatorOperation):
    """The join phase of a rebalance: all members rejoined, or the rebalance timeout."""


class DelayedHeartbeat(DelayedCoordinatorOperation):
    """A member's session: rescheduled by every heartbeat, expiry removes the member."""


class DelayedSync(DelayedCoordinatorOperation):
    """Members that received a JoinGroup answer must send SyncGroup within the rebalance timeout."""


class DelayedTask(DelayedCoordinatorOperation):
    """Any other keyed deadline (e.g. the periodic offsets-retention sweep)."""


_KINDS: dict[str, type[DelayedCoordinatorOperation]] = {
    "join": DelayedJoin, "heartbeat": DelayedHeartbeat, "sync": DelayedSync,
}


class PurgatoryTimer:
    def __init__(self, purgatory: DelayedOperationPurgatory, now_ms: Callable[[], int],
                 on_result: Callable[[CoordinatorResult], None], scope: str = "") -> None:
        self.purgatory = purgatory
        self.now_ms = now_ms
        self.on_result = on_result
        self.scope = scope  # keys are per shard: prefix them so shards never collide
        self.suspended = True
        self._ops: dict[str, DelayedCoordinatorOperation] = {}

    def resume(self) -> None:
        self.suspended = False

    def suspend(self) -> None:
        self.suspended = True
        for op in list(self._ops.values()):
            op.cancel()
        self._ops.clear()

    def schedule(self, key: str, delay_ms: int, operation: TimerOperation, kind: str = "task",
                 try_complete: Callable[[], bool] | None = None) -> None:
        if self.suspended:
            return
        delay = max(0, int(delay_ms))
        deadline = self.purgatory.timer.now_ms() + delay
        cls = _KINDS.get(kind, DelayedTask)
        op = self._ops.get(key)
        if (op is not None and try_complete is None and op.condition is None and type(op) is cls
                and not op.completed and deadline >= op.deadline_ms):
            # lazy: the wheel keeps the earlier entry; _run re-arms when it fires
            op.deadline_ms = deadline
            op.operation = operation
            return
        self.cancel(key)
        self._arm(cls(key, delay, operation, try_complete, self._run, deadline))

    def _arm(self, op: DelayedCoordinatorOperation) -> None:
        self._ops[op.key] = op
        self.purgatory.try_complete_else_watch(op, [self.scope + op.key])

    def cancel(self, key: str) -> None:
        op = self._ops.pop(key, None)
        if op is not None:
            op.cancel()

    def check(self, key: str) -> None:
        if not self.suspended:
            self.purgatory.check_and_complete(self.scope + key)

    def is_scheduled(self, key: str) -> bool:
        op = self._ops.get(key)
        return op is not None and not op.completed

    def __len__(self) -> int:
        return sum(1 for op in self._ops.values() if not op.completed)

    def _run(self, op: DelayedCoordinatorOperation) -> None:
        current = self._ops.get(op.key) is op
        if current:
            del self._ops[op.key]
        if self.suspended:
            return
        if op.expired and current:
            remaining = op.deadline_ms - self.purgatory.timer.now_ms()
            if remaining > 0:
                # rescheduled lazily since it was armed: wait out the rest of the new deadline
                self._arm(type(op)(op.key, remaining, op.operation, op.condition, self._run, op.deadline_ms))
                return
        try:
            result = op.operation(self.now_ms())
            if result is not None:
                self.on_result(result)
        except Exception:  # a bug in one deadline must not stop the reaper
            log.exception("coordinator operation %s failed", op.key)
