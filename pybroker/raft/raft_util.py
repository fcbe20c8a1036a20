"""Single-partition Raft messages as Kafka sends them (Kafka's RaftUtil).

Every Raft RPC names topic `__cluster_metadata` partition 0: by name (Vote, BeginQuorumEpoch,
EndQuorumEpoch, FetchSnapshot, DescribeQuorum) or, in Fetch v13+, by the metadata topic id
`AAAAAAAAAAAAAAAAAAAAAQ` (Kafka's Uuid.METADATA_TOPIC_ID). The versions are the ones Kafka 4.x
controllers use with each other (`RAFT_API_VERSIONS`): Vote v2 (pre-vote), BeginQuorumEpoch
v1, EndQuorumEpoch v1, Fetch v17 (ReplicaState, replica directory id), FetchSnapshot v1,
DescribeQuorum v2. A response is built in its newest shape; the codec leaves out what an older
request version lacks.

Concurrency: pure functions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypeVar

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
from pybroker.raft.offset_and_epoch import OffsetAndEpoch

METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION = 0
METADATA_TOPIC_ID = bytes(15) + b"\x01"
ZERO_UUID = bytes(16)

RAFT_API_VERSIONS: dict[int, int] = {
    ApiKey.VOTE: 2,
    ApiKey.BEGIN_QUORUM_EPOCH: 1,
    ApiKey.END_QUORUM_EPOCH: 1,
    ApiKey.FETCH: 17,
    ApiKey.FETCH_SNAPSHOT: 1,
    ApiKey.DESCRIBE_QUORUM: 2,
}
RAFT_APIS = frozenset(RAFT_API_VERSIONS)

# Kafka error codes the Raft RPCs use
NONE = 0
OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
BROKER_NOT_AVAILABLE = 8
UNKNOWN_SERVER_ERROR = -1
INVALID_REQUEST = 42
CLUSTER_AUTHORIZATION_FAILED = 31
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75
INCONSISTENT_CLUSTER_ID = 104
INCONSISTENT_VOTER_SET = 94
SNAPSHOT_NOT_FOUND = 98
POSITION_OUT_OF_RANGE = 99
INVALID_VOTER_KEY = 116

# Epochs are int32 on the wire. A node never adopts an epoch it could not follow with one of its
# own: a request naming an epoch at or above MAX_EPOCH is refused (INVALID_REQUEST) before
# anything is persisted, so a candidate's epoch + 1 always encodes.
MAX_EPOCH = 2**31 - 1
# How far ahead of this node's epoch a Vote, BeginQuorumEpoch or EndQuorumEpoch may be. Epochs
# only advance by elections a majority takes part in, so an honest peer is rarely more than a few
# ahead; one further ahead is refused (INVALID_REQUEST) and this node learns the epoch from its
# own requests' answers instead (its fetch or pre-vote is answered with the current epoch). It
# keeps a forged request from spending the epoch space: it takes a million of them, each landing
# while no leader is in lease, instead of one (deliberate; Kafka follows any epoch).
MAX_EPOCH_JUMP = 1000


_P = TypeVar("_P")
_P_co = TypeVar("_P_co", covariant=True)


class TopicWithPartitions(Protocol[_P_co]):
    """A topic entry of a Raft request or response (its name is `topic_name` or `name`)."""

    @property
    def partitions(self) -> Sequence[_P_co]: ...


class ListenerEndpoint(Protocol):
    """A leader's endpoint in BeginQuorumEpoch and EndQuorumEpoch requests (LeaderEndpoint)."""

    @property
    def name(self) -> str: ...
    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...


class NodeEndpoint(Protocol):
    """A leader's endpoint in Raft responses (NodeEndpoint)."""

    @property
    def node_id(self) -> int: ...
    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...


def _dir(directory_id: bytes | None) -> bytes:
    return directory_id if directory_id is not None else ZERO_UUID


def _opt_dir(directory_id: bytes) -> bytes | None:
    return None if directory_id == ZERO_UUID else directory_id


