"""The replica's current Raft state and its legal transitions (Kafka's QuorumState).

    Resigned    -> Unattached (election timeout, or a higher epoch), Follower (higher epoch)
    Unattached  -> Unattached (higher epoch, or a vote granted), Prospective (election timeout),
                   Follower (a leader of this or a higher epoch)
    Prospective -> Candidate (pre-votes from a majority), Follower / Unattached (pre-vote lost or
                   timed out, to Follower when the leader is known), Unattached (higher epoch)
    Candidate   -> Leader (votes from a majority), Prospective (after the election backoff),
                   Unattached / Follower (higher epoch or a leader of this epoch)
    Leader      -> Resigned (shutdown, resign, lost quorum), Unattached / Follower (higher epoch)
    Follower    -> Prospective (fetch timeout), Unattached / Follower (higher epoch)

Observers (non-voters) only move between Unattached and Follower. Any other transition
raises `IllegalStateError`: in the simulation that is a bug report, not a recoverable event.

Durability: a *durable* transition (a new epoch, a vote, a leader) changes the ElectionState;
it is queued in `pending_election` and the client hands it to the driver, which writes the
quorum-state file before sending any message produced after the change. Prospective and
Resigned are memory-only, as in Kafka. On start-up `initialize` resumes from the stored state:
a node that led the stored epoch starts Resigned in it; one that voted for itself starts
Candidate; one with a known leader starts Follower; and a log holding a higher epoch than the
file wins (the file may lag the log).

Concurrency: Raft client thread only. Randomness comes from the injected `random.Random`.
"""

from __future__ import annotations

import random as _random
from collections.abc import Mapping

from pybroker.raft.candidate_state import CandidateState
from pybroker.raft.election_state import ElectionState
from pybroker.raft.epoch_state import NO_DEADLINE, EpochState
from pybroker.raft.follower_state import FollowerState
from pybroker.raft.leader_state import LeaderState
from pybroker.raft.offset_and_epoch import OffsetAndEpoch
from pybroker.raft.prospective_state import ProspectiveState
from pybroker.raft.resigned_state import ResignedState
from pybroker.raft.unattached_state import UnattachedState
from pybroker.raft.voter_set import VoterSet


class IllegalStateError(RuntimeError):
    """A transition Raft forbids (Kafka's IllegalStateException)."""


