"""ShareFetch / ShareAcknowledge (KIP-932) on the wire against a live pybroker whose share-state
persister is the in-memory one of the unit tests (tests/unit/share/memory_persister.py), injected
in-process: the share coordinator is another component. Records are produced with confluent-kafka;
the share requests are raw (the ShareConsumer also needs the share group coordinator)."""

from __future__ import annotations

import logging
import time
import uuid

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    ApiVersionsRequest,
    ShareAcknowledgeRequest,
    ShareFetchRequest,
)
from pybroker.records.batch import iter_batch_records, iter_batches
from pybroker.testing import EmbeddedBroker
from tests.unit.share.memory_persister import MemoryPersister

from .test_dynamic_configs_wire import SET, incremental
from .test_live_versions import create_topic
from .wire import WireClient

confluent_kafka = pytest.importorskip("confluent_kafka")

GROUP = "sg"
FT, FP = ShareFetchRequest.FetchTopic, ShareFetchRequest.FetchPartition
AB = ShareFetchRequest.AcknowledgementBatch
ACCEPT, RELEASE, REJECT, RENEW = 1, 2, 3, 4
LOCK_MS = 1000


@pytest.fixture(scope="module")
def broker():
    # the shortest lock Kafka allows (group.share.min.record.lock.duration.ms moved down to it)
    with EmbeddedBroker(overrides={"group.share.record.lock.duration.ms": LOCK_MS,
                                   "group.share.min.record.lock.duration.ms": LOCK_MS,
                                   "group.share.delivery.count.limit": 3,
                                   "group.share.min.delivery.count.limit": 2}) as b:
        persister = MemoryPersister()

        def install() -> None:
            b._broker.share_partition_manager.persister = persister
        trio.from_thread.run_sync(install, trio_token=b._token)
        b.persister = persister  # type: ignore[attr-defined]
        yield b


@pytest.fixture
def wire(broker):
    c = WireClient("127.0.0.1", broker.port)
    yield c
    c.close()


def produce(broker, topic, values):
    p = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0})
    for v in values:
        p.produce(topic, v, partition=0)
    assert p.flush(15) == 0


def share_fetch(wire, member, epoch, topic_id, acks=None, max_wait_ms=0, max_records=500, version=2,
                mode=0, forget=(), renew=False, group=GROUP):
    parts = [FP(partition_index=0, acknowledgement_batches=acks or [])] if topic_id is not None else []
    zero = renew  # a renewing fetch carries no fetch parameters (KIP-1222)
    req = ShareFetchRequest(group_id=group, member_id=member, share_session_epoch=epoch,
                            max_wait_ms=0 if zero else max_wait_ms, min_bytes=0 if zero else 1,
                            max_bytes=0 if zero else 1 << 20, max_records=0 if zero else max_records,
                            batch_size=max_records, share_acquire_mode=mode, is_renew_ack=renew,
                            topics=[FT(topic_id=topic_id, partitions=parts)] if topic_id is not None else [],
                            forgotten_topics_data=list(forget))
    return wire.request(ApiKey.SHARE_FETCH, version, req)


def share_ack(wire, member, epoch, topic_id, acks, version=2, renew=False, group=GROUP):
    R = ShareAcknowledgeRequest
    req = R(group_id=group, member_id=member, share_session_epoch=epoch, is_renew_ack=renew,
            topics=[R.AcknowledgeTopic(topic_id=topic_id, partitions=[
                R.AcknowledgePartition(partition_index=0, acknowledgement_batches=[
                    R.AcknowledgementBatch(first_offset=a, last_offset=b, acknowledge_types=t) for a, b, t in acks])])])
    return wire.request(ApiKey.SHARE_ACKNOWLEDGE, version, req)


def part(resp):
    assert resp.error_code == 0, resp
    return resp.responses[0].partitions[0]


def acquired(resp):
    if not resp.responses:
        return []
    return [(a.first_offset, a.last_offset, a.delivery_count) for a in part(resp).acquired_records]


