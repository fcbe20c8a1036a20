"""A data dir written before the node ran Raft (one writer, batches at leader epoch 0, no
quorum-state file, no LeaderChange records) starts as a one-voter KRaft quorum: the first election
makes epoch 1 and commits the old records behind its LeaderChange batch; nothing is lost."""

from __future__ import annotations

import trio

from pybroker.controller.metadata_log import MetadataLog
from pybroker.log.meta_properties import ensure_log_dirs
from pybroker.protocol import messages as m
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.messages import DescribeQuorumRequest, MetadataRequest
from pybroker.records.batch import iter_batches
from pybroker.testing import EmbeddedBroker

from .wire import WireClient

TID = bytes(range(1, 17))


def test_a_pre_raft_data_dir_is_committed_by_the_first_election_and_keeps_its_topics(tmp_path):
    data = tmp_path / "data"
    ensure_log_dirs([data], 1)

    async def write_old() -> int:
        log = MetadataLog(data)
        await log.append([m.FeatureLevelRecord(name="metadata.version", feature_level=25)])
        await log.append([m.RegisterBrokerRecord(
            broker_id=1, broker_epoch=1, incarnation_id=bytes(16), fenced=False,
            end_points=[m.RegisterBrokerRecord.BrokerEndpoint(name="PLAINTEXT", host="127.0.0.1", port=1,
                                                              security_protocol=0)])])
        await log.append([m.TopicRecord(name="legacy", topic_id=TID),
                          m.PartitionRecord(partition_id=0, topic_id=TID, replicas=[1], isr=[1], leader=1,
                                            leader_epoch=0, partition_epoch=0),
                          m.ConfigRecord(resource_type=2, resource_name="legacy", name="retention.ms", value="777")])
        end = log.end_offset
        log.close()
        return end

    old_end = trio.run(write_old)
    b = EmbeddedBroker(log_dir=str(data)).start()
    try:
        w = WireClient("127.0.0.1", b.port)
        md = w.request(ApiKey.METADATA, 12, MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name="legacy", topic_id=bytes(16))],
            allow_auto_topic_creation=False))
        t = md.topics[0]
        assert t.error_code == 0 and t.topic_id == TID and [p.leader_id for p in t.partitions] == [1]
        q = w.request(ApiKey.DESCRIBE_QUORUM, 2, DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
            topic_name="__cluster_metadata", partitions=[DescribeQuorumRequest.PartitionData(partition_index=0)])]))
        p = q.topics[0].partitions[0]
        assert p.leader_epoch == 1 and p.high_watermark > old_end
        w.close()
    finally:
        b.stop()
    # the old batches are where they were, at epoch 0; the new epoch's batches follow
    segment = sorted((data / "__cluster_metadata-0").glob("*.log"))[0].read_bytes()
    epochs = [(h.base_offset, h.partition_leader_epoch) for h, _ in iter_batches(segment)]
    assert [e for o, e in epochs if o < old_end] == [0, 0, 0]
    assert all(e >= 1 for o, e in epochs if o >= old_end)
    # and a restart replays the same image
    b = EmbeddedBroker(log_dir=str(data)).start()
    try:
        w = WireClient("127.0.0.1", b.port)
        md = w.request(ApiKey.METADATA, 12, MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name="legacy", topic_id=bytes(16))],
            allow_auto_topic_creation=False))
        assert md.topics[0].error_code == 0
        w.close()
    finally:
        b.stop()
