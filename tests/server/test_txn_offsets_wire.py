"""Transactional offsets over the wire (our codec, a live broker): TxnOffsetCommit writes to
__consumer_offsets at once and stays pending; OffsetFetch with require_stable (v7+) answers
UNSTABLE_OFFSET_COMMIT for those partitions until the transaction ends, then the committed (or,
after an abort, the old) offset; TxnOffsetCommit outside the transaction is refused; and a
broker restart in the middle of a transaction keeps the pending offsets, which the
transaction's outcome (EndTxn after the restart, or the coordinator's timeout abort) decides.
"""

from __future__ import annotations

import time
import uuid

import pytest

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    AddOffsetsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    MetadataRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    TxnOffsetCommitRequest,
)
from pybroker.server.api_versions import SUPPORTED
from pybroker.testing import EmbeddedBroker

from .test_txn_wire import OVERRIDES, create_topic, init
from .wire import WireClient

UNSTABLE = Errors.UNSTABLE_OFFSET_COMMIT
FETCH_VERSIONS = list(range(7, SUPPORTED[ApiKey.OFFSET_FETCH][1] + 1))


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker(overrides=OVERRIDES) as b:
        yield b


def uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def begin_offsets(wire, tid, group, version=3):
    r = init(wire, tid)
    assert r.error_code == 0
    pid, epoch = r.producer_id, r.producer_epoch
    assert wire.request(ApiKey.ADD_OFFSETS_TO_TXN, version, AddOffsetsToTxnRequest(
        transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id=group)).error_code == 0
    return pid, epoch


def txn_commit(wire, tid, group, pid, epoch, offsets, version=3):
    req = TxnOffsetCommitRequest(
        transactional_id=tid, group_id=group, producer_id=pid, producer_epoch=epoch, generation_id=-1, member_id="",
        group_instance_id=None, topics=[TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(name=t, partitions=[
            TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(
                partition_index=p, committed_offset=o, committed_leader_epoch=-1, committed_metadata="txn")])
            for (t, p), o in offsets.items()])
    resp = wire.request(ApiKey.TXN_OFFSET_COMMIT, version, req)
    return {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}


def plain_commit(wire, group, topic, partition, offset):
    req = OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                              retention_time_ms=-1, topics=[OffsetCommitRequest.OffsetCommitRequestTopic(
                                  name=topic, partitions=[OffsetCommitRequest.OffsetCommitRequestPartition(
                                      partition_index=partition, committed_offset=offset, committed_leader_epoch=-1,
                                      committed_metadata="")])])
    assert wire.request(ApiKey.OFFSET_COMMIT, 8, req).topics[0].partitions[0].error_code == 0


def end(wire, tid, pid, epoch, commit):
    return wire.request(ApiKey.END_TXN, 3, EndTxnRequest(
        transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit)).error_code


def topic_ids(wire) -> dict[str, bytes]:
    return {t.name: t.topic_id for t in wire.request(ApiKey.METADATA, 12, MetadataRequest(topics=None)).topics}


def fetch(wire, version, group, topics, require_stable=True):
    """(top-level or group error, {(topic, partition): (offset, error)}); topics None = all.
    v10 names topics by id (KIP-848): the ids go out and come back, translated here."""
    if version >= 8:
        ids = topic_ids(wire) if version >= 10 else {}
        req = OffsetFetchRequest(require_stable=require_stable, groups=[OffsetFetchRequest.OffsetFetchRequestGroup(
            group_id=group, member_id=None, member_epoch=-1,
            topics=None if topics is None else [OffsetFetchRequest.OffsetFetchRequestTopics(
                name=t, topic_id=ids.get(t, bytes(16)), partition_indexes=ps) for t, ps in topics])])
        g = wire.request(ApiKey.OFFSET_FETCH, version, req).groups[0]
        names = {i: n for n, i in ids.items()}
        return g.error_code, {(names[t.topic_id] if version >= 10 else t.name, p.partition_index):
                              (p.committed_offset, p.error_code) for t in g.topics for p in t.partitions}
    req = OffsetFetchRequest(group_id=group, require_stable=require_stable, topics=None if topics is None else [
        OffsetFetchRequest.OffsetFetchRequestTopic(name=t, partition_indexes=ps) for t, ps in topics])
    r = wire.request(ApiKey.OFFSET_FETCH, version, req)
    return r.error_code, {(t.name, p.partition_index): (p.committed_offset, p.error_code)
                          for t in r.topics for p in t.partitions}


