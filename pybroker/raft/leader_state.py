"""Leader: the replica that won the election of its epoch (Kafka's LeaderState).

Replication is pulled by followers: each Fetch names the follower's fetch offset, which is
also its (flushed) log end offset, so the leader learns every replica's progress from the
fetches alone. The leader's own entry is its *flushed* end offset (`update_local_state`),
since a record is only safe once it is on disk on a majority.

High watermark: sort the voters' end offsets descending and take the one at index n // 2
(the largest offset a majority has). It is exposed only once it is above `epoch_start_offset`
(the LeaderChangeMessage the leader writes first in its epoch): before one of its own records
is committed, a new leader cannot tell which earlier records are committed. After that it
only moves forward. Example, 5 voters at 120, 118, 118, 90, 40 (epoch start 100): HW 118.

Observers (brokers fetching as non-voters) are tracked separately, never count toward the
high watermark, and are forgotten 5 minutes after their last fetch (Kafka's
OBSERVER_SESSION_TIMEOUT_MS).

Timers: BeginQuorumEpoch is re-sent to every voter each fetch.timeout / 2; the leader resigns
when no majority fetched within 1.5 x fetch.timeout (check quorum). While a majority fetched
within one fetch.timeout the leader is *in lease* (`in_lease`): like a follower that hears it, it
moves to no higher epoch on a Vote, BeginQuorumEpoch or EndQuorumEpoch (see follower_state).

Concurrency: Raft client thread only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pybroker.raft.election_state import ElectionState
from pybroker.raft.epoch_state import NO_DEADLINE, EpochState, Timer
from pybroker.raft.voter_set import VoterSet

OBSERVER_SESSION_TIMEOUT_MS = 300_000
# Fetches carry any replica id a peer likes; past this many observers the one that fetched least
# recently is forgotten, so made-up ids cost bounded memory (a cluster has far fewer brokers).
MAX_OBSERVERS = 10_000
CHECK_QUORUM_TIMEOUT_FACTOR = 1.5


@dataclass
class ReplicaState:
    replica_id: int
    directory_id: bytes | None = None
    end_offset: int | None = None
    last_fetch_timestamp: int = -1
    last_fetch_leader_log_end_offset: int = -1
    last_caught_up_timestamp: int = -1
    has_acknowledged_leader: bool = False

    def update_follower_state(self, now_ms: int, fetch_offset: int, leader_end_offset: int | None) -> None:
        # Kafka's rule: caught up when the fetch reaches the leader's LEO of this fetch, or the
        # LEO the leader had at the previous fetch (then it was caught up at that time).
        if leader_end_offset is not None:
            if fetch_offset >= leader_end_offset:
                self.last_caught_up_timestamp = max(self.last_caught_up_timestamp, now_ms)
            elif 0 < self.last_fetch_leader_log_end_offset <= fetch_offset:
                self.last_caught_up_timestamp = max(self.last_caught_up_timestamp,
                                                    self.last_fetch_timestamp)
            self.last_fetch_leader_log_end_offset = leader_end_offset
        self.last_fetch_timestamp = max(self.last_fetch_timestamp, now_ms)
        self.end_offset = fetch_offset
        self.has_acknowledged_leader = True


class LeaderState(EpochState):
    name = "Leader"

    def __init__(self, *, local_id: int, local_directory_id: bytes | None, epoch: int,
                 epoch_start_offset: int, voters: VoterSet, granting_voters: set[int],
                 fetch_timeout_ms: int, local_listeners: Mapping[str, tuple[str, int]],
                 now_ms: int) -> None:
        self.local_id = local_id
        self.local_directory_id = local_directory_id
        self.epoch = epoch
        self.epoch_start_offset = epoch_start_offset
        self.voters = voters
        self.granting_voters = frozenset(granting_voters)
        self.leader_endpoints = local_listeners
        self.high_watermark = None
        self.voter_states = {
            v.voter_id: ReplicaState(v.voter_id, v.directory_id,
                                     has_acknowledged_leader=v.voter_id == local_id)
            for v in voters}
        self.observer_states: dict[int, ReplicaState] = {}
        self._fetched_voters: set[int] = set()
        self.check_quorum_timeout_ms = int(fetch_timeout_ms * CHECK_QUORUM_TIMEOUT_FACTOR)
        self.check_quorum_timer = Timer(now_ms, self.check_quorum_timeout_ms)
        self.fetch_timeout_ms = fetch_timeout_ms
        self.majority_contact_ms = now_ms  # elected by a majority just now
        self.begin_quorum_epoch_timeout_ms = fetch_timeout_ms // 2
        self.begin_quorum_epoch_timer = Timer(now_ms, 0)
        self.resign_requested = False

    def election(self) -> ElectionState:
        return ElectionState(self.epoch, self.local_id, self.local_id, self.local_directory_id)

    def can_grant_vote(self, replica_id: int, directory_id: bytes | None, log_up_to_date: bool,
                       pre_vote: bool) -> bool:
        return False

    # -- timers ----------------------------------------------------------------------------
    def time_until_begin_quorum_epoch_timer_expires(self, now_ms: int) -> int:
        return self.begin_quorum_epoch_timer.remaining_ms(now_ms)

    def reset_begin_quorum_epoch_timer(self, now_ms: int) -> None:
        self.begin_quorum_epoch_timer.reset(now_ms, self.begin_quorum_epoch_timeout_ms)

    def time_until_check_quorum_expires(self, now_ms: int) -> int:
        if len(self.voter_states) == 1:
            return NO_DEADLINE
        return self.check_quorum_timer.remaining_ms(now_ms)

    def in_lease(self, now_ms: int) -> bool:
        """A majority of the voters fetched within the last fetch.timeout."""
        return len(self.voter_states) == 1 or now_ms - self.majority_contact_ms < self.fetch_timeout_ms

    def update_check_quorum_for_following_voter(self, replica_id: int, now_ms: int) -> None:
        if replica_id == self.local_id:
            raise ValueError("a Fetch from the leader itself")
        if replica_id in self.voter_states:
            self._fetched_voters.add(replica_id)
        majority = len(self.voter_states) // 2 + 1
        if self.local_id in self.voter_states:
            majority -= 1  # the leader counts itself
        if len(self._fetched_voters) >= majority:
            self._fetched_voters.clear()
            self.check_quorum_timer.reset(now_ms, self.check_quorum_timeout_ms)
            self.majority_contact_ms = now_ms

    # -- progress --------------------------------------------------------------------------
    def update_local_state(self, durable_end_offset: int) -> bool:
        """The leader's flushed log end offset moved; True if the high watermark moved."""
        state = self.voter_states.get(self.local_id)
        if state is None:
            state = self.observer_states.setdefault(self.local_id, ReplicaState(self.local_id))
        if state.end_offset is not None and durable_end_offset < state.end_offset:
            raise ValueError(f"non-monotonic local end offset {state.end_offset} -> {durable_end_offset}")
        state.end_offset = durable_end_offset
        return self._maybe_update_high_watermark()

    def update_replica_state(self, replica_id: int, directory_id: bytes | None, now_ms: int,
                             fetch_offset: int) -> bool:
        """A Fetch from `replica_id` at `fetch_offset`; True if the high watermark moved."""
        if replica_id < 0:
            return False  # not a replica (a consumer of the metadata log)
        if replica_id == self.local_id:
            raise ValueError(f"replica id {replica_id} is the leader's own")
        voter = self.voters.voter(replica_id)
        is_voter = voter is not None and voter.matches(replica_id, directory_id)
        if is_voter:
            state = self.voter_states[replica_id]
        else:
            # most recently fetched last (dict order), so the first is the one to forget
            observer = self.observer_states.pop(replica_id, None)
            if observer is None:
                observer = ReplicaState(replica_id, directory_id)
                if len(self.observer_states) >= MAX_OBSERVERS:
                    del self.observer_states[next(iter(self.observer_states))]
            self.observer_states[replica_id] = state = observer
        leader_end = self.voter_states[self.local_id].end_offset if self.local_id in self.voter_states else None
        state.update_follower_state(now_ms, fetch_offset, leader_end)
        self.update_check_quorum_for_following_voter(replica_id, now_ms)
        return is_voter and self._maybe_update_high_watermark()

    def _maybe_update_high_watermark(self) -> bool:
        ends = sorted((s.end_offset for s in self.voter_states.values() if s.end_offset is not None),
                      reverse=True)
        index = len(self.voter_states) // 2
        if index >= len(ends):
            return False
        candidate = ends[index]
        if candidate <= self.epoch_start_offset:
            return False
        if self.high_watermark is None or candidate > self.high_watermark:
            self.high_watermark = candidate
            return True
        return False

    def add_acknowledgement_from(self, voter_id: int) -> None:
        state = self.voter_states.get(voter_id)
        if state is None:
            raise ValueError(f"acknowledgement from non-voter {voter_id}")
        state.has_acknowledged_leader = True

    def non_acknowledging_voters(self) -> set[int]:
        return {v for v, s in self.voter_states.items() if not s.has_acknowledged_leader}

    def non_leader_voters_by_descending_fetch_offset(self) -> list[int]:
        others = [s for v, s in self.voter_states.items() if v != self.local_id]
        others.sort(key=lambda s: (-(s.end_offset if s.end_offset is not None else -1), s.replica_id))
        return [s.replica_id for s in others]

    def observers(self, now_ms: int) -> dict[int, ReplicaState]:
        """Observer states, after forgetting those silent for OBSERVER_SESSION_TIMEOUT_MS."""
        for replica_id in [r for r, s in self.observer_states.items()
                           if now_ms - s.last_fetch_timestamp >= OBSERVER_SESSION_TIMEOUT_MS
                           and r != self.local_id]:
            del self.observer_states[replica_id]
        return self.observer_states

    def request_resign(self) -> None:
        self.resign_requested = True