def delivered(resp):
    """{offset: delivery count} of what the response acquired (Kafka answers one entry per
    in-flight batch, or per record once a batch is tracked per record)."""
    return {o: c for a, b, c in acquired(resp) for o in range(a, b + 1)}


def values(resp):
    p = part(resp)
    if not p.records:
        return []
    return [(r.offset, r.value)
            for _, chunk in iter_batches(bytes(p.records)) for r in iter_batch_records(chunk)[1]]


def new_topic(wire, request):
    name = "sf-" + request.node.name.replace("_", "-")[-40:]
    return name, create_topic(wire, name)


def until(fn, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while True:
        got = fn()
        if got or time.monotonic() > deadline:
            return got
        time.sleep(0.01)  # between polls of the condition


def test_share_apis_are_advertised(wire):
    resp = wire.request(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(client_software_name="t",
                                                                    client_software_version="1"))
    got = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert got[ApiKey.SHARE_FETCH] == (1, 2) and got[ApiKey.SHARE_ACKNOWLEDGE] == (1, 2)


def test_fetch_acknowledge_release_and_redelivery(broker, wire, request):
    topic, tid = new_topic(wire, request)
    a, b = WireClient("127.0.0.1", broker.port), WireClient("127.0.0.1", broker.port)
    try:
        # opening the sessions initializes the share partition at the log end (latest): empty now
        assert acquired(share_fetch(a, "ma", 0, tid)) == []
        assert acquired(share_fetch(b, "mb", 0, tid)) == []
        produce(broker, topic, [b"v%d" % i for i in range(10)])
        # a waiting fetch is woken by the records
        resp = share_fetch(a, "ma", 1, tid, max_wait_ms=5000)
        assert resp.acquisition_lock_timeout_ms == LOCK_MS
        assert acquired(resp) == [(0, 9, 1)]
        assert [v for _, v in values(resp)] == [b"v%d" % i for i in range(10)]
        # another member gets none of them while they are acquired
        assert acquired(share_fetch(b, "mb", 1, tid, max_wait_ms=100)) == []
        # a accepts 0-4 and releases 5, rejects 6, keeps 7-9
        resp = share_ack(a, "ma", 2, tid, [(0, 6, [ACCEPT] * 5 + [RELEASE, REJECT])])
        assert resp.responses[0].partitions[0].error_code == 0
        # b gets the released record at once, its delivery count raised
        resp = share_fetch(b, "mb", 2, tid)
        assert delivered(resp) == {5: 2}
        assert (5, b"v5") in values(resp)
        # a's lock on 7-9 runs out: b gets them with the count raised
        resp = until(lambda: delivered(share_fetch(b, "mb", 3, tid, max_wait_ms=3000)) or None)
        assert resp == {7: 2, 8: 2, 9: 2}
        # a's late acknowledgement of records it no longer holds
        resp = share_ack(a, "ma", 3, tid, [(7, 9, [ACCEPT])])
        assert resp.error_code == 0 and resp.responses[0].partitions[0].error_code == Errors.INVALID_RECORD_STATE
        resp = share_ack(b, "mb", 4, tid, [(5, 5, [ACCEPT]), (7, 9, [ACCEPT])])
        assert resp.responses[0].partitions[0].error_code == 0
        # persisted before the answer: every record of 0-9 done
        st = broker.persister.states[(GROUP, uuid.UUID(bytes=tid), 0)]
        assert all(o < st.start_offset or st.offsets[o][0] in (2, 4) for o in range(10)), st
    finally:
        a.close()
        b.close()


def test_acknowledgements_piggybacked_on_a_fetch_come_first(broker, wire, request):
    topic, tid = new_topic(wire, request)
    share_fetch(wire, "mp", 0, tid)
    produce(broker, topic, [b"q0", b"q1", b"q2"])
    assert acquired(share_fetch(wire, "mp", 1, tid, max_wait_ms=5000)) == [(0, 2, 1)]
    # accept 0, release 1-2: the same fetch acquires the released records again
    resp = share_fetch(wire, "mp", 2, tid, acks=[AB(first_offset=0, last_offset=2,
                                                    acknowledge_types=[ACCEPT, RELEASE, RELEASE])])
    assert part(resp).acknowledge_error_code == 0
    assert delivered(resp) == {1: 2, 2: 2}
    # the log's batches covering 1-2, as Kafka sends them (the client skips what it did not acquire)
    assert {b"q1", b"q2"} <= {v for _, v in values(resp)}


def test_renew_keeps_the_records(broker, wire, request):
    topic, tid = new_topic(wire, request)
    other = WireClient("127.0.0.1", broker.port)
    try:
        share_fetch(wire, "m1", 0, tid)
        share_fetch(other, "m2", 0, tid)
        produce(broker, topic, [b"r0", b"r1"])
        assert acquired(share_fetch(wire, "m1", 1, tid, max_wait_ms=5000)) == [(0, 1, 1)]
        for epoch in (2, 3, 4):  # renewed every ~0.6 s for ~1.8 s, past the 1 s lock
            time.sleep(LOCK_MS / 1000 * 0.6)
            resp = share_ack(wire, "m1", epoch, tid, [(0, 1, [RENEW])], renew=True)
            assert resp.responses[0].partitions[0].error_code == 0
            assert acquired(share_fetch(other, "m2", epoch - 1, tid)) == []
        # a renewing ShareFetch (v2, IsRenewAck) does the same and fetches nothing
        time.sleep(LOCK_MS / 1000 * 0.6)
        resp = share_fetch(wire, "m1", 5, tid, acks=[AB(first_offset=0, last_offset=1, acknowledge_types=[RENEW])],
                           renew=True)
        assert part(resp).acknowledge_error_code == 0 and acquired(resp) == []
        time.sleep(LOCK_MS / 1000 * 0.6)
        assert acquired(share_fetch(other, "m2", 4, tid)) == []
        resp = share_ack(wire, "m1", 6, tid, [(0, 1, [ACCEPT])])
        assert resp.responses[0].partitions[0].error_code == 0
    finally:
        other.close()


def test_closed_connection_releases_the_members_records(broker, wire, request):
    topic, tid = new_topic(wire, request)
    gone = WireClient("127.0.0.1", broker.port)
    share_fetch(gone, "mg", 0, tid)
    share_fetch(wire, "mw", 0, tid)
    produce(broker, topic, [b"a", b"b", b"c"])
    assert acquired(share_fetch(gone, "mg", 1, tid, max_wait_ms=5000)) == [(0, 2, 1)]
    gone.close()
    # released at once (not after the lock), and the delivery that never finished is not counted
    resp = share_fetch(wire, "mw", 1, tid, max_wait_ms=LOCK_MS // 2)
    assert acquired(resp) == [(0, 2, 1)]


def test_final_epoch_acknowledges_and_closes_the_session(broker, wire, request):
    topic, tid = new_topic(wire, request)
    share_fetch(wire, "mf", 0, tid)
    produce(broker, topic, [b"x", b"y"])
    assert acquired(share_fetch(wire, "mf", 1, tid, max_wait_ms=5000)) == [(0, 1, 1)]
    resp = share_ack(wire, "mf", -1, tid, [(0, 0, [ACCEPT])])
    assert resp.responses[0].partitions[0].error_code == 0
    # the session is gone and the unacknowledged record 1 was released
    assert share_fetch(wire, "mf", 2, tid).error_code == Errors.SHARE_SESSION_NOT_FOUND
    assert acquired(share_fetch(wire, "mf2", 0, tid, max_wait_ms=3000)) == [(1, 1, 1)]


def test_record_limit_mode_and_delivery_count_limit(broker, wire, request):
    topic, tid = new_topic(wire, request)
    share_fetch(wire, "mr", 0, tid)
    produce(broker, topic, [b"p%d" % i for i in range(3)])
    epoch = 1
    for count in (1, 2, 3):  # delivery.count.limit 3: the third release archives it
        resp = share_fetch(wire, "mr", epoch, tid, max_wait_ms=3000, max_records=1, mode=1)
        assert acquired(resp) == [(0, 0, count)]
        resp = share_ack(wire, "mr", epoch + 1, tid, [(0, 0, [RELEASE])])
        assert resp.responses[0].partitions[0].error_code == 0
        epoch += 2
    resp = share_fetch(wire, "mr", epoch, tid, max_wait_ms=3000, max_records=1, mode=1)
    assert acquired(resp) == [(1, 1, 1)]


def test_session_and_request_errors(broker, wire, request):
    _topic, tid = new_topic(wire, request)
    assert share_fetch(wire, "me", 5, tid).error_code == Errors.SHARE_SESSION_NOT_FOUND
    assert share_fetch(wire, "me", 0, tid, acks=[AB(first_offset=0, last_offset=0, acknowledge_types=[1])]
                       ).error_code == Errors.INVALID_REQUEST
    assert share_fetch(wire, "me", 0, tid).error_code == 0
    assert share_fetch(wire, "me", 7, tid).error_code == Errors.INVALID_SHARE_SESSION_EPOCH
    assert share_fetch(wire, "", 0, tid).error_code == Errors.INVALID_REQUEST
    assert share_ack(wire, "me", 0, tid, [(0, 0, [ACCEPT])]).error_code == Errors.INVALID_SHARE_SESSION_EPOCH
    # an unknown topic id is answered per partition
    resp = share_fetch(wire, "mu", 0, uuid.uuid4().bytes)
    assert part(resp).error_code == Errors.UNKNOWN_TOPIC_ID
    # malformed acknowledgement batches: INVALID_REQUEST as the partition's acknowledge error
    resp = share_fetch(wire, "me", 1, tid, acks=[AB(first_offset=3, last_offset=1, acknowledge_types=[1])])
    assert part(resp).acknowledge_error_code == Errors.INVALID_REQUEST
    # RENEW only in a v2 request flagged IsRenewAck, which fetches nothing
    resp = share_fetch(wire, "me", 2, tid, version=1, acks=[AB(first_offset=0, last_offset=0, acknowledge_types=[4])])
    assert part(resp).acknowledge_error_code == Errors.INVALID_REQUEST
    resp = share_fetch(wire, "me", 3, tid, acks=[AB(first_offset=0, last_offset=0, acknowledge_types=[4])])
    assert part(resp).acknowledge_error_code == Errors.INVALID_REQUEST
    req = ShareFetchRequest(group_id=GROUP, member_id="me", share_session_epoch=4, max_wait_ms=0, min_bytes=0,
                            max_bytes=100, max_records=0, batch_size=0, share_acquire_mode=0, is_renew_ack=True,
                            topics=[], forgotten_topics_data=[])
    assert wire.request(ApiKey.SHARE_FETCH, 2, req).error_code == Errors.INVALID_REQUEST
    assert share_fetch(wire, "x" * 37, 0, tid).error_code == Errors.INVALID_REQUEST


def share_partitions(broker):
    def keys():
        return set(broker._broker.share_partition_manager.partitions)
    return trio.from_thread.run_sync(keys, trio_token=broker._token)


def test_a_deleted_topic_drops_its_share_partitions(broker, wire, request):
    from pybroker.protocol.messages import DeleteTopicsRequest

    topic, tid = new_topic(wire, request)
    share_fetch(wire, "md", 0, tid)
    produce(broker, topic, [b"d"])
    assert delivered(share_fetch(wire, "md", 1, tid, max_wait_ms=5000)) == {0: 1}
    assert (GROUP, tid, 0) in share_partitions(broker)
    resp = wire.request(ApiKey.DELETE_TOPICS, 6, DeleteTopicsRequest(
        topics=[DeleteTopicsRequest.DeleteTopicState(name=topic, topic_id=bytes(16))], timeout_ms=10_000))
    assert resp.responses[0].error_code == 0
    assert until(lambda: (GROUP, tid, 0) not in share_partitions(broker))
    # the session's partition now answers the unknown topic id
    resp = share_fetch(wire, "md", 2, tid)
    assert part(resp).error_code == Errors.UNKNOWN_TOPIC_ID


def test_the_groups_share_configs_apply(broker, wire, request):
    """share.* group configs (IncrementalAlterConfigs on the GROUP resource) over the group.share.*
    defaults: the lock duration answered, earliest as the reset, the delivery count limit."""
    topic, tid = new_topic(wire, request)
    group = "sg-configured"
    assert incremental(wire, [(32, group, [("share.record.lock.duration.ms", SET, "1500"),
                                           ("share.auto.offset.reset", SET, "earliest"),
                                           ("share.delivery.count.limit", SET, "2")])]) == [(0, None)]
    produce(broker, topic, [b"e0", b"e1"])  # before the share partition exists: earliest finds them
    resp = share_fetch(wire, "mc", 0, tid, group=group, max_wait_ms=5000)
    assert resp.acquisition_lock_timeout_ms == 1500
    assert delivered(resp) == {0: 1, 1: 1}
    assert part(share_ack(wire, "mc", 1, tid, [(0, 1, [RELEASE])], group=group)).error_code == 0
    assert delivered(share_fetch(wire, "mc", 2, tid, group=group)) == {0: 2, 1: 2}
    # the second release reaches the limit (2): archived, never delivered again
    assert part(share_ack(wire, "mc", 3, tid, [(0, 1, [RELEASE])], group=group)).error_code == 0
    produce(broker, topic, [b"e2"])
    assert delivered(share_fetch(wire, "mc", 4, tid, group=group, max_wait_ms=5000)) == {2: 1}


def test_read_committed_delivers_only_committed_records(broker, wire, request):
    topic, tid = new_topic(wire, request)
    group = "sg-read-committed"
    assert incremental(wire, [(32, group, [("share.isolation.level", SET, "read_committed"),
                                           ("share.auto.offset.reset", SET, "earliest")])]) == [(0, None)]
    p = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers,
                                  "transactional.id": "share-rc-" + topic})
    p.init_transactions(15)
    p.begin_transaction()
    p.produce(topic, b"aborted-1", partition=0)
    p.produce(topic, b"aborted-2", partition=0)
    p.flush(15)
    p.abort_transaction(15)
    p.begin_transaction()
    p.produce(topic, b"committed", partition=0)
    p.commit_transaction(15)
    got: dict[int, int] = {}
    seen: set[bytes] = set()
    epoch = 0
    # the aborted data batch is archived; markers and committed records are delivered
    while b"committed" not in seen and epoch < 10:
        resp = share_fetch(wire, "mr", epoch, tid, group=group, max_wait_ms=3000)
        got.update(delivered(resp))
        seen |= {v for o, v in values(resp) if o in delivered(resp)}
        epoch += 1
    assert b"committed" in seen and not seen & {b"aborted-1", b"aborted-2"}
    assert 0 not in got and 1 not in got  # the aborted records' offsets were never acquired


