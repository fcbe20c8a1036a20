"""A hand-driven KafkaRaftClient for unit tests (after Kafka's RaftClientTestContext).

`step()` polls the client and carries out its RaftIo at once (quorum-state write, log flush,
snapshot freeze), then returns the messages it sent. Requests are delivered with `request()`
(returning the response body) and answers to our requests with `respond()`.
"""

from __future__ import annotations

import random
from typing import Any

from pybroker.protocol.api_keys import ApiKey
from pybroker.raft import raft_util as ru
from pybroker.raft.election_state import ElectionState
from pybroker.raft.memory_log import MemoryLog
from pybroker.raft.offset_and_epoch import OffsetAndEpoch
from pybroker.raft.quorum_config import QuorumConfig
from pybroker.raft.quorum_state_store import MemoryQuorumStateStore
from pybroker.raft.raft_client import KafkaRaftClient
from pybroker.raft.raft_message import (
    InboundRequest,
    InboundResponse,
    OutboundRequest,
    OutboundResponse,
)
from pybroker.records.batch import build_batch

CLUSTER = "test-cluster"


class Recorder:
    """A listener that remembers every callback."""

    def __init__(self) -> None:
        self.batches: list[Any] = []
        self.snapshots: list[Any] = []
        self.leaders: list[Any] = []

    def handle_commit(self, batches: list[Any]) -> None:
        self.batches.extend(batches)

    def handle_load_snapshot(self, reader: Any) -> None:
        self.snapshots.append((reader.snapshot_id, [r for b in reader for r in b.records]))

    def handle_leader_change(self, leader: Any) -> None:
        self.leaders.append(leader)

    def records(self) -> list[bytes]:
        return [r for b in self.batches for r in b.records]


class Ctx:
    def __init__(self, local_id: int | None = 1, voters: tuple[int, ...] = (1, 2, 3), *,
                 election: ElectionState | None = None, log: MemoryLog | None = None,
                 seed: int = 0, **config: Any) -> None:
        self.now = 0
        self.log = log if log is not None else MemoryLog()
        self.store = MemoryQuorumStateStore(election)
        self.config = QuorumConfig(voters={v: ("localhost", 9000 + v) for v in voters}, **config)
        self.peer_faults: list[str] = []
        self.client = KafkaRaftClient(node_id=local_id, config=self.config, log=self.log,
                                      store=self.store, cluster_id=CLUSTER, random=random.Random(seed),
                                      strict=True, peer_fault_hook=self.peer_faults.append)
        self.recorder = Recorder()
        self.client.register(self.recorder)
        self.sent: list[OutboundRequest] = []
        self.responses: list[OutboundResponse] = []
        self.client.initialize(self.now)
        self.persisted_before_send: list[bool] = []

    @property
    def state(self) -> Any:
        return self.client.quorum.state

    def step(self) -> list[Any]:
        """Poll and carry out the IO, as the driver's loop does, until the client is idle
        (an empty io and a non-zero timeout); returns what went out."""
        out: list[Any] = []
        for _ in range(20):
            timeout = self.client.poll(self.now)
            io = self.client.take_io()
            if io.election_state is not None:
                self.store.write(io.election_state, io.voter_ids)
            if io.flush_offset is not None:
                self.log.flush(io.flush_offset)
            for writer in io.snapshots_to_freeze:
                writer.freeze()
            for work in io.deferred:
                work()
            self.client.on_io_complete(io, self.now)
            for m in io.messages:
                (self.sent if isinstance(m, OutboundRequest) else self.responses).append(m)
            out.extend(io.messages)
            if io.empty and timeout > 0:
                break
        return out

    def advance(self, ms: int) -> list[Any]:
        self.now += ms
        return self.step()

    def drain_sent(self, api_key: int | None = None) -> list[OutboundRequest]:
        picked = [r for r in self.sent if api_key is None or r.api_key == api_key]
        self.sent = [r for r in self.sent if r not in picked]
        return picked

    def request(self, api_key: int, body: Any) -> Any:
        """Deliver a request; returns the response body if answered within this step."""
        req = InboundRequest(api_key, ru.RAFT_API_VERSIONS[api_key], body, correlation_id=7)
        self.client.handle_request(req, self.now)
        self.step()
        for r in self.responses:
            if r.request is req:
                self.responses.remove(r)
                return r.body
        return None

    def respond(self, request: OutboundRequest, body: Any) -> list[Any]:
        self.client.handle_response(InboundResponse(request.destination, request.correlation_id,
                                                    request.api_key, body), self.now)
        return self.step()

    # -- canned messages ---------------------------------------------------------------------
    def vote_request(self, candidate: int, epoch: int, last: OffsetAndEpoch, pre_vote: bool = False) -> Any:
        return ru.vote_request(CLUSTER, epoch, candidate, None, self.client.node_id, None, last, pre_vote)

    def vote_response(self, epoch: int, granted: bool, leader: int | None = None, error: int = 0) -> Any:
        return ru.vote_response(error, epoch, leader, granted, {}, "CONTROLLER")

    def fetch_request(self, replica: int, epoch: int, offset: int, last_epoch: int, max_wait_ms: int = 0) -> Any:
        return ru.fetch_request(CLUSTER, replica, None, epoch, offset, last_epoch, max_wait_ms, 1 << 20)

    def fetch_response(self, epoch: int, leader: int, *, records: bytes = b"", hw: int | None = None,
                       diverging: OffsetAndEpoch | None = None, snapshot: OffsetAndEpoch | None = None,
                       error: int = 0, start: int = 0) -> Any:
        return ru.fetch_response(error, epoch, leader, high_watermark=hw, log_start_offset=start,
                                 records=records, diverging=diverging, snapshot_id=snapshot)

    def become_leader(self) -> None:
        """Drive a fresh voter through pre-vote and vote to leadership."""
        self.advance(2 * self.config.election_timeout_ms)
        assert self.client.quorum.is_prospective, self.state
        for r in self.drain_sent(ApiKey.VOTE):
            self.respond(r, self.vote_response(self.client.epoch, True))
            if self.client.quorum.is_candidate:
                break
        for r in self.drain_sent(ApiKey.VOTE):
            self.respond(r, self.vote_response(self.client.epoch, True))
            if self.client.is_leader:
                break
        assert self.client.is_leader, self.state


def data_batch(*values: bytes) -> bytes:
    return build_batch([(1, None, v, ()) for v in values])