class QuorumState:
    def __init__(self, *, local_id: int | None, local_directory_id: bytes | None, voters: VoterSet,
                 local_listeners: Mapping[str, tuple[str, int]], election_timeout_ms: int,
                 fetch_timeout_ms: int, random: _random.Random) -> None:
        self.local_id = local_id
        self.local_directory_id = local_directory_id
        self.voters = voters
        self.local_listeners = local_listeners
        self.election_timeout_ms = election_timeout_ms
        self.fetch_timeout_ms = fetch_timeout_ms
        self.random = random
        self.state: EpochState = UnattachedState(
            epoch=0, leader_id=None, voted_id=None, voted_directory_id=None, high_watermark=None,
            election_timeout_ms=NO_DEADLINE, now_ms=0)
        self.pending_election: ElectionState | None = None

    # -- start-up --------------------------------------------------------------------------
    def initialize(self, stored: ElectionState | None, log_end: OffsetAndEpoch, now_ms: int) -> None:
        election = stored if stored is not None else ElectionState(0)
        local = self.local_id
        if election.has_voted and local is None:
            raise IllegalStateError(f"quorum state {election} has a vote but this node has no id")
        state: EpochState
        if election.epoch < log_end.epoch:
            # the log saw a later epoch than the file recorded: start there, knowing nothing
            state = self._unattached(log_end.epoch, None, None, None, None, now_ms,
                                     self.random_election_timeout_ms())
        elif local is not None and election.is_leader(local):
            state = ResignedState(local_id=local, epoch=election.epoch, voter_ids=self.voters.voter_ids(),
                                  election_timeout_ms=self.random_election_timeout_ms(),
                                  preferred_successors=[], now_ms=now_ms)
        elif local is not None and election.is_voted_candidate(local, self.local_directory_id) \
                and self.is_voter() and election.leader_id is None:
            # Deliberate difference: Kafka resumes as Candidate even when the file also names the
            # epoch's leader (a candidate that lost, then followed), and its vote requests then
            # carry a last epoch equal to the candidate epoch, which voters reject as
            # INVALID_REQUEST. Following the known leader is what the state says. Pinned by
            # tests/unit/raft/test_quorum_state.py::test_restart_after_losing_own_election_follows_the_winner.
            state = CandidateState(local_id=local, local_directory_id=self.local_directory_id,
                                   epoch=election.epoch, voter_ids=self.voters.voter_ids(),
                                   high_watermark=None, retries=1,
                                   election_timeout_ms=self.random_election_timeout_ms(), now_ms=now_ms)
        elif election.leader_id is not None and self.voters.endpoint(election.leader_id) is not None:
            node = self.voters.voter(election.leader_id)
            assert node is not None
            state = FollowerState(epoch=election.epoch, leader_id=election.leader_id,
                                  leader_endpoints=node.listeners, voted_id=election.voted_id,
                                  voted_directory_id=election.voted_directory_id, high_watermark=None,
                                  fetch_timeout_ms=self.fetch_timeout_ms, now_ms=now_ms)
        else:
            # a leader whose endpoints are unknown cannot be fetched from: find it again
            state = self._unattached(election.epoch, election.leader_id, election.voted_id,
                                     election.voted_directory_id, None, now_ms,
                                     self.random_election_timeout_ms())
        self._durable_transition_to(state)

    # -- queries ---------------------------------------------------------------------------
    @property
    def epoch(self) -> int:
        return self.state.epoch

    @property
    def high_watermark(self) -> int | None:
        return self.state.high_watermark

    @property
    def leader_id(self) -> int | None:
        return self.state.election().leader_id

    @property
    def voted_id(self) -> int | None:
        return self.state.election().voted_id

    @property
    def leader_endpoints(self) -> Mapping[str, tuple[str, int]]:
        return self.state.leader_endpoints

    def is_voter(self, node_id: int | None = None) -> bool:
        if node_id is None:
            node_id = self.local_id
            if node_id is None:
                return False
            return self.voters.is_voter(node_id, self.local_directory_id)
        return self.voters.is_voter(node_id)

    def is_observer(self) -> bool:
        return not self.is_voter()

    def is_only_voter(self) -> bool:
        return self.local_id is not None and self.voters.is_only_voter(self.local_id)

    def has_remote_leader(self) -> bool:
        leader = self.leader_id
        return leader is not None and leader != self.local_id

    @property
    def is_leader(self) -> bool:
        return isinstance(self.state, LeaderState)

    @property
    def is_follower(self) -> bool:
        return isinstance(self.state, FollowerState)

    @property
    def is_candidate(self) -> bool:
        return isinstance(self.state, CandidateState)

    @property
    def is_prospective(self) -> bool:
        return isinstance(self.state, ProspectiveState)

    @property
    def is_unattached(self) -> bool:
        return isinstance(self.state, UnattachedState)

    @property
    def is_resigned(self) -> bool:
        return isinstance(self.state, ResignedState)

    def is_unattached_not_voted(self) -> bool:
        return isinstance(self.state, UnattachedState) and self.state.voted_id is None

    def is_prospective_not_voted(self) -> bool:
        return isinstance(self.state, ProspectiveState) and self.state.voted_id is None

    def random_election_timeout_ms(self) -> int:
        timeout = self.election_timeout_ms
        return 0 if timeout == 0 else timeout + self.random.randrange(timeout)

    # -- transitions -----------------------------------------------------------------------
    def _unattached(self, epoch: int, leader_id: int | None, voted_id: int | None,
                    voted_directory_id: bytes | None, high_watermark: int | None, now_ms: int,
                    timeout_ms: int) -> UnattachedState:
        if not self.is_voter():
            timeout_ms = NO_DEADLINE
        return UnattachedState(epoch=epoch, leader_id=leader_id, voted_id=voted_id,
                               voted_directory_id=voted_directory_id, high_watermark=high_watermark,
                               election_timeout_ms=timeout_ms, now_ms=now_ms)

    def transition_to_unattached(self, epoch: int, leader_id: int | None, now_ms: int) -> None:
        current = self.state
        if epoch < current.epoch or (epoch == current.epoch and not self.is_prospective):
            raise IllegalStateError(f"cannot become Unattached in epoch {epoch} from {current}")
        if isinstance(current, (CandidateState, UnattachedState, ResignedState)):
            timeout = current.remaining_election_time_ms(now_ms)
        elif isinstance(current, ProspectiveState) and not current.epoch_election.is_vote_rejected():
            timeout = current.remaining_election_time_ms(now_ms)
        else:
            timeout = self.random_election_timeout_ms()
        # same epoch (from Prospective): keep the vote so this replica cannot vote twice in it
        e = current.election()
        voted, voted_dir = (e.voted_id, e.voted_directory_id) if epoch == current.epoch else (None, None)
        self._durable_transition_to(self._unattached(epoch, leader_id, voted, voted_dir,
                                                     current.high_watermark, now_ms, timeout))

    def unattached_add_voted_state(self, epoch: int, candidate_id: int,
                                   candidate_directory_id: bytes | None, now_ms: int) -> None:
        current = self.state
        if candidate_id == self.local_id:
            raise IllegalStateError("cannot record a vote for the local replica")
        if not isinstance(current, UnattachedState) or current.voted_id is not None \
                or epoch != current.epoch:
            raise IllegalStateError(f"cannot vote for {candidate_id} in epoch {epoch} from {current}")
        # the vote resets the timer: the candidate has at least our chance of winning
        self._durable_transition_to(self._unattached(
            epoch, current.leader_id, candidate_id, candidate_directory_id, current.high_watermark,
            now_ms, self.random_election_timeout_ms()))

    def prospective_add_voted_state(self, epoch: int, candidate_id: int,
                                    candidate_directory_id: bytes | None, now_ms: int) -> None:
        current = self.state
        if candidate_id == self.local_id or self.local_id is None:
            raise IllegalStateError("cannot record a vote for the local replica")
        if not isinstance(current, ProspectiveState) or current.voted_id is not None \
                or epoch != current.epoch:
            raise IllegalStateError(f"cannot vote for {candidate_id} in epoch {epoch} from {current}")
        self._durable_transition_to(ProspectiveState(
            local_id=self.local_id, epoch=epoch, leader_id=current.leader_id,
            leader_endpoints=current.leader_endpoints, voted_id=candidate_id,
            voted_directory_id=candidate_directory_id, voter_ids=self.voters.voter_ids(),
            high_watermark=current.high_watermark, retries=current.retries,
            election_timeout_ms=self.random_election_timeout_ms(), now_ms=now_ms))

    def transition_to_follower(self, epoch: int, leader_id: int,
                               endpoints: Mapping[str, tuple[str, int]], now_ms: int) -> None:
        current = self.state
        if not endpoints:
            raise IllegalStateError(f"cannot follow {leader_id} in epoch {epoch} without its endpoints")
        if leader_id == self.local_id:
            raise IllegalStateError(f"cannot follow the local replica in epoch {epoch}")
        if epoch < current.epoch:
            raise IllegalStateError(f"cannot follow {leader_id} in epoch {epoch} from {current}")
        if epoch == current.epoch:
            if isinstance(current, FollowerState) and len(current.leader_endpoints) >= len(endpoints):
                raise IllegalStateError(f"already following in epoch {epoch}: {current}")
            if isinstance(current, LeaderState):
                raise IllegalStateError(f"the leader of epoch {epoch} cannot follow {leader_id}")
        e = current.election()
        voted, voted_dir = (e.voted_id, e.voted_directory_id) if epoch == current.epoch else (None, None)
        self._durable_transition_to(FollowerState(
            epoch=epoch, leader_id=leader_id, leader_endpoints=endpoints, voted_id=voted,
            voted_directory_id=voted_dir, high_watermark=current.high_watermark,
            fetch_timeout_ms=self.fetch_timeout_ms, now_ms=now_ms))

    def correct_leader(self, epoch: int, leader_id: int, endpoints: Mapping[str, tuple[str, int]],
                       now_ms: int) -> None:
        """Follow `leader_id` instead of the leader this follower believed led `epoch`, which
        told it so itself (its fetch answer names the real one): the belief came from a forged
        BeginQuorumEpoch. The vote of the epoch is kept."""
        current = self.state
        if not isinstance(current, FollowerState) or epoch != current.epoch \
                or leader_id in (current.leader_id, self.local_id) or not endpoints:
            raise IllegalStateError(f"cannot correct {current} to leader {leader_id} in epoch {epoch}")
        self._durable_transition_to(FollowerState(
            epoch=epoch, leader_id=leader_id, leader_endpoints=endpoints, voted_id=current.voted_id,
            voted_directory_id=current.voted_directory_id, high_watermark=current.high_watermark,
            fetch_timeout_ms=self.fetch_timeout_ms, now_ms=now_ms))

    def transition_to_prospective(self, now_ms: int) -> None:
        current = self.state
        if not self.is_voter():
            raise IllegalStateError(f"observer {self.local_id} cannot become Prospective")
        if isinstance(current, (LeaderState, ProspectiveState)):
            raise IllegalStateError(f"cannot become Prospective from {current}")
        assert self.local_id is not None
        retries = current.retries + 1 if isinstance(current, CandidateState) else 1
        e = current.election()
        # memory only: the persisted election state does not change
        self.state = ProspectiveState(
            local_id=self.local_id, epoch=current.epoch, leader_id=e.leader_id,
            leader_endpoints=current.leader_endpoints, voted_id=e.voted_id,
            voted_directory_id=e.voted_directory_id, voter_ids=self.voters.voter_ids(),
            high_watermark=current.high_watermark, retries=retries,
            election_timeout_ms=self.random_election_timeout_ms(), now_ms=now_ms)

    def transition_to_candidate(self, now_ms: int) -> None:
        current = self.state
        if not self.is_voter() or not isinstance(current, ProspectiveState):
            raise IllegalStateError(f"cannot become Candidate from {current}")
        assert self.local_id is not None
        self._durable_transition_to(CandidateState(
            local_id=self.local_id, local_directory_id=self.local_directory_id,
            epoch=current.epoch + 1, voter_ids=self.voters.voter_ids(),
            high_watermark=current.high_watermark, retries=current.retries,
            election_timeout_ms=self.random_election_timeout_ms(), now_ms=now_ms))

    def transition_to_leader(self, epoch_start_offset: int, now_ms: int) -> LeaderState:
        current = self.state
        if not self.is_voter() or not isinstance(current, CandidateState):
            raise IllegalStateError(f"cannot become Leader from {current}")
        if not current.epoch_election.is_vote_granted():
            raise IllegalStateError("cannot become Leader without votes from a majority")
        assert self.local_id is not None
        # The new leader forgets the high watermark it knew: it cannot expose a committed
        # offset until a record of its own epoch is committed (see leader_state).
        state = LeaderState(
            local_id=self.local_id, local_directory_id=self.local_directory_id, epoch=current.epoch,
            epoch_start_offset=epoch_start_offset, voters=self.voters,
            granting_voters=current.epoch_election.granting_voters(),
            fetch_timeout_ms=self.fetch_timeout_ms, local_listeners=self.local_listeners,
            now_ms=now_ms)
        self._durable_transition_to(state)
        return state

    def transition_to_resigned(self, preferred_successors: list[int], now_ms: int) -> None:
        if not self.is_leader:
            raise IllegalStateError(f"cannot resign from {self.state}")
        assert self.local_id is not None
        self.state = ResignedState(local_id=self.local_id, epoch=self.state.epoch,
                                   voter_ids=self.voters.voter_ids(),
                                   election_timeout_ms=self.random_election_timeout_ms(),
                                   preferred_successors=preferred_successors, now_ms=now_ms)

    def _durable_transition_to(self, state: EpochState) -> None:
        self.pending_election = state.election()
        self.state = state

    def take_pending_election(self) -> ElectionState | None:
        pending, self.pending_election = self.pending_election, None
        return pending
