"""Resigned: a leader giving up its epoch (Kafka's ResignedState).

Entered on graceful shutdown, on request (`resign`), when the leader lost contact with a
majority (check quorum), and at start-up when the quorum-state file says this node led the
last epoch (so it cannot vote in that epoch or write a second, different record at an
offset of it after losing unflushed data). It sends EndQuorumEpoch to the voters that have
not acknowledged it, naming `preferred_successors` (voters by descending fetch offset), and
grants no votes. After the election timeout it moves to Unattached in the next epoch.

Concurrency: Raft client thread only.
"""

from __future__ import annotations

from collections.abc import Iterable

from pybroker.raft.election_state import ElectionState
from pybroker.raft.epoch_state import EpochState, Timer


class ResignedState(EpochState):
    name = "Resigned"

    def __init__(self, *, local_id: int, epoch: int, voter_ids: Iterable[int],
                 election_timeout_ms: int, preferred_successors: list[int], now_ms: int) -> None:
        self.local_id = local_id
        self.epoch = epoch
        self.preferred_successors = preferred_successors
        self.unacked_voters = set(voter_ids) - {local_id}
        self.election_timer = Timer(now_ms, election_timeout_ms)

    def election(self) -> ElectionState:
        return ElectionState(self.epoch, self.local_id, None, None)

    def can_grant_vote(self, replica_id: int, directory_id: bytes | None, log_up_to_date: bool,
                       pre_vote: bool) -> bool:
        return False

    def acknowledge_resignation(self, voter_id: int) -> None:
        self.unacked_voters.discard(voter_id)

    def has_election_timeout_expired(self, now_ms: int) -> bool:
        return self.election_timer.is_expired(now_ms)

    def remaining_election_time_ms(self, now_ms: int) -> int:
        return self.election_timer.remaining_ms(now_ms)
