"""Fetch long-polls in the purgatory: completed by a produce, not by a polling interval.

Socket timeouts bound every wait; no test asserts a duration. A fetch with a 60 s
max_wait that comes back within the 15 s socket timeout was completed by the produce.
"""

from __future__ import annotations

import time

import pytest

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import FetchRequest
from pybroker.records.batch import iter_batch_records, iter_batches
from pybroker.testing import EmbeddedBroker

from .test_live_versions import create_topic, produce
from .wire import WireClient


def fetch_request(topic, offset, max_wait_ms, min_bytes):
    return FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=1 << 20,
                        isolation_level=0, session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(
                            topic=topic, partitions=[FetchRequest.FetchPartition(
                                partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)])])


def values_of(resp):
    pd = resp.responses[0].partitions[0]
    return [r.value for _, b in iter_batches(bytes(pd.records)) for r in iter_batch_records(b)[1]]


def test_waiting_fetch_is_completed_by_a_produce(broker):
    topic = "df-complete"
    create_topic(WireClient("127.0.0.1", broker.port), topic)
    consumer = WireClient("127.0.0.1", broker.port, timeout_s=15)
    producer = WireClient("127.0.0.1", broker.port)
    cid = consumer.send(ApiKey.FETCH, 11, fetch_request(topic, 0, max_wait_ms=60_000, min_bytes=1))
    assert produce(producer, topic, [b"wake-up"]).error_code == 0
    got_cid, resp = consumer.receive(ApiKey.FETCH, 11)
    assert got_cid == cid
    assert values_of(resp) == [b"wake-up"]


def test_fetch_waits_for_min_bytes_across_several_produces(broker):
    topic = "df-minbytes"
    create_topic(WireClient("127.0.0.1", broker.port), topic)
    consumer = WireClient("127.0.0.1", broker.port, timeout_s=15)
    producer = WireClient("127.0.0.1", broker.port)
    consumer.send(ApiKey.FETCH, 11, fetch_request(topic, 0, max_wait_ms=60_000, min_bytes=500))
    produce(producer, topic, [b"a" * 100])
    consumer.sock.settimeout(0.5)
    with pytest.raises(TimeoutError):  # 100 bytes < min_bytes: still parked
        consumer.recv_frame()
    consumer.sock.settimeout(15)
    produce(producer, topic, [b"b" * 600])
    _, resp = consumer.receive(ApiKey.FETCH, 11)
    assert values_of(resp) == [b"a" * 100, b"b" * 600]


def test_fetch_expires_empty_after_max_wait(broker):
    topic = "df-expire"
    create_topic(WireClient("127.0.0.1", broker.port), topic)
    consumer = WireClient("127.0.0.1", broker.port, timeout_s=15)
    resp = consumer.request(ApiKey.FETCH, 11, fetch_request(topic, 0, max_wait_ms=200, min_bytes=1))
    pd = resp.responses[0].partitions[0]
    assert pd.error_code == 0 and pd.high_watermark == 0 and values_of(resp) == []


def test_other_connections_are_served_while_a_fetch_waits(broker):
    topic = "df-neighbour"
    create_topic(WireClient("127.0.0.1", broker.port), topic)
    parked = WireClient("127.0.0.1", broker.port, timeout_s=15)
    parked.send(ApiKey.FETCH, 11, fetch_request(topic, 0, max_wait_ms=60_000, min_bytes=1))
    other = WireClient("127.0.0.1", broker.port)
    for _ in range(3):  # produce does not auto-create: UNKNOWN_TOPIC_OR_PARTITION, answered at once
        assert produce(other, "df-neighbour-missing", [b"x"]).error_code == 3
    assert produce(other, topic, [b"done"]).error_code == 0
    _, resp = parked.receive(ApiKey.FETCH, 11)
    assert values_of(resp) == [b"done"]


def test_shutdown_answers_a_parked_fetch():
    b = EmbeddedBroker().start()
    try:
        topic = "df-shutdown"
        create_topic(WireClient("127.0.0.1", b.port), topic)
        parked = WireClient("127.0.0.1", b.port, timeout_s=15)
        cid = parked.send(ApiKey.FETCH, 11, fetch_request(topic, 0, max_wait_ms=60_000, min_bytes=1))
        time.sleep(0.2)  # let the fetch park in the purgatory
        b.stop()
        got_cid, resp = parked.receive(ApiKey.FETCH, 11)
        # answered at once (the client's 15 s timeout is well inside max_wait_ms): the controlled
        # shutdown (controlled.shutdown.enable) takes the only replica out of the ISR first, as
        # Kafka's controller does (the partition goes leaderless, its replica into the ELR), and the
        # parked fetch completes on that change: NOT_LEADER_OR_FOLLOWER, or, since a Fetch v11+
        # consumer may read from a replica that is not the leader (KIP-392), an empty answer
        assert got_cid == cid
        assert resp.responses[0].partitions[0].error_code in (0, Errors.NOT_LEADER_OR_FOLLOWER)
    finally:
        b.close()


def test_large_and_small_regions_in_one_response_arrive_intact(broker):
    """Regions above the pread threshold go out with sendfile, small ones inline: mixed in one
    response (several partitions), the bytes must still be exactly the log's."""
    w = WireClient("127.0.0.1", broker.port)
    create_topic(w, "df-mixed", partitions=3)
    big = bytes(range(256)) * 1024  # 256 KiB: sendfile path
    for p, value in enumerate([b"small", big, b"tiny"]):
        assert produce(w, "df-mixed", [value], partition=p).error_code == 0
    req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 22, isolation_level=0,
                       session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(
                           topic="df-mixed", partitions=[FetchRequest.FetchPartition(
                               partition=p, fetch_offset=0, partition_max_bytes=1 << 21) for p in range(3)])])
    resp = w.request(ApiKey.FETCH, 11, req)
    got = [[r.value for _, b in iter_batches(bytes(pd.records)) for r in iter_batch_records(b)[1]]
           for pd in resp.responses[0].partitions]
    assert got == [[b"small"], [big], [b"tiny"]]
