"""Fetch sessions (KIP-227) on the wire: a live broker creates, continues and closes sessions as
Kafka's FetchManager does, and incremental responses carry only partitions with news."""

from __future__ import annotations

import pytest

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import FetchRequest
from pybroker.records.batch import iter_batch_records, iter_batches
from pybroker.testing import EmbeddedBroker

from .test_live_versions import create_topic, produce
from .wire import WireClient

FT = FetchRequest.FetchTopic
FP = FetchRequest.FetchPartition
Forget = FetchRequest.ForgottenTopic


def fetch(wire, version, session_id, epoch, topics, forget=(), max_wait_ms=0, min_bytes=0):
    req = FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=1 << 20,
                       isolation_level=0, session_id=session_id, session_epoch=epoch, topics=list(topics),
                       forgotten_topics_data=list(forget))
    return wire.request(ApiKey.FETCH, version, req)


def by_name(topic, offsets):
    return FT(topic=topic, partitions=[FP(partition=p, fetch_offset=o, partition_max_bytes=1 << 20)
                                       for p, o in offsets.items()])


def partitions(resp):
    return sorted(p.partition_index for t in resp.responses for p in t.partitions)


def values(resp, partition):
    for t in resp.responses:
        for p in t.partitions:
            if p.partition_index == partition and p.records:
                return [r.value for _, b in iter_batches(bytes(p.records)) for r in iter_batch_records(b)[1]]
    return []


@pytest.fixture
def topic(wire, request):
    name = "fs-" + request.node.name.replace("_", "-")[-40:]
    create_topic(wire, name, partitions=3)
    return name


def test_a_full_fetch_with_epoch_zero_gets_a_session_and_increments_carry_only_news(wire, topic):
    resp = fetch(wire, 12, 0, 0, [by_name(topic, {0: 0, 1: 0, 2: 0})])
    assert resp.error_code == 0 and resp.session_id > 0
    assert partitions(resp) == [0, 1, 2]  # a full response names every partition
    sid = resp.session_id
    resp = fetch(wire, 12, sid, 1, [])  # nothing changed: an empty incremental response
    assert (resp.error_code, resp.session_id, partitions(resp)) == (0, sid, [])
    produce(wire, topic, [b"x1", b"x2"], partition=1)
    resp = fetch(wire, 12, sid, 2, [])
    assert partitions(resp) == [1] and values(resp, 1) == [b"x1", b"x2"]
    assert resp.responses[0].partitions[0].high_watermark == 2
    # the client moves its offset on: only partition 1 is named; the high watermark it was told
    # is unchanged, so nothing is sent
    resp = fetch(wire, 12, sid, 3, [by_name(topic, {1: 2})])
    assert (resp.error_code, partitions(resp)) == (0, [])


def test_an_incremental_fetch_waits_for_data_and_wakes_on_produce(broker, topic):
    consumer = WireClient("127.0.0.1", broker.port)
    producer = WireClient("127.0.0.1", broker.port)
    sid = fetch(consumer, 12, 0, 0, [by_name(topic, {0: 0, 1: 0, 2: 0})]).session_id
    req = FetchRequest(replica_id=-1, max_wait_ms=60_000, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                       session_id=sid, session_epoch=1, topics=[])
    cid = consumer.send(ApiKey.FETCH, 12, req)
    produce(producer, topic, [b"late"], partition=2)
    got_cid, resp = consumer.receive(ApiKey.FETCH, 12)  # within the 15 s socket timeout
    assert got_cid == cid and partitions(resp) == [2] and values(resp, 2) == [b"late"]


def test_session_errors_are_kafkas(wire, topic):
    sid = fetch(wire, 12, 0, 0, [by_name(topic, {0: 0})]).session_id
    resp = fetch(wire, 12, sid, 7, [])
    assert (resp.error_code, resp.session_id, resp.responses) == (Errors.INVALID_FETCH_SESSION_EPOCH, 0, [])
    resp = fetch(wire, 12, sid ^ 0x5A5A, 1, [])
    assert (resp.error_code, resp.session_id) == (Errors.FETCH_SESSION_ID_NOT_FOUND, 0)
    resp = fetch(wire, 12, 0, 3, [])  # incremental without a session
    assert resp.error_code == Errors.FETCH_SESSION_ID_NOT_FOUND
    # a v13+ request (topic ids) in a session made with names
    resp = fetch(wire, 13, sid, 1, [])
    assert (resp.error_code, resp.session_id) == (Errors.FETCH_SESSION_TOPIC_ID_ERROR, 0)
    # none of these moved the session on: epoch 1 still works
    assert fetch(wire, 12, sid, 1, []).error_code == 0


def test_forgotten_partitions_leave_the_session_and_the_last_one_closes_it(wire, topic):
    sid = fetch(wire, 12, 0, 0, [by_name(topic, {0: 0, 1: 0})]).session_id
    produce(wire, topic, [b"a"], partition=0)
    produce(wire, topic, [b"b"], partition=1)
    resp = fetch(wire, 12, sid, 1, [], forget=[Forget(topic=topic, partitions=[0])])
    assert partitions(resp) == [1]  # partition 0 has data but is no longer in the session
    # partition 0 added back; partition 1's offset moved past what it got (else it is read again)
    resp = fetch(wire, 12, sid, 2, [by_name(topic, {0: 0, 1: 1})])
    assert partitions(resp) == [0] and values(resp, 0) == [b"a"]
    resp = fetch(wire, 12, sid, 3, [], forget=[Forget(topic=topic, partitions=[0, 1])])
    assert (resp.error_code, resp.session_id, resp.responses) == (0, 0, [])  # closed, answered sessionless
    assert fetch(wire, 12, sid, 4, []).error_code == Errors.FETCH_SESSION_ID_NOT_FOUND