@pytest.mark.parametrize("v", FETCH_VERSIONS)
@pytest.mark.parametrize("commit", [True, False])
def test_require_stable_sees_unstable_offsets_until_the_transaction_ends(wire, v, commit):
    topic, group, tid = uid("uoc"), uid("g"), uid("t")
    create_topic(wire, topic, partitions=2)
    plain_commit(wire, group, topic, 0, 3)
    pid, epoch = begin_offsets(wire, tid, group)
    assert txn_commit(wire, tid, group, pid, epoch, {(topic, 0): 10, (topic, 1): 11}) == {
        (topic, 0): 0, (topic, 1): 0}
    wanted = [(topic, [0, 1])]
    # per partition, offset -1, no group/top-level error (Kafka's fetchOffsets at every version)
    assert fetch(wire, v, group, wanted) == (0, {(topic, 0): (-1, UNSTABLE), (topic, 1): (-1, UNSTABLE)})
    # all topics: only committed partitions are listed, the pending one among them unstable
    assert fetch(wire, v, group, None) == (0, {(topic, 0): (-1, UNSTABLE)})
    # without require_stable: the last committed offset, as before the transaction
    assert fetch(wire, v, group, wanted, require_stable=False) == (0, {(topic, 0): (3, 0), (topic, 1): (-1, 0)})
    assert end(wire, tid, pid, epoch, commit) == 0
    expected = {(topic, 0): (10, 0), (topic, 1): (11, 0)} if commit else {(topic, 0): (3, 0), (topic, 1): (-1, 0)}
    assert fetch(wire, v, group, wanted) == (0, expected)
    assert fetch(wire, v, group, wanted, require_stable=False) == (0, expected)


def test_every_txn_offset_commit_version_writes_pending_offsets(wire):
    for v in range(SUPPORTED[ApiKey.TXN_OFFSET_COMMIT][0], SUPPORTED[ApiKey.TXN_OFFSET_COMMIT][1] + 1):
        topic, group, tid = uid(f"toc{v}"), uid("g"), uid("t")
        create_topic(wire, topic)
        pid, epoch = begin_offsets(wire, tid, group)
        assert txn_commit(wire, tid, group, pid, epoch, {(topic, 0): 7}, version=v) == {(topic, 0): 0}
        assert fetch(wire, 7, group, [(topic, [0])]) == (0, {(topic, 0): (-1, UNSTABLE)})
        assert end(wire, tid, pid, epoch, True) == 0
        assert fetch(wire, 7, group, [(topic, [0])]) == (0, {(topic, 0): (7, 0)})


def test_a_later_plain_commit_wins_over_the_transactional_one(wire):
    topic, group, tid = uid("win"), uid("g"), uid("t")
    create_topic(wire, topic)
    pid, epoch = begin_offsets(wire, tid, group)
    assert txn_commit(wire, tid, group, pid, epoch, {(topic, 0): 50}) == {(topic, 0): 0}
    plain_commit(wire, group, topic, 0, 60)
    assert end(wire, tid, pid, epoch, True) == 0
    assert fetch(wire, 7, group, [(topic, [0])]) == (0, {(topic, 0): (60, 0)})


def test_txn_offset_commit_needs_the_group_in_the_transaction(wire):
    topic, group, tid = uid("nog"), uid("g"), uid("t")
    create_topic(wire, topic)
    r = init(wire, tid)
    # no AddOffsetsToTxn: nothing may stay pending without a marker to come (Kafka verifies too)
    assert txn_commit(wire, tid, group, r.producer_id, r.producer_epoch, {(topic, 0): 1}) == {
        (topic, 0): Errors.INVALID_TXN_STATE}
    assert txn_commit(wire, tid, group, r.producer_id, r.producer_epoch - 1 if r.producer_epoch else 0,
                      {(topic, 0): 1})[(topic, 0)] != 0
    assert fetch(wire, 7, group, [(topic, [0])]) == (0, {(topic, 0): (-1, 0)})


