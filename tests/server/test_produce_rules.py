"""Produce validation and idempotence rules, checked on the wire against a live broker."""

from __future__ import annotations

import time

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    CreateTopicsRequest,
    FetchRequest,
    InitProducerIdRequest,
    ProduceRequest,
)
from pybroker.records.batch import build_batch, iter_batch_records, iter_batches

_n = [0]


def new_topic(wire, **configs):
    _n[0] += 1
    name = f"pr-{_n[0]}"
    req = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=1, replication_factor=1,
        configs=[CreateTopicsRequest.CreatableTopicConfig(name=k, value=str(v)) for k, v in configs.items()])])
    assert wire.request(ApiKey.CREATE_TOPICS, 7, req).topics[0].error_code == 0
    return name


def send(wire, topic, records_bytes, version=9, acks=-1):
    req = ProduceRequest(acks=acks, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=records_bytes)])])
    return wire.request(ApiKey.PRODUCE, version, req).responses[0].partition_responses[0]


def now():
    return int(time.time() * 1000)


def fetch_all(wire, topic):
    req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 22, isolation_level=0,
                       session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(
                           topic=topic, partitions=[FetchRequest.FetchPartition(
                               partition=0, fetch_offset=0, partition_max_bytes=1 << 22)])])
    pd = wire.request(ApiKey.FETCH, 11, req).responses[0].partitions[0]
    return [(h, recs) for h, b in iter_batches(bytes(pd.records)) for h, recs in [iter_batch_records(b)]]


def pid(wire):
    r = wire.request(ApiKey.INIT_PRODUCER_ID, 4, InitProducerIdRequest(transactional_id=None,
                                                                       transaction_timeout_ms=60000))
    return r.producer_id


def test_idempotent_retry_of_a_recent_batch_returns_its_original_offset(wire):
    t = new_topic(wire)
    p = pid(wire)
    batches = [build_batch([(now(), None, b"m%d" % i, [])], producer_id=p, producer_epoch=0, base_sequence=i)
               for i in range(7)]
    offsets = [send(wire, t, b).base_offset for b in batches]
    assert offsets == list(range(7))
    # the last five are remembered: a retry is acknowledged with the original offset, not re-appended
    for i in range(2, 7):
        r = send(wire, t, batches[i])
        assert (r.error_code, r.base_offset) == (0, i)
    assert len(fetch_all(wire, t)) == 7


def test_sequence_gap_is_out_of_order(wire):
    t = new_topic(wire)
    p = pid(wire)
    assert send(wire, t, build_batch([(now(), None, b"a", [])], producer_id=p, producer_epoch=0,
                                     base_sequence=0)).error_code == 0
    r = send(wire, t, build_batch([(now(), None, b"c", [])], producer_id=p, producer_epoch=0, base_sequence=2))
    assert r.error_code == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_older_producer_epoch_is_fenced(wire):
    t = new_topic(wire)
    p = pid(wire)
    assert send(wire, t, build_batch([(now(), None, b"a", [])], producer_id=p, producer_epoch=1,
                                     base_sequence=0)).error_code == 0
    r = send(wire, t, build_batch([(now(), None, b"b", [])], producer_id=p, producer_epoch=0, base_sequence=1))
    assert r.error_code == Errors.INVALID_PRODUCER_EPOCH


def test_non_idempotent_batches_ignore_sequence(wire):
    """aiokafka sends baseSequence 0 with producerId -1: no sequence checks apply."""
    t = new_topic(wire)
    for _ in range(3):
        assert send(wire, t, build_batch([(now(), None, b"x", [])], base_sequence=0)).error_code == 0


def test_topic_compression_type_recompresses(wire):
    t = new_topic(wire, **{"compression.type": "gzip"})
    assert send(wire, t, build_batch([(now(), b"k", b"v" * 50, [("h", b"1")])], compression=3)).error_code == 0
    ((h, recs),) = fetch_all(wire, t)
    assert h.compression == 1
    assert [(r.key, r.value, r.headers) for r in recs] == [(b"k", b"v" * 50, [(b"h", b"1")])]


def test_log_append_time_topic_stamps_the_broker_clock(wire):
    t = new_topic(wire, **{"message.timestamp.type": "LogAppendTime"})
    before = now()
    r = send(wire, t, build_batch([(1000, None, b"old", [])]))
    assert r.error_code == 0 and r.log_append_time_ms >= before
    ((h, recs),) = fetch_all(wire, t)
    assert h.timestamp_type == 1 and recs[0].timestamp_ms == r.log_append_time_ms


def test_timestamp_outside_the_allowed_window_is_rejected(wire):
    t = new_topic(wire, **{"message.timestamp.after.max.ms": 60000})
    r = send(wire, t, build_batch([(now() + 3_600_000, None, b"future", [])]))
    assert r.error_code == Errors.INVALID_TIMESTAMP
    assert r.record_errors and r.record_errors[0].batch_index == 0


def test_control_batch_from_a_client_is_invalid(wire):
    t = new_topic(wire)
    assert send(wire, t, build_batch([(now(), b"\x00\x00\x00\x00", b"", [])], control=True)).error_code \
        == Errors.INVALID_RECORD


def test_two_batches_in_one_partition_is_invalid(wire):
    t = new_topic(wire)
    two = build_batch([(now(), None, b"1", [])]) + build_batch([(now(), None, b"2", [])])
    assert send(wire, t, two).error_code == Errors.INVALID_RECORD


def test_zstd_needs_produce_v7(wire):
    t = new_topic(wire)
    batch = build_batch([(now(), None, b"z" * 100, [])], compression=4)
    assert send(wire, t, batch, version=6).error_code == Errors.UNSUPPORTED_COMPRESSION_TYPE
    assert send(wire, t, batch, version=7).error_code == 0


def test_batch_above_max_message_bytes_is_too_large(wire):
    t = new_topic(wire, **{"max.message.bytes": 1000})
    assert send(wire, t, build_batch([(now(), None, b"x" * 2000, [])])).error_code == Errors.MESSAGE_TOO_LARGE


def test_acks_all_min_insync_replicas_is_capped_at_the_replica_count(wire):
    # Kafka 4's effectiveMinIsr: on one replica, min.insync.replicas=2 asks for what the partition
    # has (NOT_ENOUGH_REPLICAS with a real shortfall: tests/cluster/test_replication.py)
    t = new_topic(wire, **{"min.insync.replicas": 2})
    batch = build_batch([(now(), None, b"x", [])])
    assert send(wire, t, batch, acks=-1).error_code == 0
    assert send(wire, t, batch, acks=1).error_code == 0


def test_invalid_acks_value(wire):
    t = new_topic(wire)
    assert send(wire, t, build_batch([(now(), None, b"x", [])]), acks=2).error_code == Errors.INVALID_REQUIRED_ACKS


def test_produce_to_a_missing_topic_or_partition(wire):
    assert send(wire, "pr-missing", build_batch([(now(), None, b"x", [])])).error_code \
        == Errors.UNKNOWN_TOPIC_OR_PARTITION


def test_compacted_topic_needs_keys(wire):
    t = new_topic(wire, **{"cleanup.policy": "compact"})
    r = send(wire, t, build_batch([(now(), b"k", b"1", []), (now(), None, b"2", [])]))
    assert r.error_code == Errors.INVALID_RECORD
    assert [e.batch_index for e in r.record_errors] == [1]
    assert send(wire, t, build_batch([(now(), b"k", b"1", [])], compression=3)).error_code == 0
