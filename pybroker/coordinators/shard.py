"""What a coordinator shard is (Kafka's CoordinatorShard, CoordinatorResult, CoordinatorTimer).

A shard owns the state of one partition of its coordinator topic (__consumer_offsets for
groups). Its handlers are synchronous and take the time as `now_ms`; each returns a
`CoordinatorResult`: the records to append to that partition and the response. The
runtime appends the records as one batch, then — when `replay` is set — applies them with
the same `replay()` that rebuilds the shard when the partition is loaded, and answers once
the high watermark covers them (`on_committed` runs at that point; `revert` and `on_failed`
when they cannot be appended or committed).

`replay=False` is for handlers that already changed their in-memory state and write a
record only to persist it (Kafka does the same for classic groups): loading replays those
records to rebuild the state.

Timers: shards never sleep. They schedule keyed operations on a `CoordinatorTimer`; an
operation runs later with the time and returns a result the runtime writes like any other.
Scheduling a key again replaces the pending operation under it.

Concurrency: a shard is used from one thread at a time, never concurrently.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pybroker.errors import Errors, KafkaError


class ShardRecord(Protocol):
    """A record of a coordinator topic (CoordinatorRecord for groups, TxnRecord for transactions)."""

    def encode(self) -> tuple[bytes, bytes | None]:
        """(key, value) bytes; a None value is a tombstone."""
        ...


@dataclass
class CoordinatorResult:
    """`revert` undoes what the handler changed in memory when the partition refuses the
    append (`replay=False` handlers change their state before it; Kafka's runtime reverts its
    timeline snapshot instead). `on_failed` runs when the records are not committed: the append
    refused, the high watermark not there within offsets.commit.timeout.ms, or the shard unloaded
    meanwhile (Kafka's appendFuture completed exceptionally); it gets the runtime's KafkaError."""

    records: Sequence[ShardRecord] = field(default_factory=list)
    response: Any = None
    replay: bool = True
    on_committed: Callable[[], object] | None = None
    revert: Callable[[], object] | None = None
    on_failed: Callable[[KafkaError], object] | None = None


# Kafka's CoordinatorOperationExceptionHelper.handleOperationException: what a client is told
# when a coordinator operation fails for a reason of the partition under it (anything else is
# answered as is). REQUEST_TIMED_OUT is a write the high watermark did not cover in
# offsets.commit.timeout.ms; clients look the coordinator up again and retry.
_OPERATION_ERRORS: dict[int, int] = {
    Errors.NETWORK_EXCEPTION: Errors.COORDINATOR_LOAD_IN_PROGRESS,
    Errors.UNKNOWN_TOPIC_OR_PARTITION: Errors.COORDINATOR_NOT_AVAILABLE,
    Errors.NOT_ENOUGH_REPLICAS: Errors.COORDINATOR_NOT_AVAILABLE,
    Errors.REQUEST_TIMED_OUT: Errors.COORDINATOR_NOT_AVAILABLE,
    Errors.NOT_LEADER_OR_FOLLOWER: Errors.NOT_COORDINATOR,
    Errors.KAFKA_STORAGE_ERROR: Errors.NOT_COORDINATOR,
    Errors.MESSAGE_TOO_LARGE: Errors.UNKNOWN_SERVER_ERROR,
    Errors.RECORD_LIST_TOO_LARGE: Errors.UNKNOWN_SERVER_ERROR,
    Errors.INVALID_FETCH_SIZE: Errors.UNKNOWN_SERVER_ERROR,
}


def operation_error(code: int) -> int:
    """The error code a client gets for a coordinator operation that failed with `code`."""
    return int(_OPERATION_ERRORS.get(code, code))


EMPTY_RESULT = CoordinatorResult()

TimerOperation = Callable[[int], "CoordinatorResult | None"]


class CoordinatorTimer(Protocol):
    def schedule(self, key: str, delay_ms: int, operation: TimerOperation, kind: str = "heartbeat",
                 try_complete: Callable[[], bool] | None = None) -> None:
        """Run `operation(now_ms)` after delay_ms (replacing any operation under `key`).
        With `try_complete`, `check(key)` runs the operation early once it returns True."""

    def cancel(self, key: str) -> None: ...

    def check(self, key: str) -> None:
        """Run the operation under `key` now if its try_complete condition holds."""

    def is_scheduled(self, key: str) -> bool: ...


class CoordinatorShard(Protocol):
    """The state machine of one coordinator partition, as the runtime drives it."""

    def replay(self, record: Any, offset: int = -1, now_ms: int | None = None) -> None:
        """Apply a record (the topic's record type). A shard whose topic takes transactional
        batches (the group shard) also accepts `producer_id=` for records of such a batch and
        has `replay_end_transaction_marker(producer_id, producer_epoch, commit, offset=)` for the
        COMMIT/ABORT markers (the runtime calls both when writing and when loading). A shard
        with `set_committed_offset(high_watermark)` is told the partition's high watermark
        before every read, write and load, so that reads answer only committed state."""

    def on_loaded(self, now_ms: int) -> None: ...

    def on_unloaded(self) -> None: ...


class TransactionalShard(CoordinatorShard, Protocol):
    """A shard whose topic takes producers' transactional batches (the group shard: TxnOffsetCommit)."""

    def replay(self, record: Any, offset: int = -1, now_ms: int | None = None, *,
               producer_id: int = -1) -> None: ...

    def replay_end_transaction_marker(self, producer_id: int, producer_epoch: int, commit: bool,
                                      offset: int = -1) -> None: ...
