"""The Raft RPCs a node answers (the request half of Kafka's KafkaRaftClient).

Vote (KIP-996 pre-votes included), BeginQuorumEpoch, EndQuorumEpoch, Fetch from replicas and
observers (parked up to its max wait when there is nothing new: Kafka's fetch purgatory, here
`_parked`, completed when the leader's log grows), FetchSnapshot and DescribeQuorum. Every
handler validates the cluster id and the partition first, then Kafka's voter-only or
leader-only rules, answering errors with the responder's epoch and leader so the requester can
catch up. Answers go out through the client's outbox (`_respond`), after any election state or
log change they depend on has been made durable.

Anyone who reaches the controller listener can send these, so a request is input, never a
command (deliberate differences from Kafka, which trusts its peers and stops the node when one
contradicts it; pinned by tests/unit/raft/test_raft_input.py and the simulation's Byzantine
mode). Before any state changes:
- an epoch at or above MAX_EPOCH (it could not be followed by a new one), or more than
  MAX_EPOCH_JUMP ahead of this node's, is INVALID_REQUEST;
- a Vote, BeginQuorumEpoch or EndQuorumEpoch naming a replica outside the static voter set, or
  reaching a node that is not a voter, is INCONSISTENT_VOTER_SET (Kafka before KIP-853); one that
  names this node itself as the sender, or as the leader of an epoch it does not lead, or another
  leader for the epoch whose leader it knows, is INVALID_REQUEST;
- a node in lease (a follower that hears its leader, a leader that hears a majority) moves to no
  other epoch or leader: it answers with what it knows, vote not granted (see follower_state);
- a Fetch or FetchSnapshot claiming to come from this node is INVALID_REQUEST;
- a leader's endpoints come from the voter set, never from the request.
If a handler still raises, the request is answered UNKNOWN_SERVER_ERROR and the error logged
(`strict` clients, in tests and the simulation, raise instead).

A mixin of KafkaRaftClient (raft_client.py), which owns the state it reads; RaftClientBase
(raft_client_base) declares what of the client it may use, for mypy. Request bodies are the
generated message classes the api key names (`InboundRequest.body` is untyped: the dispatch on
the api key is what makes it a VoteRequest or a FetchRequest).
Concurrency: Raft client thread only.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pybroker.protocol._generated.begin_quorum_epoch_request import BeginQuorumEpochRequest
from pybroker.protocol._generated.begin_quorum_epoch_response import BeginQuorumEpochResponse
from pybroker.protocol._generated.describe_quorum_request import DescribeQuorumRequest
from pybroker.protocol._generated.describe_quorum_response import DescribeQuorumResponse
from pybroker.protocol._generated.end_quorum_epoch_request import EndQuorumEpochRequest
from pybroker.protocol._generated.end_quorum_epoch_response import EndQuorumEpochResponse
from pybroker.protocol._generated.fetch_request import FetchRequest
from pybroker.protocol._generated.fetch_response import FetchResponse
from pybroker.protocol._generated.fetch_snapshot_request import FetchSnapshotRequest
from pybroker.protocol._generated.fetch_snapshot_response import FetchSnapshotResponse
from pybroker.protocol._generated.vote_request import VoteRequest
from pybroker.protocol._generated.vote_response import VoteResponse
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.api_message import ApiMessage
from pybroker.raft import raft_util as ru
from pybroker.raft.epoch_state import NO_DEADLINE
from pybroker.raft.follower_state import FollowerState
from pybroker.raft.leader_state import MAX_OBSERVERS, LeaderState, ReplicaState
from pybroker.raft.offset_and_epoch import OffsetAndEpoch, ValidKind
from pybroker.raft.raft_client_base import RaftClientBase
from pybroker.raft.raft_message import InboundRequest
from pybroker.raft.snapshots import BOOTSTRAP_SNAPSHOT_ID

log = logging.getLogger(__name__)


@dataclass
class _ParkedFetch:
    request: InboundRequest
    replica_id: int
    directory_id: bytes | None
    fetch_offset: int
    deadline_ms: int


class RaftRequestHandlers(RaftClientBase):
    _parked: list[_ParkedFetch]  # Fetches waiting for records (a leader's fetch purgatory)
    _hw_sent: dict[int, int]  # replica id -> the high watermark last sent to it (this leadership)

    def handle_request(self, request: InboundRequest, now_ms: int) -> None:
        """Answer (now, or for a parked Fetch later) through take_io(); never raises unless
        the client is `strict`."""
        try:
            self._dispatch_request(request, now_ms)
        except Exception:
            if self.strict:
                raise
            log.exception("node %s: internal error answering Raft request %s", self.node_id,
                          request.api_key)
            self._respond(request, ru.error_response(request.api_key, ru.UNKNOWN_SERVER_ERROR))

    def _dispatch_request(self, request: InboundRequest, now_ms: int) -> None:
        api_key = request.api_key
        body = request.body
        if api_key == ApiKey.FETCH:
            self._handle_fetch_request(request, now_ms)
            return
        response: ApiMessage
        if api_key == ApiKey.VOTE:
            response = self._handle_vote_request(body, now_ms)
        elif api_key == ApiKey.BEGIN_QUORUM_EPOCH:
            response = self._handle_begin_quorum_epoch_request(body, now_ms)
        elif api_key == ApiKey.END_QUORUM_EPOCH:
            response = self._handle_end_quorum_epoch_request(body, now_ms)
        elif api_key == ApiKey.FETCH_SNAPSHOT:
            response = self._handle_fetch_snapshot_request(body, now_ms)
        elif api_key == ApiKey.DESCRIBE_QUORUM:
            response = self._handle_describe_quorum_request(body, now_ms)
        else:
            raise ValueError(f"not a Raft API: {api_key}")
        self._respond(request, response)

    def _valid_cluster_id(self, cluster_id: str | None) -> bool:
        return cluster_id is None or cluster_id == self.cluster_id

    def _validate_voter_only_request(self, remote_id: int, request_epoch: int) -> int | None:
        if request_epoch < self.quorum.epoch:
            return ru.FENCED_LEADER_EPOCH
        if remote_id < 0 or remote_id == self.node_id or request_epoch >= ru.MAX_EPOCH \
                or request_epoch - self.quorum.epoch > ru.MAX_EPOCH_JUMP:
            return ru.INVALID_REQUEST
        if not self.quorum.is_voter() or self.voters.voter(remote_id) is None:
            return ru.INCONSISTENT_VOTER_SET
        return None

    def _in_lease(self, now_ms: int) -> bool:
        """A follower that hears its leader, or a leader that hears a majority: such a node
        moves to no other epoch or leader on a request (see follower_state)."""
        state = self.quorum.state
        if isinstance(state, (LeaderState, FollowerState)):
            return state.in_lease(now_ms)
        return False

    def _known_leader_endpoints(self, leader_id: int, offered: Sequence[ru.ListenerEndpoint]
                                ) -> Mapping[str, tuple[str, int]]:
        """The voter set's endpoints of a voter; a request's own list only for a leader the
        voter set has no address of (so a forged request cannot point a follower elsewhere)."""
        node = self.voters.voter(leader_id)
        if node is not None and node.listeners:
            return dict(node.listeners)
        return {e.name: (e.host, e.port) for e in offered} if offered else {}

    def _contradicts_known_leader(self, leader_id: int, epoch: int) -> bool:
        """Another leader than the one this node knows for `epoch` (Raft elects one per epoch;
        Kafka stops the node here)."""
        known = self.quorum.leader_id
        return epoch == self.quorum.epoch and known is not None and known != leader_id

    def _validate_leader_only_request(self, request_epoch: int) -> int | None:
        if request_epoch < self.quorum.epoch:
            return ru.FENCED_LEADER_EPOCH
        if request_epoch > self.quorum.epoch:
            return ru.UNKNOWN_LEADER_EPOCH
        if not self.quorum.is_leader:
            return ru.NOT_LEADER_OR_FOLLOWER
        if self._shutdown_deadline is not None:
            return ru.BROKER_NOT_AVAILABLE
        return None

    def _is_valid_voter_key(self, voter_id: int, voter_directory_id: bytes) -> bool:
        if voter_id < 0:
            return True  # v0 names no voter
        if voter_id != self.node_id:
            return False
        wanted = ru.optional_directory(voter_directory_id)
        return wanted is None or self.directory_id is None or wanted == self.directory_id

    def _handle_vote_request(self, body: VoteRequest, now_ms: int) -> VoteResponse:
        def response(error: int, granted: bool) -> VoteResponse:
            return ru.vote_response(error, self.quorum.epoch, self.quorum.leader_id, granted,
                                    self.quorum.leader_endpoints, self.listener_name)

        if not self._valid_cluster_id(body.cluster_id):
            return VoteResponse(error_code=ru.INCONSISTENT_CLUSTER_ID)
        p = ru.single_partition(body.topics)
        if p is None:
            return VoteResponse(error_code=ru.INVALID_REQUEST)
        pre_vote = p.pre_vote
        last_epoch, last_offset = p.last_offset_epoch, p.last_offset
        # A candidate bumped its epoch, so its last record is of an older epoch; a prospective
        # did not, so its last record may be of the epoch it sends.
        illegal_epoch = last_epoch > p.replica_epoch if pre_vote else last_epoch >= p.replica_epoch
        if last_offset < 0 or last_epoch < 0 or illegal_epoch:
            return response(ru.INVALID_REQUEST, False)
        error = self._validate_voter_only_request(p.replica_id, p.replica_epoch)
        if error is not None:
            return response(error, False)
        if self._in_lease(now_ms):
            log.info("node %s: %svote request from %s in epoch %d rejected: the leader of epoch "
                     "%d is alive", self.node_id, "pre-" if pre_vote else "", p.replica_id,
                     p.replica_epoch, self.quorum.epoch)
            return response(ru.NONE, False)
        if p.replica_epoch > self.quorum.epoch:
            self._transition_to_unattached(p.replica_epoch, None, now_ms)
        if not self._is_valid_voter_key(body.voter_id, p.voter_directory_id):
            return response(ru.INVALID_VOTER_KEY, False)
        up_to_date = OffsetAndEpoch(last_offset, last_epoch).at_least_as_up_to_date_as(
            self.log.end_offset_and_epoch())
        candidate_dir = ru.optional_directory(p.replica_directory_id)
        granted = self.quorum.state.can_grant_vote(p.replica_id, candidate_dir, up_to_date, pre_vote)
        if granted and not pre_vote:
            if self.quorum.is_unattached_not_voted():
                self.quorum.unattached_add_voted_state(p.replica_epoch, p.replica_id, candidate_dir, now_ms)
            elif self.quorum.is_prospective_not_voted():
                self.quorum.prospective_add_voted_state(p.replica_epoch, p.replica_id, candidate_dir, now_ms)
        log.debug("node %s: %svote for %s in epoch %d %s", self.node_id, "pre-" if pre_vote else "",
                  p.replica_id, p.replica_epoch, "granted" if granted else "rejected")
        return response(ru.NONE, granted)

    def _handle_begin_quorum_epoch_request(self, body: BeginQuorumEpochRequest,
                                           now_ms: int) -> BeginQuorumEpochResponse:
        def response(error: int) -> BeginQuorumEpochResponse:
            return ru.begin_quorum_epoch_response(error, self.quorum.epoch, self.quorum.leader_id,
                                                  self.quorum.leader_endpoints, self.listener_name)

        if not self._valid_cluster_id(body.cluster_id):
            return BeginQuorumEpochResponse(error_code=ru.INCONSISTENT_CLUSTER_ID)
        p = ru.single_partition(body.topics)
        if p is None:
            return BeginQuorumEpochResponse(error_code=ru.INVALID_REQUEST)
        error = self._validate_leader_announcement(p.leader_id, p.leader_epoch, now_ms)
        if error is not None:
            return response(error)
        if p.leader_epoch == self.quorum.epoch or not self._in_lease(now_ms):
            endpoints = self._known_leader_endpoints(p.leader_id, body.leader_endpoints)
            self._maybe_transition(p.leader_id, p.leader_epoch, endpoints, now_ms)
        if not self._is_valid_voter_key(body.voter_id, p.voter_directory_id):
            return response(ru.INVALID_VOTER_KEY)
        return response(ru.NONE)

    def _validate_leader_announcement(self, leader_id: int, epoch: int, now_ms: int) -> int | None:
        """BeginQuorumEpoch and EndQuorumEpoch: the voter-only rules, then the leader they name
        must not contradict what this node knows."""
        error = self._validate_voter_only_request(leader_id, epoch)
        if error is None and self._contradicts_known_leader(leader_id, epoch):
            log.warning("node %s: refused a claim that %s leads epoch %d (this node: %s)",
                        self.node_id, leader_id, epoch, self.quorum.state)
            error = ru.INVALID_REQUEST
        return error

    def _handle_end_quorum_epoch_request(self, body: EndQuorumEpochRequest,
                                         now_ms: int) -> EndQuorumEpochResponse:
        def response(error: int) -> EndQuorumEpochResponse:
            return ru.end_quorum_epoch_response(error, self.quorum.epoch, self.quorum.leader_id,
                                                self.quorum.leader_endpoints, self.listener_name)

        if not self._valid_cluster_id(body.cluster_id):
            return EndQuorumEpochResponse(error_code=ru.INCONSISTENT_CLUSTER_ID)
        p = ru.single_partition(body.topics)
        if p is None:
            return EndQuorumEpochResponse(error_code=ru.INVALID_REQUEST)
        error = self._validate_leader_announcement(p.leader_id, p.leader_epoch, now_ms)
        if error is not None:
            return response(error)
        if p.leader_epoch > self.quorum.epoch and self._in_lease(now_ms):
            return response(ru.NONE)
        endpoints = self._known_leader_endpoints(p.leader_id, body.leader_endpoints)
        self._maybe_transition(p.leader_id, p.leader_epoch, endpoints, now_ms)
        state = self.quorum.state
        if isinstance(state, FollowerState) and state.leader_id == p.leader_id:
            preferred = ([c.candidate_id for c in p.preferred_candidates] if p.preferred_candidates
                         else list(p.preferred_successors))
            position = preferred.index(self.node_id) if self.node_id in preferred else len(preferred)
            backoff = self._strict_exponential_election_backoff_ms(position, len(preferred))
            # a claim until the leader's own fetch answers confirm it (follower_state)
            state.claim_resignation(now_ms, backoff)
        return response(ru.NONE)

    def _handle_fetch_request(self, request: InboundRequest, now_ms: int) -> None:
        body: FetchRequest = request.body
        if not self._valid_cluster_id(body.cluster_id):
            self._respond(request, FetchResponse(error_code=ru.INCONSISTENT_CLUSTER_ID))
            return
        p = ru.fetch_partition(body)
        if p is None:
            self._respond(request, FetchResponse(error_code=ru.INVALID_REQUEST))
            return
        replica_id = ru.fetch_replica_id(body)
        if body.max_wait_ms < 0 or p.fetch_offset < 0 or p.last_fetched_epoch < 0 \
                or p.last_fetched_epoch > p.current_leader_epoch \
                or (replica_id >= 0 and replica_id == self.node_id):
            self._respond(request, self._empty_fetch_response(ru.INVALID_REQUEST))
            return
        directory_id = ru.optional_directory(p.replica_directory_id)
        response = self._try_complete_fetch_request(replica_id, directory_id, p.current_leader_epoch,
                                                    p.fetch_offset, p.last_fetched_epoch, now_ms)
        part = response.responses[0].partitions[0]
        # a high watermark this replica was not told yet is news: answer now (Kafka's Fetch v18
        # carries the follower's high watermark for this test; v17 does not, so the leader
        # remembers the last one it sent each replica)
        news = part.high_watermark >= 0 and part.high_watermark > self._hw_sent.get(replica_id, -1)
        if part.error_code != ru.NONE or part.records or body.max_wait_ms == 0 or news \
                or part.diverging_epoch is not None or part.snapshot_id is not None:
            self._note_hw_sent(replica_id, part.high_watermark)
            self._respond(request, response)
            return
        self._parked.append(_ParkedFetch(request, replica_id, directory_id, p.fetch_offset,
                                         now_ms + body.max_wait_ms))

    def _empty_fetch_response(self, error: int) -> FetchResponse:
        return ru.fetch_response(error, self.quorum.epoch, self.quorum.leader_id, high_watermark=None,
                                 log_start_offset=self.log.start_offset,
                                 endpoints=self.quorum.leader_endpoints, listener_name=self.listener_name)

    def _try_complete_fetch_request(self, replica_id: int, directory_id: bytes | None,
                                    leader_epoch: int, fetch_offset: int, last_fetched_epoch: int,
                                    now_ms: int) -> FetchResponse:
        error = self._validate_leader_only_request(leader_epoch)
        if error is not None:
            return self._empty_fetch_response(error)
        state = self.quorum.state
        assert isinstance(state, LeaderState)
        latest = self.log.latest_snapshot_id()
        if fetch_offset == 0 and latest is not None and latest != BOOTSTRAP_SNAPSHOT_ID:
            verdict_kind, verdict_id = ValidKind.SNAPSHOT, latest
        else:
            verdict = self.log.validate_offset_and_epoch(fetch_offset, last_fetched_epoch)
            verdict_kind, verdict_id = verdict.kind, verdict.offset_and_epoch
        records = b""
        if verdict_kind == ValidKind.VALID:
            records = self.log.read(fetch_offset, None, self.max_fetch_bytes)
            if state.update_replica_state(replica_id, directory_id, now_ms, fetch_offset):
                self._on_update_leader_high_watermark(state, now_ms)
        elif replica_id >= 0:
            # not progress, but proof of life for check-quorum
            state.update_check_quorum_for_following_voter(replica_id, now_ms)
        return ru.fetch_response(
            ru.NONE, self.quorum.epoch, self.quorum.leader_id, high_watermark=state.high_watermark,
            log_start_offset=self.log.start_offset, records=records,
            diverging=verdict_id if verdict_kind == ValidKind.DIVERGING else None,
            snapshot_id=verdict_id if verdict_kind == ValidKind.SNAPSHOT else None,
            endpoints=self.quorum.leader_endpoints, listener_name=self.listener_name)

    def _complete_all_parked_fetches(self, now_ms: int) -> None:
        parked, self._parked = self._parked, []
        for f in parked:
            self._answer_parked(f, now_ms)

    def _complete_parked_fetches(self, now_ms: int) -> None:
        end = self.log.end_offset
        ready = [f for f in self._parked if f.fetch_offset < end]
        if ready:
            self._parked = [f for f in self._parked if f.fetch_offset >= end]
            for parked in ready:
                self._answer_parked(parked, now_ms)

    def _answer_parked(self, parked: _ParkedFetch, now_ms: int) -> None:
        p = ru.fetch_partition(parked.request.body)
        assert p is not None  # it was parked after _handle_fetch_request found this partition
        response = self._try_complete_fetch_request(
            parked.replica_id, parked.directory_id, p.current_leader_epoch, p.fetch_offset,
            p.last_fetched_epoch, now_ms)
        self._note_hw_sent(parked.replica_id, response.responses[0].partitions[0].high_watermark)
        self._respond(parked.request, response)

    def _note_hw_sent(self, replica_id: int, hw: int) -> None:
        sent = self._hw_sent
        if replica_id not in sent and len(sent) >= 2 * MAX_OBSERVERS:
            sent.clear()  # made-up replica ids: forgetting costs at most an early answer each
        sent[replica_id] = max(sent.get(replica_id, -1), hw)

    def _expire_parked_fetches(self, now_ms: int) -> int:
        if not self._parked:
            return NO_DEADLINE
        expired = [f for f in self._parked if f.deadline_ms <= now_ms]
        if expired:
            self._parked = [f for f in self._parked if f.deadline_ms > now_ms]
            for parked in expired:
                self._answer_parked(parked, now_ms)
        return min((f.deadline_ms - now_ms for f in self._parked), default=NO_DEADLINE)

    def _fail_parked_fetches(self, error: int) -> None:
        parked, self._parked = self._parked, []
        for f in parked:
            self._respond(f.request, self._empty_fetch_response(error))

    def _handle_fetch_snapshot_request(self, body: FetchSnapshotRequest,
                                       now_ms: int) -> FetchSnapshotResponse:
        if not self._valid_cluster_id(body.cluster_id):
            return FetchSnapshotResponse(error_code=ru.INCONSISTENT_CLUSTER_ID)
        if len(body.topics) != 1 or len(body.topics[0].partitions) != 1:
            return FetchSnapshotResponse(error_code=ru.INVALID_REQUEST)
        p = ru.single_partition(body.topics, name_attr="name")
        epoch, leader_id = self.quorum.epoch, self.quorum.leader_id

        def response(error: int, *, snapshot_id: OffsetAndEpoch | None = None, size: int = 0,
                     position: int = 0, data: bytes = b"", topic: str = ru.METADATA_TOPIC,
                     partition_index: int = ru.METADATA_PARTITION) -> FetchSnapshotResponse:
            return ru.fetch_snapshot_response(
                error, epoch, leader_id, snapshot_id=snapshot_id, size=size, position=position,
                data=data, endpoints=self.quorum.leader_endpoints, listener_name=self.listener_name,
                partition_index=partition_index, topic=topic)

        if p is None or p.partition != ru.METADATA_PARTITION:
            t = body.topics[0]
            return response(ru.UNKNOWN_TOPIC_OR_PARTITION, topic=t.name,
                            partition_index=t.partitions[0].partition)
        if body.max_bytes < 0 or (body.replica_id >= 0 and body.replica_id == self.node_id):
            return response(ru.INVALID_REQUEST)
        error = self._validate_leader_only_request(p.current_leader_epoch)
        if error is not None:
            return response(error)
        snapshot_id = OffsetAndEpoch(p.snapshot_id.end_offset, p.snapshot_id.epoch)
        reader = self.log.read_snapshot(snapshot_id) if snapshot_id != BOOTSTRAP_SNAPSHOT_ID else None
        if reader is None:
            return response(ru.SNAPSHOT_NOT_FOUND)
        try:
            size = reader.size_in_bytes
            if p.position < 0 or p.position >= size:
                return response(ru.POSITION_OUT_OF_RANGE)
            data = reader.read(p.position, min(body.max_bytes, size))
        finally:
            reader.close()
        state = self.quorum.state
        assert isinstance(state, LeaderState)
        if body.replica_id >= 0:
            state.update_check_quorum_for_following_voter(body.replica_id, now_ms)
        return response(ru.NONE, snapshot_id=snapshot_id, size=size, position=p.position, data=data)

    def _handle_describe_quorum_request(self, body: DescribeQuorumRequest,
                                        now_ms: int) -> DescribeQuorumResponse:
        p = ru.single_partition(body.topics)
        if p is None or p.partition_index != ru.METADATA_PARTITION:
            return DescribeQuorumResponse(topics=[DescribeQuorumResponse.TopicData(
                topic_name=t.topic_name, partitions=[DescribeQuorumResponse.PartitionData(
                    partition_index=q.partition_index, error_code=ru.UNKNOWN_TOPIC_OR_PARTITION)
                    for q in t.partitions]) for t in body.topics])
        return self.describe_quorum(now_ms)

    def describe_quorum(self, now_ms: int) -> DescribeQuorumResponse:
        """The DescribeQuorum answer: the leader's view of every voter and observer; any other
        node answers NOT_LEADER_OR_FOLLOWER (Kafka's handleDescribeQuorumRequest)."""
        state = self.quorum.state
        partition = DescribeQuorumResponse.PartitionData(
            partition_index=ru.METADATA_PARTITION,
            leader_id=-1 if self.quorum.leader_id is None else self.quorum.leader_id,
            leader_epoch=self.quorum.epoch, high_watermark=-1)
        if not isinstance(state, LeaderState):
            partition.error_code = ru.NOT_LEADER_OR_FOLLOWER
            return DescribeQuorumResponse(topics=[DescribeQuorumResponse.TopicData(
                topic_name=ru.METADATA_TOPIC, partitions=[partition])])

        def replica(s: ReplicaState) -> DescribeQuorumResponse.ReplicaState:
            local = s.replica_id == state.local_id
            return DescribeQuorumResponse.ReplicaState(
                replica_id=s.replica_id, replica_directory_id=s.directory_id or ru.ZERO_UUID,
                log_end_offset=(self.log.end_offset if local else
                                (-1 if s.end_offset is None else s.end_offset)),
                last_fetch_timestamp=now_ms if local else s.last_fetch_timestamp,
                last_caught_up_timestamp=now_ms if local else s.last_caught_up_timestamp)

        partition.leader_id = state.local_id
        partition.high_watermark = -1 if state.high_watermark is None else state.high_watermark
        partition.current_voters = [replica(state.voter_states[v]) for v in sorted(state.voter_states)]
        observers = state.observers(now_ms)
        partition.observers = [replica(observers[o]) for o in sorted(observers)]
        nodes = [DescribeQuorumResponse.Node(node_id=v.voter_id, listeners=[
            DescribeQuorumResponse.Listener(name=n, host=h, port=p)
            for n, (h, p) in sorted(v.listeners.items())]) for v in self.voters]
        return DescribeQuorumResponse(topics=[DescribeQuorumResponse.TopicData(
            topic_name=ru.METADATA_TOPIC, partitions=[partition])], nodes=nodes)
