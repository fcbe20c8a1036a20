"""Answers to the node's own Raft requests (the response half of Kafka's KafkaRaftClient).

Only the answer carrying the in-flight correlation id of its destination is looked at (the
RequestManager drops late, duplicated and pre-transition ones). A top-level error (a failed
connection, a timeout) backs the destination off. `_maybe_handle_common_response` (in
raft_client) first applies what every answer says about epochs and leaders; then: votes are
counted (pre-votes make a Candidate, votes a Leader, a majority of rejections ends the
election), BeginQuorumEpoch and EndQuorumEpoch acknowledgements are recorded, fetched records
are appended (or the log truncated on a DivergingEpoch, or a snapshot download started on a
SnapshotId) and the follower's high watermark follows the leader's, and FetchSnapshot chunks
are written until the snapshot is whole and handed to the driver to freeze.

A mixin of KafkaRaftClient (raft_client.py), which owns the state it reads; RaftClientBase
(raft_client_base) declares what of the client it may use, for mypy. Response bodies are the
generated message classes of the api key (`InboundResponse.body` is untyped: the dispatch on the
api key is what makes it a VoteResponse or a FetchResponse).
Concurrency: Raft client thread only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from pybroker.protocol._generated.begin_quorum_epoch_response import BeginQuorumEpochResponse
from pybroker.protocol._generated.end_quorum_epoch_response import EndQuorumEpochResponse
from pybroker.protocol._generated.fetch_response import FetchResponse
from pybroker.protocol._generated.fetch_snapshot_response import FetchSnapshotResponse
from pybroker.protocol._generated.vote_response import VoteResponse
from pybroker.protocol.api_keys import ApiKey
from pybroker.raft import raft_util as ru
from pybroker.raft.candidate_state import CandidateState
from pybroker.raft.follower_state import FollowerState
from pybroker.raft.leader_state import LeaderState
from pybroker.raft.offset_and_epoch import OffsetAndEpoch
from pybroker.raft.prospective_state import ProspectiveState
from pybroker.raft.raft_client_base import RaftClientBase
from pybroker.raft.raft_message import InboundResponse
from pybroker.raft.resigned_state import ResignedState
from pybroker.raft.snapshots import RawSnapshotWriter

log = logging.getLogger(__name__)


class RaftResponseHandlers(RaftClientBase):
    # a peer answered INCONSISTENT_CLUSTER_ID: this node's storage is another cluster's
    inconsistent_cluster_id_from: int | None
    # downloaded snapshots whose last chunk arrived, for the driver to freeze (take_io)
    _pending_freeze: list[RawSnapshotWriter]

    def handle_response(self, response: InboundResponse, now_ms: int) -> None:
        rm = self.request_manager
        if not rm.is_response_expected(response.source, response.correlation_id):
            return  # late, duplicated, or from before a transition
        body = response.body
        # each handler takes the body class of its api key (InboundResponse.body is untyped)
        handlers: dict[int, Callable[[int, Any, int], bool]] = {
            ApiKey.FETCH: self._handle_fetch_response,
            ApiKey.VOTE: self._handle_vote_response,
            ApiKey.BEGIN_QUORUM_EPOCH: self._handle_begin_quorum_epoch_response,
            ApiKey.END_QUORUM_EPOCH: self._handle_end_quorum_epoch_response,
            ApiKey.FETCH_SNAPSHOT: self._handle_fetch_snapshot_response,
        }
        handler = handlers.get(response.api_key)
        if handler is None:
            raise ValueError(f"unexpected response to api {response.api_key}")
        if body.error_code == ru.INCONSISTENT_CLUSTER_ID:
            self.inconsistent_cluster_id_from = response.source
        if body.error_code != ru.NONE:
            success = False  # connection failure, timeout, or a top-level refusal: back off
            if body.error_code not in (ru.BROKER_NOT_AVAILABLE, ru.REQUEST_TIMED_OUT):
                log.warning("node %s: %s answered top-level error %d", self.node_id,
                            response.source, body.error_code)
        else:
            try:
                success = handler(response.source, body, now_ms)
            except Exception:
                if self.strict:
                    raise
                log.exception("node %s: internal error handling a response from %s to api %s",
                              self.node_id, response.source, response.api_key)
                success = False
        rm.on_response_result(response.source, response.correlation_id, success, now_ms)

    def _handle_vote_response(self, source: int, body: VoteResponse, now_ms: int) -> bool:
        if len(body.topics) != 1 or len(body.topics[0].partitions) != 1:
            return False
        p = body.topics[0].partitions[0]
        state = self.quorum.state
        if p.error_code == ru.NONE and not p.vote_granted and isinstance(state, CandidateState) \
                and p.leader_epoch < state.epoch:
            # the voter stays in its older epoch: it is in lease with a live leader (see
            # follower_state). That is its answer for our epoch: a rejection.
            self._record_vote(state, source, False, now_ms)
            return True
        leader_id = None if p.leader_id < 0 else p.leader_id
        handled = self._maybe_handle_common_response(
            p.error_code, leader_id, p.leader_epoch, self._leader_endpoints(leader_id, body.node_endpoints),
            now_ms)
        if handled is not None:
            return handled
        if p.error_code != ru.NONE:
            return False
        state = self.quorum.state
        if isinstance(state, (ProspectiveState, CandidateState)):
            self._record_vote(state, source, p.vote_granted, now_ms)
        return True

    def _record_vote(self, state: ProspectiveState | CandidateState, source: int, granted: bool,
                     now_ms: int) -> None:
        election = state.epoch_election
        if source in (election.rejecting_voters() if granted else election.granting_voters()):
            self._peer_fault(f"voter {source} changed its vote in epoch {state.epoch}")
            return
        if granted:
            state.record_granted_vote(source)
            self._maybe_transition_forward(now_ms)
            return
        state.record_rejected_vote(source)
        if election.is_vote_rejected():
            if isinstance(state, ProspectiveState):
                self._prospective_transition_after_election_loss(state, now_ms)
            elif not state.is_backing_off:
                # gridlocked: back off now instead of waiting for the election timeout
                state.start_backing_off(now_ms, self._binary_exponential_election_backoff_ms(state.retries))

    def _handle_begin_quorum_epoch_response(self, source: int, body: BeginQuorumEpochResponse,
                                            now_ms: int) -> bool:
        if len(body.topics) != 1 or len(body.topics[0].partitions) != 1:
            return False
        p = body.topics[0].partitions[0]
        leader_id = None if p.leader_id < 0 else p.leader_id
        handled = self._maybe_handle_common_response(
            p.error_code, leader_id, p.leader_epoch, self._leader_endpoints(leader_id, body.node_endpoints),
            now_ms)
        if handled is not None:
            return handled
        if p.error_code != ru.NONE:
            return False
        state = self.quorum.state
        if isinstance(state, LeaderState) and source in state.voter_states:
            state.add_acknowledgement_from(source)
        return True

    def _handle_end_quorum_epoch_response(self, source: int, body: EndQuorumEpochResponse,
                                          now_ms: int) -> bool:
        if len(body.topics) != 1 or len(body.topics[0].partitions) != 1:
            return False
        p = body.topics[0].partitions[0]
        leader_id = None if p.leader_id < 0 else p.leader_id
        handled = self._maybe_handle_common_response(
            p.error_code, leader_id, p.leader_epoch, self._leader_endpoints(leader_id, body.node_endpoints),
            now_ms)
        if handled is not None:
            return handled
        if p.error_code != ru.NONE:
            return False
        state = self.quorum.state
        if isinstance(state, ResignedState):
            state.acknowledge_resignation(source)
        return True

    def _handle_fetch_response(self, source: int, body: FetchResponse, now_ms: int) -> bool:
        if len(body.responses) != 1 or len(body.responses[0].partitions) != 1:
            return False
        p = body.responses[0].partitions[0]
        current = p.current_leader
        leader_id = None if current is None or current.leader_id < 0 else current.leader_id
        epoch = -1 if current is None else current.leader_epoch
        state = self.quorum.state
        if isinstance(state, FollowerState) and source == state.leader_id:
            if epoch == state.epoch and p.error_code == ru.NOT_LEADER_OR_FOLLOWER and leader_id is not None \
                    and leader_id not in (source, self.node_id) and self.voters.voter(leader_id) is not None:
                # The node this one follows says another voter leads the epoch: what named it
                # leader was a forged BeginQuorumEpoch. Its own answer is the better word.
                endpoints = self._leader_endpoints(leader_id, body.node_endpoints)
                if endpoints:
                    log.info("node %s: %s says %s leads epoch %d; following it", self.node_id, source,
                             leader_id, epoch)
                    self.quorum.correct_leader(epoch, leader_id, endpoints, now_ms)
                    self._maybe_fire_leader_change()
                    self._on_become_follower(now_ms)
                    return True
            if epoch == state.epoch and p.error_code in (ru.NOT_LEADER_OR_FOLLOWER, ru.BROKER_NOT_AVAILABLE):
                # the leader itself says it no longer leads this epoch (resigned, shutting down)
                state.on_leader_stopped_leading(now_ms)
            elif (epoch < state.epoch or p.error_code == ru.UNKNOWN_LEADER_EPOCH) \
                    and self.quorum.is_voter() and self._shutdown_deadline is None:
                # The node this one follows has not reached its epoch, so it cannot lead it: what
                # named it leader was a forged BeginQuorumEpoch (or EndQuorumEpoch). A leader's
                # epoch never goes back. Ask for pre-votes now instead of after a fetch timeout.
                log.info("node %s: %s does not know epoch %d it was said to lead; asking for "
                         "pre-votes", self.node_id, source, state.epoch)
                self._transition_to_prospective(now_ms)
                return False
        handled = self._maybe_handle_common_response(
            p.error_code, leader_id, epoch, self._leader_endpoints(leader_id, body.node_endpoints), now_ms)
        if handled is not None:
            return handled
        if p.error_code != ru.NONE:
            return False
        state = self.quorum.state
        if not isinstance(state, FollowerState):
            return True
        diverging = p.diverging_epoch
        snapshot = p.snapshot_id
        if diverging is not None and diverging.epoch >= 0:
            target = OffsetAndEpoch(diverging.end_offset, diverging.epoch)
            if state.high_watermark is not None and target.offset < state.high_watermark:
                # Kafka stops the node. Truncating would drop committed records: refuse, keep
                # asking; a real leader never says this (the simulation fails on it).
                self._peer_fault(f"leader {source} asked for truncation to {target.offset}, below "
                                 f"the high watermark {state.high_watermark}")
                return False
            offset = self.log.truncate_to_end_offset(target)
            self._log_dirty = True
            log.info("node %s: truncated to %d after a diverging epoch from leader %s",
                     self.node_id, offset, state.leader_id)
        elif snapshot is not None and (snapshot.epoch >= 0 or snapshot.end_offset >= 0):
            if snapshot.epoch < 0 or snapshot.end_offset < 0:
                return False
            snapshot_id = OffsetAndEpoch(snapshot.end_offset, snapshot.epoch)
            writer = self.log.create_new_snapshot_unchecked(snapshot_id)
            if writer is None:
                # already here: the log just has to start at it
                if self.log.truncate_to_latest_snapshot():
                    self._log_dirty = True
                    self._update_follower_high_watermark(state, snapshot_id.offset)
            else:
                if state.fetching_snapshot is not None:
                    state.fetching_snapshot.close()
                state.fetching_snapshot = writer
                log.info("node %s: fetching snapshot %s from leader %s", self.node_id, snapshot_id,
                         state.leader_id)
        else:
            records = p.records
            if records is not None and len(records) > 0:
                if self.log.append_as_follower(records) is not None:
                    self._log_dirty = True
            self._update_follower_high_watermark(state, None if p.high_watermark < 0 else p.high_watermark)
        state.reset_fetch_timeout_for_successful_fetch(now_ms)
        return True

    def _update_follower_high_watermark(self, state: FollowerState, high_watermark: int | None) -> None:
        if high_watermark is None:
            return
        high_watermark = min(high_watermark, self.log.end_offset)
        if state.high_watermark is not None and high_watermark < state.high_watermark:
            # the leader's high watermark never goes back in an epoch (Kafka throws)
            self._peer_fault(f"leader {state.leader_id} sent high watermark {high_watermark}, below "
                             f"{state.high_watermark}")
            return
        if state.update_high_watermark(high_watermark):
            self.log.update_high_watermark(high_watermark)

    def _handle_fetch_snapshot_response(self, source: int, body: FetchSnapshotResponse,
                                        now_ms: int) -> bool:
        if len(body.topics) != 1 or len(body.topics[0].partitions) != 1:
            return False
        p = ru.single_partition(body.topics, name_attr="name")
        if p is None or p.index != ru.METADATA_PARTITION:
            return False
        current = p.current_leader
        leader_id = None if current is None or current.leader_id < 0 else current.leader_id
        epoch = -1 if current is None else current.leader_epoch
        handled = self._maybe_handle_common_response(
            p.error_code, leader_id, epoch, self._leader_endpoints(leader_id, body.node_endpoints), now_ms)
        if handled is not None:
            return handled
        state = self.quorum.state
        if not isinstance(state, FollowerState):
            return True
        writer = state.fetching_snapshot
        if p.error_code == ru.SNAPSHOT_NOT_FOUND or p.snapshot_id.end_offset < 0 or p.snapshot_id.epoch < 0:
            # the leader dropped that snapshot: start over with a Fetch
            if writer is not None:
                writer.close()
            state.fetching_snapshot = None
            state.reset_fetch_timeout_for_successful_fetch(now_ms)
            return True
        if p.error_code != ru.NONE:
            return False
        snapshot_id = OffsetAndEpoch(p.snapshot_id.end_offset, p.snapshot_id.epoch)
        if writer is None or writer.snapshot_id != snapshot_id or writer.size_in_bytes != p.position:
            self._peer_fault(f"unexpected FetchSnapshot answer {snapshot_id} at {p.position} for "
                             f"{writer and writer.snapshot_id}")
            return False
        data = p.unaligned_records
        if data is not None and len(data) > 0:
            if writer.size_in_bytes + len(data) > p.size:
                # a chunk past the size the leader announced: start the download over
                self._peer_fault(f"snapshot {snapshot_id} would grow past its size {p.size}")
                writer.close()
                state.fetching_snapshot = None
                return False
            writer.append(data)
        if writer.size_in_bytes == p.size:
            state.snapshot_freezing = True
            self._pending_freeze.append(writer)
        state.reset_fetch_timeout_for_successful_fetch(now_ms)
        return True

    def _on_fetched_snapshot_frozen(self, writer: RawSnapshotWriter, now_ms: int) -> None:
        state = self.quorum.state
        if isinstance(state, FollowerState) and state.fetching_snapshot is writer:
            state.fetching_snapshot = None
            state.snapshot_freezing = False
        if self.log.truncate_to_latest_snapshot():
            self._log_dirty = True
            log.info("node %s: log now starts at downloaded snapshot %s", self.node_id, writer.snapshot_id)
            if isinstance(state, FollowerState):
                self._update_follower_high_watermark(state, writer.snapshot_id.offset)
