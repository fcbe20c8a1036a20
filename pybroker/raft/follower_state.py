"""Follower: the replica knows the leader of its epoch and fetches from it (Kafka's
FollowerState).

Every successful Fetch/FetchSnapshot answer resets the fetch timer
(controller.quorum.fetch.timeout.ms); when it expires a voter becomes Prospective. An
EndQuorumEpoch from the leader shortens the timer by the follower's place among the preferred
successors. While it has fetched from the leader at least once in this state, a follower
rejects pre-votes (KIP-996): the leader is alive as far as it can tell.

The high watermark only moves forward; it is min(leader's high watermark, local log end).
`fetching_snapshot` is the snapshot being downloaded (FetchSnapshot), `snapshot_freezing`
true once its last byte arrived and the driver has been asked to make it durable.

Concurrency: Raft client thread only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pybroker.raft.election_state import ElectionState
from pybroker.raft.epoch_state import EpochState, Timer


class FollowerState(EpochState):
    name = "Follower"

    def __init__(self, *, epoch: int, leader_id: int, leader_endpoints: Mapping[str, tuple[str, int]],
                 voted_id: int | None, voted_directory_id: bytes | None,
                 high_watermark: int | None, fetch_timeout_ms: int, now_ms: int) -> None:
        self.epoch = epoch
        self.leader_id = leader_id
        self.leader_endpoints = leader_endpoints
        self.voted_id = voted_id
        self.voted_directory_id = voted_directory_id
        self.high_watermark = high_watermark
        self.fetch_timeout_ms = fetch_timeout_ms
        self.fetch_timer = Timer(now_ms, fetch_timeout_ms)
        self.has_fetched_from_leader = False
        self.fetching_snapshot: Any = None
        self.snapshot_freezing = False

    def election(self) -> ElectionState:
        return ElectionState(self.epoch, self.leader_id, self.voted_id, self.voted_directory_id)

    def can_grant_vote(self, replica_id: int, directory_id: bytes | None, log_up_to_date: bool,
                       pre_vote: bool) -> bool:
        return pre_vote and not self.has_fetched_from_leader and log_up_to_date

    def has_fetch_timeout_expired(self, now_ms: int) -> bool:
        return self.fetch_timer.is_expired(now_ms)

    def remaining_fetch_time_ms(self, now_ms: int) -> int:
        return self.fetch_timer.remaining_ms(now_ms)

    def reset_fetch_timeout_for_successful_fetch(self, now_ms: int) -> None:
        self.fetch_timer.reset(now_ms, self.fetch_timeout_ms)
        self.has_fetched_from_leader = True

    def override_fetch_timeout(self, now_ms: int, timeout_ms: int) -> None:
        self.fetch_timer.reset(now_ms, timeout_ms)

    def update_high_watermark(self, new_high_watermark: int | None) -> bool:
        """True if it moved. Raises ValueError if it would move backwards (a safety bug)."""
        if new_high_watermark is None:
            return False
        if self.high_watermark is not None:
            if new_high_watermark < self.high_watermark:
                raise ValueError(f"non-monotonic high watermark update {self.high_watermark} -> "
                                 f"{new_high_watermark}")
            if new_high_watermark == self.high_watermark:
                return False
        self.high_watermark = new_high_watermark
        return True
