"""The KRaft state machine, sans IO (Kafka's KafkaRaftClient).

Leader election is Raft with KIP-996 pre-votes; replication is Kafka's: followers pull with
Fetch, the leader learns each follower's log end from its fetch offset, detects divergence
from the follower's last fetched epoch (answering DivergingEpoch, the follower truncates) and
sends a SnapshotId when the follower is below its log start (the follower then downloads the
snapshot with FetchSnapshot). A new leader writes a LeaderChangeMessage control batch first;
the high watermark (the majority-replicated offset) only becomes visible once that batch is
committed. BeginQuorumEpoch announces a leader; EndQuorumEpoch hands leadership over on
shutdown, naming preferred successors. Observers (brokers) fetch like followers but never vote
or count toward the high watermark.

The client does no IO and reads no clock: every input carries `now_ms`, randomness comes from
the injected `random.Random`, and every output goes through `take_io()` (see raft_message):

    client.initialize(now)
    loop:
        client.handle_request(request, now) | client.handle_response(response, now)
        timeout = client.poll(now)            # timers, sends, listener callbacks
        io = client.take_io()                 # persist, then on_io_complete, then send
        ... wait for the next message or `timeout` ms

Local API: `register(listener)` (listener.py), `append(records)` on the leader (returns the
offset of the last record; it is committed when a listener sees it in handle_commit, or when
`high_watermark` passes it while this node still leads the epoch it was appended in),
`create_snapshot(...)`, `resign(epoch)`, `begin_shutdown(...)`, `describe_quorum(now)`.

Code layout: this module holds the client's state, polling, transitions and local API; the
RPC handlers are its mixins raft_request_handlers (what it answers) and raft_response_handlers
(answers to its own requests), both typed against raft_client_base (the state and methods of
this class they use); batch_accumulator batches the leader's appends.

Concurrency: one thread (the trio loop, or the simulation). Not thread-safe.
"""

from __future__ import annotations

import logging
import random as _random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.api_message import ApiMessage
from pybroker.raft import raft_util as ru
from pybroker.raft.batch import BytesSerde, decode_batches
from pybroker.raft.batch_accumulator import BatchAccumulator
from pybroker.raft.candidate_state import CandidateState
from pybroker.raft.control_records import build_control_batch, leader_change_message
from pybroker.raft.epoch_state import NO_DEADLINE, Timer
from pybroker.raft.errors import NotLeaderError, RaftSafetyError
from pybroker.raft.follower_state import FollowerState
from pybroker.raft.leader_state import LeaderState
from pybroker.raft.listener import LeaderAndEpoch, Listener
from pybroker.raft.offset_and_epoch import OffsetAndEpoch
from pybroker.raft.prospective_state import ProspectiveState
from pybroker.raft.quorum_config import (
    MAX_BATCH_SIZE_BYTES,
    MAX_FETCH_SIZE_BYTES,
    RETRY_BACKOFF_BASE_MS,
    QuorumConfig,
)
from pybroker.raft.quorum_state import IllegalStateError, QuorumState
from pybroker.raft.quorum_state_store import QuorumStateStore
from pybroker.raft.raft_log import ReplicatedLog
from pybroker.raft.raft_message import (
    InboundRequest,
    OutboundRequest,
    OutboundResponse,
    RaftIo,
)
from pybroker.raft.raft_request_handlers import RaftRequestHandlers
from pybroker.raft.raft_response_handlers import RaftResponseHandlers
from pybroker.raft.request_manager import RequestManager
from pybroker.raft.resigned_state import ResignedState
from pybroker.raft.snapshots import SnapshotReader, SnapshotWriter
from pybroker.raft.unattached_state import UnattachedState
from pybroker.raft.voter_set import DEFAULT_CONTROLLER_LISTENER, VoterSet
from pybroker.records.batch import build_batch

log = logging.getLogger(__name__)

LOG_CLEANER_INTERVAL_MS = 60_000
LISTENER_BYTES_PER_POLL = 1024 * 1024


class _ListenerContext:
    def __init__(self, listener: Listener) -> None:
        self.listener = listener
        self.next_offset: int | None = None  # None: never read (Kafka's STARTING_NEXT_OFFSET)
        self.last_leader: LeaderAndEpoch | None = None

    def should_fire(self, leader: LeaderAndEpoch) -> bool:
        last = self.last_leader
        if last is None or leader.epoch > last.epoch:
            return True
        return leader != last and leader.leader_id is not None and last.leader_id is None


