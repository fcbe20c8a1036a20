"""Follower: the replica knows the leader of its epoch and fetches from it (Kafka's
FollowerState).

Every successful Fetch/FetchSnapshot answer resets the fetch timer
(controller.quorum.fetch.timeout.ms); when it expires a voter becomes Prospective.

Leader lease (KIP-996's check-quorum rule, Raft thesis 9.6): while the follower has fetched
from its leader within the fetch timeout and the leader has not said it stopped leading, it is
*in lease*: it grants no pre-vote and moves to no other leader or epoch on a request (the
client's `_in_lease`). A candidate that a majority still hears from a live leader cannot win, and
a forged Vote or BeginQuorumEpoch cannot pull a healthy follower away.

EndQuorumEpoch (the leader resigning) is a *claim* until the leader confirms it: Kafka shortens
the fetch timer at once by the follower's place among the preferred successors, which let one
forged frame to each follower move leadership. Here the backoff is kept (`resignation_backoff_ms`)
and applied when the leader itself answers a Fetch with NOT_LEADER_OR_FOLLOWER or
BROKER_NOT_AVAILABLE in this epoch (`leader_stopped_leading`), which a resigned leader does at
once for every parked fetch. A real handover costs one fetch round trip more; a forged one
changes nothing.

The high watermark only moves forward; it is min(leader's high watermark, local log end).
`fetching_snapshot` is the snapshot being downloaded (FetchSnapshot), `snapshot_freezing`
true once its last byte arrived and the driver has been asked to make it durable.

Concurrency: Raft client thread only.
"""

from __future__ import annotations

from collections.abc import Mapping

from pybroker.raft.election_state import ElectionState
from pybroker.raft.epoch_state import EpochState, Timer
from pybroker.raft.snapshots import RawSnapshotWriter


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
        self.leader_stopped_leading = False
        self.resignation_backoff_ms: int | None = None
        self.fetching_snapshot: RawSnapshotWriter | None = None
        self.snapshot_freezing = False

    def election(self) -> ElectionState:
        return ElectionState(self.epoch, self.leader_id, self.voted_id, self.voted_directory_id)

    def can_grant_vote(self, replica_id: int, directory_id: bytes | None, log_up_to_date: bool,
                       pre_vote: bool) -> bool:
        return pre_vote and not self.has_fetched_from_leader and log_up_to_date

    def in_lease(self, now_ms: int) -> bool:
        """The leader answered a fetch within the fetch timeout and still leads, as far as this
        follower can tell (see the module docstring)."""
        return (self.has_fetched_from_leader and not self.leader_stopped_leading
                and not self.fetch_timer.is_expired(now_ms))

    def claim_resignation(self, now_ms: int, backoff_ms: int) -> None:
        """An EndQuorumEpoch named this follower's leader: apply `backoff_ms` once the leader
        confirms it stopped leading (at once if it already has)."""
        self.resignation_backoff_ms = backoff_ms
        if self.leader_stopped_leading:
            self._apply_resignation(now_ms)

    def on_leader_stopped_leading(self, now_ms: int) -> None:
        """The leader answered a fetch of this epoch with NOT_LEADER_OR_FOLLOWER or
        BROKER_NOT_AVAILABLE: it resigned or is shutting down."""
        self.leader_stopped_leading = True
        if self.resignation_backoff_ms is not None:
            self._apply_resignation(now_ms)

    def _apply_resignation(self, now_ms: int) -> None:
        assert self.resignation_backoff_ms is not None
        self.override_fetch_timeout(now_ms, min(self.resignation_backoff_ms,
                                                self.fetch_timer.remaining_ms(now_ms)))
        self.resignation_backoff_ms = None

    def has_fetch_timeout_expired(self, now_ms: int) -> bool:
        return self.fetch_timer.is_expired(now_ms)

    def remaining_fetch_time_ms(self, now_ms: int) -> int:
        return self.fetch_timer.remaining_ms(now_ms)

    def reset_fetch_timeout_for_successful_fetch(self, now_ms: int) -> None:
        self.fetch_timer.reset(now_ms, self.fetch_timeout_ms)
        self.has_fetched_from_leader = True
        self.leader_stopped_leading = False

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