def node_endpoints(cls: Any, leader_id: int | None, endpoints: Mapping[str, tuple[str, int]],
                   listener_name: str) -> list[Any]:
    if leader_id is None or leader_id < 0:
        return []
    address = endpoints.get(listener_name) or next(iter(endpoints.values()), None)
    if address is None:
        return []
    return [cls.NodeEndpoint(node_id=leader_id, host=address[0], port=address[1])]


def listener_endpoints(cls: Any, endpoints: Mapping[str, tuple[str, int]]) -> list[Any]:
    return [cls.LeaderEndpoint(name=n, host=h, port=p) for n, (h, p) in sorted(endpoints.items())]


# -- requests ------------------------------------------------------------------------------
def vote_request(cluster_id: str, epoch: int, replica_id: int, replica_directory_id: bytes | None,
                 voter_id: int, voter_directory_id: bytes | None, last: OffsetAndEpoch,
                 pre_vote: bool) -> VoteRequest:
    return VoteRequest(cluster_id=cluster_id, voter_id=voter_id, topics=[VoteRequest.TopicData(
        topic_name=METADATA_TOPIC, partitions=[VoteRequest.PartitionData(
            partition_index=METADATA_PARTITION, replica_epoch=epoch, replica_id=replica_id,
            replica_directory_id=_dir(replica_directory_id),
            voter_directory_id=_dir(voter_directory_id),
            last_offset_epoch=last.epoch, last_offset=last.offset, pre_vote=pre_vote)])])


def begin_quorum_epoch_request(cluster_id: str, epoch: int, leader_id: int, voter_id: int,
                               voter_directory_id: bytes | None,
                               leader_endpoints: Mapping[str, tuple[str, int]]) -> BeginQuorumEpochRequest:
    return BeginQuorumEpochRequest(
        cluster_id=cluster_id, voter_id=voter_id,
        topics=[BeginQuorumEpochRequest.TopicData(topic_name=METADATA_TOPIC, partitions=[
            BeginQuorumEpochRequest.PartitionData(
                partition_index=METADATA_PARTITION, voter_directory_id=_dir(voter_directory_id),
                leader_id=leader_id, leader_epoch=epoch)])],
        leader_endpoints=listener_endpoints(BeginQuorumEpochRequest, leader_endpoints))


def end_quorum_epoch_request(cluster_id: str, epoch: int, leader_id: int, preferred: list[int],
                             leader_endpoints: Mapping[str, tuple[str, int]]) -> EndQuorumEpochRequest:
    return EndQuorumEpochRequest(
        cluster_id=cluster_id,
        topics=[EndQuorumEpochRequest.TopicData(topic_name=METADATA_TOPIC, partitions=[
            EndQuorumEpochRequest.PartitionData(
                partition_index=METADATA_PARTITION, leader_id=leader_id, leader_epoch=epoch,
                preferred_candidates=[EndQuorumEpochRequest.ReplicaInfo(candidate_id=c)
                                      for c in preferred])])],
        leader_endpoints=listener_endpoints(EndQuorumEpochRequest, leader_endpoints))


def fetch_request(cluster_id: str, replica_id: int, directory_id: bytes | None, epoch: int,
                  fetch_offset: int, last_fetched_epoch: int, max_wait_ms: int,
                  max_bytes: int) -> FetchRequest:
    return FetchRequest(
        cluster_id=cluster_id,
        replica_state=FetchRequest.ReplicaState(replica_id=replica_id, replica_epoch=-1),
        max_wait_ms=max_wait_ms, min_bytes=0, max_bytes=max_bytes, isolation_level=0,
        topics=[FetchRequest.FetchTopic(topic=METADATA_TOPIC, topic_id=METADATA_TOPIC_ID, partitions=[
            FetchRequest.FetchPartition(
                partition=METADATA_PARTITION, current_leader_epoch=epoch, fetch_offset=fetch_offset,
                last_fetched_epoch=last_fetched_epoch, partition_max_bytes=max_bytes,
                replica_directory_id=_dir(directory_id))])])


