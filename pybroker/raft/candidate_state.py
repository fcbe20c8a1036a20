"""Candidate: a voter that bumped the epoch, voted for itself and asks for votes (Kafka's
CandidateState).

Votes from a majority make it Leader. When a majority rejects it, or its election timeout
expires, it backs off for a random, exponentially growing time (Kafka's
binaryExponentialElectionBackoffMs: 100 ms * random(0 .. 2^retries), capped by
controller.quorum.election.backoff.max.ms) and then becomes Prospective again.

Concurrency: Raft client thread only.
"""

from __future__ import annotations

from collections.abc import Iterable

from pybroker.raft.election_state import ElectionState
from pybroker.raft.epoch_state import EpochElection, EpochState, Timer


class CandidateState(EpochState):
    name = "Candidate"

    def __init__(self, *, local_id: int, local_directory_id: bytes | None, epoch: int,
                 voter_ids: Iterable[int], high_watermark: int | None, retries: int,
                 election_timeout_ms: int, now_ms: int) -> None:
        self.local_id = local_id
        self.local_directory_id = local_directory_id
        self.epoch = epoch
        self.high_watermark = high_watermark
        self.retries = retries
        self.election_timer = Timer(now_ms, election_timeout_ms)
        self.backoff_timer: Timer | None = None
        self.epoch_election = EpochElection(voter_ids)
        self.epoch_election.record_vote(local_id, True)

    def election(self) -> ElectionState:
        return ElectionState(self.epoch, None, self.local_id, self.local_directory_id)

    def can_grant_vote(self, replica_id: int, directory_id: bytes | None, log_up_to_date: bool,
                       pre_vote: bool) -> bool:
        # Its own vote went to itself; a pre-vote commits to nothing.
        return pre_vote and log_up_to_date

    def record_granted_vote(self, voter_id: int) -> bool:
        return self.epoch_election.record_vote(voter_id, True)

    def record_rejected_vote(self, voter_id: int) -> bool:
        if voter_id == self.local_id:
            raise ValueError("a candidate cannot reject its own vote")
        return self.epoch_election.record_vote(voter_id, False)

    def start_backing_off(self, now_ms: int, backoff_ms: int) -> None:
        self.backoff_timer = Timer(now_ms, backoff_ms)

    @property
    def is_backing_off(self) -> bool:
        return self.backoff_timer is not None

    def is_backoff_complete(self, now_ms: int) -> bool:
        return self.backoff_timer is not None and self.backoff_timer.is_expired(now_ms)

    def remaining_backoff_ms(self, now_ms: int) -> int:
        return 0 if self.backoff_timer is None else self.backoff_timer.remaining_ms(now_ms)

    def remaining_election_time_ms(self, now_ms: int) -> int:
        return self.election_timer.remaining_ms(now_ms)

    def has_election_timeout_expired(self, now_ms: int) -> bool:
        return self.election_timer.is_expired(now_ms)
