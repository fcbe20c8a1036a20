"""How a state machine follows the Raft log (Kafka's RaftClient.Listener, LeaderAndEpoch).

Register a `Listener` with `KafkaRaftClient.register`. The client calls, from its own thread:

- `handle_load_snapshot(reader)` when the listener must start from a snapshot (it is new and a
  snapshot exists, or the log it still needed was cleaned away); then commits follow from the
  snapshot's end offset;
- `handle_commit(batches)` with committed batches in offset order, each exactly once, data
  batches with their records and control batches (LeaderChange, ...) with their control
  records, so the listener can track offsets and epochs;
- `handle_leader_change(leader)` when the leader or epoch changes. When this node becomes the
  leader it is told only once the listener has seen every record before the new epoch, so an
  active controller always starts from the whole log.

Callbacks run on the Raft client's thread and must not block (hand big work to a thread).

Concurrency: see above; LeaderAndEpoch is an immutable value.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol


class LeaderAndEpoch(NamedTuple):
    leader_id: int | None
    epoch: int

    def is_leader(self, node_id: int | None) -> bool:
        return node_id is not None and self.leader_id == node_id


class Listener(Protocol):
    def handle_commit(self, batches: list[Any]) -> None: ...

    def handle_load_snapshot(self, reader: Any) -> None: ...

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None: ...
