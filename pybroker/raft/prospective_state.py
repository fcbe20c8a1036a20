"""Prospective: a voter asking for pre-votes before it bumps the epoch (KIP-996).

Entered from Unattached or Follower when the election or fetch timeout expires, and from a
Candidate after a lost election. The epoch does not change and nothing is persisted (the
election state is the one of the state it came from). Pre-votes from a majority (itself
included) make it a Candidate; a majority of rejections or the election timeout send it back
to Follower when it knows the leader, else to Unattached. A replica that is still fetching
from a live leader rejects pre-votes, so a partitioned voter cannot disrupt a working quorum
by bumping the epoch.

Concurrency: Raft client thread only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pybroker.raft.election_state import ElectionState
from pybroker.raft.epoch_state import (
    EpochElection,
    EpochState,
    Timer,
    unattached_or_prospective_can_grant_vote,
)


class ProspectiveState(EpochState):
    name = "Prospective"

    def __init__(self, *, local_id: int, epoch: int, leader_id: int | None,
                 leader_endpoints: Mapping[str, tuple[str, int]], voted_id: int | None,
                 voted_directory_id: bytes | None, voter_ids: Iterable[int],
                 high_watermark: int | None, retries: int, election_timeout_ms: int,
                 now_ms: int) -> None:
        self.local_id = local_id
        self.epoch = epoch
        self.leader_id = leader_id
        self.leader_endpoints = leader_endpoints
        self.voted_id = voted_id
        self.voted_directory_id = voted_directory_id
        self.high_watermark = high_watermark
        self.retries = retries
        self.election_timer = Timer(now_ms, election_timeout_ms)
        self.epoch_election = EpochElection(voter_ids)
        self.epoch_election.record_vote(local_id, True)

    def election(self) -> ElectionState:
        return ElectionState(self.epoch, self.leader_id, self.voted_id, self.voted_directory_id)

    def can_grant_vote(self, replica_id: int, directory_id: bytes | None, log_up_to_date: bool,
                       pre_vote: bool) -> bool:
        return unattached_or_prospective_can_grant_vote(
            self.leader_id, self.voted_id, self.voted_directory_id, replica_id, directory_id,
            log_up_to_date, pre_vote)

    def record_granted_vote(self, voter_id: int) -> bool:
        return self.epoch_election.record_vote(voter_id, True)

    def record_rejected_vote(self, voter_id: int) -> bool:
        if voter_id == self.local_id:
            raise ValueError("a replica cannot reject its own pre-vote")
        return self.epoch_election.record_vote(voter_id, False)

    def remaining_election_time_ms(self, now_ms: int) -> int:
        return self.election_timer.remaining_ms(now_ms)

    def has_election_timeout_expired(self, now_ms: int) -> bool:
        return self.election_timer.is_expired(now_ms)
