"""A deterministic, seeded simulation of a KRaft quorum (after Kafka's RaftEventSimulationTest).

Many `KafkaRaftClient`s run in one process on virtual time. Every message goes through the real
wire codec (encode_request / decode_request / encode_response / decode_response at the versions
Kafka 4.x controllers use), then through a `Network` that can drop, delay, duplicate and so
reorder it, and that can cut links (partitions). Nodes crash with or without losing what they
had not flushed (MemoryLog.crash) and restart from their log and quorum-state store.

Durability is modelled like the trio driver: after each step a node hands its RaftIo to the
"disk" and stays busy until it completes (a random 0-3 ms later); only then does it call
`on_io_complete` and send the io's messages. A crash while busy loses that io.

A small replicated state machine (`SimStateMachine`) sits on every node: the leader appends
records, every node applies what commits, takes snapshots through `SnapshotPolicy`, and loads a
snapshot when it has to. Invariants are checked after every event (cheap ones) and on demand:

- at most one leader per epoch;
- the high watermark of a node incarnation never decreases;
- a committed offset always holds the same record (epoch and value), on every node, forever;
- any two logs agree on every offset both hold below both high watermarks;
- progress: commits advance whenever a majority is up, connected and left alone.

A failure raises `InvariantViolation` whose message starts with the seed, so a run replays with
PYBROKER_SIM_SEED=<seed>.

Byzantine-input mode (`run_byzantine_scenario`): an `Adversary` that can reach every node's
controller listener injects Raft requests as a non-voter or as a spoofed voter: forged Votes,
pre-votes, BeginQuorumEpoch and EndQuorumEpoch (other leaders, the receiver itself, the epochs
around the receiver's, the last int32 epochs), Fetch and FetchSnapshot from the leader's own id
and made-up ids, and field-level mutations of all of them, each through the wire codec. Honest
nodes then contradict each other at times (a lie repeated in good faith); those peer faults are
counted, not fatal. Every node runs `strict`: any exception out of a handler fails the run. The
invariants are the same, progress included. One forgery is out of the model: a Fetch in a voter's
name claiming more than that voter has, which would count as its acknowledgement; without
authentication of the controller listener (the security issue) no rule can tell it apart (Kafka's
leader, like ours, takes any valid fetch offset as the replica's end offset). The adversary builds
its Fetches within the model, but a field mutation (a made-up replica id rewritten to a voter's) or
a leadership change between forging and delivery can still make one claim more; the cluster
withholds such a Fetch when its target is about to handle it (`Adversary.forges_acknowledgement`,
counted in `ByzantineReport.withheld`), so the bound is what the leader knows at that moment.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.frame import decode_request, decode_response, encode_request, encode_response
from pybroker.raft import raft_util as ru
from pybroker.raft.batch import Batch
from pybroker.raft.leader_state import LeaderState
from pybroker.raft.listener import LeaderAndEpoch
from pybroker.raft.memory_log import MemoryLog
from pybroker.raft.offset_and_epoch import OffsetAndEpoch
from pybroker.raft.quorum_config import QuorumConfig
from pybroker.raft.quorum_state_store import MemoryQuorumStateStore
from pybroker.raft.raft_client import KafkaRaftClient, NotLeaderError
from pybroker.raft.raft_message import (
    InboundRequest,
    InboundResponse,
    OutboundRequest,
    OutboundResponse,
    RaftIo,
)
from pybroker.raft.raft_util import BROKER_NOT_AVAILABLE, error_response
from pybroker.raft.snapshot_policy import SnapshotPolicy
from pybroker.raft.snapshots import SnapshotReader

CLUSTER_ID = "sim-cluster-0000000000"


class InvariantViolation(AssertionError):
    pass


@dataclass
class NetworkConfig:
    min_delay_ms: int = 1
    max_delay_ms: int = 10
    drop_probability: float = 0.0
    duplicate_probability: float = 0.0


class SimStateMachine:
    """Applies committed records; `values` maps offset -> record bytes (data records only)."""

    def __init__(self, node: SimNode) -> None:
        self.node = node
        self.values: dict[int, bytes] = {}
        self.next_offset = 0
        self.last_epoch = 0
        self.leader = LeaderAndEpoch(None, 0)
        self.snapshots_loaded = 0

    def handle_commit(self, batches: list[Batch[bytes]]) -> None:
        cluster = self.node.cluster
        for batch in batches:
            if batch.base_offset != self.next_offset:
                cluster.fail(f"node {self.node.id} got batch {batch.base_offset} while expecting "
                             f"{self.next_offset}")
            for i, value in enumerate(batch.records):
                offset = batch.base_offset + i
                self.values[offset] = value
                cluster.record_committed(self.node.id, offset, batch.epoch, value)
            if batch.is_control:
                for offset in range(batch.base_offset, batch.last_offset + 1):
                    cluster.record_committed(self.node.id, offset, batch.epoch, None)
            self.next_offset = batch.last_offset + 1
            self.last_epoch = batch.epoch
            self.node.policy_bytes(batch.size_in_bytes)

    def handle_load_snapshot(self, reader: SnapshotReader) -> None:
        self.snapshots_loaded += 1
        self.values = {}
        for batch in reader:
            for record in batch.records:
                offset_s, value = bytes(record).split(b"=", 1)
                self.values[int(offset_s)] = value
        for offset, value in self.values.items():
            self.node.cluster.record_committed(self.node.id, offset, None, value)
        self.next_offset = reader.snapshot_id.offset
        self.last_epoch = reader.snapshot_id.epoch

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self.leader = leader

    def snapshot_records(self) -> list[bytes]:
        return [b"%d=%s" % (o, v) for o, v in sorted(self.values.items())]


class SimNode:
    def __init__(self, cluster: Cluster, node_id: int, voter: bool) -> None:
        self.cluster = cluster
        self.id = node_id
        self.voter = voter
        self.log = MemoryLog(retention_bytes=cluster.retention_bytes)
        self.store = MemoryQuorumStateStore()
        self.client: KafkaRaftClient | None = None
        self.machine: SimStateMachine | None = None
        self.policy: SnapshotPolicy | None = None
        self.incarnation = 0
        self.alive = False
        self.busy = False
        self.backlog: list[tuple[str, Any]] = []
        self.poll_token = 0
        self.highest_hw: int | None = None
        self.append_seq = 0
        self.snapshots_taken = 0

    def start(self) -> None:
        c = self.cluster
        self.incarnation += 1
        self.alive, self.busy, self.backlog = True, False, []
        self.highest_hw = None
        self.client = KafkaRaftClient(
            node_id=self.id, config=c.quorum_config, log=self.log, store=self.store,
            cluster_id=CLUSTER_ID, random=random.Random(c.random.getrandbits(64)),
            max_fetch_bytes=c.max_fetch_bytes, log_cleaner_interval_ms=c.cleaner_interval_ms,
            strict=True, peer_fault_hook=self.on_peer_fault)
        self.machine = SimStateMachine(self)
        self.policy = SnapshotPolicy(max_bytes_between_snapshots=c.snapshot_bytes,
                                     max_interval_ms=c.snapshot_interval_ms, now_ms=c.now)
        self.client.register(self.machine)
        self.client.initialize(c.now)
        c.step(self)

    def on_peer_fault(self, message: str) -> None:
        """A peer contradicted this node: a bug among honest nodes, expected under lies."""
        self.cluster.peer_faults += 1
        if not self.cluster.byzantine:
            self.cluster.fail(f"node {self.id}: {message}")

    def crash(self, lose_unflushed: bool) -> None:
        self.alive = False
        self.client = None
        self.machine = None
        self.backlog = []
        self.busy = False
        self.log.crash(lose_unflushed)

    def policy_bytes(self, size: int) -> None:
        assert self.policy is not None
        self.policy.record_committed_bytes(size)

    def maybe_snapshot(self) -> None:
        """The state machine's side of KIP-630: snapshot at the last applied batch."""
        client, machine, policy = self.client, self.machine, self.policy
        assert client is not None and machine is not None and policy is not None
        if machine.next_offset == 0 or not policy.should_snapshot(self.cluster.now):
            return
        snapshot_id = OffsetAndEpoch(machine.next_offset, machine.last_epoch)
        latest = client.latest_snapshot_id()
        if latest is not None and latest.offset >= snapshot_id.offset:
            policy.snapshot_done(self.cluster.now)
            return
        writer = client.create_snapshot(snapshot_id, self.cluster.now, self.cluster.now)
        if writer is None:
            policy.snapshot_done(self.cluster.now)
            return
        writer.append(machine.snapshot_records())
        writer.freeze()
        policy.snapshot_done(self.cluster.now)
        self.snapshots_taken += 1


