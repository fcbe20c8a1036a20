"""Unattached: an epoch is known but no leader of it is followed (Kafka's UnattachedState).

A voter here may have voted in this epoch (`voted_id`) and may know the leader's id without
its endpoints. When the randomised election timeout expires a voter becomes Prospective; an
observer stays until it finds a leader (its timeout is infinite).

Concurrency: Raft client thread only.
"""

from __future__ import annotations

from pybroker.raft.election_state import ElectionState
from pybroker.raft.epoch_state import EpochState, Timer, unattached_or_prospective_can_grant_vote


class UnattachedState(EpochState):
    name = "Unattached"

    def __init__(self, *, epoch: int, leader_id: int | None, voted_id: int | None,
                 voted_directory_id: bytes | None, high_watermark: int | None,
                 election_timeout_ms: int, now_ms: int) -> None:
        self.epoch = epoch
        self.leader_id = leader_id
        self.voted_id = voted_id
        self.voted_directory_id = voted_directory_id
        self.high_watermark = high_watermark
        self.election_timer = Timer(now_ms, election_timeout_ms)

    def election(self) -> ElectionState:
        return ElectionState(self.epoch, self.leader_id, self.voted_id, self.voted_directory_id)

    def can_grant_vote(self, replica_id: int, directory_id: bytes | None, log_up_to_date: bool,
                       pre_vote: bool) -> bool:
        return unattached_or_prospective_can_grant_vote(
            self.leader_id, self.voted_id, self.voted_directory_id, replica_id, directory_id,
            log_up_to_date, pre_vote)

    def remaining_election_time_ms(self, now_ms: int) -> int:
        return self.election_timer.remaining_ms(now_ms)

    def has_election_timeout_expired(self, now_ms: int) -> bool:
        return self.election_timer.is_expired(now_ms)