_ack_batch = st.builds(lambda first, span, types: AB(first_offset=first, last_offset=first + span,
                                                    acknowledge_types=types),
                       st.integers(-2, 40), st.integers(-2, 12), st.lists(st.integers(-1, 5), max_size=14))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.tuples(st.sampled_from(["fetch", "ack"]), st.sampled_from(["fa", "fb", ""]),
                                st.sampled_from([-2, -1, 0, 1, 3, 6, 6, 6, 6]), st.lists(_ack_batch, max_size=4),
                                st.booleans(),
                                st.integers(0, 2)), min_size=1, max_size=12))
def test_arbitrary_share_requests_get_kafka_errors_never_a_broken_broker(broker, fuzz_topic, caplog, steps):
    """Random epochs, members and acknowledgement batches (overlapping, reversed, bad types,
    offsets never delivered): every request is answered with Kafka error codes, and the share
    partition keeps its invariants for the next test."""
    tid, conns = fuzz_topic
    known = {int(e) for e in Errors}
    epochs: dict[str, int] = {}
    for kind, member, epoch, acks, renew, conn in steps:
        w = conns[conn]
        if epoch == 6:  # mostly the session's own next epoch, so acknowledgements get exercised
            epoch = epochs.get(member, 0)
        if kind == "fetch":
            resp = share_fetch(w, member, epoch, tid, acks=acks, renew=renew and bool(acks), max_wait_ms=0)
            codes = [resp.error_code] + [c for t in resp.responses for p in t.partitions
                                         for c in (p.error_code, p.acknowledge_error_code)]
        else:
            resp = share_ack(w, member, epoch, tid, [(b.first_offset, b.last_offset, b.acknowledge_types)
                                                    for b in acks], renew=renew)
            codes = [resp.error_code] + [p.error_code for t in resp.responses for p in t.partitions]
        assert all(c in known for c in codes), codes
        if resp.error_code == 0 and epoch >= 0:
            epochs[member] = 1 if epoch >= 2**31 - 1 else epoch + 1
        elif resp.error_code == 0:
            epochs.pop(member, None)
    # still serving: a fresh member's session fetches; nothing went wrong inside
    assert share_fetch(conns[0], "fresh", 0, tid).error_code == 0
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text[-3000:]