def fetch_snapshot_request(cluster_id: str, replica_id: int, directory_id: bytes | None, epoch: int,
                           snapshot_id: OffsetAndEpoch, position: int, max_bytes: int) -> FetchSnapshotRequest:
    return FetchSnapshotRequest(
        cluster_id=cluster_id, replica_id=replica_id, max_bytes=max_bytes,
        topics=[FetchSnapshotRequest.TopicSnapshot(name=METADATA_TOPIC, partitions=[
            FetchSnapshotRequest.PartitionSnapshot(
                partition=METADATA_PARTITION, current_leader_epoch=epoch,
                snapshot_id=FetchSnapshotRequest.SnapshotId(end_offset=snapshot_id.offset,
                                                            epoch=snapshot_id.epoch),
                position=position, replica_directory_id=_dir(directory_id))])])


def describe_quorum_request() -> DescribeQuorumRequest:
    return DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
        topic_name=METADATA_TOPIC,
        partitions=[DescribeQuorumRequest.PartitionData(partition_index=METADATA_PARTITION)])])


# -- responses -----------------------------------------------------------------------------
def vote_response(error: int, epoch: int, leader_id: int | None, granted: bool,
                  endpoints: Mapping[str, tuple[str, int]], listener_name: str) -> VoteResponse:
    return VoteResponse(error_code=NONE, topics=[VoteResponse.TopicData(
        topic_name=METADATA_TOPIC, partitions=[VoteResponse.PartitionData(
            partition_index=METADATA_PARTITION, error_code=error, leader_id=_leader(leader_id),
            leader_epoch=epoch, vote_granted=granted)])],
        node_endpoints=node_endpoints(VoteResponse, leader_id, endpoints, listener_name))


def begin_quorum_epoch_response(error: int, epoch: int, leader_id: int | None,
                                endpoints: Mapping[str, tuple[str, int]],
                                listener_name: str) -> BeginQuorumEpochResponse:
    return BeginQuorumEpochResponse(error_code=NONE, topics=[BeginQuorumEpochResponse.TopicData(
        topic_name=METADATA_TOPIC, partitions=[BeginQuorumEpochResponse.PartitionData(
            partition_index=METADATA_PARTITION, error_code=error, leader_id=_leader(leader_id),
            leader_epoch=epoch)])],
        node_endpoints=node_endpoints(BeginQuorumEpochResponse, leader_id, endpoints, listener_name))


def end_quorum_epoch_response(error: int, epoch: int, leader_id: int | None,
                              endpoints: Mapping[str, tuple[str, int]],
                              listener_name: str) -> EndQuorumEpochResponse:
    return EndQuorumEpochResponse(error_code=NONE, topics=[EndQuorumEpochResponse.TopicData(
        topic_name=METADATA_TOPIC, partitions=[EndQuorumEpochResponse.PartitionData(
            partition_index=METADATA_PARTITION, error_code=error, leader_id=_leader(leader_id),
            leader_epoch=epoch)])],
        node_endpoints=node_endpoints(EndQuorumEpochResponse, leader_id, endpoints, listener_name))


def fetch_response(error: int, epoch: int, leader_id: int | None, *, high_watermark: int | None,
                   log_start_offset: int, records: bytes = b"",
                   diverging: OffsetAndEpoch | None = None, snapshot_id: OffsetAndEpoch | None = None,
                   endpoints: Mapping[str, tuple[str, int]] = {}, listener_name: str = "") -> FetchResponse:
    partition = FetchResponse.PartitionData(
        partition_index=METADATA_PARTITION, error_code=error,
        high_watermark=-1 if high_watermark is None else high_watermark,
        last_stable_offset=-1, log_start_offset=log_start_offset,
        current_leader=FetchResponse.LeaderIdAndEpoch(leader_id=_leader(leader_id), leader_epoch=epoch),
        records=records)
    if diverging is not None:
        partition.diverging_epoch = FetchResponse.EpochEndOffset(epoch=diverging.epoch, end_offset=diverging.offset)
    if snapshot_id is not None:
        partition.snapshot_id = FetchResponse.SnapshotId(end_offset=snapshot_id.offset, epoch=snapshot_id.epoch)
    return FetchResponse(error_code=NONE, responses=[FetchResponse.FetchableTopicResponse(
        topic=METADATA_TOPIC, topic_id=METADATA_TOPIC_ID, partitions=[partition])],
        node_endpoints=node_endpoints(FetchResponse, leader_id, endpoints, listener_name))


