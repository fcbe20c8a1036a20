"""QuorumState: start-up from the stored election state and the legal transitions."""

from __future__ import annotations

import random

import pytest

from pybroker.raft.candidate_state import CandidateState
from pybroker.raft.election_state import ElectionState
from pybroker.raft.epoch_state import NO_DEADLINE
from pybroker.raft.follower_state import FollowerState
from pybroker.raft.offset_and_epoch import OffsetAndEpoch
from pybroker.raft.prospective_state import ProspectiveState
from pybroker.raft.quorum_state import IllegalStateError, QuorumState
from pybroker.raft.resigned_state import ResignedState
from pybroker.raft.unattached_state import UnattachedState
from pybroker.raft.voter_set import VoterSet

START = OffsetAndEpoch(0, 0)
VOTERS = VoterSet.from_static({1: ("h", 1), 2: ("h", 2), 3: ("h", 3)})


def quorum(local_id: int | None = 1, stored: ElectionState | None = None,
           log_end: OffsetAndEpoch = START) -> QuorumState:
    q = QuorumState(local_id=local_id, local_directory_id=None, voters=VOTERS, local_listeners={},
                    election_timeout_ms=1000, fetch_timeout_ms=2000, random=random.Random(1))
    q.initialize(stored, log_end, now_ms=0)
    return q


def test_fresh_start_is_unattached_in_epoch_zero() -> None:
    q = quorum()
    assert isinstance(q.state, UnattachedState) and q.epoch == 0
    assert q.take_pending_election() == ElectionState(0)


def test_restarted_leader_is_resigned_and_restarted_candidate_is_candidate() -> None:
    assert isinstance(quorum(stored=ElectionState(4, 1, 1)).state, ResignedState)
    q = quorum(stored=ElectionState(4, None, 1))
    assert isinstance(q.state, CandidateState) and q.epoch == 4


def test_restart_after_losing_own_election_follows_the_winner() -> None:
    # voted for itself in epoch 4, then learned that 2 won it (a deliberate difference from Kafka)
    q = quorum(stored=ElectionState(4, 2, 1))
    assert isinstance(q.state, FollowerState) and q.state.leader_id == 2 and q.voted_id == 1


def test_log_ahead_of_the_state_file_wins() -> None:
    q = quorum(stored=ElectionState(3, 2), log_end=OffsetAndEpoch(10, 6))
    assert isinstance(q.state, UnattachedState) and q.epoch == 6 and q.leader_id is None


def test_observer_unattached_has_no_election_timeout() -> None:
    q = quorum(local_id=9)
    assert q.is_observer()
    assert q.state.election_timer.deadline_ms == NO_DEADLINE


def test_random_election_timeout_is_in_t_to_2t() -> None:
    q = quorum()
    values = [q.random_election_timeout_ms() for _ in range(500)]
    assert min(values) >= 1000 and max(values) < 2000 and len(set(values)) > 100


def test_prospective_keeps_the_epoch_and_is_not_persisted() -> None:
    q = quorum(stored=ElectionState(4, 2))
    q.take_pending_election()
    q.transition_to_prospective(now_ms=10)
    assert isinstance(q.state, ProspectiveState) and q.epoch == 4 and q.leader_id == 2
    assert q.take_pending_election() is None
    q.transition_to_candidate(now_ms=10)
    assert q.epoch == 5 and q.take_pending_election() == ElectionState(5, None, 1)


def test_candidate_needs_a_prospective_and_leader_needs_a_majority() -> None:
    q = quorum()
    with pytest.raises(IllegalStateError):
        q.transition_to_candidate(0)
    q.transition_to_prospective(0)
    q.transition_to_candidate(0)
    with pytest.raises(IllegalStateError):
        q.transition_to_leader(0, 0)
    q.state.record_granted_vote(2)
    state = q.transition_to_leader(0, 0)
    assert q.is_leader and state.epoch == 1
    with pytest.raises(IllegalStateError):
        q.transition_to_follower(1, 2, {"CONTROLLER": ("h", 2)}, 0)


def test_one_vote_per_epoch_and_no_going_back_in_epochs() -> None:
    q = quorum(stored=ElectionState(4))
    q.unattached_add_voted_state(4, 2, None, 0)
    with pytest.raises(IllegalStateError):
        q.unattached_add_voted_state(4, 3, None, 0)
    with pytest.raises(IllegalStateError):
        q.transition_to_unattached(3, None, 0)
    with pytest.raises(IllegalStateError):
        q.transition_to_unattached(4, None, 0)
    q.transition_to_follower(4, 2, {"CONTROLLER": ("h", 2)}, 0)
    assert q.take_pending_election() == ElectionState(4, 2, 2)  # the vote is kept in the epoch


def test_observer_cannot_campaign() -> None:
    q = quorum(local_id=7)
    with pytest.raises(IllegalStateError):
        q.transition_to_prospective(0)