@pytest.fixture(scope="module")
def fuzz_topic(broker):
    conns = [WireClient("127.0.0.1", broker.port) for _ in range(3)]
    tid = create_topic(conns[0], "sf-fuzz")
    produce(broker, "sf-fuzz", [b"f%d" % i for i in range(30)])
    yield tid, conns
    for c in conns:
        c.close()


def parked(broker) -> int:
    def count() -> int:
        return broker._broker.replica_manager.fetch_purgatory.watched()
    return trio.from_thread.run_sync(count, trio_token=broker._token)


def test_parked_members_keep_waiting_until_they_acquire(broker, wire, request):
    """An append wakes every share fetch parked on the partition; the one that acquires answers,
    the others keep waiting (Kafka's DelayedShareFetch acquires in tryComplete)."""
    import threading

    topic, tid = new_topic(wire, request)
    a, b = WireClient("127.0.0.1", broker.port), WireClient("127.0.0.1", broker.port)
    try:
        share_fetch(a, "pa", 0, tid)
        share_fetch(b, "pb", 0, tid)
        got: dict[str, dict[int, int]] = {}

        def fetch(w: WireClient, member: str) -> None:
            got[member] = delivered(share_fetch(w, member, 1, tid, max_wait_ms=15000))
        threads = [threading.Thread(target=fetch, args=(w, m)) for w, m in ((a, "pa"), (b, "pb"))]
        before = parked(broker)
        for t in threads:
            t.start()
        assert until(lambda: parked(broker) >= before + 2)
        produce(broker, topic, [b"one"])
        assert until(lambda: len(got) == 1)
        produce(broker, topic, [b"two"])
        for t in threads:
            t.join(20)
        assert sorted(map(sorted, got.values())) == [[0], [1]]
    finally:
        a.close()
        b.close()


def test_a_failed_state_read_is_answered_and_retried(broker, wire, request):
    topic, tid = new_topic(wire, request)
    broker.persister.read_error = Errors.COORDINATOR_LOAD_IN_PROGRESS
    try:
        resp = share_fetch(wire, "mf", 0, tid)
        assert part(resp).error_code == Errors.COORDINATOR_NOT_AVAILABLE
    finally:
        broker.persister.read_error = 0
    # the failed share partition is loaded again by the next fetch (an incremental response leaves
    # out a partition with nothing new, as Kafka's)
    resp = share_fetch(wire, "mf", 1, tid)
    assert resp.error_code == 0 and all(p.error_code == 0 for t in resp.responses for p in t.partitions)
    produce(broker, topic, [b"after"])
    assert delivered(share_fetch(wire, "mf", 2, tid, max_wait_ms=5000)) == {0: 1}
