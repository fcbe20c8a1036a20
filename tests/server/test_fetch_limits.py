"""How byte limits shape a Fetch response: whole batches only (a deliberate difference from Kafka,
whose responses end with the head of the next batch), Kafka's minOneMessage for the first
partition with data, and an empty answer for a later partition whose first batch does not fit."""

from __future__ import annotations

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.messages import FetchRequest
from pybroker.records.batch import iter_batches

from .test_live_versions import create_topic, produce

FT = FetchRequest.FetchTopic
FP = FetchRequest.FetchPartition


def fetch(wire, topic, partitions, max_bytes=1 << 20, version=12):
    req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=max_bytes, isolation_level=0,
                       session_id=0, session_epoch=-1, topics=[FT(topic=topic, partitions=[
                           FP(partition=p, fetch_offset=o, partition_max_bytes=m) for p, o, m in partitions])])
    resp = wire.request(ApiKey.FETCH, version, req)
    return {p.partition_index: bytes(p.records or b"") for t in resp.responses for p in t.partitions}


def batches(data):
    """(base offset, size) of each batch, asserting the bytes are whole batches and nothing else."""
    out, pos = [], 0
    for header, batch in iter_batches(data):
        out.append((header.base_offset, len(batch)))
        pos += len(batch)
    assert pos == len(data), f"{len(data) - pos} trailing bytes of a partial batch"
    return out


def test_a_limit_inside_a_batch_ends_the_response_at_the_last_whole_batch(wire):
    topic = "limits-whole"
    create_topic(wire, topic)
    for i in range(3):
        produce(wire, topic, [bytes([65 + i]) * 300])  # one ~400-byte batch each, offsets 0, 1, 2
    sizes = [size for _, size in batches(fetch(wire, topic, [(0, 0, 1 << 20)])[0])]
    assert len(sizes) == 3
    limit = sizes[0] + sizes[1] + sizes[2] // 2  # the limit falls in the middle of the third batch
    got = batches(fetch(wire, topic, [(0, 0, limit)])[0])
    assert [base for base, _ in got] == [0, 1]
    assert [base for base, _ in batches(fetch(wire, topic, [(0, 2, limit)])[0])] == [2]


def test_the_first_batch_goes_whole_even_above_the_limit(wire):
    topic = "limits-min-one"
    create_topic(wire, topic)
    produce(wire, topic, [b"x" * 2000])
    produce(wire, topic, [b"y" * 10])
    got = batches(fetch(wire, topic, [(0, 0, 100)])[0])
    assert [base for base, _ in got] == [0]  # Kafka's minOneMessage: never an empty answer


def test_a_later_partition_whose_first_batch_does_not_fit_is_answered_empty(wire):
    topic = "limits-later"
    create_topic(wire, topic, partitions=2)
    produce(wire, topic, [b"a" * 600], partition=0)
    produce(wire, topic, [b"b" * 600], partition=1)
    got = fetch(wire, topic, [(0, 0, 1 << 20), (1, 0, 1 << 20)], max_bytes=1000)
    assert [b for b, _ in batches(got[0])] == [0]
    assert got[1] == b""  # Kafka drops an incomplete first batch for Fetch v3+
    got = fetch(wire, topic, [(1, 0, 1 << 20), (0, 1, 1 << 20)], max_bytes=1000)
    assert [b for b, _ in batches(got[1])] == [0]