def fetch_snapshot_response(error: int, epoch: int, leader_id: int | None, *,
                            snapshot_id: OffsetAndEpoch | None = None, size: int = 0, position: int = 0,
                            data: bytes = b"", endpoints: Mapping[str, tuple[str, int]] = {},
                            listener_name: str = "", partition_index: int = METADATA_PARTITION,
                            topic: str = METADATA_TOPIC) -> FetchSnapshotResponse:
    sid = snapshot_id if snapshot_id is not None else OffsetAndEpoch(-1, -1)
    return FetchSnapshotResponse(error_code=NONE, topics=[FetchSnapshotResponse.TopicSnapshot(
        name=topic, partitions=[FetchSnapshotResponse.PartitionSnapshot(
            index=partition_index, error_code=error,
            snapshot_id=FetchSnapshotResponse.SnapshotId(end_offset=sid.offset, epoch=sid.epoch),
            current_leader=FetchSnapshotResponse.LeaderIdAndEpoch(leader_id=_leader(leader_id),
                                                                  leader_epoch=epoch),
            size=size, position=position, unaligned_records=data)])],
        node_endpoints=node_endpoints(FetchSnapshotResponse, leader_id, endpoints, listener_name))


def error_response(api_key: int, error: int) -> Any:
    """A response carrying only a top-level error (a failed or timed-out request)."""
    classes: dict[int, type[Any]] = {ApiKey.VOTE: VoteResponse, ApiKey.BEGIN_QUORUM_EPOCH: BeginQuorumEpochResponse,
           ApiKey.END_QUORUM_EPOCH: EndQuorumEpochResponse, ApiKey.FETCH: FetchResponse,
           ApiKey.FETCH_SNAPSHOT: FetchSnapshotResponse,
           ApiKey.DESCRIBE_QUORUM: DescribeQuorumResponse}
    return classes[api_key](error_code=error)


def _leader(leader_id: int | None) -> int:
    return -1 if leader_id is None else leader_id


# -- request checks ------------------------------------------------------------------------
def single_partition(topics: Sequence[TopicWithPartitions[_P]],
                     name_attr: str = "topic_name") -> _P | None:
    """The one partition of a request naming only __cluster_metadata-0, else None."""
    if len(topics) != 1:
        return None
    topic = topics[0]
    parts = topic.partitions
    if getattr(topic, name_attr) != METADATA_TOPIC or len(parts) != 1:
        return None
    return parts[0]


def fetch_partition(request: FetchRequest) -> FetchRequest.FetchPartition | None:
    if len(request.topics) != 1 or len(request.topics[0].partitions) != 1:
        return None
    topic = request.topics[0]
    if topic.topic_id != METADATA_TOPIC_ID and topic.topic != METADATA_TOPIC:
        return None
    partition = topic.partitions[0]
    return partition if partition.partition == METADATA_PARTITION else None


def fetch_replica_id(request: FetchRequest) -> int:
    """Kafka's FetchRequest.replicaId: ReplicaState in v15+, the old field before."""
    if request.replica_state is not None and request.replica_state.replica_id != -1:
        return request.replica_state.replica_id
    return request.replica_id


def optional_directory(directory_id: bytes) -> bytes | None:
    return _opt_dir(directory_id)