@dataclass(order=True)
class _Event:
    time: int
    seq: int
    kind: str = field(compare=False)
    node: int = field(compare=False)
    payload: Any = field(compare=False)


class Cluster:
    def __init__(self, seed: int, *, voters: int = 3, observers: int = 0,
                 network: NetworkConfig | None = None, snapshot_bytes: int = 4096,
                 snapshot_interval_ms: int = 0, retention_bytes: int = 8192,
                 cleaner_interval_ms: int = 500, max_fetch_bytes: int = 2048,
                 append_interval_ms: int = 20, wire: bool = True) -> None:
        self.seed = seed
        self.random = random.Random(seed)
        self.now = 0
        self.network = network or NetworkConfig()
        self.snapshot_bytes = snapshot_bytes
        self.snapshot_interval_ms = snapshot_interval_ms
        self.retention_bytes = retention_bytes
        self.cleaner_interval_ms = cleaner_interval_ms
        self.max_fetch_bytes = max_fetch_bytes
        self.append_interval_ms = append_interval_ms
        self.wire = wire
        voter_ids = list(range(1, voters + 1))
        # Kafka's defaults, except the request timeout: the simulation loses single messages,
        # where TCP would lose a connection and fail fast, and with request timeout == fetch
        # timeout (2000 ms) one lost FetchSnapshot expired the fetch timer and restarted the
        # download; a shorter request timeout retries first.
        self.quorum_config = QuorumConfig(voters={v: ("sim", 9000 + v) for v in voter_ids},
                                          request_timeout_ms=1000)
        self.nodes = {v: SimNode(self, v, True) for v in voter_ids}
        for o in range(voters + 1, voters + observers + 1):
            self.nodes[o] = SimNode(self, o, False)
        self.cut: set[frozenset[int]] = set()
        self._events: list[_Event] = []
        self._seq = itertools.count()
        self.leaders: dict[int, int] = {}
        self.committed: dict[int, tuple[int | None, bytes | None]] = {}
        self.max_committed = 0
        self.events_run = 0
        self.appends = True
        self.byzantine = False  # set by run_byzantine_scenario: lies make peer faults expected
        self.peer_faults = 0
        self.adversary: Adversary | None = None
        self.adversary_answers = 0

    # -- failures ----------------------------------------------------------------------------
    def fail(self, message: str) -> None:
        raise InvariantViolation(f"seed {self.seed} at {self.now} ms: {message} "
                                 f"(replay with PYBROKER_SIM_SEED={self.seed})")

    # -- scheduling --------------------------------------------------------------------------
    def _schedule(self, time: int, kind: str, node: int, payload: Any = None) -> None:
        heapq.heappush(self._events, _Event(time, next(self._seq), kind, node, payload))

    def start(self) -> None:
        for node in self.nodes.values():
            node.start()
        self._schedule(self.now + self.append_interval_ms, "append", 0)

    def run_for(self, duration_ms: int, check: Callable[[], None] | None = None) -> None:
        end = self.now + duration_ms
        while self._events and self._events[0].time <= end:
            event = heapq.heappop(self._events)
            self.now = event.time
            self._dispatch(event)
            self.events_run += 1
            self.check_cheap_invariants()
            if check is not None:
                check()
        self.now = end

    def _dispatch(self, event: _Event) -> None:
        if event.kind == "append":
            self._appends()
            self._schedule(self.now + self.append_interval_ms, "append", 0)
            return
        if event.kind == "forge":
            adversary = self.adversary
            if adversary is not None and adversary.active:
                node_id, request = adversary.forge()
                if node_id is not None:
                    self._schedule(self.now + self._delay(), "request", node_id, request)
                self._schedule(self.now + adversary.next_gap_ms(), "forge", 0)
            return
        node = self.nodes[event.node]
        if event.kind == "io_done":
            incarnation, io = event.payload
            if node.alive and node.incarnation == incarnation:
                self._complete_io(node, io)
            return
        if not node.alive:
            return
        if event.kind == "poll":
            incarnation, token = event.payload
            if incarnation != node.incarnation or token != node.poll_token:
                return
        if node.busy:
            node.backlog.append((event.kind, event.payload))
            return
        self._handle(node, event.kind, event.payload)

    def _handle(self, node: SimNode, kind: str, payload: Any) -> None:
        client = node.client
        assert client is not None
        if kind == "request":
            adversary = self.adversary
            if payload.token == ADVERSARY and adversary is not None \
                    and adversary.forges_acknowledgement(node, payload):
                return  # out of the model (module docstring): never reaches the node
            client.handle_request(payload, self.now)
        elif kind == "response":
            incarnation, response = payload
            if incarnation != node.incarnation:
                return
            client.handle_response(response, self.now)
        self.step(node)

    def step(self, node: SimNode) -> None:
        """Poll the node, then hand its IO to the disk or its messages to the network."""
        client = node.client
        assert client is not None
        timeout = client.poll(self.now)
        if node.machine is not None:
            node.maybe_snapshot()
        io = client.take_io()
        node.poll_token += 1
        self._schedule(self.now + max(1, min(timeout, 10_000)), "poll", node.id,
                       (node.incarnation, node.poll_token))
        if io.needs_persistence:
            node.busy = True
            self._schedule(self.now + self.random.randint(0, 3), "io_done", node.id,
                           (node.incarnation, io))
        else:
            self._send_all(node, io.messages)

    def _complete_io(self, node: SimNode, io: RaftIo) -> None:
        client = node.client
        assert client is not None
        if io.election_state is not None:
            node.store.write(io.election_state, io.voter_ids)
        if io.flush_offset is not None:
            node.log.flush(io.flush_offset)
        for writer in io.snapshots_to_freeze:
            writer.freeze()
        for work in io.deferred:
            work()
        client.on_io_complete(io, self.now)
        self._send_all(node, io.messages)
        node.busy = False
        self.step(node)
        while node.backlog and not node.busy and node.alive:
            kind, payload = node.backlog.pop(0)
            self._handle(node, kind, payload)

    # -- network -----------------------------------------------------------------------------
    def connected(self, a: int, b: int) -> bool:
        return frozenset((a, b)) not in self.cut

    def _delay(self) -> int:
        return self.random.randint(self.network.min_delay_ms, self.network.max_delay_ms)

    def _send_all(self, node: SimNode, messages: list[Any]) -> None:
        for message in messages:
            if isinstance(message, OutboundRequest):
                self._send_request(node, message)
            elif isinstance(message, OutboundResponse):
                self._send_response(node, message)

    def _send_request(self, node: SimNode, request: OutboundRequest) -> None:
        dest = self.nodes.get(request.destination)
        reply_to = (node.id, node.incarnation, request.correlation_id, request.api_key, request.api_version)
        if dest is None or not dest.alive:
            # connection refused: the driver answers with a disconnect error
            body = error_response(request.api_key, BROKER_NOT_AVAILABLE)
            self._schedule(self.now + 1, "response", node.id, (node.incarnation, InboundResponse(
                request.destination, request.correlation_id, request.api_key, body)))
            return
        if not self.connected(node.id, dest.id) or self.random.random() < self.network.drop_probability:
            return
        copies = 2 if self.random.random() < self.network.duplicate_probability else 1
        for _ in range(copies):
            body = request.body
            if self.wire:
                frame = encode_request(request.api_key, request.api_version, request.correlation_id,
                                       f"raft-{node.id}", body)
                _, body = decode_request(memoryview(frame)[4:])
            inbound = InboundRequest(request.api_key, request.api_version, body,
                                     request.correlation_id, token=reply_to)
            self._schedule(self.now + self._delay(), "request", dest.id, inbound)

    def _send_response(self, node: SimNode, response: OutboundResponse) -> None:
        if response.request.token == ADVERSARY:
            self.adversary_answers += 1
            return
        src, incarnation, correlation_id, api_key, version = response.request.token
        if not self.connected(node.id, src) or self.random.random() < self.network.drop_probability:
            return
        body = response.body
        if self.wire:
            chunks = encode_response(api_key, version, correlation_id, body)
            frame = b"".join(bytes(c) for c in chunks)
            _, body = decode_response(api_key, version, memoryview(frame)[4:])
        copies = 2 if self.random.random() < self.network.duplicate_probability else 1
        for _ in range(copies):
            self._schedule(self.now + self._delay(), "response", src, (incarnation, InboundResponse(
                node.id, correlation_id, api_key, body)))

    # -- faults ------------------------------------------------------------------------------
    def partition(self, group: set[int]) -> None:
        """Cut every link between `group` and the other nodes."""
        for a in group:
            for b in self.nodes:
                if b not in group:
                    self.cut.add(frozenset((a, b)))

    def heal(self) -> None:
        self.cut.clear()

    def crash(self, node_id: int, lose_unflushed: bool) -> None:
        node = self.nodes[node_id]
        if node.alive:
            node.crash(lose_unflushed)

    def restart(self, node_id: int) -> None:
        node = self.nodes[node_id]
        if not node.alive:
            node.start()

    # -- the workload ------------------------------------------------------------------------
    def _appends(self) -> None:
        if not self.appends:
            return
        for node in self.nodes.values():
            client = node.client
            if node.alive and client is not None and client.is_leader and not node.busy:
                node.append_seq += 1
                value = b"n%d-i%d-s%d" % (node.id, node.incarnation, node.append_seq)
                try:
                    client.append([value], self.now)
                except NotLeaderError:
                    continue
                self.step(node)

    # -- invariants --------------------------------------------------------------------------
    def record_committed(self, node_id: int, offset: int, epoch: int | None, value: bytes | None) -> None:
        known = self.committed.get(offset)
        if known is None:
            self.committed[offset] = (epoch, value)
            self.max_committed = max(self.max_committed, offset + 1)
            return
        known_epoch, known_value = known
        if value is not None and known_value is not None and value != known_value:
            self.fail(f"node {node_id} committed {value!r} at offset {offset}, "
                      f"which holds {known_value!r}")
        if epoch is not None and known_epoch is not None and epoch != known_epoch:
            self.fail(f"node {node_id} committed epoch {epoch} at offset {offset}, "
                      f"which holds epoch {known_epoch}")
        if (known_value is None and value is not None and known_epoch is not None and epoch is None):
            self.fail(f"node {node_id} has data {value!r} at offset {offset}, a control record")
        self.committed[offset] = (known_epoch if known_epoch is not None else epoch,
                                  known_value if known_value is not None else value)

    def check_cheap_invariants(self) -> None:
        for node in self.nodes.values():
            client = node.client
            if not node.alive or client is None:
                continue
            state = client.quorum.state
            if isinstance(state, LeaderState):
                other = self.leaders.setdefault(state.epoch, node.id)
                if other != node.id:
                    self.fail(f"two leaders in epoch {state.epoch}: {other} and {node.id}")
            hw = client.high_watermark
            if hw is not None:
                if node.highest_hw is not None and hw < node.highest_hw:
                    self.fail(f"node {node.id} high watermark went back {node.highest_hw} -> {hw}")
                node.highest_hw = hw

    def check_logs_agree(self) -> None:
        live = [n for n in self.nodes.values() if n.alive and n.client is not None
                and n.client.high_watermark is not None]
        views = {}
        for n in live:
            hw = n.client.high_watermark  # type: ignore[union-attr]
            views[n.id] = {b[0]: b for b in n.log.batches() if b[1] < hw}
        for (a, batches_a), (b, batches_b) in itertools.combinations(views.items(), 2):
            for base in batches_a.keys() & batches_b.keys():
                ba, bb = batches_a[base], batches_b[base]
                if ba != bb or self.nodes[a].log.batch_bytes(base) != self.nodes[b].log.batch_bytes(base):
                    self.fail(f"logs of {a} and {b} disagree at offset {base} below both high "
                              f"watermarks: {ba} vs {bb}")

    def leader(self) -> SimNode | None:
        best = None
        for n in self.nodes.values():
            if n.alive and n.client is not None and n.client.is_leader:
                if best is None or n.client.epoch > best.client.epoch:  # type: ignore[union-attr]
                    best = n
        return best

    def max_high_watermark(self) -> int:
        return max((n.client.high_watermark or 0 for n in self.nodes.values()
                    if n.alive and n.client is not None), default=0)

    def check_converged(self) -> None:
        """After a quiet period: every live node applied exactly the committed history, all of
        it (nothing committed was lost), up to the leader's high watermark."""
        leader = self.leader()
        if leader is None:
            self.fail("no leader after the cluster was healed and left alone")
        hw = leader.client.high_watermark  # type: ignore[union-attr]
        if hw is None or hw < self.max_committed:
            self.fail(f"leader {leader.id} has high watermark {hw} below the committed {self.max_committed}")
        committed_values = {o: v for o, (_, v) in self.committed.items() if v is not None and o < hw}
        for n in self.nodes.values():
            if not n.alive or n.machine is None:
                continue
            if n.machine.next_offset != hw:
                self.fail(f"node {n.id} applied up to {n.machine.next_offset}, the leader's high "
                          f"watermark is {hw}")
            if n.machine.values != committed_values:
                missing = sorted(committed_values.keys() - n.machine.values.keys())[:5]
                wrong = sorted(o for o in committed_values.keys() & n.machine.values.keys()
                               if committed_values[o] != n.machine.values[o])[:5]
                extra = sorted(n.machine.values.keys() - committed_values.keys())[:5]
                self.fail(f"node {n.id} state differs from the committed history: missing {missing}, "
                          f"wrong {wrong}, extra {extra}")
        self.check_logs_agree()