def _wait_stable(wire, group, topic, deadline_s=20.0):
    end_at = time.monotonic() + deadline_s
    while True:
        err, got = fetch(wire, 7, group, [(topic, [0])])
        if err not in (Errors.COORDINATOR_LOAD_IN_PROGRESS, Errors.NOT_COORDINATOR) and got[(topic, 0)][1] != UNSTABLE:
            return got[(topic, 0)]
        assert time.monotonic() < end_at, f"still {err} {got}"
        time.sleep(0.1)


def _wait_loaded(wire, group, topic, deadline_s=20.0):
    end_at = time.monotonic() + deadline_s
    while True:
        err, got = fetch(wire, 7, group, [(topic, [0])])
        if err not in (Errors.COORDINATOR_LOAD_IN_PROGRESS, Errors.NOT_COORDINATOR):
            return got[(topic, 0)]
        assert time.monotonic() < end_at, f"still {err}"
        time.sleep(0.1)


@pytest.mark.parametrize("commit", [True, False])
def test_restart_mid_transaction_keeps_pending_offsets_for_end_txn(tmp_path, commit):
    topic, group, tid = "rs-topic", "rs-group", "rs-txn"
    with EmbeddedBroker(log_dir=str(tmp_path), overrides=OVERRIDES) as first:
        w = WireClient("127.0.0.1", first.port)
        create_topic(w, topic)
        plain_commit(w, group, topic, 0, 4)
        pid, epoch = begin_offsets(w, tid, group)
        assert txn_commit(w, tid, group, pid, epoch, {(topic, 0): 40}) == {(topic, 0): 0}
        w.close()
    with EmbeddedBroker(log_dir=str(tmp_path), overrides=OVERRIDES) as second:
        w = WireClient("127.0.0.1", second.port)
        # loaded from __consumer_offsets: still pending, the old offset still the committed one
        assert _wait_loaded(w, group, topic) == (-1, UNSTABLE)
        assert fetch(w, 7, group, [(topic, [0])], require_stable=False) == (0, {(topic, 0): (4, 0)})
        for _ in range(50):
            code = end(w, tid, pid, epoch, commit)
            if code not in (Errors.COORDINATOR_LOAD_IN_PROGRESS, Errors.NOT_COORDINATOR, Errors.CONCURRENT_TRANSACTIONS):
                break
            time.sleep(0.1)
        assert code == 0
        assert fetch(w, 7, group, [(topic, [0])]) == (0, {(topic, 0): (40 if commit else 4, 0)})
        w.close()
    with EmbeddedBroker(log_dir=str(tmp_path), overrides=OVERRIDES) as third:
        w = WireClient("127.0.0.1", third.port)
        # the marker was loaded too: the outcome survives another restart
        assert _wait_loaded(w, group, topic) == (40 if commit else 4, 0)
        w.close()


def test_restart_mid_transaction_then_timeout_aborts_the_offsets(tmp_path):
    topic, group, tid = "to-topic", "to-group", "to-txn"
    overrides = {**OVERRIDES, "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"}
    with EmbeddedBroker(log_dir=str(tmp_path), overrides=overrides) as first:
        w = WireClient("127.0.0.1", first.port)
        create_topic(w, topic)
        plain_commit(w, group, topic, 0, 4)
        r = init(w, tid, timeout_ms=1500)
        pid, epoch = r.producer_id, r.producer_epoch
        assert w.request(ApiKey.ADD_OFFSETS_TO_TXN, 3, AddOffsetsToTxnRequest(
            transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id=group)).error_code == 0
        assert txn_commit(w, tid, group, pid, epoch, {(topic, 0): 40}) == {(topic, 0): 0}
        w.close()
    with EmbeddedBroker(log_dir=str(tmp_path), overrides=overrides) as second:
        w = WireClient("127.0.0.1", second.port)
        # the reloaded coordinator aborts the expired transaction: its offsets are dropped
        assert _wait_stable(w, group, topic) == (4, 0)
        r2 = w.request(ApiKey.INIT_PRODUCER_ID, 4, InitProducerIdRequest(
            transactional_id=tid, transaction_timeout_ms=1500, producer_id=-1, producer_epoch=-1))
        assert r2.error_code == 0 and r2.producer_epoch > epoch
        w.close()