def test_full_fetches_close_the_session_they_name(wire, topic):
    sid = fetch(wire, 12, 0, 0, [by_name(topic, {0: 0})]).session_id
    resp = fetch(wire, 12, sid, -1, [by_name(topic, {0: 0})])  # close, no new session
    assert resp.session_id == 0 and partitions(resp) == [0]
    assert fetch(wire, 12, sid, 1, []).error_code == Errors.FETCH_SESSION_ID_NOT_FOUND
    sid = fetch(wire, 12, 0, 0, [by_name(topic, {0: 0})]).session_id
    resp = fetch(wire, 12, sid, 0, [by_name(topic, {0: 0})])  # close and open another
    assert resp.session_id not in (0, sid)
    assert fetch(wire, 12, sid, 1, []).error_code == Errors.FETCH_SESSION_ID_NOT_FOUND
    assert fetch(wire, 12, resp.session_id, 1, []).error_code == 0


def test_sessionless_fetches_and_old_versions_never_get_a_session(wire, topic):
    assert fetch(wire, 12, 0, -1, [by_name(topic, {0: 0})]).session_id == 0
    for v in (4, 6):  # no session fields: Kafka reads them as (0, -1)
        req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, topics=[by_name(topic, {0: 0})])
        resp = wire.request(ApiKey.FETCH, v, req)
        assert partitions(resp) == [0]


def test_topic_id_sessions_carry_unknown_ids_as_errors(wire, topic):
    tid = create_topic(wire, topic + "-ids", partitions=2)
    ghost = b"\x07" * 16
    topics = [FT(topic_id=tid, partitions=[FP(partition=p, fetch_offset=0, partition_max_bytes=1 << 20)
                                           for p in (0, 1)]),
              FT(topic_id=ghost, partitions=[FP(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])]
    resp = fetch(wire, 16, 0, 0, topics, max_wait_ms=0)
    sid = resp.session_id
    assert sid > 0
    # Kafka's order: the partitions read, then the refused one; grouped by topic id
    assert [(t.topic_id, [p.partition_index for p in t.partitions]) for t in resp.responses] == \
        [(tid, [0, 1]), (ghost, [0])]
    assert resp.responses[1].partitions[0].error_code == Errors.UNKNOWN_TOPIC_ID
    produce(wire, topic + "-ids", [b"by-id"], partition=1)
    resp = fetch(wire, 16, sid, 1, [])
    # the unknown id is an error every time; partition 1 has records
    assert [(t.topic_id, [p.partition_index for p in t.partitions]) for t in resp.responses] == \
        [(tid, [1]), (ghost, [0])]
    assert fetch(wire, 12, sid, 2, []).error_code == Errors.FETCH_SESSION_TOPIC_ID_ERROR


def test_a_session_partition_with_an_unknown_topic_does_not_make_the_fetch_return_early(broker, topic):
    """Refused partitions (here an unknown topic id) do not cut a fetch's wait short, as in Kafka:
    otherwise such a session would spin, answered at once every time."""
    wire = WireClient("127.0.0.1", broker.port)
    producer = WireClient("127.0.0.1", broker.port)
    tid = create_topic(wire, topic + "-w", partitions=1)
    topics = [FT(topic_id=tid, partitions=[FP(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)]),
              FT(topic_id=b"\x09" * 16, partitions=[FP(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])]
    sid = fetch(wire, 16, 0, 0, topics).session_id
    req = FetchRequest(replica_id=-1, max_wait_ms=60_000, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                       session_id=sid, session_epoch=1, topics=[])
    wire.send(ApiKey.FETCH, 16, req)
    wire.sock.settimeout(0.5)
    with pytest.raises(TimeoutError):  # still parked: the refused partition did not answer it
        wire.recv_frame()
    wire.sock.settimeout(15)
    produce(producer, topic + "-w", [b"now"])
    _, resp = wire.receive(ApiKey.FETCH, 16)
    assert [p.partition_index for t in resp.responses for p in t.partitions if t.topic_id == tid] == [0]


def test_a_broker_without_cache_slots_answers_full_fetches_sessionless():
    with EmbeddedBroker(overrides={"max.incremental.fetch.session.cache.slots": 0}) as b:
        wire = WireClient("127.0.0.1", b.port)
        create_topic(wire, "fs-noslots")
        resp = fetch(wire, 12, 0, 0, [by_name("fs-noslots", {0: 0})])
        assert (resp.error_code, resp.session_id, partitions(resp)) == (0, 0, [0])
        wire.close()


def test_a_topic_made_again_under_its_name_is_an_inconsistent_id_in_the_session(wire, topic):
    from pybroker.protocol.messages import DeleteTopicsRequest

    name = topic + "-again"
    old = create_topic(wire, name, partitions=1)
    part = [FP(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)]
    sid = fetch(wire, 16, 0, 0, [FT(topic_id=old, partitions=part)]).session_id
    resp = wire.request(ApiKey.DELETE_TOPICS, 6, DeleteTopicsRequest(topics=[
        DeleteTopicsRequest.DeleteTopicState(name=name, topic_id=bytes(16))], timeout_ms=5000))
    assert resp.responses[0].error_code == 0
    new = create_topic(wire, name, partitions=1)
    assert new != old
    resp = fetch(wire, 16, sid, 1, [])
    got = [(t.topic_id, p.error_code) for t in resp.responses for p in t.partitions]
    assert got == [(old, Errors.INCONSISTENT_TOPIC_ID)]
