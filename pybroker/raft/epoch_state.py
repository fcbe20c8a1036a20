"""What every Raft state shares (Kafka's EpochState, Timer and EpochElection).

A replica is always in exactly one state of one epoch; `QuorumState` owns the current one and
checks every transition. Each state answers:

- `election()`: the ElectionState to make durable when entering it (see quorum_state_store);
- `can_grant_vote(replica_id, directory_id, log_up_to_date, pre_vote)`: Kafka's rules, with
  KIP-996: a pre-vote changes nothing on the receiver and is granted by any state that has
  not heard from a live leader, when the requester's log is at least as up to date;
- `high_watermark`: the offset below which the log is committed, if known.

Timers hold absolute deadlines in the caller's milliseconds (`now_ms` is always passed in;
nothing here reads a clock). `NO_DEADLINE` stands for Kafka's Long.MAX_VALUE.

Concurrency: used only from the Raft client's thread (the trio loop).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pybroker.raft.election_state import ElectionState

NO_DEADLINE = 1 << 62


class Timer:
    __slots__ = ("deadline_ms",)

    def __init__(self, now_ms: int, timeout_ms: int) -> None:
        self.deadline_ms = NO_DEADLINE
        self.reset(now_ms, timeout_ms)

    def reset(self, now_ms: int, timeout_ms: int) -> None:
        self.deadline_ms = NO_DEADLINE if timeout_ms >= NO_DEADLINE else now_ms + timeout_ms

    def remaining_ms(self, now_ms: int) -> int:
        return max(0, self.deadline_ms - now_ms)

    def is_expired(self, now_ms: int) -> bool:
        return now_ms >= self.deadline_ms


class EpochElection:
    """Votes collected by a Prospective (pre-votes) or Candidate replica in one epoch."""

    def __init__(self, voter_ids: Iterable[int]) -> None:
        self._votes: dict[int, bool | None] = {v: None for v in voter_ids}

    def record_vote(self, voter_id: int, granted: bool) -> bool:
        """True if this voter had not answered yet; a voter changing its answer is a bug."""
        if voter_id not in self._votes:
            raise ValueError(f"vote from {voter_id}, which is not a voter {sorted(self._votes)}")
        previous = self._votes[voter_id]
        if previous is not None and previous != granted:
            raise ValueError(f"voter {voter_id} changed its vote from {previous} to {granted}")
        self._votes[voter_id] = granted
        return previous is None

    def _majority(self) -> int:
        return len(self._votes) // 2 + 1

    def granting_voters(self) -> set[int]:
        return {v for v, g in self._votes.items() if g is True}

    def rejecting_voters(self) -> set[int]:
        return {v for v, g in self._votes.items() if g is False}

    def unrecorded_voters(self) -> set[int]:
        return {v for v, g in self._votes.items() if g is None}

    def is_vote_granted(self) -> bool:
        return len(self.granting_voters()) >= self._majority()

    def is_vote_rejected(self) -> bool:
        """No majority is possible any more (Kafka's isVoteRejected)."""
        return len(self.granting_voters()) + len(self.unrecorded_voters()) < self._majority()

    def __repr__(self) -> str:
        return (f"EpochElection(granted={sorted(self.granting_voters())}, "
                f"rejected={sorted(self.rejecting_voters())})")


def unattached_or_prospective_can_grant_vote(
        leader_id: int | None, voted_id: int | None, voted_directory_id: bytes | None,
        replica_id: int, replica_directory_id: bytes | None, log_up_to_date: bool,
        pre_vote: bool) -> bool:
    """Kafka's QuorumState.unattachedOrProspectiveCanGrantVote."""
    if pre_vote:
        return log_up_to_date
    if voted_id is not None:
        # a repeated request from the candidate we voted for is granted again
        return voted_id == replica_id and (voted_directory_id is None
                                           or voted_directory_id == replica_directory_id)
    if leader_id is not None:
        return False
    return log_up_to_date


class EpochState:
    """Base of the six states; see the module docstring."""

    name = "EpochState"
    epoch: int
    high_watermark: int | None = None
    leader_endpoints: Mapping[str, tuple[str, int]] = {}

    def election(self) -> ElectionState:
        raise NotImplementedError

    def can_grant_vote(self, replica_id: int, directory_id: bytes | None, log_up_to_date: bool,
                       pre_vote: bool) -> bool:
        raise NotImplementedError

    def __repr__(self) -> str:
        e = self.election()
        return (f"{self.name}(epoch={self.epoch}, leader={e.leader_id}, voted={e.voted_id}, "
                f"hw={self.high_watermark})")
