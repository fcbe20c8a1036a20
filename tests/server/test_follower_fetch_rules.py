"""A replica fetch (Fetch with a replica id) from a broker that is not a replica of the
partition gets no data, as Kafka's Partition.followerReplicaOrThrow answers it:
UNKNOWN_LEADER_EPOCH when the request carries a leader epoch (a replica a reassignment added
retries until the leader has seen the change), NOT_LEADER_OR_FOLLOWER without one."""

from __future__ import annotations

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import FetchRequest

from .test_live_versions import create_topic, produce
from .wire import WireClient


def replica_fetch(topic: str, replica_id: int, leader_epoch: int) -> FetchRequest:
    return FetchRequest(
        replica_id=replica_id, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0,
        session_epoch=-1,
        topics=[FetchRequest.FetchTopic(topic=topic, partitions=[FetchRequest.FetchPartition(
            partition=0, fetch_offset=0, partition_max_bytes=1 << 20, current_leader_epoch=leader_epoch)])])


def test_a_fetch_from_a_broker_that_is_no_replica_gets_no_data(broker):
    topic = "ff-not-a-replica"
    w = WireClient("127.0.0.1", broker.port)
    create_topic(w, topic)
    assert produce(w, topic, [b"v"]).error_code == 0
    for epoch, expected in ((-1, Errors.NOT_LEADER_OR_FOLLOWER), (0, Errors.UNKNOWN_LEADER_EPOCH)):
        resp = w.request(ApiKey.FETCH, 12, replica_fetch(topic, 4242, epoch))
        pd = resp.responses[0].partitions[0]
        assert pd.error_code == expected, (epoch, pd.error_code)
        assert not pd.records