# -- random fault scenarios ------------------------------------------------------------------
STABLE_MS = 15_000


@dataclass
class ScenarioReport:
    seed: int
    faults: list[str] = field(default_factory=list)
    committed: int = 0
    events: int = 0
    snapshot_loads: int = 0
    leader_epochs: int = 0
    virtual_ms: int = 0


def run_random_scenario(seed: int, *, phases: int = 4, voters: int | None = None) -> ScenarioReport:
    """Faults chosen by `seed`, each followed by a repair and a stable period in which commits
    must advance; ends with everything healed and every node converged."""
    rng = random.Random(seed * 7919 + 1)
    network = NetworkConfig(
        max_delay_ms=rng.choice([3, 10, 40]),
        drop_probability=rng.choice([0.0, 0.0, 0.01, 0.05]),
        duplicate_probability=rng.choice([0.0, 0.01, 0.05]))
    cluster = Cluster(seed, voters=voters or rng.choice([3, 3, 5]),
                      observers=rng.choice([0, 1]), network=network)
    report = ScenarioReport(seed)
    cluster.start()
    cluster.run_for(STABLE_MS)
    _require_progress(cluster, 0, "the first election")
    voter_ids = [n for n, node in cluster.nodes.items() if node.voter]
    for _ in range(phases):
        leader = cluster.leader()
        victim = leader.id if leader is not None and rng.random() < 0.6 else rng.choice(voter_ids)
        fault = rng.choice(["crash", "crash-lose", "partition", "partition-minority",
                            "resign", "shutdown", "power-cut-all", "lossy"])
        report.faults.append(f"{fault}:{victim}")
        down = rng.randint(200, 6000)
        if fault in ("crash", "crash-lose"):
            cluster.crash(victim, lose_unflushed=fault == "crash-lose")
            cluster.run_for(down)
            cluster.restart(victim)
        elif fault == "partition":
            cluster.partition({victim})
            cluster.run_for(down)
            cluster.heal()
        elif fault == "partition-minority":
            minority = set(rng.sample(voter_ids, (len(voter_ids) - 1) // 2))
            cluster.partition(minority)
            cluster.run_for(down)
            cluster.heal()
        elif fault == "resign" and leader is not None and leader.client is not None:
            leader.client.resign(leader.client.epoch)
            cluster.run_for(down)
        elif fault == "shutdown" and leader is not None and leader.client is not None:
            leader.client.begin_shutdown(5000, cluster.now)
            cluster.step(leader)
            cluster.run_for(down)
            cluster.crash(leader.id, lose_unflushed=False)
            cluster.restart(leader.id)
        elif fault == "power-cut-all":
            for n in list(cluster.nodes):
                cluster.crash(n, lose_unflushed=True)
            cluster.run_for(down)
            for n in list(cluster.nodes):
                cluster.restart(n)
        elif fault == "lossy":
            saved = cluster.network
            cluster.network = NetworkConfig(max_delay_ms=80, drop_probability=0.2,
                                            duplicate_probability=0.1)
            cluster.run_for(down)
            cluster.network = saved
        mark = cluster.max_committed
        cluster.run_for(STABLE_MS)
        _require_progress(cluster, mark, f"repairing {report.faults[-1]}")
        cluster.check_logs_agree()
    cluster.heal()
    cluster.network = NetworkConfig(max_delay_ms=network.max_delay_ms)
    for n in list(cluster.nodes):
        cluster.restart(n)
    cluster.appends = False
    cluster.run_for(STABLE_MS)
    cluster.check_converged()
    report.committed = cluster.max_committed
    report.events = cluster.events_run
    report.snapshot_loads = sum(n.machine.snapshots_loaded for n in cluster.nodes.values()
                                if n.machine is not None)
    report.leader_epochs = len(cluster.leaders)
    report.virtual_ms = cluster.now
    return report


def _require_progress(cluster: Cluster, mark: int, what: str) -> None:
    if cluster.max_committed <= mark:
        states = {n.id: (repr(n.client.quorum.state) if n.client else "down")
                  for n in cluster.nodes.values()}
        cluster.fail(f"no commit during {STABLE_MS} ms after {what} with a healthy majority: {states}")


# -- Byzantine input ---------------------------------------------------------------------------
ADVERSARY = "adversary"  # the token of a forged request: its answers go nowhere
INT32_MAX = 2**31 - 1
NON_VOTER_IDS = (99, 1000, -1, -2, INT32_MAX)


class Adversary:
    """Forges Raft requests to the nodes (see the module docstring).

    `forge()` picks a live node and builds one request as a real peer would have built it, then
    lies in it: the sender's id, the leader it names, the epoch, the offsets. A quarter of the
    requests also get one numeric field replaced by an edge value. Every request goes through the
    wire codec, so what reaches a node is what could cross a socket.
    """

    FIELD_EDGES = (-1, 0, 1, 2, INT32_MAX - 1, INT32_MAX, -(2**31))

    def __init__(self, cluster: Cluster, rng: random.Random, *, mean_gap_ms: int = 20) -> None:
        self.cluster = cluster
        self.rng = rng
        self.mean_gap_ms = mean_gap_ms
        self.active = True
        self.sent: dict[str, int] = {}
        self.withheld = 0  # forged acknowledgements kept from their target (out of the model)

    def next_gap_ms(self) -> int:
        return max(1, int(self.rng.expovariate(1 / self.mean_gap_ms)))

    def _epoch(self, around: int) -> int:
        rng = self.rng
        return rng.choice([around, around, around + 1, around + 1, around + 2, max(0, around - 1),
                           around + rng.randint(3, 1000), INT32_MAX - 2, INT32_MAX - 1, INT32_MAX])

    def _id(self, target: int, voters: list[int]) -> int:
        rng = self.rng
        pool = [*voters, target, *NON_VOTER_IDS]
        return rng.choice(pool)

    def forge(self) -> tuple[int | None, InboundRequest | None]:
        cluster, rng = self.cluster, self.rng
        live = [n for n in cluster.nodes.values() if n.alive and n.client is not None]
        if not live:
            return None, None
        target = rng.choice(live)
        client = target.client
        assert client is not None
        voters = sorted(v for v, n in cluster.nodes.items() if n.voter)
        epoch = self._epoch(client.epoch)
        kind = rng.choice(["vote", "pre-vote", "begin", "end", "fetch", "fetch", "snapshot"])
        end = client.log.end_offset
        last = OffsetAndEpoch(rng.choice([0, end, end + rng.randint(1, 50), max(0, end - 3)]),
                              rng.choice([0, client.log.last_fetched_epoch(), epoch - 1, epoch]))
        cluster_id = rng.choice([CLUSTER_ID, CLUSTER_ID, None])
        if kind in ("vote", "pre-vote"):
            api_key = ApiKey.VOTE
            body = ru.vote_request(cluster_id, epoch, self._id(target.id, voters), None,
                                   rng.choice([target.id, -1, target.id]), None,
                                   OffsetAndEpoch(max(0, last.offset), max(0, min(last.epoch, epoch - (kind == "vote")))),
                                   kind == "pre-vote")
        elif kind == "begin":
            api_key = ApiKey.BEGIN_QUORUM_EPOCH
            body = ru.begin_quorum_epoch_request(cluster_id, epoch, self._id(target.id, voters),
                                                 rng.choice([target.id, -1]), None,
                                                 rng.choice([{}, {"CONTROLLER": ("evil", 6666)}]))
        elif kind == "end":
            api_key = ApiKey.END_QUORUM_EPOCH
            others = [v for v in voters if v != target.id]
            preferred = rng.sample([*voters, 99], rng.randint(0, len(voters)))
            leader = rng.choice([client.quorum.leader_id or rng.choice(voters), *others, target.id, 99])
            body = ru.end_quorum_epoch_request(cluster_id, epoch, leader, preferred, {})
        elif kind == "fetch":
            api_key = ApiKey.FETCH
            replica = self._fetch_replica(target, voters)
            offset, fetched_epoch = self._fetch_position(target, replica, last)
            body = ru.fetch_request(cluster_id, replica, None, rng.choice([client.epoch, epoch]),
                                    offset, fetched_epoch, rng.choice([0, 0, 50, 500]), 2048)
        else:
            api_key = ApiKey.FETCH_SNAPSHOT
            latest = client.log.latest_snapshot_id() or OffsetAndEpoch(rng.randint(0, 100), 1)
            body = ru.fetch_snapshot_request(cluster_id, self._fetch_replica(target, voters), None,
                                             rng.choice([client.epoch, epoch]), latest,
                                             rng.choice([0, 10, -1, 1 << 30]), rng.choice([1024, 0, 1]))
        if rng.random() < 0.25:
            self._mutate(body)
        version = ru.RAFT_API_VERSIONS[api_key]
        try:
            frame = encode_request(api_key, version, 1, "forger", body)
        except Exception:  # noqa: BLE001 - a mutation the codec cannot carry never reaches a socket
            return None, None
        _, body = decode_request(memoryview(frame)[4:])
        self.sent[kind] = self.sent.get(kind, 0) + 1
        return target.id, InboundRequest(api_key, version, body, 1, token=ADVERSARY)

    def _fetch_replica(self, target: SimNode, voters: list[int]) -> int:
        """The leader's own id, a non-voter or observer id, or a voter's name."""
        return self.rng.choice([target.id, *NON_VOTER_IDS, *voters])

    def forges_acknowledgement(self, target: SimNode, request: InboundRequest) -> bool:
        """A forged Fetch that, handled by `target` now, would count as a voter's acknowledgement
        of more than that voter has (out of the model, see the module docstring): in the name
        of a voter other than the target, to a leader of the epoch it names, at an offset past the
        end offset the leader knows for that voter. The leader learns that only from the voter's
        own fetches and from in-model forgeries, which claim no more, so it is at most what the
        voter has. `_fetch_position` shapes Fetches this way when forging; this is checked again at
        delivery because a mutation can rewrite the replica id or the offset, and the target can
        become a leader (or a leader of a later epoch) while the request is in flight."""
        client = target.client
        if request.api_key != ApiKey.FETCH or client is None:
            return False
        state = client.quorum.state
        if not isinstance(state, LeaderState):
            return False
        body = request.body
        partition = ru.fetch_partition(body)
        replica = ru.fetch_replica_id(body)
        if partition is None or replica == target.id or partition.current_leader_epoch != state.epoch:
            return False
        voter = state.voters.voter(replica)
        if voter is None or not voter.matches(replica, ru.optional_directory(partition.replica_directory_id)):
            return False  # an observer's fetch: never counted toward the high watermark
        known = state.voter_states[replica].end_offset or 0
        if partition.fetch_offset <= known:
            return False
        self.withheld += 1
        return True

    def _fetch_position(self, target: SimNode, replica: int, last: OffsetAndEpoch) -> tuple[int, int]:
        """Anything for made-up ids; in a voter's name, no more than the leader already knows
        that voter has (claiming more would forge its acknowledgement: out of the model)."""
        client = target.client
        assert client is not None
        state = client.quorum.state
        if replica != target.id and isinstance(state, LeaderState) and replica in state.voter_states:
            known = state.voter_states[replica].end_offset or 0
            offset = self.rng.randint(0, known)
            # the epoch of the record before that offset, as the voter would have sent it
            epoch = 0
            for _base, last_offset, batch_epoch in client.log.batches():
                if last_offset < offset:
                    epoch = batch_epoch
            if offset < client.log.start_offset:
                epoch = self.rng.randint(0, client.epoch)
            return offset, epoch
        return max(0, last.offset), max(0, last.epoch)

    def _mutate(self, body: Any) -> None:
        """Replace one int field, anywhere in the message, with an edge value."""
        holders: list[tuple[Any, str]] = []

        def walk(obj: Any, depth: int) -> None:
            if depth > 4 or not hasattr(obj, "__slots__"):
                return
            for name in obj.__slots__:
                value = getattr(obj, name, None)
                if isinstance(value, bool):
                    continue
                if isinstance(value, int):
                    holders.append((obj, name))
                elif isinstance(value, list):
                    for item in value:
                        walk(item, depth + 1)
                else:
                    walk(value, depth + 1)

        walk(body, 0)
        if holders:
            obj, name = self.rng.choice(holders)
            setattr(obj, name, self.rng.choice(self.FIELD_EDGES))


@dataclass
class ByzantineReport:
    seed: int
    forged: dict[str, int] = field(default_factory=dict)
    answered: int = 0
    withheld: int = 0  # forged acknowledgements kept from their target (out of the model)
    peer_faults: int = 0
    committed: int = 0
    leader_epochs: int = 0
    faults: list[str] = field(default_factory=list)


def run_byzantine_scenario(seed: int, *, phases: int = 3) -> ByzantineReport:
    """Forged requests against a cluster, with honest faults (crashes, partitions, resignations).

    Progress is required where the model says it must hold: with a leader in lease the cluster
    keeps committing while the adversary forges at full rate (a healthy quorum cannot be moved);
    after each repair it must commit once left alone. While no leader is in lease, a fast enough
    forger can keep an unauthenticated quorum from electing one (each forged Vote or
    BeginQuorumEpoch looks like an election to its receiver), so those windows check safety only.
    At the end the forger stops and every node must converge.
    """
    rng = random.Random(seed * 104729 + 7)
    cluster = Cluster(seed, voters=rng.choice([3, 3, 5]), observers=rng.choice([0, 1]),
                      network=NetworkConfig(max_delay_ms=rng.choice([3, 10])))
    cluster.byzantine = True
    adversary = cluster.adversary = Adversary(cluster, random.Random(seed ^ 0x5EED),
                                              mean_gap_ms=rng.choice([5, 20, 50]))
    report = ByzantineReport(seed)

    def forge(on: bool) -> None:
        if on and not adversary.active:
            cluster._schedule(cluster.now + 1, "forge", 0)
        adversary.active = on

    cluster.start()
    adversary.active = False
    forge(True)
    cluster.run_for(STABLE_MS // 3)  # the first election under forgeries: safety only
    forge(False)
    mark = cluster.max_committed
    cluster.run_for(STABLE_MS)
    _require_progress(cluster, mark, "the first election once left alone")
    voter_ids = [n for n, node in cluster.nodes.items() if node.voter]
    for _ in range(phases):
        # a leader in lease holds against anything forged
        leader = cluster.leader()
        forge(True)
        mark = cluster.max_committed
        cluster.run_for(STABLE_MS)
        _require_progress(cluster, mark, "forgeries against a leader in lease")
        if leader is not None and leader.client is not None and cluster.leader() is not leader:
            cluster.fail(f"forged requests moved leadership away from {leader.id}")
        # an honest fault while forging, then left alone
        leader = cluster.leader()
        victim = leader.id if leader is not None and rng.random() < 0.6 else rng.choice(voter_ids)
        fault = rng.choice(["crash", "crash-lose", "partition", "resign", "shutdown"])
        report.faults.append(f"{fault}:{victim}")
        down = rng.randint(200, 4000)
        if fault in ("crash", "crash-lose"):
            cluster.crash(victim, lose_unflushed=fault == "crash-lose")
            cluster.run_for(down)
            cluster.restart(victim)
        elif fault == "partition":
            cluster.partition({victim})
            cluster.run_for(down)
            cluster.heal()
        elif fault == "resign" and leader is not None and leader.client is not None:
            leader.client.resign(leader.client.epoch)
            cluster.run_for(down)
        elif fault == "shutdown" and leader is not None and leader.client is not None:
            leader.client.begin_shutdown(5000, cluster.now)
            cluster.step(leader)
            cluster.run_for(down)
            cluster.crash(leader.id, lose_unflushed=False)
            cluster.restart(leader.id)
        cluster.run_for(STABLE_MS // 5)
        forge(False)
        mark = cluster.max_committed
        cluster.run_for(STABLE_MS)
        _require_progress(cluster, mark, f"repairing {report.faults[-1]}, left alone")
        cluster.check_logs_agree()
    cluster.heal()
    for n in list(cluster.nodes):
        cluster.restart(n)
    cluster.appends = False
    cluster.run_for(STABLE_MS)
    cluster.check_converged()
    report.forged = dict(adversary.sent)
    report.answered = cluster.adversary_answers
    report.withheld = adversary.withheld
    report.peer_faults = cluster.peer_faults
    report.committed = cluster.max_committed
    report.leader_epochs = len(cluster.leaders)
    return report
