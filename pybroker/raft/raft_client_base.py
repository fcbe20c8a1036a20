"""What KafkaRaftClient's RPC handler mixins may use of the client: the state they read and
write, and the client's methods they call.

KafkaRaftClient (raft_client) is split over two mixins, raft_request_handlers (the RPCs this
node answers) and raft_response_handlers (answers to its own requests). Both inherit this
class, and KafkaRaftClient inherits both, so mypy checks the mixins against these declarations
and checks KafkaRaftClient's definitions against them as overrides: a signature changed on one
side and not the other is a type error, and an abstract method the client does not define
makes it abstract (mypy refuses to instantiate it; so does Python).

Why a base class and not a Protocol as the mixins' `self` type: with a Protocol every mixin
method needs `self: Protocol` and the Protocol has to list the mixins' own methods as well
(they call each other through `self`), while the client's conformance is only checked where a
mixin method is bound. A base class declares only what the client owns, and the override check
happens once, at `class KafkaRaftClient`.

Declarations only: the client's `__init__` assigns the attributes, and the abstract methods
have no body here (their docs are on the client). State that belongs to one mixin (the parked
fetches, the snapshots waiting to be frozen) is declared in that mixin.

Concurrency: Raft client thread only.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence

from pybroker.protocol.api_message import ApiMessage
from pybroker.raft.leader_state import LeaderState
from pybroker.raft.prospective_state import ProspectiveState
from pybroker.raft.quorum_state import QuorumState
from pybroker.raft.raft_log import ReplicatedLog
from pybroker.raft.raft_message import InboundRequest
from pybroker.raft.raft_util import NodeEndpoint
from pybroker.raft.request_manager import RequestManager
from pybroker.raft.voter_set import VoterSet


class RaftClientBase(ABC):
    # set once in KafkaRaftClient.__init__
    node_id: int | None  # None: an observer without an id
    cluster_id: str
    directory_id: bytes | None
    listener_name: str
    max_fetch_bytes: int
    strict: bool  # a handler's unexpected exception propagates instead of being logged
    log: ReplicatedLog
    voters: VoterSet
    quorum: QuorumState
    request_manager: RequestManager
    # changing state
    _shutdown_deadline: int | None  # set by begin_shutdown
    _log_dirty: bool  # the log changed since the last take_io (flush it)

    # -- the client's own methods the mixins call ---------------------------------------------
    @abstractmethod
    def _respond(self, request: InboundRequest, body: ApiMessage) -> None: ...

    @abstractmethod
    def _peer_fault(self, message: str) -> None: ...

    @abstractmethod
    def _maybe_transition(self, leader_id: int | None, epoch: int,
                          endpoints: Mapping[str, tuple[str, int]], now_ms: int) -> bool: ...

    @abstractmethod
    def _maybe_handle_common_response(self, error: int, leader_id: int | None, epoch: int,
                                      endpoints: Mapping[str, tuple[str, int]],
                                      now_ms: int) -> bool | None: ...

    @abstractmethod
    def _leader_endpoints(self, leader_id: int | None,
                          node_endpoints: Sequence[NodeEndpoint] | None
                          ) -> Mapping[str, tuple[str, int]]: ...

    @abstractmethod
    def _transition_to_unattached(self, epoch: int, leader_id: int | None, now_ms: int) -> None: ...

    @abstractmethod
    def _transition_to_prospective(self, now_ms: int) -> None: ...

    @abstractmethod
    def _maybe_transition_forward(self, now_ms: int) -> None: ...

    @abstractmethod
    def _prospective_transition_after_election_loss(self, state: ProspectiveState,
                                                    now_ms: int) -> None: ...

    @abstractmethod
    def _on_become_follower(self, now_ms: int) -> None: ...

    @abstractmethod
    def _maybe_fire_leader_change(self) -> None: ...

    @abstractmethod
    def _on_update_leader_high_watermark(self, state: LeaderState, now_ms: int) -> None: ...

    @abstractmethod
    def _binary_exponential_election_backoff_ms(self, retries: int) -> int: ...

    @abstractmethod
    def _strict_exponential_election_backoff_ms(self, position: int, total: int) -> int: ...
