"""What a restart must keep: topic ids, topic configs, data, high watermarks, producer ids
and idempotent-producer state (clean stop here; SIGKILL is in tests/clients/test_restart.py)."""

from __future__ import annotations

import time

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.messages import (
    CreateTopicsRequest,
    DescribeConfigsRequest,
    InitProducerIdRequest,
    ListOffsetsRequest,
    MetadataRequest,
)
from pybroker.records.batch import build_batch
from pybroker.testing import EmbeddedBroker

from .test_produce_rules import send
from .wire import WireClient


def state(wire, topic):
    md = wire.request(ApiKey.METADATA, 12, MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False))
    cfg = wire.request(ApiKey.DESCRIBE_CONFIGS, 4, DescribeConfigsRequest(resources=[
        DescribeConfigsRequest.DescribeConfigsResource(resource_type=2, resource_name=topic,
                                                       configuration_keys=["retention.ms"])]))
    lo = wire.request(ApiKey.LIST_OFFSETS, 7, ListOffsetsRequest(replica_id=-1, topics=[
        ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
            ListOffsetsRequest.ListOffsetsPartition(partition_index=p, timestamp=-1) for p in range(2)])]))
    return (md.topics[0].topic_id, len(md.topics[0].partitions), cfg.results[0].configs[0].value,
            [p.offset for p in lo.topics[0].partitions])


def test_clean_restart_keeps_ids_configs_offsets_and_producer_state(tmp_path):
    topic = "rs-topic"
    now = int(time.time() * 1000)
    with EmbeddedBroker(log_dir=str(tmp_path)) as first:
        w = WireClient("127.0.0.1", first.port)
        req = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
            name=topic, num_partitions=2, replication_factor=1,
            configs=[CreateTopicsRequest.CreatableTopicConfig(name="retention.ms", value="123456")])])
        assert w.request(ApiKey.CREATE_TOPICS, 7, req).topics[0].error_code == 0
        pid = w.request(ApiKey.INIT_PRODUCER_ID, 4, InitProducerIdRequest(transactional_id=None,
                                                                          transaction_timeout_ms=1)).producer_id
        batches = [build_batch([(now, None, b"%d" % i, [])], producer_id=pid, producer_epoch=0, base_sequence=i)
                   for i in range(3)]
        assert [send(w, topic, b).base_offset for b in batches] == [0, 1, 2]
        before = state(w, topic)
        w.close()
    with EmbeddedBroker(log_dir=str(tmp_path)) as second:
        w = WireClient("127.0.0.1", second.port)
        assert state(w, topic) == before == (before[0], 2, "123456", [3, 0])
        # the retry of an acknowledged batch is still recognised after the restart
        r = send(w, topic, batches[2])
        assert (r.error_code, r.base_offset) == (0, 2)
        assert send(w, topic, build_batch([(now, None, b"3", [])], producer_id=pid, producer_epoch=0,
                                          base_sequence=3)).base_offset == 3
        # producer ids are never handed out twice across restarts
        pid2 = w.request(ApiKey.INIT_PRODUCER_ID, 4, InitProducerIdRequest(transactional_id=None,
                                                                           transaction_timeout_ms=1)).producer_id
        assert pid2 > pid
        w.close()