class KafkaRaftClient(RaftRequestHandlers, RaftResponseHandlers):
    def __init__(self, *, node_id: int | None, config: QuorumConfig, log: ReplicatedLog,
                 store: QuorumStateStore, cluster_id: str, random: _random.Random,
                 serde: Any = None, directory_id: bytes | None = None,
                 listener_name: str = DEFAULT_CONTROLLER_LISTENER,
                 local_listeners: Mapping[str, tuple[str, int]] | None = None,
                 voters: VoterSet | None = None, followers_always_flush: bool = False,
                 kraft_version: int = 0, max_fetch_bytes: int = MAX_FETCH_SIZE_BYTES,
                 log_cleaner_interval_ms: int = LOG_CLEANER_INTERVAL_MS, strict: bool = False,
                 peer_fault_hook: Callable[[str], None] | None = None) -> None:
        self.node_id = node_id
        self.config = config
        self.log = log
        self.store = store
        self.cluster_id = cluster_id
        self.random = random
        self.serde = serde if serde is not None else BytesSerde()
        self.directory_id = directory_id
        self.listener_name = listener_name
        self.voters = voters if voters is not None else VoterSet.from_static(config.voters, listener_name)
        if local_listeners is None:
            node = self.voters.voter(node_id) if node_id is not None else None
            local_listeners = dict(node.listeners) if node is not None else {}
        self.local_listeners = local_listeners
        self.followers_always_flush = followers_always_flush
        self.kraft_version = kraft_version
        self.max_fetch_bytes = max_fetch_bytes
        # strict: a handler's unexpected exception propagates (tests, the simulation) instead of
        # being logged and answered UNKNOWN_SERVER_ERROR / dropped (a node in production)
        self.strict = strict
        # called with a description when a peer contradicts this node (_peer_fault)
        self.peer_fault_hook = peer_fault_hook
        self._epoch_exhausted_logged = False
        self._bootstrap_addresses: dict[int, tuple[str, int]] = {}
        if config.bootstrap_servers:
            for i, address in enumerate(config.bootstrap_servers):
                self._bootstrap_addresses[-2 - i] = address
            bootstrap_ids = list(self._bootstrap_addresses)
        else:
            bootstrap_ids = sorted(self.voters.voter_ids())
        self.request_manager = RequestManager(bootstrap_ids, config.retry_backoff_ms,
                                              config.request_timeout_ms, random)
        self.quorum = QuorumState(
            local_id=node_id, local_directory_id=directory_id, voters=self.voters,
            local_listeners=self.local_listeners, election_timeout_ms=config.election_timeout_ms,
            fetch_timeout_ms=config.fetch_timeout_ms, random=random)
        self._correlation_id = 0
        self._outbox: list[OutboundRequest | OutboundResponse] = []
        self._parked = []
        self._pending_freeze = []
        self._log_dirty = False
        self._durable_end = 0
        self._listeners: dict[int, _ListenerContext] = {}
        self._accumulator: BatchAccumulator | None = None
        self._shutdown_deadline = None
        self.shutdown_complete = False
        self.shutdown_timed_out = False
        self._cleaner_interval_ms = log_cleaner_interval_ms
        self._cleaner_timer = Timer(0, log_cleaner_interval_ms)
        self._initialized = False
        self._hw_sent = {}
        # a peer answered INCONSISTENT_CLUSTER_ID: this node's storage is another cluster's
        self.inconsistent_cluster_id_from = None

    # -- start-up --------------------------------------------------------------------------
    def initialize(self, now_ms: int) -> None:
        """Resume from the quorum-state store and the log (Kafka's KafkaRaftClient.initialize)."""
        self._durable_end = self.log.end_offset
        self._cleaner_timer = Timer(now_ms, self._cleaner_interval_ms)
        self.quorum.initialize(self.store.read(), self.log.end_offset_and_epoch(), now_ms)
        self._initialized = True
        if self.quorum.is_candidate:
            self._on_become_candidate(now_ms)
        elif self.quorum.is_follower:
            self._on_become_follower(now_ms)
        # a single voter elects itself at once
        if self.quorum.is_only_voter() and not (self.quorum.is_prospective or self.quorum.is_candidate
                                                or self.quorum.is_leader):
            self._transition_to_prospective(now_ms)

    # -- queries ---------------------------------------------------------------------------
    @property
    def leader_and_epoch(self) -> LeaderAndEpoch:
        return LeaderAndEpoch(self.quorum.leader_id, self.quorum.epoch)

    @property
    def epoch(self) -> int:
        return self.quorum.epoch

    @property
    def high_watermark(self) -> int | None:
        return self.quorum.high_watermark

    @property
    def log_end_offset(self) -> int:
        return self.log.end_offset

    @property
    def is_leader(self) -> bool:
        return self.quorum.is_leader

    def latest_snapshot_id(self) -> OffsetAndEpoch | None:
        return self.log.latest_snapshot_id()

    @property
    def next_append_offset(self) -> int | None:
        """The offset the next `append`ed record will get (the leader's broker epochs are
        these); None when this node does not lead."""
        if not self.quorum.is_leader or self._accumulator is None:
            return None
        return self._accumulator.next_offset

    def leader_address(self) -> tuple[int | None, tuple[str, int] | None]:
        """(the leader's id, its address on the controller listener) as far as this node knows."""
        leader = self.quorum.leader_id
        if leader is None:
            return None, None
        return leader, self._address(leader)

    # -- listeners -------------------------------------------------------------------------
    def register(self, listener: Listener) -> None:
        self._listeners.setdefault(id(listener), _ListenerContext(listener))

    def unregister(self, listener: Listener) -> None:
        self._listeners.pop(id(listener), None)

    # -- the IO boundary ---------------------------------------------------------------------
    def take_io(self) -> RaftIo:
        io = RaftIo(election_state=self.quorum.take_pending_election(),
                    voter_ids=self.voters.voter_ids())
        if self._log_dirty and (self.quorum.is_voter() or self.followers_always_flush):
            io.flush_offset = self.log.end_offset
            self._log_dirty = False
        io.snapshots_to_freeze, self._pending_freeze = self._pending_freeze, []
        take_deferred = getattr(self.log, "take_deferred", None)
        if take_deferred is not None:
            io.deferred = take_deferred()
        io.messages, self._outbox = self._outbox, []
        return io

    def on_io_complete(self, io: RaftIo, now_ms: int) -> None:
        """The driver made `io` durable; messages go out after this returns."""
        for writer in io.snapshots_to_freeze:
            self._on_fetched_snapshot_frozen(writer, now_ms)
        if io.flush_offset is not None:
            self._durable_end = max(self._durable_end, io.flush_offset)
            if isinstance(self.quorum.state, LeaderState):
                self._update_leader_end_offset(self.quorum.state, now_ms)

    def _next_correlation_id(self) -> int:
        self._correlation_id += 1
        return self._correlation_id

    def _respond(self, request: InboundRequest, body: ApiMessage) -> None:
        self._outbox.append(OutboundResponse(request, body))

    def _address(self, node: int) -> tuple[str, int] | None:
        if node < 0:
            return self._bootstrap_addresses.get(node)
        address = self.voters.endpoint(node, self.listener_name) or self.voters.endpoint(node)
        if address is None and node == self.quorum.leader_id:
            endpoints = self.quorum.leader_endpoints
            address = endpoints.get(self.listener_name) or next(iter(endpoints.values()), None)
        return address

    def _maybe_send_request(self, now_ms: int, destination: int,
                            build: Callable[[], tuple[int, Any]]) -> int:
        """Send unless a request to `destination` is in flight or backing off; returns the time
        before it could be retried (Kafka's maybeSendRequest)."""
        rm = self.request_manager
        if rm.is_backing_off(destination, now_ms):
            return rm.remaining_backoff_ms(destination, now_ms)
        if rm.is_ready(destination, now_ms):
            address = self._address(destination)
            if address is None:
                return self.config.retry_backoff_ms
            api_key, body = build()
            correlation_id = self._next_correlation_id()
            self._outbox.append(OutboundRequest(destination, address, correlation_id, api_key,
                                                ru.RAFT_API_VERSIONS[api_key], body, now_ms))
            rm.on_request_sent(destination, correlation_id, now_ms)
        return rm.remaining_request_time_ms(destination, now_ms)

    # -- polling -----------------------------------------------------------------------------
    def poll(self, now_ms: int) -> int:
        """Run timers, send what is due, call listeners; returns ms until the next poll is due."""
        if not self._initialized:
            raise IllegalStateError("initialize() first")
        if self._maybe_complete_shutdown(now_ms):
            return NO_DEADLINE
        timeout = self._poll_current_state(now_ms)
        timeout = min(timeout, self._expire_parked_fetches(now_ms))
        if self._cleaner_timer.is_expired(now_ms):
            if self.log.maybe_clean(now_ms):
                self._log_dirty = True
            self._cleaner_timer.reset(now_ms, self._cleaner_interval_ms)
        timeout = min(timeout, self._cleaner_timer.remaining_ms(now_ms))
        if self._poll_listeners():
            timeout = 0  # more committed batches to hand over: come back at once
        return timeout

    def _poll_current_state(self, now_ms: int) -> int:
        state = self.quorum.state
        if isinstance(state, LeaderState):
            return self._poll_leader(state, now_ms)
        if isinstance(state, CandidateState):
            return self._poll_candidate(state, now_ms)
        if isinstance(state, ProspectiveState):
            return self._poll_prospective(state, now_ms)
        if isinstance(state, FollowerState):
            if self.quorum.is_voter():
                return self._poll_follower_as_voter(state, now_ms)
            return self._poll_follower_as_observer(state, now_ms)
        if isinstance(state, UnattachedState):
            if self.quorum.is_voter():
                return self._poll_unattached_as_voter(state, now_ms)
            return self._maybe_send_any_voter_fetch(now_ms)
        if isinstance(state, ResignedState):
            return self._poll_resigned(state, now_ms)
        raise IllegalStateError(f"unexpected state {state}")

    def _poll_leader(self, state: LeaderState, now_ms: int) -> int:
        self._maybe_fire_leader_change_for_leader(state)
        check_quorum = state.time_until_check_quorum_expires(now_ms)
        if self._shutdown_deadline is not None or state.resign_requested or check_quorum == 0:
            if check_quorum == 0:
                log.info("node %s: no fetch from a majority within %d ms, resigning epoch %d",
                         self.node_id, state.check_quorum_timeout_ms, state.epoch)
            self._transition_to_resigned(state.non_leader_voters_by_descending_fetch_offset(), now_ms)
            return 0
        drain = self._maybe_append_batches(state, now_ms)
        begin = self._maybe_send_begin_quorum_epoch_requests(state, now_ms)
        return min(drain, begin, check_quorum)

    def _maybe_append_batches(self, state: LeaderState, now_ms: int) -> int:
        acc = self._accumulator
        if acc is None:
            return NO_DEADLINE
        if acc.time_until_drain(now_ms) == 0:
            for values in acc.drain():
                batch = build_batch([(now_ms, None, v, ()) for v in values])
                self.log.append_as_leader(batch, state.epoch)
            if self.log.end_offset != acc.next_offset:
                raise RaftSafetyError(f"leader log end {self.log.end_offset} differs from the "
                                      f"accumulator's {acc.next_offset}")
            self._log_dirty = True
            self._complete_parked_fetches(now_ms)
        return acc.time_until_drain(now_ms)

    def _maybe_send_begin_quorum_epoch_requests(self, state: LeaderState, now_ms: int) -> int:
        remaining = state.time_until_begin_quorum_epoch_timer_expires(now_ms)
        if remaining > 0:
            return remaining
        backoff = NO_DEADLINE
        for voter in self.voters:
            if voter.voter_id == self.node_id:
                continue
            def begin(v: Any = voter) -> tuple[int, Any]:
                return ApiKey.BEGIN_QUORUM_EPOCH, ru.begin_quorum_epoch_request(
                    self.cluster_id, state.epoch, state.local_id, v.voter_id, v.directory_id,
                    self.local_listeners)
            backoff = min(backoff, self._maybe_send_request(now_ms, voter.voter_id, begin))
        state.reset_begin_quorum_epoch_timer(now_ms)
        return min(backoff, state.time_until_begin_quorum_epoch_timer_expires(now_ms))

    def _maybe_send_vote_requests(self, state: ProspectiveState | CandidateState, now_ms: int,
                                  pre_vote: bool) -> int:
        if state.epoch_election.is_vote_rejected():
            return NO_DEADLINE
        last = self.log.end_offset_and_epoch()
        backoff = NO_DEADLINE
        for voter_id in sorted(state.epoch_election.unrecorded_voters()):
            node = self.voters.voter(voter_id)
            assert node is not None and self.node_id is not None
            def vote(n: Any = node, local_id: int = self.node_id) -> tuple[int, Any]:
                return ApiKey.VOTE, ru.vote_request(self.cluster_id, state.epoch, local_id, self.directory_id,
                                                    n.voter_id, n.directory_id, last, pre_vote)
            backoff = min(backoff, self._maybe_send_request(now_ms, voter_id, vote))
        return backoff

    def _poll_candidate(self, state: CandidateState, now_ms: int) -> int:
        if self._shutdown_deadline is not None:
            return min(self._maybe_send_vote_requests(state, now_ms, False),
                       max(0, self._shutdown_deadline - now_ms))
        if state.is_backing_off:
            if state.is_backoff_complete(now_ms):
                self._transition_to_prospective(now_ms)
                return 0
            return state.remaining_backoff_ms(now_ms)
        if state.has_election_timeout_expired(now_ms):
            backoff = self._binary_exponential_election_backoff_ms(state.retries)
            log.info("node %s: election of epoch %d timed out, backing off %d ms",
                     self.node_id, state.epoch, backoff)
            state.start_backing_off(now_ms, backoff)
            return backoff
        return min(self._maybe_send_vote_requests(state, now_ms, False),
                   state.remaining_election_time_ms(now_ms))

    def _poll_prospective(self, state: ProspectiveState, now_ms: int) -> int:
        if self._shutdown_deadline is None and state.has_election_timeout_expired(now_ms):
            self._prospective_transition_after_election_loss(state, now_ms)
            return 0
        return min(self._maybe_send_vote_requests(state, now_ms, True),
                   state.remaining_election_time_ms(now_ms))

    def _poll_follower_as_voter(self, state: FollowerState, now_ms: int) -> int:
        if self._shutdown_deadline is not None:
            return 0
        if state.has_fetch_timeout_expired(now_ms):
            log.info("node %s: no answer from leader %s for %d ms, asking for pre-votes",
                     self.node_id, state.leader_id, state.fetch_timeout_ms)
            self._transition_to_prospective(now_ms)
            return 0
        backoff = self._maybe_send_fetch_or_fetch_snapshot(state, now_ms)
        return min(backoff, state.remaining_fetch_time_ms(now_ms))

    def _poll_follower_as_observer(self, state: FollowerState, now_ms: int) -> int:
        rm = self.request_manager
        if state.has_fetch_timeout_expired(now_ms):
            return self._maybe_send_any_voter_fetch(now_ms)
        leader = state.leader_id
        if rm.has_request_timed_out(leader, now_ms):
            rm.reset(leader)
            backoff = self._maybe_send_any_voter_fetch(now_ms)
        elif rm.is_backing_off(leader, now_ms):
            backoff = self._maybe_send_any_voter_fetch(now_ms)
        elif not rm.has_any_inflight_request(now_ms):
            backoff = self._maybe_send_fetch_or_fetch_snapshot(state, now_ms)
        else:
            backoff = rm.backoff_before_available_bootstrap_server(now_ms)
        return min(backoff, state.remaining_fetch_time_ms(now_ms))

    def _poll_unattached_as_voter(self, state: UnattachedState, now_ms: int) -> int:
        if self._shutdown_deadline is not None:
            return max(0, self._shutdown_deadline - now_ms)
        if state.has_election_timeout_expired(now_ms):
            self._transition_to_prospective(now_ms)
            return 0
        return state.remaining_election_time_ms(now_ms)

    def _poll_resigned(self, state: ResignedState, now_ms: int) -> int:
        backoff = NO_DEADLINE
        for voter_id in sorted(state.unacked_voters):
            backoff = min(backoff, self._maybe_send_request(now_ms, voter_id, lambda: (
                ApiKey.END_QUORUM_EPOCH, ru.end_quorum_epoch_request(
                    self.cluster_id, state.epoch, state.local_id, state.preferred_successors,
                    self.local_listeners))))
        if self._shutdown_deadline is not None:
            # stay resigned until the shutdown finishes or another leader is elected
            return min(backoff, max(0, self._shutdown_deadline - now_ms))
        if state.has_election_timeout_expired(now_ms):
            self._transition_to_unattached(state.epoch + 1, None, now_ms)
            return 0
        return min(backoff, state.remaining_election_time_ms(now_ms))

    def _maybe_send_fetch_or_fetch_snapshot(self, state: FollowerState, now_ms: int) -> int:
        if state.snapshot_freezing:
            return NO_DEADLINE  # the driver is making the downloaded snapshot durable
        writer = state.fetching_snapshot
        if writer is not None:
            return self._maybe_send_request(now_ms, state.leader_id, lambda: (
                ApiKey.FETCH_SNAPSHOT, ru.fetch_snapshot_request(
                    self.cluster_id, self._local_id_or_sentinel(), self.directory_id,
                    self.quorum.epoch, writer.snapshot_id, writer.size_in_bytes,
                    self.max_fetch_bytes)))
        return self._maybe_send_request(now_ms, state.leader_id, self._build_fetch_request)

    def _build_fetch_request(self) -> tuple[int, Any]:
        return ApiKey.FETCH, ru.fetch_request(
            self.cluster_id, self._local_id_or_sentinel(), self.directory_id, self.quorum.epoch,
            self.log.end_offset, self.log.last_fetched_epoch(), self.config.fetch_max_wait_ms,
            self.max_fetch_bytes)

    def _maybe_send_any_voter_fetch(self, now_ms: int) -> int:
        node = self.request_manager.find_ready_bootstrap_server(now_ms)
        if node is not None:
            return self._maybe_send_request(now_ms, node, self._build_fetch_request)
        return self.request_manager.backoff_before_available_bootstrap_server(now_ms)

    def _local_id_or_sentinel(self) -> int:
        return -1 if self.node_id is None else self.node_id

    def _binary_exponential_election_backoff_ms(self, retries: int) -> int:
        if retries <= 0:
            raise ValueError(f"retries {retries} must be positive")
        return min(RETRY_BACKOFF_BASE_MS * self.random.randrange(2 << min(20, retries - 1)),
                   self.config.election_backoff_max_ms)

    def _strict_exponential_election_backoff_ms(self, position: int, total: int) -> int:
        maximum = self.config.election_backoff_max_ms
        if position == 0:
            return 0
        if position < 0 or position >= total:
            return maximum
        base = maximum >> (total - 1)
        return min(maximum, base << (position - 1))

    # -- transitions -----------------------------------------------------------------------
    def _leaving_leader(self) -> None:
        """Abandon what only a leader holds: unappended records and parked fetches."""
        self._accumulator = None
        self._hw_sent = {}
        self._fail_parked_fetches(ru.NOT_LEADER_OR_FOLLOWER)

    def _transition_to_prospective(self, now_ms: int) -> None:
        self.quorum.transition_to_prospective(now_ms)
        self.request_manager.reset_all()
        self._maybe_transition_forward(now_ms)

    def _maybe_transition_forward(self, now_ms: int) -> None:
        state = self.quorum.state
        if isinstance(state, ProspectiveState) and state.epoch_election.is_vote_granted():
            self._transition_to_candidate(now_ms)
        elif isinstance(state, CandidateState) and state.epoch_election.is_vote_granted():
            self._on_become_leader(now_ms)

    def _transition_to_candidate(self, now_ms: int) -> None:
        if self.quorum.epoch + 1 >= ru.MAX_EPOCH:
            # never reached by honest nodes (2^31 elections); requests at MAX_EPOCH are refused,
            # so this node could not be followed in the next epoch: stay prospective
            if not self._epoch_exhausted_logged:
                log.error("node %s: cannot start an election: epoch %d is the last the protocol can "
                          "follow", self.node_id, self.quorum.epoch)
                self._epoch_exhausted_logged = True
            return
        self.quorum.transition_to_candidate(now_ms)
        self._maybe_fire_leader_change()
        self._on_become_candidate(now_ms)

    def _on_become_candidate(self, now_ms: int) -> None:
        state = self.quorum.state
        assert isinstance(state, CandidateState)
        if state.epoch_election.is_vote_granted():
            self._on_become_leader(now_ms)
        else:
            self.request_manager.reset_all()

    def _on_become_leader(self, now_ms: int) -> None:
        end = self.log.end_offset
        state = self.quorum.transition_to_leader(end, now_ms)
        self._hw_sent = {}
        log.info("node %s: leader of epoch %d from offset %d", self.node_id, state.epoch, end)
        # Written at once: the high watermark can only move once a record of this epoch commits.
        voters = sorted(self.voters.voter_ids())
        batch = build_control_batch(
            [leader_change_message(state.local_id, voters, sorted(state.granting_voters))],
            base_offset=0, epoch=state.epoch, timestamp_ms=now_ms)
        self.log.append_as_leader(batch, state.epoch)
        self._log_dirty = True
        self._accumulator = BatchAccumulator(state.epoch, self.log.end_offset,
                                         self.config.append_linger_ms, MAX_BATCH_SIZE_BYTES)
        self.request_manager.reset_all()

    def _transition_to_unattached(self, epoch: int, leader_id: int | None, now_ms: int) -> None:
        was_leader = self.quorum.is_leader
        self.quorum.transition_to_unattached(epoch, leader_id, now_ms)
        if was_leader:
            self._leaving_leader()
        self._maybe_fire_leader_change()
        self.request_manager.reset_all()

    def _transition_to_follower(self, epoch: int, leader_id: int,
                                endpoints: Mapping[str, tuple[str, int]], now_ms: int) -> None:
        was_leader = self.quorum.is_leader
        self.quorum.transition_to_follower(epoch, leader_id, endpoints, now_ms)
        if was_leader:
            self._leaving_leader()
        self._maybe_fire_leader_change()
        self._on_become_follower(now_ms)

    def _on_become_follower(self, now_ms: int) -> None:
        self.request_manager.reset_all()
        self._fail_parked_fetches(ru.NOT_LEADER_OR_FOLLOWER)

    def _transition_to_resigned(self, preferred: list[int], now_ms: int) -> None:
        self._leaving_leader()
        self.quorum.transition_to_resigned(preferred, now_ms)
        self.request_manager.reset_all()

    def _prospective_transition_after_election_loss(self, state: ProspectiveState, now_ms: int) -> None:
        if state.leader_id is not None and state.leader_endpoints:
            self._transition_to_follower(state.epoch, state.leader_id, state.leader_endpoints, now_ms)
        else:
            self._transition_to_unattached(state.epoch, state.leader_id, now_ms)

    def _has_consistent_leader(self, epoch: int, leader_id: int | None) -> bool:
        if leader_id is not None and leader_id == self.node_id:
            # only this node can know it leads; a resigned leader still names itself
            return self.quorum.is_leader or (self.quorum.is_resigned and epoch == self.quorum.epoch)
        return (epoch != self.quorum.epoch or leader_id is None or self.quorum.leader_id is None
                or leader_id == self.quorum.leader_id)

    def _peer_fault(self, message: str) -> None:
        """A peer told this node something that contradicts what it knows (a buggy, stale or
        lying peer, or one that was lied to): the message is ignored, never fatal."""
        if self.peer_fault_hook is not None:
            self.peer_fault_hook(message)
        else:
            log.warning("node %s: %s", self.node_id, message)

    def _maybe_transition(self, leader_id: int | None, epoch: int,
                          endpoints: Mapping[str, tuple[str, int]], now_ms: int) -> bool:
        """Follow what a request or response says of `epoch` and its leader; False (nothing
        changed) when it contradicts this node (Kafka throws and the node stops)."""
        if epoch >= ru.MAX_EPOCH:
            self._peer_fault(f"epoch {epoch} from a peer is past the last usable epoch")
            return False
        if not self._has_consistent_leader(epoch, leader_id):
            if leader_id == self.node_id and epoch > self.quorum.epoch:
                # Only this node can know it leads: a newer epoch said to be led by it is a lie, or
                # one a peer repeats in good faith. The epoch is real to that peer; the leader is not.
                self._peer_fault(f"a peer says this node leads epoch {epoch}; moving to that epoch "
                                 f"without a leader")
                leader_id = None
            else:
                self._peer_fault(f"leader {leader_id} of epoch {epoch} contradicts {self.quorum.state}")
                return False
        if epoch > self.quorum.epoch:
            if leader_id is not None and leader_id != self.node_id and endpoints:
                self._transition_to_follower(epoch, leader_id, endpoints, now_ms)
            else:
                self._transition_to_unattached(epoch, leader_id if leader_id != self.node_id else None,
                                               now_ms)
        elif leader_id is not None and leader_id != self.node_id and endpoints and (
                self.quorum.leader_id is None
                or len(endpoints) > len(self.quorum.leader_endpoints)):
            self._transition_to_follower(epoch, leader_id, endpoints, now_ms)
        return True

    def _leader_endpoints(self, leader_id: int | None,
                          node_endpoints: Sequence[ru.NodeEndpoint] | None
                          ) -> Mapping[str, tuple[str, int]]:
        """A leader's endpoints: the voter set's (static and trusted), else what the peer said."""
        if leader_id is None:
            return {}
        node = self.voters.voter(leader_id)
        if node is not None and node.listeners:
            return dict(node.listeners)
        for e in node_endpoints or ():
            if e.node_id == leader_id:
                return {self.listener_name: (e.host, e.port)}
        return {}

    def _maybe_handle_common_response(self, error: int, leader_id: int | None, epoch: int,
                                      endpoints: Mapping[str, tuple[str, int]],
                                      now_ms: int) -> bool | None:
        """Kafka's maybeHandleCommonResponse: None when the API's own handler should run,
        else whether the response counts as a success for the request manager."""
        if leader_id is not None and self.voters.voter(leader_id) is None:
            self._peer_fault(f"a peer names {leader_id}, not a voter, leader of epoch {epoch}")
            leader_id, endpoints = None, {}
        if epoch < self.quorum.epoch or error == ru.UNKNOWN_LEADER_EPOCH:
            # Deliberate difference: Kafka counts these as handled and asks again at once; a peer
            # in an older epoch (one in lease refuses to move: see follower_state) would then be
            # asked in a tight loop. Back off instead.
            return False
        if epoch > self.quorum.epoch or error in (ru.FENCED_LEADER_EPOCH, ru.NOT_LEADER_OR_FOLLOWER):
            return self._maybe_transition(leader_id, epoch, endpoints, now_ms)
        if leader_id is not None and self.quorum.leader_id is None and leader_id != self.node_id:
            if not endpoints:
                self._peer_fault(f"leader {leader_id} of epoch {epoch} has no known endpoints")
                return False
            self._transition_to_follower(epoch, leader_id, endpoints, now_ms)
            return None if error == ru.NONE else True
        if error == ru.BROKER_NOT_AVAILABLE:
            return False
        if error == ru.INVALID_VOTER_KEY:
            return True
        if error in (ru.INVALID_REQUEST, ru.INCONSISTENT_VOTER_SET, ru.UNKNOWN_SERVER_ERROR):
            self._peer_fault(f"a peer answered error {error} to a request of ours")
            return False
        return None

    # -- leader progress and local API -------------------------------------------------------
    def _update_leader_end_offset(self, state: LeaderState, now_ms: int) -> None:
        if state.update_local_state(min(self._durable_end, self.log.end_offset)):
            self._on_update_leader_high_watermark(state, now_ms)

    def _on_update_leader_high_watermark(self, state: LeaderState, now_ms: int) -> None:
        assert state.high_watermark is not None
        self.log.update_high_watermark(state.high_watermark)
        # Kafka's fetchPurgatory.completeAll: the parked followers learn the new high watermark
        # now, not when their fetch expires (up to 500 ms later)
        self._complete_all_parked_fetches(now_ms)

    def append(self, records: list[Any], now_ms: int, epoch: int | None = None) -> int:
        """Queue records for one batch on the leader; returns the offset of the last one.

        Raises NotLeaderError when this node does not lead (`epoch`, if given). The records
        are written within controller.quorum.append.linger.ms and commit once a majority has
        them; if leadership is lost first they may or may not survive.
        """
        state = self.quorum.state
        if not isinstance(state, LeaderState) or self._accumulator is None:
            raise NotLeaderError(f"node {self.node_id} is not the leader (state {state})")
        if epoch is not None and epoch != state.epoch:
            raise NotLeaderError(f"node {self.node_id} leads epoch {state.epoch}, not {epoch}")
        return self._accumulator.append([self.serde.serialize(r) for r in records], now_ms)

    def resign(self, epoch: int) -> None:
        """Ask the leader of `epoch` to step down (ignored for an older epoch)."""
        if epoch < 0:
            raise ValueError(f"invalid epoch {epoch}")
        if epoch > self.quorum.epoch:
            raise ValueError(f"epoch {epoch} is ahead of the current epoch {self.quorum.epoch}")
        state = self.quorum.state
        if epoch < self.quorum.epoch:
            return
        if not isinstance(state, LeaderState):
            if self.quorum.leader_id != self.node_id:
                raise NotLeaderError(f"node {self.node_id} does not lead epoch {epoch}")
            return
        state.request_resign()

    def begin_shutdown(self, timeout_ms: int, now_ms: int) -> None:
        """Graceful shutdown (Kafka's shutdown(timeoutMs)): a leader resigns and tells the
        voters; done (`shutdown_complete`) once another leader is known, at once for an
        observer, a lone voter or a voter neither leading nor a candidate, or when the timeout
        passes (`shutdown_timed_out`)."""
        if self._shutdown_deadline is None:
            self._shutdown_deadline = now_ms + timeout_ms

    def _maybe_complete_shutdown(self, now_ms: int) -> bool:
        if self._shutdown_deadline is None:
            return False
        if self.shutdown_complete:
            return True
        if now_ms >= self._shutdown_deadline:
            self.shutdown_complete = self.shutdown_timed_out = True
            return True
        # nothing to hand over unless this node leads, resigned its lead, or stands for election:
        # a voter that only waits for a leader (unattached, prospective) leaves at once (the last
        # voters of a cluster stopping together would otherwise wait out the timeout for an
        # election that cannot succeed)
        q = self.quorum
        if q.is_observer() or q.is_only_voter() or q.has_remote_leader() \
                or not (q.is_leader or q.is_resigned or q.is_candidate):
            self.shutdown_complete = True
            return True
        return False

    def create_snapshot(self, snapshot_id: OffsetAndEpoch, last_contained_log_timestamp: int,
                        now_ms: int) -> SnapshotWriter | None:
        """A writer for a snapshot of the committed records below `snapshot_id.offset` (whose
        last record has epoch `snapshot_id.epoch`); None when that snapshot exists or is below
        the log start. Freeze it in a worker thread; log cleanup then follows the retention
        settings."""
        raw = self.log.create_new_snapshot(snapshot_id)
        if raw is None:
            return None
        return SnapshotWriter(raw, serde=self.serde, last_contained_log_timestamp=last_contained_log_timestamp,
                              now_ms=now_ms)

    # -- listeners -------------------------------------------------------------------------
    def _poll_listeners(self) -> bool:
        """Hand committed batches and leader changes to the listeners; True when a listener
        still lags (at most LISTENER_BYTES_PER_POLL go to each per poll, so a long replay
        does not hold the loop)."""
        hw = self.quorum.high_watermark
        lagging = False
        if hw is not None:
            lagging = self._update_listeners_progress(hw)
        state = self.quorum.state
        if isinstance(state, LeaderState):
            self._maybe_fire_leader_change_for_leader(state)
        elif not isinstance(state, ResignedState):
            self._maybe_fire_leader_change()
        return lagging

    def _update_listeners_progress(self, hw: int) -> bool:
        lagging = False
        for ctx in list(self._listeners.values()):
            nxt = ctx.next_offset
            latest = self.log.latest_snapshot_id()
            if (nxt is None or nxt < self.log.start_offset) and (nxt is None or nxt < hw) \
                    and latest is not None:
                raw = self.log.read_snapshot(latest)
                if raw is not None:
                    ctx.listener.handle_load_snapshot(SnapshotReader(raw, self.serde))
                    ctx.next_offset = latest.offset
            elif nxt is None:
                ctx.next_offset = 0
            elif nxt < self.log.start_offset:
                raise IllegalStateError(f"listener needs offset {nxt} below the log start "
                                        f"{self.log.start_offset} and there is no snapshot")
            delivered = 0
            while ctx.next_offset is not None and ctx.next_offset < hw:
                if delivered >= LISTENER_BYTES_PER_POLL:
                    lagging = True
                    break
                data = self.log.read(ctx.next_offset, hw, MAX_BATCH_SIZE_BYTES)
                batches = [b for b in decode_batches(data, self.serde, verify_crc=False)
                           if b.last_offset >= ctx.next_offset and b.last_offset < hw]
                if not batches:
                    break
                delivered += len(data)
                ctx.next_offset = batches[-1].last_offset + 1
                ctx.listener.handle_commit(batches)
        return lagging

    def _maybe_fire_leader_change(self) -> None:
        leader = self.leader_and_epoch
        for ctx in self._listeners.values():
            if ctx.should_fire(leader):
                ctx.last_leader = leader
                ctx.listener.handle_leader_change(leader)

    def _maybe_fire_leader_change_for_leader(self, state: LeaderState) -> None:
        leader = LeaderAndEpoch(state.local_id, state.epoch)
        for ctx in self._listeners.values():
            # the new leader's state machine must have seen everything before its epoch first
            if ctx.should_fire(leader) and ctx.next_offset is not None \
                    and ctx.next_offset >= state.epoch_start_offset:
                ctx.last_leader = leader
                ctx.listener.handle_leader_change(leader)
