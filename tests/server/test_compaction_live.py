"""The log cleaner runs in the broker: a compacted topic keeps each key's latest value, and
__consumer_offsets is compacted too (committed offsets survive it and a restart)."""

from __future__ import annotations

import time

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.messages import CreateTopicsRequest, FetchRequest, ProduceRequest
from pybroker.records.batch import build_batch, iter_batch_records, iter_batches
from pybroker.testing import EmbeddedBroker

from .test_groups_wire import commit, fetch
from .test_live_versions import create_topic
from .wire import WireClient

OVERRIDES = {"log.cleaner.enable": "true", "log.cleaner.backoff.ms": 50, "log.segment.delete.delay.ms": 0,
             "offsets.topic.num.partitions": 1, "offsets.topic.segment.bytes": 400,
             "log.cleaner.min.cleanable.ratio": 0.01}


def produce_keyed(w, topic, pairs):
    now = int(time.time() * 1000)
    batch = build_batch([(now, k, v, ()) for k, v in pairs])
    req = ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)])])
    resp = w.request(ApiKey.PRODUCE, 9, req).responses[0].partition_responses[0]
    assert resp.error_code == 0, resp


def consume_all(w, topic):
    """Every record from offset 0 to the high watermark, as a consumer reads them."""
    out, offset = [], 0
    for _ in range(1000):
        req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                           session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(
                               topic=topic, partitions=[FetchRequest.FetchPartition(
                                   partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)])])
        pd = w.request(ApiKey.FETCH, 11, req).responses[0].partitions[0]
        assert pd.error_code == 0, pd
        if offset >= pd.high_watermark:
            return out
        progressed = False
        for header, chunk in iter_batches(bytes(pd.records or b"")):
            _, recs = iter_batch_records(chunk)
            out += [r for r in recs if r.offset >= offset]
            offset = max(offset, header.last_offset + 1)
            progressed = True
        assert progressed
    raise AssertionError("consumer did not reach the high watermark")


def wait_for(cond, timeout_s=20.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.1)
    return cond()


def test_compacted_topic_keeps_latest_value_per_key(tmp_path):
    with EmbeddedBroker(log_dir=str(tmp_path), overrides=OVERRIDES) as b:
        w = WireClient("127.0.0.1", b.port)
        req = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
            name="cmp", num_partitions=1, replication_factor=1, configs=[
                CreateTopicsRequest.CreatableTopicConfig(name="cleanup.policy", value="compact"),
                CreateTopicsRequest.CreatableTopicConfig(name="segment.bytes", value="300")])])
        assert w.request(ApiKey.CREATE_TOPICS, 7, req).topics[0].error_code == 0
        expected = {}
        for i in range(120):
            key = b"key-%d" % (i % 4)
            value = b"value-%d-" % i + b"x" * 30
            produce_keyed(w, "cmp", [(key, value)])
            expected[key] = value
        total = 120

        def compacted():
            return len(consume_all(w, "cmp")) < total // 4

        assert wait_for(compacted)
        records = consume_all(w, "cmp")
        latest = {}
        for r in records:
            latest[r.key] = r.value
        assert latest == expected
        offsets = [r.offset for r in records]
        assert offsets == sorted(set(offsets)) and offsets[-1] == total - 1
        assert (tmp_path / "cleaner-offset-checkpoint").read_text().count("cmp 0 ") == 1
        w.close()


def test_consumer_offsets_are_compacted_and_survive_a_restart(tmp_path):
    with EmbeddedBroker(log_dir=str(tmp_path), overrides=OVERRIDES) as b:
        w = WireClient("127.0.0.1", b.port)
        create_topic(w, "t")
        commits = 80
        for i in range(commits):
            r = commit(w, "g", i, f"m{i}")
            assert r.topics[0].partitions[0].error_code == 0

        def compacted():
            return len(consume_all(w, "__consumer_offsets")) < commits // 4

        assert wait_for(compacted)
        assert fetch(w, "g") == {("t", 0): (commits - 1, f"m{commits - 1}")}
        w.close()
    # the group coordinator replays the compacted partition
    with EmbeddedBroker(log_dir=str(tmp_path), overrides=OVERRIDES) as b:
        w = WireClient("127.0.0.1", b.port)
        assert fetch(w, "g") == {("t", 0): (commits - 1, f"m{commits - 1}")}
        w.close()
