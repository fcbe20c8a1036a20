"""What a replica must remember about elections across restarts (Kafka's ElectionState).

(epoch, leader id, voted id, voted directory id): the highest epoch seen, the leader of that
epoch if known, and the candidate this replica voted for in it. Raft's safety rests on this
being durable before any message that depends on it leaves the node (a granted vote, a
BeginQuorumEpoch), so a restarted voter never votes twice in one epoch.

Concurrency: immutable value.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ElectionState:
    epoch: int
    leader_id: int | None = None
    voted_id: int | None = None
    voted_directory_id: bytes | None = None

    def __post_init__(self) -> None:
        if self.epoch < 0:
            raise ValueError(f"negative epoch {self.epoch}")
        if self.leader_id is not None and self.leader_id < 0:
            raise ValueError(f"negative leader id {self.leader_id}")
        if self.voted_id is not None and self.voted_id < 0:
            raise ValueError(f"negative voted id {self.voted_id}")

    @property
    def has_leader(self) -> bool:
        return self.leader_id is not None

    @property
    def has_voted(self) -> bool:
        return self.voted_id is not None

    def is_leader(self, node_id: int) -> bool:
        return self.leader_id == node_id

    def is_voted_candidate(self, node_id: int, directory_id: bytes | None = None) -> bool:
        if self.voted_id != node_id:
            return False
        # kraft.version 0 stores no directory id: the vote was for this node id.
        return self.voted_directory_id is None or self.voted_directory_id == directory_id
