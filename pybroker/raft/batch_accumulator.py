"""Records appended on the leader, batched before they reach the log (Kafka's BatchAccumulator).

An `append` assigns offsets at once (the leader's log end plus what is pending) and never
spans two batches, so a controller operation's records commit atomically. A batch is handed
over (`drain`) once controller.quorum.append.linger.ms passed since its first record or once
it is full (8 MiB); the leader then writes it and fsyncs once for everything drained. Created
at the start of a leader epoch, discarded when leadership ends (undrained records are lost,
and `append` callers learn it from the leader change).

Concurrency: Raft client thread only.
"""

from __future__ import annotations

from pybroker.raft.epoch_state import NO_DEADLINE


class BatchAccumulator:

    def __init__(self, epoch: int, next_offset: int, linger_ms: int, max_batch_bytes: int) -> None:
        self.epoch = epoch
        self.next_offset = next_offset
        self.linger_ms = linger_ms
        self.max_batch_bytes = max_batch_bytes
        self.completed: list[list[bytes]] = []
        self.current: list[bytes] = []
        self.current_bytes = 0
        self.first_append_ms: int | None = None

    def append(self, values: list[bytes], now_ms: int) -> int:
        size = sum(len(v) + 32 for v in values)
        if not values:
            raise ValueError("append needs at least one record")
        if size > self.max_batch_bytes:
            raise ValueError(f"{size} bytes of records exceed the {self.max_batch_bytes}-byte batch limit")
        if self.current and self.current_bytes + size > self.max_batch_bytes:
            self.completed.append(self.current)
            self.current, self.current_bytes = [], 0
        self.current.extend(values)
        self.current_bytes += size
        if self.first_append_ms is None:
            self.first_append_ms = now_ms
        self.next_offset += len(values)
        return self.next_offset - 1

    def time_until_drain(self, now_ms: int) -> int:
        if self.completed:
            return 0
        if not self.current or self.first_append_ms is None:
            return NO_DEADLINE
        return max(0, self.first_append_ms + self.linger_ms - now_ms)

    def drain(self) -> list[list[bytes]]:
        batches = self.completed + ([self.current] if self.current else [])
        self.completed, self.current, self.current_bytes, self.first_append_ms = [], [], 0, None
        return batches
