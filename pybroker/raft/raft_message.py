"""What crosses the boundary between the sans-IO Raft client and its driver (Kafka's
RaftRequest, RaftResponse and the work of its KafkaRaftClientDriver).

Into the client: `InboundRequest` (a Raft RPC another node sent us, with an opaque `token` the
driver uses to route the answer) and `InboundResponse` (the answer to one of our requests, or a
synthesized error response when the request failed or timed out).

Out of the client, from `take_io()`, a `RaftIo`, to be carried out *in order*:

1. `election_state`: write the quorum-state file (fsync);
2. `flush_offset`: fsync the log up to this offset;
3. `snapshots_to_freeze`: fsync and rename these downloaded snapshots;
4. `deferred`: other blocking work (deleting files of cleaned segments and snapshots);
5. then call `client.on_io_complete(io, now_ms)`,
6. and only then send `messages` (OutboundRequest / OutboundResponse).

Steps 1-4 block; the driver runs them in a worker thread. Sending only after they finish is what
makes a granted vote, a BeginQuorumEpoch or a Fetch offset (the follower's acknowledgement)
promise only what is on disk.

Concurrency: plain values, handed from the client's thread to the driver and back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pybroker.raft.election_state import ElectionState
from pybroker.raft.snapshots import RawSnapshotWriter


@dataclass
class InboundRequest:
    api_key: int
    api_version: int
    body: Any
    correlation_id: int = 0
    token: Any = None


@dataclass
class InboundResponse:
    source: int
    correlation_id: int
    api_key: int
    body: Any


@dataclass
class OutboundRequest:
    destination: int
    address: tuple[str, int] | None
    correlation_id: int
    api_key: int
    api_version: int
    body: Any
    created_ms: int


@dataclass
class OutboundResponse:
    request: InboundRequest
    body: Any


@dataclass
class RaftIo:
    election_state: ElectionState | None = None
    voter_ids: frozenset[int] = frozenset()
    flush_offset: int | None = None
    snapshots_to_freeze: list[RawSnapshotWriter] = field(default_factory=list)
    deferred: list[Callable[[], None]] = field(default_factory=list)
    messages: list[OutboundRequest | OutboundResponse] = field(default_factory=list)

    @property
    def needs_persistence(self) -> bool:
        return (self.election_state is not None or self.flush_offset is not None
                or bool(self.snapshots_to_freeze) or bool(self.deferred))

    @property
    def empty(self) -> bool:
        return not self.needs_persistence and not self.messages
