"""Targeted adversarial frames for a live cluster's controller and broker listeners.

`ClusterFrames(seed, view, workload_topic).frame(listener, receiver)` returns a `Frame` (label,
bytes with size prefix, whether Kafka must answer it) for node `receiver`'s listener of kind
"controller" or "broker". Most frames are requests of the APIs peers send each other (Vote,
BeginQuorumEpoch, EndQuorumEpoch, Raft Fetch, FetchSnapshot, DescribeQuorum, BrokerRegistration,
BrokerHeartbeat, AllocateProducerIds, AlterPartition, Envelope; to the broker listener
WriteTxnMarkers, a follower's Fetch and OffsetForLeaderEpoch), built from what `view`
(tests/fuzz/cluster_view.py) says the
cluster holds, and lying in it: voter and broker ids spoofed, non-voters, the receiver's own id,
epochs around the current one and at the int32/int64 edges, stale and future broker epochs,
incarnation ids of other brokers, AlterPartition for partitions the sender does not lead with
made-up ISRs, epochs and leader recovery states, Envelopes around random inner requests with
random principals and client addresses, markers for random producers and coordinator epochs.
The rest: the same requests with their bytes mutated (frames.py's mutators), schema-random
requests of these APIs (frames.py's value generator), frames cut in half (the size prefix
promises more than comes) and garbage.

What the frames never do, because Kafka itself would obey them and the test's checks assume a
cluster that keeps serving its clients (they are commands, not input):
- a follower's Fetch never names a replica of a partition at an offset its leader holds (the
  leader would count it as replicated there: `replica_fetch`), and a Raft Fetch, which a broker
  listener takes for a follower's, never names the workload's topic;
- a registration under a broker's real incarnation id changes nothing of its listeners (an
  "amend" that points a broker's clients and followers elsewhere until it restarts);
- a heartbeat at a broker's real epoch never names its real log directories offline;
- an Envelope's inner request never names the workload's topic (deleting it, or its data
  through retention configs, is an admin's right), and the name pool (frames.NAMES) lacks it;
- a WriteTxnMarkers for a live producer never carries an epoch the leader would take (a newer
  one with a coordinator epoch not older than the producer's): Kafka writes such a marker for a
  producer in no transaction and resets its sequences, and an idempotent producer then bumps its
  epoch and may write a record again whose first write it never saw acknowledged (KIP-360's
  window; it duplicated two records in one run). Frames whose bytes get mutated never name a
  live producer at all.
Forgeries at real epochs that Kafka obeys but a node recovers from on its own (a heartbeat asking
for fencing or a controlled shutdown, an ISR change, a marker at a producer's own epoch) stay in.

Everything comes from one `random.Random(seed)`: with the same view, the same seed gives the
same frames. Concurrency: one thread.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pybroker.protocol.api_keys import REQUEST_CLASSES, ApiKey
from pybroker.protocol.api_message import ApiMessage, in_range
from pybroker.protocol.frame import encode_request
from pybroker.protocol.messages import (
    AllocateProducerIdsRequest,
    AlterPartitionRequest,
    BeginQuorumEpochRequest,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    DefaultPrincipalData,
    DescribeQuorumRequest,
    EndQuorumEpochRequest,
    EnvelopeRequest,
    FetchRequest,
    FetchSnapshotRequest,
    OffsetForLeaderEpochRequest,
    VoteRequest,
    WriteTxnMarkersRequest,
)
from pybroker.raft import raft_util as ru
from pybroker.server.api_versions import SUPPORTED
from pybroker.server.controller_apis import CONTROLLER_SUPPORTED
from pybroker.server.forwarding import ENVELOPED_APIS

from .cluster_view import BrokerFacts, ClusterView, PartitionFacts, ProducerFacts
from .frames import FrameFuzzer

INT32_MAX, INT32_MIN = 2**31 - 1, -(2**31)
INT64_MAX, INT64_MIN = 2**63 - 1, -(2**63)
INT16_MAX = 2**15 - 1
ZERO_UUID = bytes(16)
METADATA_TOPIC = ru.METADATA_TOPIC

# the APIs this fuzzer targets, and the versions it sends (the nodes' own ranges)
CLUSTER_APIS: dict[int, tuple[int, int]] = {
    k: CONTROLLER_SUPPORTED[k] for k in (
        ApiKey.VOTE, ApiKey.BEGIN_QUORUM_EPOCH, ApiKey.END_QUORUM_EPOCH, ApiKey.FETCH, ApiKey.FETCH_SNAPSHOT,
        ApiKey.DESCRIBE_QUORUM, ApiKey.BROKER_REGISTRATION, ApiKey.BROKER_HEARTBEAT,
        ApiKey.ALLOCATE_PRODUCER_IDS, ApiKey.ALTER_PARTITION, ApiKey.ENVELOPE)}
CLUSTER_APIS[ApiKey.WRITE_TXN_MARKERS] = (1, 2)


@dataclass(frozen=True)
class Generator:
    label: str
    key: int
    make: Callable[[int, int], Any]  # (version, receiving node) -> request body
    weight: int
    listeners: tuple[str, ...] = ("controller",)  # the listeners serving it
    versions: tuple[int, int] = (0, 0)

    def __post_init__(self) -> None:
        if self.versions == (0, 0):
            object.__setattr__(self, "versions", CLUSTER_APIS[self.key])


@dataclass(frozen=True)
class Frame:
    label: str  # the API's name, "+mutated" when its bytes were mutated, or "garbage"/"half-frame"
    data: bytes
    # a well-formed request of an API the receiving listener serves: Kafka answers it, whatever
    # it claims, so a node that closes the connection instead is wrong
    must_answer: bool = False


def mk(cls: type[ApiMessage], version: int, **values: Any) -> Any:
    """`cls(**values)` with only the fields `version` carries (the others cannot be encoded)."""
    names = {fs.name for fs in cls._FIELDS if in_range(fs.versions, version)}
    return cls(**{k: v for k, v in values.items() if k in names})


class ClusterFrames:
    def __init__(self, seed: int, view: ClusterView, workload_topic: str) -> None:
        self.rng = random.Random(seed)
        self.view = view
        self.workload_topic = workload_topic
        self.fuzz = FrameFuzzer(self.rng.getrandbits(64), CLUSTER_APIS)
        self.fuzz.rng = self.rng  # one stream for everything
        self.inner = FrameFuzzer(self.rng.getrandbits(64), {k: CONTROLLER_SUPPORTED[k] for k in ENVELOPED_APIS})
        self.inner.rng = self.rng
        self.correlation_id = 0
        self.mutating = False
        # label -> (api key, versions, generator, weight, listeners serving it); the Raft RPCs
        # and AlterPartition carry the most state, so they are drawn the most
        G = Generator
        self.generators: dict[str, Generator] = {g.label: g for g in (
            G("VOTE", ApiKey.VOTE, self.vote, 12),
            G("BEGIN_QUORUM_EPOCH", ApiKey.BEGIN_QUORUM_EPOCH, self.begin_quorum_epoch, 10),
            G("END_QUORUM_EPOCH", ApiKey.END_QUORUM_EPOCH, self.end_quorum_epoch, 10),
            G("FETCH", ApiKey.FETCH, self.raft_fetch, 12, ("controller", "broker")),
            G("FETCH_SNAPSHOT", ApiKey.FETCH_SNAPSHOT, self.fetch_snapshot, 4),
            G("DESCRIBE_QUORUM", ApiKey.DESCRIBE_QUORUM, self.describe_quorum, 2, ("controller", "broker")),
            G("BROKER_REGISTRATION", ApiKey.BROKER_REGISTRATION, self.broker_registration, 8),
            G("BROKER_HEARTBEAT", ApiKey.BROKER_HEARTBEAT, self.broker_heartbeat, 10),
            G("ALLOCATE_PRODUCER_IDS", ApiKey.ALLOCATE_PRODUCER_IDS, self.allocate_producer_ids, 2),
            G("ALTER_PARTITION", ApiKey.ALTER_PARTITION, self.alter_partition, 12),
            G("ENVELOPE", ApiKey.ENVELOPE, self.envelope, 10),
            G("WRITE_TXN_MARKERS", ApiKey.WRITE_TXN_MARKERS, self.write_txn_markers, 8, ("broker",)),
            G("FETCH(replica)", ApiKey.FETCH, self.replica_fetch, 8, ("broker",), versions=SUPPORTED[ApiKey.FETCH]),
            G("OFFSET_FOR_LEADER_EPOCH", ApiKey.OFFSET_FOR_LEADER_EPOCH, self.offset_for_leader_epoch, 3,
              ("broker",), versions=(3, SUPPORTED[ApiKey.OFFSET_FOR_LEADER_EPOCH][1])),
        )}

    # ------------------------------------------------------------------ frames

    def frame(self, listener: str, receiver: int) -> Frame:
        """One frame for `receiver`'s listener of kind "controller" or "broker"."""
        r = self.rng.random()
        if r < 0.04:
            return Frame("garbage", self.garbage())
        g = self.pick(listener)
        if r < 0.14:
            try:
                version = self.rng.randint(*g.versions)
                body = self.fuzz._message(REQUEST_CLASSES[g.key], version)
                data = self.encode(g.key, version, body)
            except Exception:  # a value this version cannot carry
                return Frame("garbage", self.garbage())
            return Frame(f"{g.label}+random", data)
        self.mutating = r < 0.4  # a frame whose bytes will be cut or mutated
        data = self.targeted_frame(g, receiver)
        self.mutating = False
        if r < 0.2:
            cut = self.rng.randrange(4, max(5, len(data)))
            return Frame("half-frame", data[:cut])
        if r < 0.4:
            buf = bytearray(data)
            for _ in range(self.rng.randint(1, 2)):
                self.fuzz._mutate_frame(buf)
            return Frame(f"{g.label}+mutated", bytes(buf))
        return Frame(g.label, data, must_answer=listener in g.listeners)

    def pick(self, listener: str) -> Generator:
        """Mostly an API this listener serves; sometimes one it does not (closed, as Kafka does)."""
        gens = list(self.generators.values())
        if self.rng.random() < 0.9:
            gens = [g for g in gens if listener in g.listeners]
        return self.rng.choices(gens, [g.weight for g in gens])[0]

    def targeted_frame(self, g: Generator, receiver: int) -> bytes:
        for _ in range(20):
            version = self.rng.randint(*g.versions)
            try:
                return self.encode(g.key, version, g.make(version, receiver))
            except Exception:  # a made-up value this version cannot carry: draw again
                continue
        return self.encode(ApiKey.DESCRIBE_QUORUM, 0, ru.describe_quorum_request())

    def encode(self, key: int, version: int, body: Any) -> bytes:
        self.correlation_id += 1
        client_id = self.rng.choice(["fuzz", "raft-client-2", None, "", "x" * 300])
        return encode_request(key, version, self.correlation_id, client_id, body)

    def garbage(self) -> bytes:
        r = self.rng.random()
        junk = bytes(self.rng.getrandbits(8) for _ in range(self.rng.choice([1, 3, 4, 7, 12, 40, 200])))
        if r < 0.4:  # a plausible size prefix over junk
            return struct.pack(">i", len(junk)) + junk
        if r < 0.6:  # an HTTP request on a Kafka listener
            return b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
        return junk

    # ------------------------------------------------------------------ values

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def epoch(self, current: int | None = None) -> int:
        cur = self.view.quorum_epoch if current is None else current
        r = self.rng.random()
        if r < 0.55:
            return max(INT32_MIN, min(INT32_MAX, cur + self.rng.choice([-2, -1, 0, 0, 1, 1, 2, 3])))
        if r < 0.85:
            return self.rng.choice([INT32_MAX, INT32_MAX - 1, cur + ru.MAX_EPOCH_JUMP,
                                    cur + ru.MAX_EPOCH_JUMP + 1, 0, -1, INT32_MIN])
        return self.rng.randint(INT32_MIN, INT32_MAX)

    def int64_around(self, value: int) -> int:
        r = self.rng.random()
        if r < 0.6:
            return max(INT64_MIN, min(INT64_MAX, value + self.rng.choice([-1, 0, 0, 1, 2, -1000, 1000])))
        return self.rng.choice([0, -1, INT64_MAX, INT64_MIN, 1 << 40, INT32_MAX])

    def voter(self, receiver: int | None = None) -> int:
        r = self.rng.random()
        voters = list(self.view.voters)
        if r < 0.45:
            return self.rng.choice(voters)
        if r < 0.6 and receiver is not None:
            return receiver
        if r < 0.75 and self.view.quorum_leader >= 0:
            return self.view.quorum_leader
        return self.rng.choice([-1, -2, 0, max(voters) + 1, 99, 1000, INT32_MAX, INT32_MIN])

    def broker_id(self) -> int:
        ids = sorted(self.view.brokers) or list(self.view.voters)
        if self.chance(0.7):
            return self.rng.choice(ids)
        return self.rng.choice([-1, 0, max(ids) + 1, 99, INT32_MAX, INT32_MIN])

    def broker(self, broker_id: int) -> BrokerFacts | None:
        return self.view.brokers.get(broker_id)

    def broker_epoch(self, broker_id: int) -> int:
        b = self.broker(broker_id)
        others = [x.epoch for x in self.view.brokers.values()]
        r = self.rng.random()
        if b is not None and r < 0.35:
            return b.epoch
        if b is not None and r < 0.6:
            return self.int64_around(b.epoch)
        if others and r < 0.75:
            return self.rng.choice(others)
        return self.rng.choice([-1, 0, 1, self.view.high_watermark, self.view.high_watermark + 1000, INT64_MAX,
                                INT64_MIN])

    def cluster_id(self, nullable: bool = True) -> str | None:
        r = self.rng.random()
        if r < 0.85:
            return self.view.cluster_id
        return self.rng.choice([None if nullable else "", "", "x", self.view.cluster_id[::-1], "é" * 30])

    def directory(self, node: int | None = None) -> bytes:
        r = self.rng.random()
        dirs = list(self.view.directory_ids.values())
        if node is not None and node in self.view.directory_ids and r < 0.5:
            return self.view.directory_ids[node]
        if dirs and r < 0.7:
            return self.rng.choice(dirs)
        return self.rng.choice([ZERO_UUID, bytes(range(16)), bytes([0xFF] * 16), self.rng.randbytes(16)])

    def endpoints(self, cls: Any) -> list[Any]:
        if self.chance(0.3):
            return []
        return [cls.LeaderEndpoint(name=self.rng.choice(["CONTROLLER", "PLAINTEXT", "", "X" * 50]),
                                   host=self.rng.choice(["127.0.0.1", "10.255.255.1", "", "evil.invalid"]),
                                   port=self.rng.choice([0, 1, 9093, 65535]))
                for _ in range(self.rng.choice([1, 1, 2, 5]))]

    def partition(self) -> PartitionFacts | None:
        parts = self.view.partitions
        if not parts:
            return None
        mine = [p for p in parts if p.topic == self.workload_topic]
        return self.rng.choice(mine if mine and self.chance(0.6) else parts)

    def metadata_partitions(self, make: Callable[[int], Any]) -> list[Any]:
        """The one metadata partition, mostly; sometimes none, two, or another index."""
        r = self.rng.random()
        if r < 0.85:
            return [make(0)]
        return self.rng.choice([[], [make(0), make(0)], [make(1)], [make(-1)]])

    def metadata_topic(self) -> str:
        # never the workload's topic: a Raft Fetch reaching a broker listener is a follower's fetch
        # of the topic it names (see replica_fetch)
        return METADATA_TOPIC if self.chance(0.9) else self.rng.choice(["", "__cluster_metadatA", "__consumer_offsets"])

    # ------------------------------------------------------------------ the Raft RPCs

    def vote(self, version: int, receiver: int) -> Any:
        hw = self.view.high_watermark
        candidate = self.voter(receiver)
        epoch = self.epoch()

        def part(index: int) -> Any:
            return mk(VoteRequest.PartitionData, version, partition_index=index, replica_epoch=epoch,
                      replica_id=candidate, replica_directory_id=self.directory(candidate),
                      voter_directory_id=self.directory(receiver),
                      last_offset_epoch=self.epoch(epoch - 1 if self.chance(0.5) else None),
                      last_offset=self.int64_around(hw), pre_vote=self.chance(0.5))

        return mk(VoteRequest, version, cluster_id=self.cluster_id(), voter_id=self.voter(receiver),
                  topics=[VoteRequest.TopicData(topic_name=self.metadata_topic(),
                                                partitions=self.metadata_partitions(part))])

    def begin_quorum_epoch(self, version: int, receiver: int) -> Any:
        leader, epoch = self.voter(receiver), self.epoch()

        def part(index: int) -> Any:
            return mk(BeginQuorumEpochRequest.PartitionData, version, partition_index=index,
                      voter_directory_id=self.directory(receiver), leader_id=leader, leader_epoch=epoch)

        return mk(BeginQuorumEpochRequest, version, cluster_id=self.cluster_id(), voter_id=self.voter(receiver),
                  topics=[BeginQuorumEpochRequest.TopicData(topic_name=self.metadata_topic(),
                                                            partitions=self.metadata_partitions(part))],
                  leader_endpoints=self.endpoints(BeginQuorumEpochRequest))

    def end_quorum_epoch(self, version: int, receiver: int) -> Any:
        # mostly the real leader of the real epoch: the claim a follower must not act on alone
        leader = self.view.quorum_leader if self.chance(0.6) and self.view.quorum_leader >= 0 else self.voter(receiver)
        epoch = self.view.quorum_epoch if self.chance(0.5) else self.epoch()
        successors = [self.voter(receiver) for _ in range(self.rng.choice([0, 1, 2, 3, 40]))]

        def part(index: int) -> Any:
            return mk(EndQuorumEpochRequest.PartitionData, version, partition_index=index, leader_id=leader,
                      leader_epoch=epoch, preferred_successors=successors,
                      preferred_candidates=[EndQuorumEpochRequest.ReplicaInfo(
                          candidate_id=c, candidate_directory_id=self.directory(c)) for c in successors])

        return mk(EndQuorumEpochRequest, version, cluster_id=self.cluster_id(),
                  topics=[EndQuorumEpochRequest.TopicData(topic_name=self.metadata_topic(),
                                                          partitions=self.metadata_partitions(part))],
                  leader_endpoints=self.endpoints(EndQuorumEpochRequest))

    def raft_fetch(self, version: int, receiver: int) -> Any:
        hw = self.view.high_watermark
        replica = self.voter(receiver) if self.chance(0.8) else self.broker_id()
        epoch = self.epoch()
        max_bytes = self.rng.choice([0, 1, 1 << 20, INT32_MAX, -1])

        def part(index: int) -> Any:
            return mk(FetchRequest.FetchPartition, version, partition=index, current_leader_epoch=epoch,
                      fetch_offset=self.int64_around(hw),
                      last_fetched_epoch=self.epoch(epoch if self.chance(0.5) else None),
                      log_start_offset=self.rng.choice([-1, 0, hw]), partition_max_bytes=max_bytes,
                      replica_directory_id=self.directory(replica))

        topic_id = ru.METADATA_TOPIC_ID if self.chance(0.85) else self.rng.choice([ZERO_UUID, bytes(range(16))])
        return mk(FetchRequest, version, cluster_id=self.cluster_id(), replica_id=replica,
                  replica_state=FetchRequest.ReplicaState(replica_id=replica,
                                                          replica_epoch=self.rng.choice([-1, 0, INT64_MAX])),
                  max_wait_ms=self.rng.choice([0, 0, 10, 200, 500, 60_000, -1, INT32_MAX]),
                  min_bytes=self.rng.choice([0, 1, INT32_MAX]), max_bytes=max_bytes, isolation_level=0,
                  session_id=0, session_epoch=-1,
                  topics=[FetchRequest.FetchTopic(topic=self.metadata_topic(), topic_id=topic_id,
                                                  partitions=self.metadata_partitions(part))],
                  forgotten_topics_data=[], rack_id="")

    def fetch_snapshot(self, version: int, receiver: int) -> Any:
        snaps = self.view.snapshot_ids or [(0, 0)]
        end, ep = self.rng.choice(snaps)

        def part(index: int) -> Any:
            return mk(FetchSnapshotRequest.PartitionSnapshot, version, partition=index,
                      current_leader_epoch=self.epoch(),
                      snapshot_id=FetchSnapshotRequest.SnapshotId(end_offset=self.int64_around(end),
                                                                  epoch=self.epoch(ep)),
                      position=self.rng.choice([0, 1, -1, 100, INT64_MAX]),
                      replica_directory_id=self.directory(receiver))

        return mk(FetchSnapshotRequest, version, cluster_id=self.cluster_id(), replica_id=self.voter(receiver),
                  max_bytes=self.rng.choice([0, 1, -1, 1 << 20, INT32_MAX]),
                  topics=[FetchSnapshotRequest.TopicSnapshot(name=self.metadata_topic(),
                                                             partitions=self.metadata_partitions(part))])

    def describe_quorum(self, version: int, receiver: int) -> Any:
        def part(index: int) -> Any:
            return DescribeQuorumRequest.PartitionData(partition_index=index)

        return DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
            topic_name=self.metadata_topic(), partitions=self.metadata_partitions(part))
            for _ in range(self.rng.choice([1, 1, 1, 0, 2]))])

    # ------------------------------------------------------------------ replication (broker listener)

    def replica_fetch(self, version: int, receiver: int) -> Any:
        """A follower's Fetch of the cluster's partitions, from an id that is no replica of them
        (the leader's own, a made-up one, a consumer's -1), or from a replica at an offset outside
        the leader's log. Never a replica's id at an offset the leader holds: the leader takes that
        as the follower's log end and may advance the high watermark on it (a command)."""
        ids = sorted(self.view.brokers) or list(self.view.voters)
        # a frame to be mutated is a consumer's: mutated offsets could fall inside the log
        replica = -1 if self.mutating else self.rng.choice([*ids, -1, -1, 99, INT32_MAX, -2])

        def part() -> Any:
            p = self.partition()
            if p is None:
                return None
            if replica in p.replicas and replica != p.leader:
                offset = self.rng.choice([-1, -2, 1 << 50, INT64_MAX, INT64_MIN])
            else:
                offset = self.rng.choice([0, 1, 100, 1 << 40, -1, INT64_MAX])
            return p, mk(FetchRequest.FetchPartition, version,
                         partition=p.partition if self.chance(0.9) else self.rng.choice([-1, 99]),
                         current_leader_epoch=self.epoch(p.leader_epoch), fetch_offset=offset,
                         last_fetched_epoch=self.rng.choice([-1, p.leader_epoch, p.leader_epoch - 1,
                                                             p.leader_epoch + 1, INT32_MAX]),
                         log_start_offset=self.rng.choice([-1, 0, 5, INT64_MAX]),
                         partition_max_bytes=self.rng.choice([0, 1, 1 << 20, INT32_MAX, -1]),
                         replica_directory_id=self.directory())

        topics = []
        for _ in range(self.rng.choice([1, 1, 2])):
            parts = [x for x in (part() for _ in range(self.rng.choice([1, 1, 2, 3]))) if x is not None]
            if not parts:
                continue
            pf = parts[0][0]
            topics.append(mk(FetchRequest.FetchTopic, version, topic=pf.topic, topic_id=pf.topic_id,
                             partitions=[fp for _, fp in parts]))
        session = self.chance(0.2)
        return mk(FetchRequest, version, cluster_id=self.cluster_id(), replica_id=replica,
                  replica_state=FetchRequest.ReplicaState(replica_id=replica, replica_epoch=self.broker_epoch(replica)),
                  max_wait_ms=self.rng.choice([0, 0, 10, 500, 60_000, -1]), min_bytes=self.rng.choice([0, 1, INT32_MAX]),
                  max_bytes=self.rng.choice([0, 1 << 20, INT32_MAX, -1]), isolation_level=self.rng.choice([0, 1, 2, -1]),
                  session_id=self.rng.choice([0, 1, INT32_MAX, -1]) if session else 0,
                  session_epoch=self.rng.choice([0, 1, -1, INT32_MAX]) if session else -1,
                  topics=topics, forgotten_topics_data=[], rack_id=self.rng.choice(["", "r1"]))

    def offset_for_leader_epoch(self, version: int, receiver: int) -> Any:
        ids = sorted(self.view.brokers) or list(self.view.voters)
        parts = [p for p in (self.partition() for _ in range(self.rng.choice([1, 2, 3]))) if p is not None]
        return mk(OffsetForLeaderEpochRequest, version, replica_id=self.rng.choice([*ids, -1, -2, 99]),
                  topics=[OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic=p.topic, partitions=[
                      OffsetForLeaderEpochRequest.OffsetForLeaderPartition(
                          partition=p.partition, current_leader_epoch=self.epoch(p.leader_epoch),
                          leader_epoch=self.epoch(p.leader_epoch))]) for p in parts])

    # ------------------------------------------------------------------ broker membership

    def broker_registration(self, version: int, receiver: int) -> Any:
        bid = self.broker_id()
        real = self.broker(bid)
        others = [b for b in self.view.brokers.values() if b.broker_id != bid]
        r = self.rng.random()
        if real is not None and r < 0.3:
            incarnation = real.incarnation_id  # an amend: it must not move the broker's listeners
        elif others and r < 0.55:
            incarnation = self.rng.choice(others).incarnation_id
        else:
            incarnation = self.rng.choice([ZERO_UUID, self.rng.randbytes(16)])
        amend = real is not None and incarnation == real.incarnation_id
        template = real or (others[0] if others else None)
        if amend or (template is not None and self.chance(0.5)):
            assert template is not None
            listeners = [BrokerRegistrationRequest.Listener(name=n, host=h, port=p, security_protocol=sp)
                         for n, h, p, sp in template.listeners]
        else:
            listeners = [BrokerRegistrationRequest.Listener(
                name=self.rng.choice(["PLAINTEXT", "CONTROLLER", "", "X"]),
                host=self.rng.choice(["127.0.0.1", "", "10.255.255.1"]), port=self.rng.choice([0, 1, 65535]),
                security_protocol=self.rng.choice([0, 1, 2, 3, -1, 99, INT16_MAX]))
                for _ in range(self.rng.choice([0, 1, 2, 3]))]
        features = [BrokerRegistrationRequest.Feature(name=n, min_supported_version=lo, max_supported_version=hi)
                    for n, lo, hi in (template.features if template else ())]
        if self.chance(0.4):
            features.append(BrokerRegistrationRequest.Feature(
                name=self.rng.choice(["metadata.version", "kraft.version", "group.version", "nope", ""]),
                min_supported_version=self.rng.choice([0, 1, -1, 30, INT16_MAX]),
                max_supported_version=self.rng.choice([0, 1, -1, 30, INT16_MAX])))
        log_dirs = list(real.log_dirs) if real is not None and self.chance(0.6) else \
            self.rng.choice([[], [ZERO_UUID], [self.rng.randbytes(16)], [bytes(range(16))] * 2])
        if amend:
            log_dirs = list(real.log_dirs) if real is not None else log_dirs
        return mk(BrokerRegistrationRequest, version, broker_id=bid,
                  cluster_id=self.cluster_id(nullable=False) or "", incarnation_id=incarnation,
                  listeners=listeners, features=features, rack=self.rng.choice([None, "", "r1", "r" * 300]),
                  is_migrating_zk_broker=self.chance(0.1), log_dirs=log_dirs,
                  previous_broker_epoch=self.broker_epoch(bid))

    def broker_heartbeat(self, version: int, receiver: int) -> Any:
        bid = self.broker_id()
        epoch = self.broker_epoch(bid)
        real = self.broker(bid)
        offline = self.rng.choice([[], [], [ZERO_UUID], [self.rng.randbytes(16)]])
        if real is not None and epoch != real.epoch and real.log_dirs and self.chance(0.3):
            offline = [self.rng.choice(real.log_dirs)]  # at a wrong epoch only (module docstring)
        return mk(BrokerHeartbeatRequest, version, broker_id=bid, broker_epoch=epoch,
                  current_metadata_offset=self.int64_around(self.view.high_watermark),
                  want_fence=self.chance(0.4), want_shut_down=self.chance(0.3), offline_log_dirs=offline)

    def allocate_producer_ids(self, version: int, receiver: int) -> Any:
        bid = self.broker_id()
        return AllocateProducerIdsRequest(broker_id=bid, broker_epoch=self.broker_epoch(bid))

    def alter_partition(self, version: int, receiver: int) -> Any:
        p = self.partition()
        if p is None:
            return mk(AlterPartitionRequest, version, broker_id=self.broker_id(), broker_epoch=-1, topics=[])
        r = self.rng.random()
        sender = p.leader if r < 0.5 else self.rng.choice([*p.replicas, self.broker_id()])
        ids = sorted(self.view.brokers) or list(self.view.voters)
        isr = self.made_up_isr(p, ids)

        def pdata(index: int) -> Any:
            return mk(AlterPartitionRequest.PartitionData, version, partition_index=index,
                      leader_epoch=p.leader_epoch if self.chance(0.4) else self.epoch(p.leader_epoch), new_isr=isr,
                      new_isr_with_epochs=[AlterPartitionRequest.BrokerState(
                          broker_id=b, broker_epoch=self.broker_epoch(b)) for b in isr],
                      leader_recovery_state=self.rng.choice([0, 0, 1, 2, -1, 127]),
                      partition_epoch=p.partition_epoch if self.chance(0.4) else self.epoch(p.partition_epoch))

        index = p.partition if self.chance(0.8) else self.rng.choice([-1, p.partition + 100, INT32_MAX])
        parts = [pdata(index) for _ in range(self.rng.choice([1, 1, 1, 2, 0]))]
        unknown = self.rng.random() < 0.1
        return mk(AlterPartitionRequest, version, broker_id=sender, broker_epoch=self.broker_epoch(sender),
                  topics=[AlterPartitionRequest.TopicData(
                      topic_name="nope" if unknown else p.topic,
                      topic_id=self.rng.randbytes(16) if unknown else p.topic_id, partitions=parts)])

    def made_up_isr(self, p: PartitionFacts, ids: list[int]) -> list[int]:
        r = self.rng.random()
        if r < 0.3:
            return list(p.isr)
        if r < 0.5:
            return [b for b in p.isr if self.chance(0.6)] or [p.leader]
        if r < 0.65:
            return list(p.replicas) + [self.rng.choice([*ids, 99])]
        if r < 0.75:
            return [p.leader, p.leader]
        if r < 0.85:
            return []
        return [self.rng.choice([*ids, -1, 99, INT32_MAX]) for _ in range(self.rng.randint(1, 4))]

    # ------------------------------------------------------------------ Envelope

    def principal(self) -> bytes | None:
        r = self.rng.random()
        if r < 0.5:
            kind, name = self.rng.choice([("User", "ANONYMOUS"), ("User", "admin"), ("", ""), ("Group", "g"),
                                          ("User", "x" * 2000), ("Us:er", "a:b")])
            return struct.pack(">h", 0) + DefaultPrincipalData(type=kind, name=name,
                                                               token_authenticated=self.chance(0.2)).encode(0)
        if r < 0.6:
            return None
        return self.rng.choice([b"", b"\x00", b"\x00\x00", b"\x00\x07" + b"\x00" * 10, b"\xff\xff",
                                struct.pack(">h", 0) + b"\x05abc", self.rng.randbytes(self.rng.choice([1, 5, 30]))])

    def client_address(self) -> bytes:
        return self.rng.choice([bytes([127, 0, 0, 1]), bytes([10, 0, 0, 9]), bytes(16), b"", b"\x01\x02\x03",
                                b"\x01" * 5, bytes(17), self.rng.randbytes(4)])

    def inner_request(self) -> bytes:
        """The inner request's bytes (no size prefix), as a forwarding broker would wrap them."""
        r = self.rng.random()
        if r < 0.6:
            data = self.inner.request()
        elif r < 0.7:
            data = self.targeted_frame(self.rng.choice(list(self.generators.values())), -1)  # not forwardable
        elif r < 0.8:
            data = self.inner.frame()  # mutated
        elif r < 0.9:
            data = self.encode(ApiKey.DESCRIBE_QUORUM, self.rng.randint(0, 2), ru.describe_quorum_request())
        else:
            return self.rng.choice([b"", b"\x00", self.rng.randbytes(self.rng.choice([3, 9, 40]))])
        inner = data[4:]
        if self.workload_topic.encode() in inner:
            return b""  # never an admin operation on the workload's topic (module docstring)
        return inner

    def envelope(self, version: int, receiver: int) -> Any:
        inner = self.inner_request()
        if self.chance(0.05):  # an envelope in an envelope
            nested = self.encode(ApiKey.ENVELOPE, 0, EnvelopeRequest(
                request_data=inner, request_principal=self.principal(), client_host_address=self.client_address()))
            inner = nested[4:]
        return EnvelopeRequest(request_data=inner, request_principal=self.principal(),
                               client_host_address=self.client_address())

    # ------------------------------------------------------------------ WriteTxnMarkers

    def write_txn_markers(self, version: int, receiver: int) -> Any:
        entries: dict[int, list[ProducerFacts]] = {}
        for prod in self.view.producers:
            entries.setdefault(prod.producer_id, []).append(prod)

        def marker() -> Any:
            topics = []
            where: set[tuple[str, int]] = set()
            for _ in range(self.rng.choice([1, 1, 2, 0])):
                p = self.partition()
                name, index = (p.topic, p.partition) if p is not None else (self.workload_topic, 0)
                if self.chance(0.15):
                    name = self.rng.choice(["__consumer_offsets", "__transaction_state", "nope", ""])
                if self.chance(0.15):
                    index = self.rng.choice([-1, 100, INT32_MAX])
                where.add((name, index))
                topics.append(WriteTxnMarkersRequest.WritableTxnMarkerTopic(name=name, partition_indexes=[index]))
            pid = self.rng.choice(list(entries)) if entries and not self.mutating and self.chance(0.5) else \
                self.rng.choice([-1, 0, 1, 1000, INT64_MAX, INT64_MIN, self.rng.randint(0, 1 << 40)])
            if pid in entries and self.mutating:
                pid = INT64_MAX - self.rng.randint(0, 1000)  # mutated bytes could bump a live epoch
            known = entries.get(pid)
            if known is not None:
                # never an epoch a leader would take as newer (module docstring): at most the
                # producer's own, or a newer one with a coordinator epoch older than any the
                # producer can have (>= -1), and only where its state is known to be
                pepoch = max(-(2**15), min(k.producer_epoch for k in known) + self.rng.choice([-1, 0, 0]))
                cepoch = max(k.coordinator_epoch for k in known) + self.rng.choice([0, 1])
                if where <= {(k.topic, k.partition) for k in known} and self.chance(0.3):
                    pepoch = min(INT16_MAX, pepoch + 2)
                    cepoch = self.rng.choice([-2, INT32_MIN])
            else:
                pepoch = self.rng.choice([-1, 0, 1, INT16_MAX, -(2**15)])
                cepoch = self.rng.choice([-1, 0, 1, INT32_MAX, INT32_MIN])
            return mk(WriteTxnMarkersRequest.WritableTxnMarker, version, producer_id=pid, producer_epoch=pepoch,
                      transaction_result=self.chance(0.5), topics=topics, coordinator_epoch=cepoch,
                      transaction_version=self.rng.choice([0, 1, 2, 2, -1, 127]))

        return WriteTxnMarkersRequest(markers=[marker() for _ in range(self.rng.choice([1, 1, 2, 0]))])
